"""The backup bundle: one portable file of the agent's signed events and its conversations.

Pure functions over event lists and session records; reading files, the conversation store and
republishing through the outbox are the caller's. The file is UTF-8 JSON::

    {"format": "didactyl-bundle/1", "agent": "<hex pubkey>", "created_at": <unix seconds>,
     "events": [<signed event>, ...],
     "conversations": [<signed kind 30078 part>, ...]}

``events`` are the agent's own signed events (memory, soul, tasks, identity: kinds 0/3/10002/10050/1,
30078, 31120...), kept exactly as signed so they can be republished as they are. ``conversations`` is the
JSON list of session records, cut into parts of at most :data:`PART_BYTES`, each NIP-44 encrypted to the
agent's own key inside a kind 30078 event signed by the agent (``d = didactyl-bundle:<created_at>:<i>``,
``["part", i, n]``): the conversations are private and tamper-evident like everything else.

:func:`read_bundle` verifies every id and signature and every author, and refuses the whole bundle on the
first failure, naming the event (its position, kind and id). Nothing is restored from a bundle it refused.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import AgentError, NostrError
from ..nostr import nip44
from ..nostr.event import Event, sign_event
from ..nostr.keys import SecretKey
from ..nostr.kinds import APP_DATA
from ..nostr.signer import Signer

BUNDLE_FORMAT = "didactyl-bundle/1"
PART_BYTES = 48_000  # plaintext per conversations part: NIP-44 takes at most 65,535 bytes
MAX_BUNDLE_BYTES = 256 * 1024 * 1024  # default bound on the file a caller reads; configurable per call
MAX_EVENTS = 100_000
_ROLES = frozenset({"system", "user", "assistant", "tool"})
_PART_D = re.compile(r"^didactyl-bundle:(\d+):(\d+)$")


class BundleError(AgentError):
    """A bundle could not be written or was refused on reading; the message names the event or session."""

    title = "Bundle"


@dataclass(frozen=True, slots=True)
class Bundle:
    agent: str
    created_at: int
    events: tuple[Event, ...]
    sessions: tuple[dict[str, Any], ...]


def session_record(session_id: str, title: str, created_at: float, updated_at: float,
                   messages: Sequence[Mapping[str, Any]], agent: str | None = None) -> dict[str, Any]:
    """The portable form of one conversation (OpenAI-format messages, oldest first); ``agent``: the agent elsewhere
    it is with (hex), only when it is not the bundle's own."""
    record = {"id": session_id, "title": title, "created_at": created_at, "updated_at": updated_at,
              "messages": [dict(m) for m in messages]}
    return record if agent is None else {**record, "agent": agent}


# --- writing -----------------------------------------------------------------------------------


def write_bundle(sk: SecretKey, events: Iterable[Event], sessions: Iterable[Mapping[str, Any]], *,
                 created_at: int, rng: random.Random | None = None) -> str:
    """The bundle text. Every event must be the agent's own and valid; each session is checked.

    ``rng`` draws the NIP-44 nonces (a seeded one makes the file reproducible in tests); by default
    they come from the system's randomness.
    """
    kept, text = _checked(sk.public_key_hex, events, sessions)
    parts = _encrypt_parts(sk, text, created_at=created_at, rng=rng)
    return _bundle_text(sk.public_key_hex, created_at, kept, parts)


async def write_bundle_with(signer: Signer, events: Iterable[Event], sessions: Iterable[Mapping[str, Any]], *,
                            created_at: int, part_bytes: int = PART_BYTES) -> str:
    """:func:`write_bundle` with the agent's key behind ``signer`` (a remote signer: one encrypt and one sign per
    part of at most ``part_bytes``, a few at a time)."""
    agent = signer.public_key
    kept, text = await asyncio.to_thread(_checked, agent, events, sessions)
    pieces = _chunks(text, part_bytes)
    total, at_once = str(len(pieces)), asyncio.Semaphore(4)

    async def part(i: int, piece: str) -> Event:
        async with at_once:
            content = await signer.nip44_encrypt(agent, piece) if piece else ""
            return await signer.sign_event(kind=APP_DATA, created_at=created_at, content=content,
                                           tags=_part_tags(created_at, i, total))

    parts = await asyncio.gather(*(part(i, piece) for i, piece in enumerate(pieces)))
    return await asyncio.to_thread(_bundle_text, agent, created_at, kept, list(parts))


def _checked(agent: str, events: Iterable[Event],
             sessions: Iterable[Mapping[str, Any]]) -> tuple[dict[str, Event], str]:
    """Every event the agent's own and valid (deduplicated), every session checked: the events and the
    conversations' JSON."""
    kept: dict[str, Event] = {}
    for n, ev in enumerate(events, 1):
        _check_event(ev, n, agent)
        kept.setdefault(ev.id, ev)
    records = [_check_session(s, n) for n, s in enumerate(sessions, 1)]
    return kept, json.dumps(records, ensure_ascii=False, separators=(",", ":"))


def _bundle_text(agent: str, created_at: int, kept: dict[str, Event], parts: list[Event]) -> str:
    return json.dumps({"format": BUNDLE_FORMAT, "agent": agent, "created_at": created_at,
                       "events": [ev.to_dict() for ev in kept.values()],
                       "conversations": [p.to_dict() for p in parts]}, ensure_ascii=False, separators=(",", ":"))


def _part_tags(created_at: int, i: int, total: str) -> list[tuple[str, ...]]:
    return [("d", f"didactyl-bundle:{created_at}:{i}"), ("app", "didactyl"), ("part", str(i), total)]


def _chunks(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` UTF-8 bytes, never inside a character."""
    out: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + limit)  # at most `limit` chars; shrink until the bytes fit
        while len(text[start:end].encode("utf-8", "surrogatepass")) > limit:
            end = start + max(1, (end - start) * 3 // 4)
        out.append(text[start:end])
        start = end
    return out or [""]


def _encrypt_parts(sk: SecretKey, text: str, *, created_at: int, rng: random.Random | None) -> list[Event]:
    key = nip44.get_conversation_key(sk.secret_hex(), sk.public_key_hex)
    pieces = _chunks(text, PART_BYTES)
    total = str(len(pieces))
    return [sign_event(sk, kind=APP_DATA, created_at=created_at,
                       content=nip44.encrypt(piece, key, rng.randbytes(32) if rng else None) if piece else "",
                       tags=_part_tags(created_at, i, total))
            for i, piece in enumerate(pieces)]


# --- reading -----------------------------------------------------------------------------------


def read_bundle(text: str | bytes, sk: SecretKey, *, max_bytes: int = MAX_BUNDLE_BYTES) -> Bundle:
    """Parse and verify a bundle for ``sk``'s agent; :class:`BundleError` names what failed."""
    agent, created_at, events, parts = _parse_bundle(text, sk.public_key_hex, max_bytes)
    key = nip44.get_conversation_key(sk.secret_hex(), sk.public_key_hex)

    def decrypt(name: str, payload: str) -> str:
        try:
            return nip44.decrypt(payload, key)
        except NostrError as exc:
            raise BundleError(f"{name} does not decrypt with this key: {exc.message}") from None

    _check_parts(parts, created_at)
    pieces = [decrypt(_part_name(i, ev), ev.content) if ev.content else "" for i, ev in enumerate(parts)]
    return Bundle(agent, created_at, events, _sessions_from(pieces))


async def read_bundle_with(text: str | bytes, signer: Signer, *, max_bytes: int = MAX_BUNDLE_BYTES) -> Bundle:
    """:func:`read_bundle` with the agent's key behind ``signer`` (a remote signer: one decrypt per part, a few
    at a time); the same checks, all of them before anything is decrypted."""
    agent, created_at, events, parts = await asyncio.to_thread(_parse_bundle, text, signer.public_key, max_bytes)
    _check_parts(parts, created_at)
    at_once = asyncio.Semaphore(4)

    async def piece(i: int, ev: Event) -> str:
        if not ev.content:
            return ""
        async with at_once:
            try:
                return await signer.nip44_decrypt(agent, ev.content)
            except NostrError as exc:
                raise BundleError(f"{_part_name(i, ev)} does not decrypt with this key: {exc.message}") from None

    pieces = await asyncio.gather(*(piece(i, ev) for i, ev in enumerate(parts)))
    return Bundle(agent, created_at, events, await asyncio.to_thread(_sessions_from, list(pieces)))


def _parse_bundle(text: str | bytes, agent: str, max_bytes: int) -> tuple[str, int, tuple[Event, ...], list[Event]]:
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise BundleError(f"the bundle is {size:,} bytes, over the {max_bytes:,}-byte limit")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise BundleError("the bundle is not valid JSON") from None
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"not a {BUNDLE_FORMAT} file")
    if data.get("agent") != agent:
        raise BundleError(f"the bundle belongs to agent {str(data.get('agent'))[:12]}…, not to this key")
    created_at, raw_events, raw_parts = data.get("created_at"), data.get("events"), data.get("conversations")
    if not isinstance(created_at, int) or isinstance(created_at, bool):
        raise BundleError("the bundle has no created_at")
    if not isinstance(raw_events, list) or not isinstance(raw_parts, list):
        raise BundleError("the bundle must hold an events list and a conversations list")
    if len(raw_events) + len(raw_parts) > MAX_EVENTS:
        raise BundleError(f"the bundle holds more than {MAX_EVENTS:,} events")
    events = tuple(_parse_event(item, n, agent, "event") for n, item in enumerate(raw_events, 1))
    parts = [_parse_event(item, n, agent, "conversations part") for n, item in enumerate(raw_parts, 1)]
    return agent, created_at, events, parts


def _parse_event(item: Any, n: int, agent: str, what: str) -> Event:
    try:
        ev = Event.from_dict(item)
    except NostrError as exc:
        raise BundleError(f"{what} #{n} is malformed: {exc.message}") from None
    _check_event(ev, n, agent, what)
    return ev


def _check_event(ev: Event, n: int, agent: str, what: str = "event") -> None:
    name = f"{what} #{n} (kind {ev.kind}, id {ev.id[:12]}…)"
    try:
        ev.check()
    except NostrError as exc:
        raise BundleError(f"{name} failed verification: {exc.message.removeprefix('invalid: ')}") from None
    if ev.pubkey != agent:
        raise BundleError(f"{name} was signed by {ev.pubkey[:12]}…, not by this agent")


def _part_name(i: int, ev: Event) -> str:
    return f"conversations part #{i + 1} (id {ev.id[:12]}…)"


def _check_parts(parts: list[Event], created_at: int) -> None:
    """Every part in its place: this bundle's, numbered in order, none missing."""
    if not parts:
        raise BundleError("the bundle has no conversations part")
    for i, ev in enumerate(parts):
        m = _PART_D.match(ev.d_tag)
        part = next((t for t in ev.tags if len(t) >= 3 and t[0] == "part"), None)
        if (ev.kind != APP_DATA or m is None or int(m.group(1)) != created_at or int(m.group(2)) != i
                or part is None or part[1:3] != (str(i), str(len(parts)))):
            raise BundleError(f"{_part_name(i, ev)} is out of place (parts missing, reordered or from another "
                              "bundle)")


def _sessions_from(pieces: list[str]) -> tuple[dict[str, Any], ...]:
    try:
        records = json.loads("".join(pieces))
    except (ValueError, RecursionError):
        raise BundleError("the conversations in the bundle are not valid JSON") from None
    if not isinstance(records, list):
        raise BundleError("the conversations in the bundle are not a list")
    return tuple(_check_session(r, n) for n, r in enumerate(records, 1))


def _check_session(record: Any, n: int) -> dict[str, Any]:
    if not isinstance(record, Mapping):
        raise BundleError(f"conversation #{n} is not an object")
    sid, title = record.get("id"), record.get("title")
    name = f"conversation #{n} ({sid!r})"
    if not isinstance(sid, str) or not sid or not isinstance(title, str):
        raise BundleError(f"{name} needs a string id and title")
    for key in ("created_at", "updated_at"):
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BundleError(f"{name}: {key} must be a number")
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise BundleError(f"{name}: messages must be a list")
    for k, msg in enumerate(messages, 1):
        if not isinstance(msg, Mapping) or msg.get("role") not in _ROLES:
            raise BundleError(f"{name}: message #{k} has no valid role")
    agent = record.get("agent")
    if agent is not None and (not isinstance(agent, str) or len(agent) != 64
                              or any(c not in "0123456789abcdef" for c in agent)):
        raise BundleError(f"{name}: agent must be a hex public key")
    return session_record(sid, title, record["created_at"], record["updated_at"], messages, agent)
