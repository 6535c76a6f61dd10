"""Agent-core benchmark: prompt assembly with every section full, and one memory save end to end.

    python bench/agent_bench.py

Lines:
  assemble (warm)        soul.assemble, nothing changed since the last turn           target median < 5 ms
  assemble (changed)     a new short-term memory version and one more history message
                         every iteration (renderers and token counts recomputed)       target median < 5 ms
  memory_save e2e        DocumentSaves.save: check, date, NIP-44 encrypt, sign, adopt,  reported as a ratio to
                         outbox, publish to the embedded relay on loopback, OK back,   the raw publish below
                         history
  raw publish            RelayPool.publish of a pre-signed event of the same size

"Every section full": an 8,000-char short-term memory, agent and admin profiles, 50 contacts,
10 relays, 20 notes each, and 40 turns (80 messages) of history. Token counts use the offline
counter (``agent.llm.tokens``; litellm is not imported here). Medians; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from didactyl_tui.agent.documents.history import DocumentHistory
from didactyl_tui.agent.documents.history_thread import HistoryThread
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.documents.outbox import Outbox
from didactyl_tui.agent.documents.publisher import DocumentPublisher
from didactyl_tui.agent.documents.saving import DocumentSaves
from didactyl_tui.agent.documents.store import DocumentStore
from didactyl_tui.agent.identity.cache import IdentityCache
from didactyl_tui.agent.llm import tokens
from didactyl_tui.agent.soul.assembly import assemble
from didactyl_tui.agent.soul.template import default_template
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.agent.tools.context import AgentToolContext
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.signer import LocalSigner
from didactyl_tui.service.parts import document_codecs

ASSEMBLE_MS_TARGET = 5.0
STM_CHARS = 8000
LIMITS = {DocumentKey.SHORT_TERM: 8000, DocumentKey.LONG_TERM: 32000}
MODEL = "openai/gpt-4o-mini"
NOW = int(time.time()) - 3600

AGENT = SecretKey.from_hex("7f" * 32)
ADMIN = SecretKey.from_hex("3c" * 32)


def words(n_chars: int, seed: int) -> str:
    vocab = ["memory", "relay", "nostr", "agent", "tea", "Ada", "prefers", "short", "answers", "project",
             "deadline", "Friday", "the", "a", "of", "and", "review", "notes", "ship", "é", "✓"]
    out: list[str] = []
    i = seed
    while sum(len(w) + 1 for w in out) < n_chars:
        out.append(vocab[(i * 7 + 3) % len(vocab)])
        i += 1
    return " ".join(out)[:n_chars]


def memory_version(text: str, created_at: int) -> Event:
    conv = nip44.get_conversation_key(AGENT.secret_hex(), AGENT.public_key_hex)
    return sign_event(AGENT, kind=30078, content=nip44.encrypt(text, conv), created_at=created_at,
                      tags=[["d", "short_term_memory"], ["app", "didactyl"]])


def fill_identity(cache: IdentityCache, key: SecretKey, name: str) -> None:
    profile = {"name": name, "about": words(300, 1), "picture": "https://example.com/p.png",
               "nip05": f"{name}@example.com", "lud16": f"{name}@ln.example.com"}
    cache.ingest(None, sign_event(key, kind=0, content=json.dumps(profile), created_at=NOW))
    contacts = [SecretKey.from_hex(f"{n + 1:064x}").public_key_hex for n in range(50)]
    cache.ingest(None, sign_event(key, kind=3, content="", created_at=NOW, tags=[["p", pk] for pk in contacts]))
    relays = [["r", f"wss://relay{n}.example.com"] + (["read"] if n % 3 == 0 else []) for n in range(10)]
    cache.ingest(None, sign_event(key, kind=10002, content="", created_at=NOW, tags=relays))
    for n in range(20):
        cache.ingest(None, sign_event(key, kind=1, content=words(280, n), created_at=NOW - n * 60))


def history(turns: int) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for n in range(turns):
        out.append({"role": "user", "content": words(200, n)})
        out.append({"role": "assistant", "content": words(600, n + 100)})
    return out


def make_store(pool: RelayPool, **options: object) -> DocumentStore:
    codecs = document_codecs(limits=LIMITS, registry=build_base_registry(admin=True, tasks=True, notes=True),
                             initial_soul=default_template())
    return DocumentStore(LocalSigner(AGENT), pool, codecs, **options)  # type: ignore[arg-type]


def make_saves(store: DocumentStore, pool: RelayPool, data: Path) -> DocumentSaves:
    """The one save path as the service builds it: outbox, relays, history (files in ``data``)."""
    publisher = DocumentPublisher(pool, Outbox(data / "outbox.sqlite3"))
    history = HistoryThread(DocumentHistory(data / "history.sqlite3"), store.pubkey, store.warn)
    return DocumentSaves(store, publisher, history, warn=store.warn)


async def bench_assemble(rounds: int) -> tuple[float, float, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        pool = RelayPool([])
        store = make_store(pool, clock=lambda: NOW + 10_000)
        ctx = AgentToolContext(memory=store, saves=make_saves(store, pool, Path(tmp)),
                               agent=IdentityCache(AGENT.public_key_hex), admin=IdentityCache(ADMIN.public_key_hex),
                               files_root=Path(tmp) / "memory")
        fill_identity(ctx.agent, AGENT, "didactyl")
        fill_identity(ctx.admin, ADMIN, "ada")
        await store.take("ws://bench", memory_version(words(STM_CHARS, 5), NOW))
        registry = build_base_registry(admin=True)
        template = default_template()
        hist = history(40)

        def once(h: list[dict[str, str]]):
            return assemble(template, model=MODEL, registry=registry, ctx=ctx, created_at=0.0, history=h,
                            user_message="What should I work on today?", backend_id="recall",
                            backend_context="## Recall\n\n" + words(1200, 9))

        first = once(hist)
        assert not any(layer.skipped for layer in first.layers), [lyr.section for lyr in first.layers if lyr.skipped]
        warm: list[float] = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            once(hist)
            warm.append(time.perf_counter() - t0)
        # Versions are prepared outside the timed part: signing and encrypting are the save's cost, not assembly's.
        versions = [memory_version(words(STM_CHARS, 1000 + n), NOW + 1 + n) for n in range(rounds)]
        changed: list[float] = []
        grown = list(hist)
        for n in range(rounds):
            await store.take("ws://bench", versions[n])
            grown = [*grown[2:], {"role": "user", "content": words(200, 500 + n)},
                     {"role": "assistant", "content": words(600, 700 + n)}]
            t0 = time.perf_counter()
            once(grown)
            changed.append(time.perf_counter() - t0)
        ms = statistics.median(warm) * 1000, statistics.median(changed) * 1000
        return ms[0], ms[1], first.total_tokens, len(first.messages)


async def bench_save(rounds: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        relay = EmbeddedRelay(Path(tmp) / "relay.sqlite3")
        await relay.start()
        pool = RelayPool([relay.url])
        await pool.start()
        try:
            store = make_store(pool)
            saving = make_saves(store, pool, Path(tmp))  # the real save path: outbox, relays, history
            texts = [words(STM_CHARS, n) for n in range(rounds)]
            await saving.save(DocumentKey.SHORT_TERM, "warm-up")
            # The raw side: events of the same size, signed beforehand (a separate d tag, so no replacement
            # interplay with the store's own versions).
            base = int(time.time()) - rounds - 10
            conv = nip44.get_conversation_key(AGENT.secret_hex(), AGENT.public_key_hex)
            raw_events = [sign_event(AGENT, kind=30078, content=nip44.encrypt(t, conv), created_at=base + n,
                                     tags=[["d", "bench_raw"], ["app", "didactyl"]]) for n, t in enumerate(texts)]
            saves: list[float] = []
            raws: list[float] = []
            for n in range(rounds):  # interleaved: both sides see the same machine load
                t0 = time.perf_counter()
                result = await saving.save(DocumentKey.SHORT_TERM, texts[n])
                saves.append(time.perf_counter() - t0)
                assert result.any_accepted, result.outcome.summary()
                t0 = time.perf_counter()
                outcome = await pool.publish(raw_events[n], timeout=5)
                raws.append(time.perf_counter() - t0)
                assert outcome.any_accepted, outcome.summary()
            return statistics.median(saves) * 1000, statistics.median(raws) * 1000
        finally:
            await pool.close()
            await relay.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="assembly iterations (default 200)")
    parser.add_argument("--saves", type=int, default=60, help="memory saves (default 60)")
    args = parser.parse_args(argv)

    warm_ms, changed_ms, total_tokens, n_messages = asyncio.run(bench_assemble(args.rounds))
    save_ms, raw_ms = asyncio.run(bench_save(args.saves))
    ok = warm_ms < ASSEMBLE_MS_TARGET and changed_ms < ASSEMBLE_MS_TARGET
    print(f"token counter: {tokens.counter_backend()}; prompt: {total_tokens:,} tokens in {n_messages} messages")
    print(f"{'assemble (warm)':<22} median {warm_ms:7.3f} ms   target < {ASSEMBLE_MS_TARGET:g} ms  "
          f"{'ok' if warm_ms < ASSEMBLE_MS_TARGET else 'MISSED'}")
    print(f"{'assemble (changed)':<22} median {changed_ms:7.3f} ms   target < {ASSEMBLE_MS_TARGET:g} ms  "
          f"{'ok' if changed_ms < ASSEMBLE_MS_TARGET else 'MISSED'}")
    print(f"{'memory_save e2e':<22} median {save_ms:7.3f} ms   ({STM_CHARS:,} chars, embedded relay, loopback)")
    print(f"{'raw publish':<22} median {raw_ms:7.3f} ms   same-sized pre-signed event")
    print(f"{'save / raw publish':<22} ratio  {save_ms / raw_ms:7.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
