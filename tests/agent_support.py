"""Helpers for the agent-core tests: signed events, a store on real relays, waiting for a condition."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from didactyl_tui.agent.documents.history import DocumentHistory
from didactyl_tui.agent.documents.history_thread import HistoryThread
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.outbox import Outbox
from didactyl_tui.agent.documents.publisher import DocumentPublisher
from didactyl_tui.agent.documents.saving import Change, DocumentSaves
from didactyl_tui.agent.documents.store import DocumentStore
from didactyl_tui.agent.identity.cache import IdentityCache
from didactyl_tui.agent.soul.prompt_record import PromptAssembly
from didactyl_tui.agent.soul.template import default_template
from didactyl_tui.agent.tasks.task_list import TaskBook, TaskList
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.context import AgentToolContext
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.signer import LocalSigner
from didactyl_tui.service.parts import document_codecs

AGENT_KEY = SecretKey.from_hex("7f" * 32)
ADMIN_KEY = SecretKey.from_hex("3c" * 32)
OTHER_KEY = SecretKey.from_hex("5a" * 32)
LIMITS = {DocumentKey.SHORT_TERM: 8000, DocumentKey.LONG_TERM: 32000}
NOW = 1_750_000_000


def memory_event(key: SecretKey, content: str, created_at: int, d: str = "short_term_memory",
                 *, encrypt_to: SecretKey | None = None, kind: int = 30078, prev: str | None = None) -> Event:
    """A memory version as another device (or a stranger) would publish it (``prev``: its base, as didactyl
    tags it; None: untagged, like another Nostr client)."""
    owner = encrypt_to or key
    conv = nip44.get_conversation_key(owner.secret_hex(), owner.public_key_hex)
    payload = nip44.encrypt(content, conv) if content else ""
    tags = [["d", d], ["app", "didactyl"]] + ([["prev", prev]] if prev else [])
    return sign_event(key, kind=kind, content=payload, created_at=created_at, tags=tags)


def tasks_event(key: SecretKey, tasks: TaskList, created_at: int, *, prev: str | None = None,
                content: str | None = None) -> Event:
    """A task-list version as another writer would publish it (``content``: a plaintext of one's own instead)."""
    conv = nip44.get_conversation_key(key.secret_hex(), key.public_key_hex)
    payload = nip44.encrypt(tasks.to_json() if content is None else content, conv)
    tags = [["d", "tasks"], ["app", "didactyl"]] + ([["prev", prev]] if prev else [])
    return sign_event(key, kind=30078, content=payload, created_at=created_at, tags=tags)


def make_store(key: SecretKey, pool: Any, *, limits: dict[DocumentKey, int] | None = None,
               clock: Callable[[], float] | None = None, **options: Any) -> DocumentStore:
    """The agent's document store as the service builds it (every document's codec, the built-in soul)."""
    codecs = document_codecs(limits=limits or LIMITS, registry=build_base_registry(admin=True, tasks=True, notes=True),
                          initial_soul=default_template())
    return DocumentStore(LocalSigner(key), pool, codecs, clock=clock or time.time, **options)


def make_saves(store: DocumentStore, pool: Any, data: Path, *, clock: Callable[[], float] | None = None,
               timeout: float = 5.0, **options: Any) -> DocumentSaves:
    """The one save path over ``store`` as the service builds it: an outbox (in ``data``), the relays of ``pool``, a
    history. Its warnings are the store's (``store.warnings``)."""
    data.mkdir(parents=True, exist_ok=True)
    publisher = DocumentPublisher(pool, Outbox(data / "outbox.sqlite3"), timeout=timeout)
    history = HistoryThread(DocumentHistory(data / "history.sqlite3"), store.pubkey, store.warn)
    return DocumentSaves(store, publisher, history, warn=store.warn, clock=clock or time.time, **options)


def soul_event(key: SecretKey, template: Any, created_at: int, *, encrypt: bool = True, prev: str | None = None,
               text: str | None = None) -> Event:
    """A kind 31120 soul as another writer would publish it (docs/soul-event.md; ``text``: a document of one's own)."""
    from didactyl_tui.agent.soul.content import soul_to_json

    doc = soul_to_json(template) if text is None else text
    tags = [["d", "soul"], ["app", "didactyl"]]
    if encrypt:
        doc = nip44.encrypt(doc, nip44.get_conversation_key(key.secret_hex(), key.public_key_hex))
        tags.append(["encrypted", "nip44"])
    tags += [["prev", prev]] if prev else []
    return sign_event(key, kind=31120, content=doc, created_at=created_at, tags=tags)


def task_book(saves: DocumentSaves, clock: Callable[[], float] | None = None) -> TaskBook:
    """The task tools' book over the task-list document, saved through ``saves`` (as the service wires it)."""
    return TaskBook(lambda: saves.store.value(DocumentKey.TASKS),
                    lambda derive: saves.save(DocumentKey.TASKS, Change(derive)), clock=clock or time.time)


def profile_event(key: SecretKey, created_at: int = NOW, **fields: str) -> Event:
    return sign_event(key, kind=0, content=json.dumps(fields), created_at=created_at)


def contacts_event(key: SecretKey, pubkeys: list[str], created_at: int = NOW) -> Event:
    return sign_event(key, kind=3, content="", created_at=created_at, tags=[["p", pk] for pk in pubkeys])


def relays_event(key: SecretKey, urls: list[tuple[str, str]], created_at: int = NOW) -> Event:
    tags = [["r", u, m] if m else ["r", u] for u, m in urls]
    return sign_event(key, kind=10002, content="", created_at=created_at, tags=tags)


def note_event(key: SecretKey, text: str, created_at: int) -> Event:
    return sign_event(key, kind=1, content=text, created_at=created_at)


class Clock:
    """A settable wall clock (seconds)."""

    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def offline_context(tmp_path: Path, *, admin: bool = False, clock: Callable[[], float] | None = None,
                    limits: dict[DocumentKey, int] | None = None) -> AgentToolContext:
    """A tool context whose caches are filled by ``ingest`` (a pool with no relays: no network at all)."""
    clock = clock or Clock()
    pool = RelayPool([])
    store = make_store(AGENT_KEY, pool, limits=limits, clock=clock)
    return AgentToolContext(
        memory=store,
        saves=make_saves(store, pool, tmp_path / "documents", clock=clock),
        agent=IdentityCache(AGENT_KEY.public_key_hex, clock=clock),
        admin=IdentityCache(ADMIN_KEY.public_key_hex, clock=clock) if admin else None,
        files_root=tmp_path / "memory",
    )


async def _holds(predicate: Callable[[], Any]) -> bool:
    value = predicate()
    return bool(await value if inspect.isawaitable(value) else value)


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll until ``predicate()`` holds (relay round trips are asynchronous); fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await _holds(predicate):
        if loop.time() > deadline:
            raise AssertionError("condition not reached within the timeout")
        await asyncio.sleep(0.01)


async def fill_caches(ctx, *, stm: str = "Admin is Ada.") -> None:
    """Caches as a start against relays would leave them: memory, profile, contacts, relays, notes, the admin."""
    assert await ctx.memory.take("ws://relay.test", memory_event(AGENT_KEY, stm, NOW - 5))
    ctx.agent.ingest("ws://relay.test", profile_event(AGENT_KEY, name="didactyl", about="An agent."))
    ctx.agent.ingest(None, contacts_event(AGENT_KEY, [ADMIN_KEY.public_key_hex]))
    ctx.agent.ingest(None, relays_event(AGENT_KEY, [("wss://a.test", ""), ("wss://b.test", "read")]))
    ctx.agent.ingest(None, note_event(AGENT_KEY, "first note", NOW - 100))
    ctx.agent.ingest(None, note_event(AGENT_KEY, "second note", NOW - 50))
    if ctx.admin is not None:
        ctx.admin.ingest(None, profile_event(ADMIN_KEY, name="Ada"))


def make_assembly(user_message: str = "hello", tools: list[dict[str, Any]] | None = None) -> PromptAssembly:
    """A minimal assembly: a system line and ``user_message``, offering ``tools``."""
    messages = ({"role": "system", "content": "You are a test."}, {"role": "user", "content": user_message})
    return PromptAssembly(
        model="openai/stub-model", created_at=0.0, layers=(), history=(), history_dropped=0, backend_id=None,
        backend_context=None, backend_tokens=0, user_message=user_message, tools=tuple(tools or ()),
        messages=messages, total_tokens=0,
    )
