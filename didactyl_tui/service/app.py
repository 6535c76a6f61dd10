"""AppService: the one API the TUI and the CLI call. It owns the configuration, the event stream and the
parts; each part owns its state (see the package docstring for the map).

Start-up: key → embedded relay → relay pool → the agent's documents (memories, soul, tasks, profile, contacts, relay
list) and the admin's context fetched (relay trouble never raises: it shows in ``relay_states()`` and as
:class:`ServiceWarning`) → the newest version kept here of each document that the relays lack or cannot give in a
readable form → live subscriptions → the DM inbox (``answer_dms``) → the configured soul, profile, contacts, relay
list and startup events published where the relays hold nothing (or this device's own older version).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from ..agent.conversations.session_info import SessionInfo
from ..agent.conversations.session_kind import SessionKind
from ..agent.dm.inbox import DmPolicy
from ..agent.documents.codecs import build_codecs
from ..agent.documents.keys import DocumentKey
from ..agent.documents.sync import RECONCILE_START_DELAY_S
from ..agent.documents.versions import DocumentSnapshot, SaveResult
from ..agent.identity.cache import KindDrift, OwnIdentityDraft, SelfContextSnapshot, pubkey_hex
from ..agent.soul.prompt_record import PromptAssembly
from ..agent.soul.template import SoulTemplate, load_soul_template
from ..agent.tasks.task_list import TaskBook, TaskList
from ..agent.tools.builtin import build_base_registry
from ..agent.tools.note_poster import NotePoster
from ..agent.tools.registry import ToolOutcome
from ..agent.turn.events import AgentEvent, TurnFailed
from ..config import Config
from ..config_file import config_error
from ..errors import AgentError, ConfigError
from ..nostr.results import ConnectionState, PublishOutcome
from . import state
from .api_keys import api_key_file, load_api_keys
from .bundle import BundleReport, BundleService
from .chat import ChatService, Sessions, preload_llm
from .dm import DmService
from .dm_status import DmStatus
from .documents import DocumentService
from .events import Listeners, SelfContextChanged, ServiceEvent, ServiceWarning
from .identity import IdentityService
from .merge import MODEL_DRAFT_TIMEOUT_S, MergeDraft, draft_merge, resolve_with_model
from .model import ModelCheck, ModelChoice, ModelSettings
from .notes import NoteConfirmation
from .runtime import Runtime, start_runtime
from .soul import SoulView, soul_view
from .startup import publish_startup_events, startup_intents
from .views import DocumentStatus, DocumentVersionView, PendingPublish


class _Parts:
    """What exists only while started: never Optional inside."""

    def __init__(self, rt: Runtime, documents: DocumentService, chat: ChatService,
                 identity: IdentityService) -> None:
        self.rt, self.documents, self.chat, self.identity = rt, documents, chat, identity
        self.dm: DmService | None = None  # only when this service answers direct messages


def admin_pubkey_of(config: Config) -> str | None:
    """``[admin] pubkey`` as hex (None when unset); ConfigError naming the key when it is not a public key."""
    if not config.admin.pubkey.strip():
        return None
    try:
        return pubkey_hex(config.admin.pubkey)
    except ValueError as exc:
        raise config_error(config.path, "admin", "pubkey", str(exc)) from None


class AppService:
    def __init__(
        self,
        config: Config,
        *,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        relay_client_options: Mapping[str, Any] | None = None,
        read_only: bool = False,
        answer_dms: bool = False,
    ) -> None:
        """``answer_dms``: answer NIP-17 direct messages while started (the TUI and ``serve``; not the
        one-shot commands)."""
        self.config = config
        self.read_only = read_only  # the default for start(): see there
        self.answer_dms = answer_dms
        self.data_dir = Path(data_dir)
        self.env: dict[str, str] = dict(os.environ if env is None else env)
        self._own_env = dict(self.env)  # the shell's own: it wins over the keys kept in the API key file
        self.api_key_file = api_key_file(config, self.data_dir)
        self._key_file_problem: str | None = None  # said once the service starts
        try:
            load_api_keys(self.api_key_file, self.env)
        except ConfigError as exc:
            self._key_file_problem = exc.message
        self._clock = clock
        self._client_options = dict(relay_client_options or {})
        self._events: Listeners[ServiceEvent] = Listeners()
        self.admin_pubkey = admin_pubkey_of(config)
        self.dm_policy = _dm_policy(config, self.admin_pubkey)
        self.soul = load_soul_template(config.soul, config_path=config.path)
        self._model = ModelChoice(config, self.env, self.data_dir)
        self.note_confirmation = NoteConfirmation()
        self.registry = build_base_registry(admin=self.admin_pubkey is not None, tasks=True, notes=True,
                                            offer_aliases=config.tools.offer_aliases)
        self._parts: _Parts | None = None

    # --- the one event stream ----------------------------------------------------------------------
    def add_listener(self, cb: Callable[[ServiceEvent], None]) -> Callable[[], None]:
        return self._events.add(cb)

    def _warn(self, message: str) -> None:
        import logging

        logging.getLogger("didactyl.service").warning("%s", message)
        self._events.emit(ServiceWarning(message))

    # --- readiness: the one guard ------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._parts is not None

    @property
    def parts(self) -> _Parts:
        if self._parts is None:
            raise AgentError("the service has not started yet", "Not started")
        return self._parts

    # --- lifecycle ----------------------------------------------------------------------------------
    async def __aenter__(self) -> AppService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self, *, publish_identity: bool | None = None, read_only: bool | None = None) -> None:
        """Key, embedded relay, pool, memories, caches, live subscriptions, own profile.

        ``read_only`` (``prompt``, ``memory show``/``history``): nothing of its own is published — no profile,
        no repair of lagging relays; only saves already waiting in the outbox are delivered.
        Relay trouble never raises (see ``relay_states()``); a bad key raises NostrError/ConfigError.
        """
        if self._parts is not None:
            return
        if self._key_file_problem:
            self._warn(self._key_file_problem)
        read_only = self.read_only if read_only is None else read_only
        documents: DocumentService | None = None
        codecs = build_codecs(limits={DocumentKey.SHORT_TERM: self.config.memory.short_term_max_chars,
                                      DocumentKey.LONG_TERM: self.config.memory.long_term_max_chars},
                              registry=self.registry, initial_soul=self.soul)
        rt = await start_runtime(
            self.config, self.data_dir, self.env, admin_pubkey=self.admin_pubkey, clock=self._clock,
            client_options=self._client_options, emit=self._events.emit, warn=self._warn,
            on_lost=lambda key, lost, winner: documents.lost(key, lost, winner) if documents else None,
            on_outbox_change=lambda: documents.outbox_changed() if documents else None, codecs=codecs)
        try:
            documents = DocumentService(rt, self._events.emit, self._warn)
            identity = IdentityService(rt, self.config, self._clock, self._warn, self.data_dir,
                                       emit_changed=lambda: self._events.emit(SelfContextChanged("agent")))
            rt.sync.repairs = not read_only
            if self.config.relays_override is not None:  # this run's relays never receive the public relay list
                rt.sync.not_repaired = frozenset({DocumentKey.RELAYS})
                rt.publisher.held_kinds = frozenset({DocumentKey.RELAYS.kind})
            chat = ChatService(rt, self.config, self.env, self.registry, self._model, self._clock,
                               self._events.emit, self._warn)
            wanted = publish_identity if publish_identity is not None else self.config.agent.publish_profile
            wanted = wanted and not read_only  # a read-only command publishes nothing of its own
            self._parts = _Parts(rt, documents, chat, identity)
            rt.tool_context.tasks = TaskBook(lambda: rt.store.value(DocumentKey.TASKS), documents.task_changes(),
                                             clock=self._clock)
            rt.tool_context.notes = NotePoster(
                rt.key, lambda ev: rt.pool.publish(ev, rt.timeout_s),
                None if self.config.tools.post_notes_without_asking else self.note_confirmation, self._clock)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(rt.store.load())
                for cache in rt.caches:
                    tg.create_task(identity.load(cache))
            # The newest version kept here of each document (an edit the relays did not confirm, or the last one that
            # reads when the relays' newest does not) is the document unless the relays gave a newer one that reads.
            await rt.sync.restore_newest_known()
            rt.store.start_live()
            identity.follow()
            if read_only:  # a command that only reads still finishes what an earlier run left in the outbox
                await documents.deliver_pending()
            # What the last run (or this one) left unsent goes out now; relays that lag get the newest.
            rt.daemons.spawn(rt.publisher.run())
            rt.sync.ready = True
            rt.sync.schedule_reconcile(delay=RECONCILE_START_DELAY_S)
            if self.answer_dms:
                self._parts.dm = DmService(rt, self.config, chat, self.dm_policy, self.data_dir, self._clock,
                                           self._events.emit, self._warn)
                await self._parts.dm.start()
            if wanted:
                self._publish_initial_soul()
                intents = startup_intents(self.config)
                await identity.publish_own(skip_kinds=frozenset(i.kind for i in intents))
                if intents:
                    rt.tasks.spawn(publish_startup_events(rt, intents, self._clock, self._warn))
        except BaseException:
            await self.stop()  # a half-started service leaves no relay or socket behind
            raise

    async def stop(self) -> None:
        parts, self._parts = self._parts, None
        if parts is not None:
            if parts.dm is not None:  # the DM being answered finishes first
                await parts.dm.stop(self.config.llm.turn_timeout_s + 3 * self.config.relays.timeout_s)
            await parts.chat.settle()  # a cancelled turn's message is saved before the database closes
            await parts.rt.stop()

    # --- identity and relays -----------------------------------------------------------------------
    @property
    def agent_pubkey(self) -> str:
        return self.parts.rt.key.public_key_hex

    @property
    def agent_npub(self) -> str:
        return self.parts.rt.key.npub

    @property
    def embedded_relay_url(self) -> str | None:
        relay = self._parts.rt.embedded_relay if self._parts is not None else None
        return relay.url if relay is not None else None

    @property
    def relay_urls(self) -> list[str]:
        return self._parts.rt.pool.urls if self._parts is not None else []

    def relay_states(self) -> dict[str, ConnectionState]:
        return self._parts.rt.pool.states() if self._parts is not None else {}

    def dropped_counts(self) -> dict[str, dict[str, int]]:
        if self._parts is None:
            return {}
        return {url: dict(counter) for url, counter in self._parts.rt.pool.dropped().items()}

    def filtered_counts(self) -> dict[str, int]:
        """Events the memory store and identity caches refused (foreign author, far future, undecryptable...)."""
        total: dict[str, int] = {}
        if self._parts is None:
            return total
        rt = self._parts.rt
        for counter in [*(c.dropped for c in rt.caches), rt.store.dropped]:
            for reason, n in counter.items():
                total[reason] = total.get(reason, 0) + n
        return total

    def dm_counts(self) -> dict[str, int]:
        """Direct messages seen by verdict (answer, duplicate, stranger, own_copy, unreadable, dropped)."""
        dm = self._parts.dm if self._parts is not None else None
        return dm.counts if dm is not None else {}

    async def dm_status(self) -> DmStatus | None:
        """What the direct-message inbox is doing (None when this service does not answer them)."""
        dm = self._parts.dm if self._parts is not None else None
        return await dm.status() if dm is not None else None

    def self_context(self) -> SelfContextSnapshot:
        return self.parts.identity.snapshot()

    def identity_drift(self) -> list[KindDrift]:
        """The agent's kinds the relays hold in a version published elsewhere that the config would change."""
        return self.parts.identity.drift()

    async def adopt_identity(self) -> list[int]:
        """Take the relays' drifted versions as ours (nothing published); the kinds adopted."""
        return await self.parts.identity.adopt()

    async def republish_identity(self, *, only_drifted: bool = True) -> dict[int, PublishOutcome]:
        """Publish the config's fields merged into the relays' drifted versions (no field deleted); with
        ``only_drifted=False`` every kind the config would change."""
        return await self.parts.identity.republish_merged(only_drifted=only_drifted)

    def identity_drafts(self) -> list[OwnIdentityDraft]:
        """What publishing the config would send now (the config merged into the relays' versions)."""
        return self.parts.identity.drafts()

    # --- model and state.toml ----------------------------------------------------------------------
    @property
    def model(self) -> str:
        return self._model.name

    @property
    def model_configured(self) -> bool:
        return bool(self._model.name.strip())

    @property
    def model_settings(self) -> ModelSettings:
        """The model in use with its api_base and key variable (what the model dialog starts from)."""
        return self._model.settings

    @property
    def model_source(self) -> str:
        """Where the model comes from: "env" ($DIDACTYL_MODEL), "state" (chosen in the app), "config", "none"."""
        return self._model.source

    def model_explanation(self) -> str:
        """One line: which source wins and why."""
        return self._model.explain()

    def model_shadowed(self) -> str | None:
        """A warning when $DIDACTYL_MODEL hides the model chosen in the app (now, or at the next start)."""
        return self._model.shadowed()

    def set_model(self, chosen: ModelSettings | str) -> None:
        """Switch the model (with its server and key variable) and remember it; a key typed with it is kept in
        the API key file and used at once (file writes: call it from a thread in a UI)."""
        self._model.set(chosen, key_file=self.api_key_file, env=self.env, own_env=self._own_env)
        if self._parts is not None:
            self.preload_llm()  # a model now: its first turn should not wait for the import

    def warm_model_client(self) -> None:
        """Start the model helper now (the model dialog is open: a test or a turn is coming). Blocking (it
        starts a process): call it from a thread. Nothing without the helper ([llm] worker_process = false)."""
        from .model import warm_model_client

        if self.config.llm.worker_process:
            warm_model_client()

    def key_problem(self, chosen: ModelSettings) -> str | None:
        """Why the key typed with ``chosen`` could not be used (the shell sets its variable to another), or None."""
        from .model import key_shadowed

        if chosen.no_key or not chosen.api_key.strip() or not chosen.api_key_env.strip():
            return None  # no key, or its variable is picked when it is kept (one the shell leaves free)
        return key_shadowed(chosen.api_key_env.strip(), self._own_env, chosen.api_key)

    async def check_model(self, chosen: ModelSettings) -> ModelCheck:
        """A bounded connection test (a one-token completion; the server's /models list when it has an api_base).
        Works before the service has started (no relay needed)."""
        from ..agent.llm.types import LlmSettings
        from .model import check_model

        return await check_model(LlmSettings.from_config(self.config.llm, self.env), chosen, self.env)

    def count_tokens(self, text: str) -> int:
        """Tokens in ``text`` for the model in use, counted as prompt assembly counts them (CPU work for a long
        text: call it from a thread in a UI)."""
        from ..agent.llm.tokens import count_tokens

        return count_tokens(self.model, text)

    def context_window(self) -> int | None:
        """Prompt tokens the model accepts: ``[llm] context_window``, else litellm's table (None: unknown)."""
        from ..agent.llm.client import context_window  # litellm itself only when loaded already

        return self.config.llm.context_window or context_window(self.model)

    def remember(self, key: str, value: Any) -> None:
        """Keep a runtime choice (model, theme...) in <data dir>/state.toml."""
        state.remember(self.data_dir, key, value)

    def preload_llm(self) -> threading.Thread | None:
        """Start importing litellm in the background when a model is configured; None when there is none
        (no turn to win time for, and idle RSS stays ~200 MiB lower)."""
        if self._parts is None or not self._parts.chat.should_preload():
            return None
        return preload_llm(self.config.llm.worker_process)

    # --- the agent's documents: one API for every one of them --------------------------------------
    # ``key``: a document's key ("short_term", "long_term", "soul", "tasks", "profile", "contacts", "relays") or a
    # DocumentKey; every document is read, saved, versioned and repaired the same way (service/documents.py).
    def memory(self, key: DocumentKey | str) -> DocumentSnapshot:
        """A document as known now (its text, value, version, relays; a newer version that does not read)."""
        return self.parts.documents.snapshot(key)

    def memory_relay_versions(self, key: DocumentKey | str) -> dict[str, tuple[str, int]]:
        return self.parts.documents.relay_versions(key)

    async def load_long_term(self) -> DocumentSnapshot:
        return await self.parts.documents.load_long_term()

    async def save_memory(self, key: DocumentKey | str, content: str, *, encrypt: bool = True) -> SaveResult:
        """The one save path of an edited text (the memory_save tool's too). Bad text raises AgentError before
        anything is signed (a soul names its bad section)."""
        return await self.parts.documents.save(key, content, encrypt=encrypt)

    def memory_not_persisted(self, event_id: str) -> str | None:
        """Why a saved version is not written on this device (disk full...), or None."""
        return self.parts.documents.not_persisted(event_id) if self._parts is not None else None

    def memory_at_risk(self) -> list[str]:
        """Edits lost if the app quits now (on no relay, not written on this device), one line each."""
        return self.parts.documents.at_risk() if self._parts is not None else []

    async def rollback_memory(self, key: DocumentKey | str, event_id: str) -> SaveResult:
        return await self.parts.documents.rollback(key, event_id)

    async def memory_history(self, key: DocumentKey | str) -> list[DocumentVersionView]:
        return await self.parts.documents.history(key)

    async def memory_version(self, key: DocumentKey | str, event_id: str) -> DocumentVersionView:
        return await self.parts.documents.version(key, event_id)

    async def memory_diff(self, key: DocumentKey | str, older_id: str, newer_id: str) -> str:
        return await self.parts.documents.diff(key, older_id, newer_id)

    async def merge_draft(self, key: DocumentKey | str, ours_id: str, theirs_id: str) -> MergeDraft:
        """The merge view's draft of two concurrent versions: merged three-way from their common base (found in the
        history), conflicts marked; two-way, every difference a conflict, when no base is known (service/merge.py)."""
        store = self.parts.rt.store
        return await draft_merge(self.parts.rt.history, lambda eid: self.memory_version(key, eid),
                                 lambda text: store.from_text(key, text), ours_id, theirs_id)

    async def model_merge_draft(self, key: DocumentKey | str, draft: str) -> str:
        """The configured model's resolution of the conflicts marked in ``draft``: a proposal, nothing is saved."""
        snap = self.memory(key)
        return await resolve_with_model(
            lambda messages, n: self.parts.chat.complete(messages, max_chars=n, timeout_s=MODEL_DRAFT_TIMEOUT_S),
            f"the agent's {snap.type.title.lower()}", draft, snap.limit_chars)

    async def memory_status(self, key: DocumentKey | str, *, bring_up_to_date: bool = False) -> DocumentStatus:
        return await self.parts.documents.status(key, bring_up_to_date=bring_up_to_date)

    async def pending_publishes(self, key: DocumentKey | str | None = None) -> list[PendingPublish]:
        return await self.parts.documents.pending_publishes(key) if self._parts is not None else []

    @property
    def reconcile_interval_s(self) -> float:
        return self.parts.rt.sync.reconcile_interval_s

    @reconcile_interval_s.setter
    def reconcile_interval_s(self, seconds: float) -> None:
        self.parts.rt.sync.reconcile_interval_s = seconds

    # --- the soul (kind 31120) ---------------------------------------------------------------------
    def soul_view(self) -> SoulView:
        """The soul in use, and the version it came from."""
        rt = self.parts.rt
        return soul_view(rt.store.snapshot(DocumentKey.SOUL), rt.store.current_event(DocumentKey.SOUL))

    async def publish_soul(self, template: SoulTemplate | None = None, *, encrypt: bool = True) -> PublishOutcome:
        """Publish ``template`` (default: the configured soul) as the agent's kind 31120: checked (linted) and saved
        through the one save path, a new version based on the one in use."""
        chosen = template or self.soul
        documents = self.parts.documents
        text = self.parts.rt.store.codec(DocumentKey.SOUL).to_text(chosen)
        return (await documents.save(DocumentKey.SOUL, text, encrypt=encrypt)).outcome

    def _publish_initial_soul(self) -> None:
        """The configured soul, published once: when the relays answered and hold no soul at all (one that does not
        read is not published over: the user may want to fix it rather than lose it)."""
        documents = self.parts.documents
        snap = documents.snapshot(DocumentKey.SOUL)
        if not snap.loaded or snap.event_id is not None or snap.unreadable is not None:
            return

        async def publish() -> None:
            try:
                await documents.save_value(DocumentKey.SOUL, self.soul)
            except Exception as exc:  # a bad configured soul, or a newer one arrived: told, never raised
                self._warn(f"the soul was not published: {exc}")

        self.parts.rt.tasks.spawn(publish())

    def set_note_asker(self, ask: Callable[[str], Awaitable[bool]] | None) -> None:
        """How a terminal turn asks the user before the agent posts a public note (the TUI's dialog)."""
        self.note_confirmation.ask = ask

    # --- backup bundles ---------------------------------------------------------------------------
    async def export_bundle(self, path: Path) -> BundleReport:
        """Write the agent's signed events and its conversations to ``path`` (0600)."""
        return await BundleService(self.parts.rt, self._clock).export(path)

    async def import_bundle(self, path: Path) -> BundleReport:
        """Verify ``path`` whole (BundleError names what failed), then republish and restore the sessions."""
        return await BundleService(self.parts.rt, self._clock).import_(path)

    # --- tasks ----------------------------------------------------------------------------------------
    def tasks(self) -> TaskList:
        """The agent's task list in use."""
        return self.parts.rt.store.value(DocumentKey.TASKS)

    # --- chat: the parts' API ------------------------------------------------------------------------
    @property
    def sessions(self) -> Sessions:
        """The saved chats: list, resolve, rename, delete, export."""
        return self.parts.chat.sessions

    async def new_session(self) -> str:
        return await self.parts.chat.new_session()

    async def has_session(self, session_id: str) -> bool:
        return await self.parts.chat.has_session(session_id)

    async def list_sessions(self) -> list[SessionInfo]:
        return await self.parts.chat.list_sessions()

    async def session_messages(self, session_id: str) -> list[dict[str, Any]]:
        return await self.parts.chat.session_messages(session_id)

    def tool_names_offered(self) -> list[str]:
        return self.parts.chat.tool_names_offered()

    async def dry_run(self, session_id: str, message: str | None = None) -> PromptAssembly:
        return await self.parts.chat.dry_run(session_id, message)

    async def dispatch_tool(self, name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome:
        return await self.parts.chat.dispatch_tool(name, arguments)

    async def run_turn(self, session_id: str, message: str,
                       kind: SessionKind = SessionKind.TERMINAL) -> AsyncIterator[AgentEvent]:
        """One turn (a terminal one unless ``kind`` says otherwise). LLM errors end it with TurnFailed (never
        raised); a failed or cancelled turn keeps only the user's message in the chat, marked (see
        ChatService.run_turn)."""
        try:
            chat = self.parts.chat
        except AgentError as exc:
            yield TurnFailed(session_id, exc.message, title=exc.title, retryable=False)
            return
        async for event in chat.run_turn(session_id, message, kind):
            yield event


def _dm_policy(config: Config, admin: str | None) -> DmPolicy:
    allow = []
    for text in config.dm.allow:
        try:
            allow.append(pubkey_hex(text))
        except ValueError as exc:
            raise config_error(config.path, "dm", "allow", f"{text[:70]!r}: {exc}") from None
    return DmPolicy.of(admin, allow)
