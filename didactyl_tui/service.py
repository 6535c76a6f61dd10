"""AppService: the one API the TUI and the CLI call. It owns the key, the relays, the stores and the agent.

Start-up: key → embedded relay → relay pool → memories, self- and admin-context fetched (relay trouble
never raises: it shows in ``relay_states()`` and as :class:`ServiceWarning`) → live subscriptions → the
agent's configured profile, contacts and relay list published when they differ from the relays'.

A turn: the soul assembles the prompt from the caches (no network), ``agent.loop.run_turn`` streams it
with tools dispatched to the memory backend's tools first, then the registry; a finished turn is
persisted and recorded by the backend. litellm is never imported here (``preload_llm`` starts it in a
thread, off the UI path).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
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
from .agent.memory.store import MemorySnapshot, MemoryStore, MemoryType, SaveResult
from .agent.prompt_record import PromptAssembly, SourceEvent
from .agent.soul import SoulTemplate, assemble, load_soul_template
from .agent.tools.builtin import build_base_registry
from .agent.tools.context import AgentToolContext
from .agent.tools.registry import Tool, ToolOutcome, ToolRegistry
from .config import Config, config_error
from .errors import AgentError, ConfigError, DidactylError, RelayError
from .nostr.event import Event, sign_event
from .nostr.keys import SecretKey
from .nostr.kinds import CONTACTS, METADATA, RELAY_LIST
from .nostr.pool import RelayPool
from .nostr.results import ConnectionState

log = logging.getLogger("didactyl.service")

__all__ = [
    "AppService",
    "IdentityView",
    "MemoryChanged",
    "PromptAssembled",
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


# --- events for the UI --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryChanged:
    type: MemoryType
    snapshot: MemorySnapshot
    origin: Literal["local", "remote"]


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


ServiceEvent = MemoryChanged | RelayStateChanged | SelfContextChanged | PromptAssembled | ServiceWarning


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
        self._started = False
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
        await self.pool.start()

        limits = {MemoryType.SHORT_TERM: cfg.memory.short_term_max_chars,
                  MemoryType.LONG_TERM: cfg.memory.long_term_max_chars}
        store = MemoryStore(self._key, self.pool, limits=limits, relay_timeout=cfg.relays.timeout_s,
                            clock=self._clock)
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
        store.start_live()
        for cache in self._caches():
            self._subscriptions.append(self.pool.subscribe(cache.filters(), cache.ingest))
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
        self._emit(MemoryChanged(snap.type, snap, "local" if origin == "local" else "remote"))

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
        if self._background:
            # Let publishes under way finish (each is bounded by the relay timeout), then cancel the rest.
            await asyncio.wait(list(self._background), timeout=self.config.relays.timeout_s + 1)
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
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

    def pending_publishes(self) -> int:
        """Memories whose current version no relay has accepted yet."""
        return self.memory_store.pending_publishes() if self.memory_store is not None else 0

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
        """The same path as the memory_save tool; bad input raises AgentError before anything is published."""
        return await self._require()[0].save(t, content)

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
            yield TurnFailed(session_id, "no model is configured: set $DIDACTYL_MODEL or [llm] model in the "
                             "config (e.g. openai/gpt-4o-mini)", title="No model configured", retryable=False)
            return
        try:
            assembly = await self._assemble(session_id, message, dry_run=False)
        except DidactylError as exc:
            yield TurnFailed(session_id, exc.one_line(), title=exc.title, retryable=False)
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
