"""AppService: the one API the TUI and the CLI call. It owns the key, the relays, the stores and the agent.

Start-up: key → embedded relay → relay pool → memories, self- and admin-context fetched (relay trouble
never raises: it shows in ``relay_states()`` and as :class:`ServiceWarning`) → live subscriptions → the
agent's configured profile, contacts and relay list published when they differ from the relays'.

A turn: the soul assembles the prompt from the caches (no network), ``agent.loop.run_turn`` streams it
with tools dispatched to the memory backend's tools first, then the registry; a finished turn is
persisted and recorded by the backend. litellm is never imported here (``preload_llm`` starts it in a
thread, off the UI path).

Memory that is never lost: every save goes to the SQLite outbox (``<data>/memory.sqlite3``) before the
relays, and a background publisher retries what no relay took — at once when a relay (re)connects, and
across restarts. Every version seen (own saves and relays') is kept, encrypted, in
``<data>/memory-history.sqlite3``. After start and after reconnects (rate-limited) each relay is asked
which version it holds and lagging ones get the newest. When this device's own edit loses to a newer
version from another device, the user is told and the edit stays in the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import sqlite3
import threading
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .agent.events import AgentEvent, TurnFailed, TurnFinished
from .agent.identity_cache import (
    IdentityCache,
    IdentityView,
    SelfContextSnapshot,
    own_identity_drafts,
    pubkey_hex,
)
from .agent.keystore import ensure_data_dir, load_agent_key
from .agent.memory.history import MemoryHistory, unified_diff
from .agent.memory.outbox import REFUSED as OUTBOX_REFUSED
from .agent.memory.outbox import RELAY_ACCEPTED, Outbox, OutboxEntry, classify_verdict
from .agent.memory.publisher import MemoryPublisher, RelayHolding
from .agent.memory.store import MemorySnapshot, MemoryStore, MemoryType, SaveResult, VersionSeen
from .agent.prompt_record import PromptAssembly, SourceEvent
from .agent.soul import SoulTemplate, assemble, load_soul_template
from .agent.tools.builtin import build_base_registry
from .agent.tools.context import AgentToolContext
from .agent.tools.registry import Tool, ToolOutcome, ToolRegistry
from .config import Config, config_error
from .errors import AgentError, ConfigError, DidactylError, NostrError, RelayError
from .nostr.event import Event, sign_event
from .nostr.keys import SecretKey
from .nostr.kinds import APP_DATA, CONTACTS, METADATA, RELAY_LIST
from .nostr.pool import RelayPool
from .nostr.replaceable import is_newer
from .nostr.results import ConnectionState, PublishOutcome, RelayVerdict

log = logging.getLogger("didactyl.service")

__all__ = [
    "AppService",
    "IdentityView",
    "MemoryChanged",
    "MemoryStatus",
    "MemoryVersionView",
    "OutboxChanged",
    "PendingPublish",
    "PromptAssembled",
    "RelayMemoryStatus",
    "RelayStateChanged",
    "SelfContextChanged",
    "SelfContextSnapshot",
    "ServiceEvent",
    "ServiceToolContext",
    "ServiceWarning",
]

STATE_FILE = "state.toml"
RELAY_DB = "relay.sqlite3"
CONVERSATIONS_DB = "conversations.sqlite3"
MEMORY_FOLDER = "memory"
OUTBOX_DB = "memory.sqlite3"
HISTORY_DB = "memory-history.sqlite3"
RECONCILE_MIN_INTERVAL_S = 10.0  # at most one relay-consensus check per this many seconds after reconnects
RECONCILE_START_DELAY_S = 1.0  # the first check waits for the outbox's first retries (and a CLI command's own)
LOST_NOTE = "lost to a newer version from another device"
REFUSED_NOTE = "not published: a newer version from another device already existed"


# --- events for the UI --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryChanged:
    type: MemoryType
    snapshot: MemorySnapshot
    origin: Literal["local", "remote"]
    # This device's own edit lost to a newer version from another device (its text is in memory_history).
    lost_local: bool = False
    lost_event_id: str | None = None


@dataclass(frozen=True, slots=True)
class OutboxChanged:
    """The memory outbox changed (a save queued, a relay accepted, a retry failed)."""

    pending: int  # memory publishes some relay still needs (len(pending_publishes()))


@dataclass(frozen=True, slots=True)
class RelayStateChanged:
    url: str
    state: ConnectionState


@dataclass(frozen=True, slots=True)
class SelfContextChanged:
    who: Literal["agent", "admin"]


@dataclass(frozen=True, slots=True)
class PromptAssembled:
    assembly: PromptAssembly


@dataclass(frozen=True, slots=True)
class ServiceWarning:
    message: str


ServiceEvent = (MemoryChanged | RelayStateChanged | SelfContextChanged | PromptAssembled | ServiceWarning
                | OutboxChanged)


# --- memory outbox, history and relay consensus, as the UI and CLI see them --------------------------------


def _when(created_at: int | float | None) -> str:
    if created_at is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created_at))


@dataclass(frozen=True, slots=True)
class PendingPublish:
    """A memory version some relay still needs (from the outbox)."""

    type: MemoryType
    event_id: str
    created_at: int
    state: str  # "pending" (no relay took it yet) | "delivered" (some did) | "unsaved" (outbox not writable)
    attempts: int
    next_attempt_at: float
    accepted_by: tuple[str, ...]
    waiting_for: tuple[str, ...]  # relays it is still being sent to
    last_error: str

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value, "event_id": self.event_id, "created_at": self.created_at,
            "state": self.state, "attempts": self.attempts, "next_attempt_at": round(self.next_attempt_at, 3),
            "accepted_by": list(self.accepted_by), "waiting_for": list(self.waiting_for),
            "last_error": self.last_error,
        }

    def describe(self) -> str:
        """One line, e.g. ``event 1a2b3c4d: pending, 3 attempts, waiting for ws://a (retry: timeout)``."""
        parts = [f"event {self.event_id[:8]}: {self.state}",
                 f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"]
        if self.waiting_for:
            parts.append("waiting for " + ", ".join(self.waiting_for))
        text = ", ".join(parts)
        return f"{text} ({self.last_error})" if self.last_error else text


@dataclass(frozen=True, slots=True)
class MemoryVersionView:
    """One version in a memory's history. ``content`` decrypts on each call; the text is kept nowhere."""

    type: MemoryType
    event_id: str
    created_at: int
    origin: str  # "local" (saved on this device) | "remote" (seen on a relay)
    note: str
    seen_at: float
    current: bool  # the version the memory shows now
    event: Event = field(repr=False, compare=False)
    _decrypt: Callable[[Event], str] = field(repr=False, compare=False)

    @property
    def content(self) -> str:
        try:
            return self._decrypt(self.event)
        except NostrError as exc:
            raise AgentError(f"version {self.event_id[:8]} does not decrypt with this key ({exc.message})",
                             "Memory history") from None

    def to_json_dict(self) -> dict[str, Any]:
        """For ``didactyl memory history --json``: sizes, never the text."""
        try:
            text: str | None = self.content
        except AgentError:
            text = None
        return {
            "event_id": self.event_id, "created_at": self.created_at, "origin": self.origin, "note": self.note,
            "current": self.current, "seen_at": round(self.seen_at, 3),
            "chars": len(text) if text is not None else None,
            "utf8_bytes": len(text.encode("utf-8", "surrogatepass")) if text is not None else None,
        }


@dataclass(frozen=True, slots=True)
class RelayMemoryStatus:
    """Which version of one memory one relay holds."""

    url: str
    reachable: bool  # answered the query completely
    event_id: str | None  # what it held when asked (None: no version)
    created_at: int | None
    lagging: bool  # reachable, and held an older version or none
    republished: RelayVerdict | None  # the answer to bringing it up to date (None: not needed or not tried)

    @property
    def current(self) -> bool:
        """Holds the newest version now (held it already, or took it just now)."""
        if not self.reachable:
            return False
        if not self.lagging:
            return True
        return self.republished is not None and classify_verdict(
            self.republished.verdict, self.republished.message) == RELAY_ACCEPTED

    def describe(self) -> str:
        if not self.reachable:
            return "unreachable"
        held = f"{self.event_id[:8]} ({_when(self.created_at)})" if self.event_id else "no version"
        if not self.lagging:
            return f"{held}: current" if self.event_id else held
        if self.republished is None:
            return f"{held}: lagging"
        if self.current:
            return f"{held}: was lagging, brought up to date"
        reason = f": {self.republished.message}" if self.republished.message else ""
        return f"{held}: lagging, not updated ({self.republished.verdict.value}{reason})"

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "reachable": self.reachable, "event_id": self.event_id, "created_at": self.created_at,
            "lagging": self.lagging, "current": self.current,
            "republished": None if self.republished is None else {
                "verdict": self.republished.verdict.value, "message": self.republished.message},
        }


@dataclass(frozen=True, slots=True)
class MemoryStatus:
    """Per relay, which version of a memory it holds; lagging relays were offered the newest."""

    type: MemoryType
    newest_event_id: str | None
    newest_created_at: int | None
    relays: tuple[RelayMemoryStatus, ...]
    pending: tuple[PendingPublish, ...]

    @property
    def any_reachable(self) -> bool:
        return any(r.reachable for r in self.relays)

    @property
    def brought_up_to_date(self) -> list[str]:
        return [r.url for r in self.relays if r.lagging and r.current]

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value, "newest_event_id": self.newest_event_id,
            "newest_created_at": self.newest_created_at,
            "relays": {r.url: r.to_json_dict() for r in self.relays},
            "brought_up_to_date": self.brought_up_to_date,
            "pending": [p.to_json_dict() for p in self.pending],
        }


@dataclass
class ServiceToolContext(AgentToolContext):
    """What the model's tool calls run with: the store, the caches, the config."""

    config: Config | None = None
    data_dir: Path | None = None


# --- state.toml (runtime choices the app owns; never the user's config.toml) ---------------------


def read_state(data_dir: Path) -> dict[str, Any]:
    try:
        with open(Path(data_dir) / STATE_FILE, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def write_state(data_dir: Path, values: Mapping[str, Any]) -> None:
    import tomli_w

    path = Path(data_dir) / STATE_FILE
    ensure_data_dir(path.parent)
    tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(tomli_w.dumps(dict(values)), "utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {exc.strerror}", "Settings") from None


def _address_in_use(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE


class AppService:
    def __init__(
        self,
        config: Config,
        *,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        relay_client_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.data_dir = Path(data_dir)
        self.env: dict[str, str] = dict(os.environ if env is None else env)
        self._clock = clock
        self._client_options = dict(relay_client_options or {})
        self._listeners: list[Callable[[ServiceEvent], None]] = []
        self._state_lock = threading.Lock()
        self._key: SecretKey | None = None
        self.admin_pubkey: str | None = None
        if config.admin.pubkey.strip():
            try:
                self.admin_pubkey = pubkey_hex(config.admin.pubkey)
            except ValueError as exc:
                raise config_error(config.path, "admin", "pubkey", str(exc)) from None
        self.soul: SoulTemplate = load_soul_template(config.soul, config_path=config.path)
        self._model = self._initial_model()
        self.embedded_relay: Any = None
        self.pool: RelayPool | None = None
        self.memory_store: MemoryStore | None = None
        self.agent_cache: IdentityCache | None = None
        self.admin_cache: IdentityCache | None = None
        self.registry: ToolRegistry = build_base_registry(admin=self.admin_pubkey is not None)
        self.tool_context: ServiceToolContext | None = None
        self.conversations: Any = None
        self.memory_manager: Any = None
        self._subscriptions: list[Any] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._daemons: set[asyncio.Task[Any]] = set()  # cancelled at stop, never waited for
        self._started = False
        self._memory_ready = False
        self.outbox: Outbox | None = None
        self.history: MemoryHistory | None = None
        self.publisher: MemoryPublisher | None = None
        self.reconcile_interval_s = RECONCILE_MIN_INTERVAL_S
        self._reconcile_lock = asyncio.Lock()
        self._reconcile_task: asyncio.Task[Any] | None = None
        self._reconcile_again = False
        self._last_reconcile = float("-inf")
        self._lost: dict[MemoryType, str] = {}  # type -> this device's edit that just lost (for MemoryChanged)
        self._last_local: dict[MemoryType, str] = {}  # type -> the last version saved here
        self._history_error: str | None = None
        self._outbox_error: str | None = None
        self._preload_thread: threading.Thread | None = None

    # --- listeners ----------------------------------------------------------------------------
    def add_listener(self, cb: Callable[[ServiceEvent], None]) -> Callable[[], None]:
        self._listeners.append(cb)

        def unsubscribe() -> None:
            if cb in self._listeners:
                self._listeners.remove(cb)

        return unsubscribe

    def _emit(self, event: ServiceEvent) -> None:
        for cb in list(self._listeners):
            try:
                cb(event)
            except Exception:  # a listener's bug must not break the service
                log.exception("service listener failed")

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self._emit(ServiceWarning(message))

    # --- public identity ------------------------------------------------------------------------
    @property
    def key(self) -> SecretKey:
        if self._key is None:
            raise AgentError("the service has not started yet", "Not started")
        return self._key

    @property
    def agent_pubkey(self) -> str:
        return self.key.public_key_hex

    @property
    def agent_npub(self) -> str:
        return self.key.npub

    @property
    def embedded_relay_url(self) -> str | None:
        return self.embedded_relay.url if self.embedded_relay is not None else None

    @property
    def relay_urls(self) -> list[str]:
        return self.pool.urls if self.pool is not None else []

    # --- model --------------------------------------------------------------------------------
    def _initial_model(self) -> str:
        # $DIDACTYL_MODEL (already in config.llm) is the most explicit choice; then the model switched
        # at runtime and remembered in state.toml; then config.toml.
        if self.env.get("DIDACTYL_MODEL", "").strip():
            return self.config.llm.model
        remembered = read_state(self.data_dir).get("model")
        if isinstance(remembered, str) and remembered.strip():
            return remembered.strip()
        return self.config.llm.model

    @property
    def model(self) -> str:
        return self._model

    @property
    def model_configured(self) -> bool:
        return bool(self._model.strip())

    def set_model(self, name: str) -> None:
        name = name.strip()
        if not name:
            raise ConfigError("a model name cannot be empty", "Model")
        self._model = name
        self.remember("model", name)

    def remember(self, key: str, value: Any) -> None:
        """Keep a runtime choice (model, theme...) in <data dir>/state.toml."""
        with self._state_lock:
            state = read_state(self.data_dir)
            state[key] = value
            write_state(self.data_dir, state)

    # --- lifecycle ------------------------------------------------------------------------------
    async def __aenter__(self) -> AppService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self, *, publish_identity: bool | None = None) -> None:
        """Key, embedded relay, pool, memories, caches, live subscriptions, own profile.

        Relay trouble never raises (see ``relay_states()``); a bad key raises NostrError/ConfigError.
        """
        if self._started:
            return
        try:
            await self._start(publish_identity)
        except BaseException:
            await self.stop()  # a half-started service leaves no relay or socket behind
            raise

    async def _start(self, publish_identity: bool | None) -> None:
        ensure_data_dir(self.data_dir)
        self._key = load_agent_key(self.data_dir, self.env).key
        cfg = self.config
        urls: list[str] = []
        if cfg.relays.embedded:
            await self._start_embedded_relay()
            if self.embedded_relay is not None:
                urls.append(self.embedded_relay.url)
        urls += [u for u in cfg.relays.urls if u not in urls]
        if not urls:
            self._warn("no relay is available: memory saves will not be published")
        self.pool = RelayPool(urls, auth_key=self._key, **self._client_options)
        self.pool.add_state_listener(lambda url, state: self._emit(RelayStateChanged(url, state)))
        self.pool.add_state_listener(self._relay_state_changed)
        await self.pool.start()

        self._open_memory_outbox()
        assert self.publisher is not None
        limits = {MemoryType.SHORT_TERM: cfg.memory.short_term_max_chars,
                  MemoryType.LONG_TERM: cfg.memory.long_term_max_chars}
        store = MemoryStore(self._key, self.pool, limits=limits, relay_timeout=cfg.relays.timeout_s,
                            clock=self._clock, publisher=self.publisher.publish)
        store.add_version_listener(self._version_seen)
        store.add_listener(self._memory_changed)
        store.add_warning_listener(self._warn)
        self.memory_store = store
        self.agent_cache = IdentityCache(self._key.public_key_hex, clock=self._clock)
        self.agent_cache.add_listener(lambda: self._emit(SelfContextChanged("agent")))
        if self.admin_pubkey is not None:
            self.admin_cache = IdentityCache(self.admin_pubkey, clock=self._clock)
            self.admin_cache.add_listener(lambda: self._emit(SelfContextChanged("admin")))
        self.tool_context = ServiceToolContext(
            memory=store, agent=self.agent_cache, admin=self.admin_cache,
            files_root=self.data_dir / MEMORY_FOLDER, config=cfg, data_dir=self.data_dir,
        )
        self._open_conversations()
        self._open_memory_backend()
        self._started = True

        async with asyncio.TaskGroup() as tg:
            tg.create_task(store.load())
            for cache in self._caches():
                tg.create_task(self._load_identity(cache))
        self._restore_newest_known(store)
        store.start_live()
        for cache in self._caches():
            self._subscriptions.append(self.pool.subscribe(cache.filters(), cache.ingest))
        # What the last run (or this one) left unsent goes out now; relays that lag get the newest.
        self._daemon(self.publisher.run())
        self._memory_ready = True
        self._schedule_reconcile(delay=RECONCILE_START_DELAY_S)
        wanted = publish_identity if publish_identity is not None else cfg.agent.publish_profile
        if wanted and self.agent_cache.loaded:
            # The cache shows the configured identity at once; the relays get it in the background.
            own = self._own_identity_events()
            for ev in own:
                self.agent_cache.ingest(None, ev)
            if own:
                self._spawn(self._publish_own_identity(own))

    def _memory_changed(self, snap: MemorySnapshot, origin: str) -> None:
        self._index_long_term(snap)
        lost = self._lost.pop(snap.type, None) if origin != "local" else None
        self._emit(MemoryChanged(snap.type, snap, "local" if origin == "local" else "remote",
                                 lost_local=lost is not None, lost_event_id=lost))

    # --- memory outbox and history --------------------------------------------------------------
    def _open_memory_outbox(self) -> None:
        """The outbox and the history in the data dir; an unusable file falls back to memory, with a warning."""
        assert self.pool is not None
        try:
            self.outbox = Outbox(self.data_dir / OUTBOX_DB)
        except AgentError as exc:
            self._warn(f"{exc.message}; unsent memory edits are kept only until didactyl quits")
            self.outbox = Outbox(Path(":memory:"))
        try:
            self.history = MemoryHistory(self.data_dir / HISTORY_DB)
        except AgentError as exc:
            self._warn(f"{exc.message}; memory versions are kept only until didactyl quits")
            self.history = MemoryHistory(Path(":memory:"))
        self.publisher = MemoryPublisher(self.pool, self.outbox, timeout=self.config.relays.timeout_s,
                                         on_change=self._outbox_changed)

    def _restore_newest_known(self, store: MemoryStore) -> None:
        """The newest version this device knows — an edit the relays did not confirm before the last run
        ended, or a version the relays have since lost — is still the memory: shown (and sent by the retry
        loop or the consensus check) unless the relays gave something newer."""
        for t in MemoryType:
            candidates: list[tuple[Event, str]] = []
            if self.outbox is not None:
                try:
                    entry = self.outbox.latest(f"{APP_DATA}:{store.pubkey}:{t.d_tag}")
                except AgentError:
                    entry = None
                if entry is not None and entry.state != OUTBOX_REFUSED:
                    candidates.append((entry.event, "local"))
            if self.history is not None:
                versions = self._history_call(self.history.versions, t.d_tag) or []
                mine = next((v for v in versions if v.event.pubkey == store.pubkey), None)
                if mine is not None:
                    candidates.append((mine.event, mine.origin))
            best: tuple[Event, str] | None = None
            for ev, origin in candidates:
                if best is None or is_newer(ev, best[0]):
                    best = (ev, origin)
            if best is not None:
                store.restore(best[0], origin=best[1])

    def _outbox_changed(self) -> None:
        publisher = self.publisher
        if publisher is None:
            return
        error = getattr(publisher, "outbox_error", None)
        if error and error != self._outbox_error:
            self._warn(f"{error}; memory edits are still sent, and stored once the file is writable")
        self._outbox_error = error
        self._emit(OutboxChanged(len(self.pending_publishes())))

    def _history_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A history read or write; a locked or broken file gives one warning, never an exception."""
        try:
            result = fn(*args)
        except (AgentError, sqlite3.Error) as exc:  # locked by another program, or closed at stop
            message = exc.message if isinstance(exc, AgentError) else str(exc)
            if message != self._history_error:
                self._warn(f"memory history: {message}")
            self._history_error = message
            return None
        self._history_error = None
        return result

    def _version_seen(self, seen: VersionSeen) -> None:
        """Every version the store sees: keep it in the history, supersede older unsent local versions,
        and tell this device when its own edit lost to another device's newer one."""
        if seen.origin == "local":
            self._last_local[seen.type] = seen.event.id
        elif seen.became_current:
            lost = self._lost_local_edit(seen)
            if lost is not None:
                self._lost[seen.type] = lost
        if self.history is not None:
            self._history_call(self.history.record, seen.event, seen.origin)
        if seen.origin == "remote" and self.publisher is not None:
            self._daemon(self._note_remote(seen.event))

    async def _note_remote(self, ev: Event) -> None:
        assert self.publisher is not None
        try:
            await self.publisher.note_remote(ev)
        except Exception:  # the outbox reports its own trouble through on_change
            log.exception("noting a remote memory version failed")

    def _lost_local_edit(self, seen: VersionSeen) -> str | None:
        """The id of this device's newest edit that ``seen`` (another device's newer version) replaced."""
        history, store = self.history, self.memory_store
        if history is None or store is None:
            return None
        if self._history_call(history.get, seen.event.id) is not None:
            return None  # seen before (our own save coming back, or judged when it first arrived)
        versions = self._history_call(history.versions, seen.type.d_tag) or []
        previous = next((v for v in versions if v.event_id != seen.event.id and v.event.pubkey == store.pubkey), None)
        if previous is None or previous.origin != "local":
            return None  # not this device's edit
        if LOST_NOTE in previous.note or REFUSED_NOTE in previous.note:
            return None  # the user was told already
        if not is_newer(seen.event, previous.event):
            return None
        try:
            if store.decrypt(previous.event) == seen.content:
                return None  # the other device wrote the same words: nothing was lost
        except NostrError:
            return None
        self._history_call(history.annotate, previous.event_id, LOST_NOTE)
        self._warn(f"your edit of the {seen.type.title.lower()} (event {previous.event_id[:8]}) lost to a newer "
                   "version from another device; your text is kept in the memory history")
        return previous.event_id

    def _daemon(self, coro: Any) -> None:
        """A background task that stop() cancels (the outbox keeps whatever it was doing)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._daemons.add(task)
        task.add_done_callback(self._daemons.discard)

    # --- relay consensus --------------------------------------------------------------------------
    def _relay_state_changed(self, url: str, state: ConnectionState) -> None:
        if state is not ConnectionState.CONNECTED or not self._memory_ready:
            return
        if self.publisher is not None:
            self.publisher.wake()  # retry what this relay missed now, not at the next backoff
        self._schedule_reconcile()

    def _schedule_reconcile(self, delay: float = 0.0) -> None:
        """Check every relay's memory versions soon: at most once per ``reconcile_interval_s``."""
        if self._reconcile_task is not None and not self._reconcile_task.done():
            self._reconcile_again = True
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._reconcile_task = loop.create_task(self._reconcile_soon(delay))
        self._daemons.add(self._reconcile_task)
        self._reconcile_task.add_done_callback(self._daemons.discard)

    async def _reconcile_soon(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            wait = self._last_reconcile + self.reconcile_interval_s - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._reconcile_again = False
            self._last_reconcile = loop.time()
            for t in MemoryType:
                try:
                    async with self._reconcile_lock:
                        status = await self._check_memory(t, fix=True)
                except asyncio.CancelledError:
                    raise
                except Exception:  # relay trouble shows in relay_states; never out of a background check
                    log.exception("checking the relays' %s failed", t.value)
                    continue
                if status.brought_up_to_date:
                    log.info("brought %s up to date on %s", t.value, ", ".join(status.brought_up_to_date))
            if not self._reconcile_again:
                return

    async def _check_memory(self, t: MemoryType, *, fix: bool) -> MemoryStatus:
        store, publisher = self._require()[0], self._require_publisher()
        best, holdings = await publisher.relay_versions(store.pubkey, APP_DATA, t.d_tag)
        holdings = list(holdings)
        if best is not None and store.version_type(best) is t:  # (refused ones were counted when first seen)
            for h in holdings:
                if h.event_id == best.id:
                    store.ingest(h.url, best)  # a newer version than the cache's: adopted (and kept in history)
        # The newest the store accepts: a relay's (now in the cache) or this device's own newer save.
        target = store.current_event(t)
        outcome: PublishOutcome | None = None
        # A newer version the store refused (dated too far ahead, or not decryptable) is not overwritten.
        if fix and target is not None and (best is None or not is_newer(best, target)):
            outcome = await publisher.reconcile(target, holdings)
        if fix:
            # Whatever the outbox has due goes out now, so the pending list below is settled, not mid-flight.
            await publisher.retry_due()
        newest_id = outcome.event_id if outcome is not None else (target.id if target else None)
        newest_at = target.created_at if target is not None and target.id == newest_id else None
        if newest_at is None and newest_id is not None:  # reconcile sent a newer save from the outbox
            entry = await asyncio.to_thread(publisher.outbox.get, newest_id)
            newest_at = entry.event.created_at if entry is not None else None
        relays = tuple(self._relay_status(h, newest_id, outcome) for h in holdings)
        return MemoryStatus(t, newest_id, newest_at, relays, tuple(self.pending_publishes(t)))

    @staticmethod
    def _relay_status(h: RelayHolding, newest_id: str | None, outcome: PublishOutcome | None) -> RelayMemoryStatus:
        lagging = h.reachable and newest_id is not None and h.event_id != newest_id
        verdict = outcome.results.get(h.url) if outcome is not None and lagging else None
        return RelayMemoryStatus(h.url, h.reachable, h.event_id, h.created_at, lagging, verdict)

    def _require_publisher(self) -> MemoryPublisher:
        if self.publisher is None:
            raise AgentError("the service has not started yet", "Not started")
        return self.publisher

    async def _start_embedded_relay(self) -> None:
        from .nostr.embedded_relay.server import EmbeddedRelay

        db = self.data_dir / RELAY_DB
        port = self.config.relays.embedded_port
        try:
            relay = EmbeddedRelay(db, "127.0.0.1", port)
            await relay.start()
        except RelayError as exc:
            if port == 0 or not _address_in_use(exc):
                self._warn(f"the embedded relay did not start: {exc.message}")
                return
            # Another instance (or program) has the port: run ours on a free one, same database.
            try:
                relay = EmbeddedRelay(db, "127.0.0.1", 0)
                await relay.start()
            except RelayError as again:
                self._warn(f"the embedded relay did not start: {again.message}")
                return
            self._warn(f"port {port} is busy (another didactyl?); the embedded relay runs on {relay.url}")
        self.embedded_relay = relay

    def _caches(self) -> list[IdentityCache]:
        return [c for c in (self.agent_cache, self.admin_cache) if c is not None]

    async def _load_identity(self, cache: IdentityCache) -> None:
        assert self.pool is not None
        try:
            by_relay = await self.pool.query_by_relay(cache.filters(), timeout=self.config.relays.timeout_s)
        except Exception as exc:  # relay trouble never raises out of start()
            self._warn(f"could not fetch {cache.npub[:16]}…'s profile: {exc}")
            by_relay = {}
        # ``loaded`` only when some relay answered: publishing our profile over one we could not read
        # would drop fields set elsewhere.
        answered = any(events is not None for events in by_relay.values())
        cache.ingest_many([ev for events in by_relay.values() for ev in events or ()], loaded=answered)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _own_identity_events(self) -> list[Event]:
        """Kinds 0 / 3 / 10002 from the config, signed, where they differ from what the relays hold."""
        assert self.agent_cache is not None and self._key is not None
        cfg = self.config
        try:
            contacts = [pubkey_hex(pk) for pk in cfg.agent.contacts]
        except ValueError as exc:
            self._warn(config_error(cfg.path, "agent", "contacts", f"{exc}; contacts not published").message)
            contacts = []
        drafts = own_identity_drafts(
            self.agent_cache, name=cfg.agent.name, about=cfg.agent.about, picture=cfg.agent.picture,
            contacts=contacts, relay_urls=cfg.relays.urls,
        )
        events = []
        for draft in drafts:
            current = self.agent_cache.event(draft.kind)
            created_at = max(int(self._clock()), (current.created_at + 1) if current else 0)
            events.append(sign_event(self._key, kind=draft.kind, content=draft.content, created_at=created_at,
                                     tags=draft.tags))
        return events

    async def _publish_own_identity(self, events: list[Event]) -> None:
        assert self.pool is not None
        for ev in events:
            outcome = await self.pool.publish(ev, timeout=self.config.relays.timeout_s)
            if outcome.results and not outcome.any_accepted:
                what = {METADATA: "profile", CONTACTS: "contact list", RELAY_LIST: "relay list"}[ev.kind]
                self._warn(f"the agent's {what} was not published: {outcome.summary()}")

    async def stop(self) -> None:
        self._memory_ready = False
        if self._background:
            # Let publishes under way finish (each is bounded by the relay timeout), then cancel the rest.
            await asyncio.wait(list(self._background), timeout=self.config.relays.timeout_s + 1)
        # The retry loop and consensus checks are cancelled, not awaited: the outbox keeps what is unsent.
        for task in [*self._background, *self._daemons]:
            task.cancel()
        for task in [*self._background, *self._daemons]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                async with asyncio.timeout(self.config.relays.timeout_s + 1):
                    await task
        for sub in self._subscriptions:
            with contextlib.suppress(Exception):
                await sub.close()
        self._subscriptions.clear()
        if self.memory_store is not None:
            with contextlib.suppress(Exception):
                await self.memory_store.stop_live()
        if self.pool is not None:
            with contextlib.suppress(Exception):
                await self.pool.close()
        if self.embedded_relay is not None:
            with contextlib.suppress(Exception):
                await self.embedded_relay.stop()
            self.embedded_relay = None
        await self._close_memory_backend()
        if self.conversations is not None:
            with contextlib.suppress(Exception):
                self.conversations.close()
        for db in (self.outbox, self.history):
            if db is not None:
                with contextlib.suppress(Exception):
                    db.close()
        self.outbox = self.history = self.publisher = None
        self._started = False

    def _require(self) -> tuple[MemoryStore, ServiceToolContext]:
        if self.memory_store is None or self.tool_context is None:
            raise AgentError("the service has not started yet", "Not started")
        return self.memory_store, self.tool_context

    # --- relays ---------------------------------------------------------------------------------
    def relay_states(self) -> dict[str, ConnectionState]:
        return self.pool.states() if self.pool is not None else {}

    def dropped_counts(self) -> dict[str, dict[str, int]]:
        if self.pool is None:
            return {}
        return {url: dict(counter) for url, counter in self.pool.dropped().items()}

    def filtered_counts(self) -> dict[str, int]:
        """Events the memory store and identity caches refused (foreign author, far future, undecryptable...)."""
        total: dict[str, int] = {}
        counters = [c.dropped for c in self._caches()]
        if self.memory_store is not None:
            counters.append(self.memory_store.dropped)
        for counter in counters:
            for reason, n in counter.items():
                total[reason] = total.get(reason, 0) + n
        return total

    def pending_publishes(self, t: MemoryType | str | None = None) -> list[PendingPublish]:
        """Memory versions some relay still needs (of memory ``t``, or both), oldest first, from the outbox:
        ``pending`` ones no relay took yet, ``delivered`` ones some relays still lack, ``unsaved`` ones held
        in memory while the outbox file is not writable."""
        wanted = MemoryType.parse(t) if t is not None else None
        publisher, store = self.publisher, self.memory_store
        if publisher is None or store is None:
            return []
        urls = self.relay_urls
        try:
            entries: list[OutboxEntry] = publisher.outbox.unfinished(urls)
        except AgentError:
            entries = []
        out: list[PendingPublish] = []
        for entry in entries:
            mt = self._own_memory_type(entry.event)
            if mt is None or (wanted is not None and mt is not wanted):
                continue
            out.append(PendingPublish(mt, entry.event.id, entry.event.created_at, entry.state, entry.attempts,
                                      entry.next_attempt_at, tuple(entry.accepted_by),
                                      tuple(entry.relays_to_retry(urls)), entry.last_error))
        for ev in publisher.unsaved():
            mt = self._own_memory_type(ev)
            if mt is None or (wanted is not None and mt is not wanted):
                continue
            out.append(PendingPublish(mt, ev.id, ev.created_at, "unsaved", 0, 0.0, (), tuple(urls),
                                      self._outbox_error or ""))
        return out

    def _own_memory_type(self, ev: Event) -> MemoryType | None:
        if self.memory_store is None or ev.pubkey != self.memory_store.pubkey or ev.kind != APP_DATA:
            return None
        return MemoryType.from_d_tag(ev.d_tag)

    # --- memory ---------------------------------------------------------------------------------
    def memory(self, t: MemoryType) -> MemorySnapshot:
        return self._require()[0].snapshot(t)

    def memory_limit(self, t: MemoryType) -> int:
        t = MemoryType.parse(t)
        return self.config.memory.short_term_max_chars if t is MemoryType.SHORT_TERM \
            else self.config.memory.long_term_max_chars

    async def load_long_term(self) -> MemorySnapshot:
        return await self._require()[0].load_long_term()

    async def save_memory(self, t: MemoryType, content: str) -> SaveResult:
        """The same path as the memory_save tool; bad input raises AgentError before anything is published.

        Also raises AgentError (nothing published, the text kept in the history) when a newer version from
        another device is already known."""
        store = self._require()[0]
        t = MemoryType.parse(t)
        store.validate(t, content)
        try:
            return await store.save(t, content)
        except AgentError as exc:
            refused = self._last_local.get(t)
            if refused is not None and self.history is not None:
                self._history_call(self.history.annotate, refused, REFUSED_NOTE)
            self._spawn(store.load([t]))  # fetch the newer version the publisher knows of
            raise AgentError(f"the {t.title.lower()} was not saved: {exc.message}; your text is kept in the "
                             "memory history", "Memory") from None

    # --- memory history and relay consensus -------------------------------------------------------
    def memory_history(self, t: MemoryType | str) -> list[MemoryVersionView]:
        """Every version of memory ``t`` this app has seen (own saves and other devices'), newest first."""
        store = self._require()[0]
        t = MemoryType.parse(t)
        if self.history is None:
            return []
        current = store.snapshot(t).event_id
        versions = self._history_call(self.history.versions, t.d_tag) or []
        return [
            MemoryVersionView(t, v.event_id, v.created_at, v.origin, v.note, v.seen_at, v.event_id == current,
                              v.event, store.decrypt)
            for v in versions if v.event.pubkey == store.pubkey
        ]

    def memory_version(self, t: MemoryType | str, event_id: str) -> MemoryVersionView:
        """One version from the history, by event id (or an unambiguous prefix of at least 4 characters)."""
        t = MemoryType.parse(t)
        wanted = event_id.strip().lower()
        versions = self.memory_history(t)
        exact = [v for v in versions if v.event_id == wanted]
        found = exact or ([v for v in versions if v.event_id.startswith(wanted)] if len(wanted) >= 4 else [])
        if len(found) != 1:
            what = "is ambiguous" if found else "is not"
            raise AgentError(f"{event_id!r} {what} in the {t.title.lower()} history", "Memory history")
        return found[0]

    def memory_diff(self, t: MemoryType | str, older_id: str, newer_id: str) -> str:
        """A unified diff between two versions of memory ``t`` (empty when their texts are equal)."""
        old, new = self.memory_version(t, older_id), self.memory_version(t, newer_id)
        return unified_diff(old.content, new.content, old_label=f"{old.event_id[:8]} ({_when(old.created_at)})",
                            new_label=f"{new.event_id[:8]} ({_when(new.created_at)})")

    async def rollback_memory(self, t: MemoryType | str, event_id: str) -> SaveResult:
        """Save an older version's text again: a new version, through the normal save path."""
        t = MemoryType.parse(t)
        version = self.memory_version(t, event_id)
        if version.current:
            raise AgentError(f"version {version.event_id[:8]} is already the current {t.title.lower()}", "Rollback")
        result = await self.save_memory(t, version.content)
        if self.history is not None:
            self._history_call(self.history.annotate, result.event_id, f"rollback to {version.event_id[:8]}")
        return result

    async def memory_status(self, t: MemoryType | str, *, bring_up_to_date: bool = True) -> MemoryStatus:
        """Ask every relay which version of memory ``t`` it holds; lagging relays are offered the newest."""
        t = MemoryType.parse(t)
        async with self._reconcile_lock:
            return await self._check_memory(t, fix=bring_up_to_date)

    def self_context(self) -> SelfContextSnapshot:
        if self.agent_cache is None:
            raise AgentError("the service has not started yet", "Not started")
        return SelfContextSnapshot(self.agent_cache.view(), self.admin_cache.view() if self.admin_cache else None)

    # --- conversations --------------------------------------------------------------------------
    def _open_conversations(self) -> None:
        from .agent.conversations import ConversationStore

        self.conversations = ConversationStore(self.data_dir / CONVERSATIONS_DB)

    def new_session(self) -> str:
        return self._conversations().new_session()

    def list_sessions(self) -> list[Any]:
        return self._conversations().list_sessions()

    def session_messages(self, session_id: str) -> list[dict[str, Any]]:
        return self._conversations().messages(session_id)

    def _conversations(self) -> Any:
        if self.conversations is None:
            raise AgentError("the service has not started yet", "Not started")
        return self.conversations

    # --- memory backend -------------------------------------------------------------------------
    def _open_memory_backend(self) -> None:
        from .agent.memory.backend import create_memory_manager

        self.memory_manager = create_memory_manager(self.config, self.data_dir, self.env)

    async def _close_memory_backend(self) -> None:
        manager, self.memory_manager = self.memory_manager, None
        if manager is not None:
            with contextlib.suppress(Exception):
                await manager.aclose()

    def _backend_tools(self) -> list[Tool]:
        return self.memory_manager.tools() if self.memory_manager is not None else []

    def _index_long_term(self, snap: MemorySnapshot) -> None:
        """Give the backend (recall) the long-term memory whenever it changes."""
        if self.memory_manager is not None and snap.type is MemoryType.LONG_TERM and snap.loaded:
            self._spawn(self.memory_manager.index_long_term(snap.content))

    async def _backend_context(self, session_id: str, message: str | None) -> tuple[str | None, str | None]:
        """(backend id, its context for this message); the manager bounds time and swallows failures."""
        manager = self.memory_manager
        if manager is None or manager.backend is None:
            return None, None
        context = await manager.query_context(session_id, message) if message else None
        return (manager.backend_id if manager.is_available() else None), context

    # --- the agent ------------------------------------------------------------------------------
    def tool_names_offered(self) -> list[str]:
        return [t.name for t in self.registry.visible()] + [t.name for t in self._backend_tools() if t.visible]

    def _source_events(self) -> dict[str, SourceEvent]:
        store, _ = self._require()
        out: dict[str, SourceEvent] = {}
        snap = store.snapshot(MemoryType.SHORT_TERM)
        if snap.event_id is not None and snap.created_at is not None:
            out["memory_short_term_read"] = SourceEvent(snap.event_id, snap.created_at, snap.relays)
        for cache, prefix in ((self.agent_cache, "nostr_agent"), (self.admin_cache, "nostr_admin")):
            if cache is None:
                continue
            for kind, suffix in ((METADATA, "profile"), (CONTACTS, "contacts"), (RELAY_LIST, "relays")):
                ev: Event | None = cache.event(kind)
                if ev is not None:
                    out[f"{prefix}_{suffix}"] = SourceEvent(ev.id, ev.created_at)
        return out

    async def _history(self, session_id: str) -> tuple[list[dict[str, Any]], int]:
        conversations = self._conversations()
        messages, dropped = await asyncio.to_thread(
            conversations.history_for_prompt, session_id, self._model, self.config.llm.history_tokens
        )
        return list(messages), int(dropped)

    async def _assemble(self, session_id: str, message: str | None, *, dry_run: bool) -> PromptAssembly:
        _, ctx = self._require()
        history, dropped = await self._history(session_id)
        backend_id, context = await self._backend_context(session_id, message)
        assembly = assemble(
            self.soul,
            model=self._model,
            registry=self.registry,
            ctx=ctx,
            created_at=self._clock(),
            history=history,
            history_dropped=dropped,
            user_message=message,
            backend_id=backend_id,
            backend_context=context,
            backend_tools=self._backend_tools(),
            source_events=self._source_events(),
            dry_run=dry_run,
        )
        self._emit(PromptAssembled(assembly))
        return assembly

    async def dry_run(self, session_id: str, message: str | None = None) -> PromptAssembly:
        """The next prompt, assembled from the caches, without calling the model."""
        return await self._assemble(session_id, message, dry_run=True)

    async def dispatch_tool(self, name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome:
        """A tool call from the model: the memory backend's tools first, then the registry."""
        _, ctx = self._require()
        if self.memory_manager is not None:
            outcome = await self.memory_manager.call_tool(name, arguments)
            if outcome is not None:
                return outcome
        return await self.registry.call(name, arguments, ctx)

    def _llm_settings(self) -> Any:
        from .agent.llm import LlmSettings

        base = LlmSettings.from_config(self.config.llm, self.env)
        return LlmSettings(
            model=self._model, api_base=base.api_base, api_key=base.api_key,
            timeout_s=base.timeout_s, max_retries=base.max_retries,
        )

    async def run_turn(self, session_id: str, message: str) -> AsyncIterator[AgentEvent]:
        """One interactive turn. LLM errors end it with TurnFailed (never raised); nothing is persisted then."""
        from .agent import loop

        if not self.model_configured:
            yield TurnFailed(session_id, "set $DIDACTYL_MODEL or [llm] model in the "
                             "config (e.g. openai/gpt-4o-mini)", title="No model configured", retryable=False)
            return
        try:
            assembly = await self._assemble(session_id, message, dry_run=False)
        except DidactylError as exc:
            yield TurnFailed(session_id, exc.message, title=exc.title, retryable=False)
            return
        async for event in loop.run_turn(
            settings=self._llm_settings(),
            assembly=assembly,
            dispatch=self.dispatch_tool,
            session_id=session_id,
            max_tool_rounds=self.config.llm.max_tool_rounds,
        ):
            if isinstance(event, TurnFinished):
                await self._persist_turn(session_id, message, event)
            yield event

    async def _persist_turn(self, session_id: str, message: str, event: TurnFinished) -> None:
        new_messages = list(getattr(event, "new_messages", []) or [])
        conversations = self._conversations()
        try:
            await asyncio.to_thread(conversations.append, session_id,
                                    [{"role": "user", "content": message}, *new_messages])
        except DidactylError as exc:
            self._warn(f"the conversation was not saved: {exc.message}")
        if self.memory_manager is not None:
            await self.memory_manager.record_turn(session_id, message, event.reply)

    # --- litellm, off the UI path ---------------------------------------------------------------
    def preload_llm(self) -> None:
        """Start importing litellm in a background thread (the TUI calls this after its first paint)."""
        if self._preload_thread is not None:
            return

        def run() -> None:
            try:
                from .agent import llm

                llm.preload()
            except Exception:
                log.exception("preloading litellm failed")

        self._preload_thread = threading.Thread(target=run, name="litellm-preload", daemon=True)
        self._preload_thread.start()
