"""AppService: starts and stops the service's parts; the TUI and the CLI reach each part through it.

Before it starts it holds what needs no relay: the config, the event stream, the model (:class:`ModelService`: the
model dialog works before the key and the relays are up), the permission gate (who allows a tool that acts) and the
MCP servers. :meth:`AppService.start` builds the parts (parts.py) and brings them up; each part is then a property
(``documents``, ``chat``, ``prompt``, ``identity``, ``soul``, ``merges``, ``relays``, ``bundle``, ``dm``) that raises
AgentError while not started. ``chat`` is a :class:`~.conversation.Conversation` wherever the agent runs; ``prompt``
is None when it runs elsewhere.

Start-up: key → embedded relay → relay pool → the agent's documents (memories, soul, tasks, profile, contacts, relay
list) and the admin's context fetched (relay trouble never raises: it shows in ``relays.states()`` and as
:class:`ServiceWarning`) → the newest version kept here of each document that the relays lack or cannot give in a
readable form → live subscriptions → the DM inbox (``answer_dms``) → the configured soul, profile, contacts, relay
list and startup events published where the relays hold nothing (or this device's own older version).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..agent.documents.sync import RECONCILE_START_DELAY_S
from ..agent.soul.template import load_soul_template
from ..agent.tools.builtin import build_base_registry
from ..agent.tools.mcp.servers import McpServers, McpServerStatus
from ..config import Config
from ..errors import AgentError, ConfigError
from .api_keys import api_key_file, load_api_keys
from .attach import attach_agent_of, open_attach_target
from .bundle import BundleService
from .chat import preload_llm
from .conversation import Conversation
from .dm import DmService
from .documents import DocumentService
from .events import Listeners, McpServersChanged, ServiceEvent, ServiceWarning
from .identity import IdentityService
from .live_policy import LivePolicy, Rights, RightsChanged, admin_pubkey_of, rights_of
from .merge import MergeService
from .model import ModelService
from .parts import Parts, build_parts
from .permissions import keep_always, permission_gate
from .prompt import PromptService
from .relays import RelayService
from .runtime import Runtime
from .soul import SoulService
from .startup import publish_startup_events, startup_intents

log = logging.getLogger("didactyl.service")


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
        allow_tools: tuple[str, ...] = (),
        start_mcp: bool = True,
    ) -> None:
        """``answer_dms``: answer NIP-17 direct messages while started (the TUI and ``serve``; not the
        one-shot commands). ``read_only``: the default for :meth:`start`. ``allow_tools``: tools that act allowed
        without asking for this run (``--allow``), besides ``[permissions] allow``. ``start_mcp``: start the
        ``[[mcp.servers]]`` with the service (the app, ``serve``, ``chat``, ``acp`` and the dry run ``prompt``; not the
        other commands, which run no turn)."""
        self.config = config
        self.read_only = read_only
        self.start_mcp = start_mcp
        self.answer_dms = answer_dms
        self.data_dir = Path(data_dir)
        self.env: dict[str, str] = dict(os.environ if env is None else env)
        own_env = dict(self.env)  # the shell's own: it wins over the keys kept in the API key file
        key_file = api_key_file(config, self.data_dir)
        self._key_file_problem: str | None = None  # said once the service starts
        try:
            load_api_keys(key_file, self.env)
        except ConfigError as exc:
            self._key_file_problem = exc.message
        self._clock = clock
        self._client_options = dict(relay_client_options or {})
        self._events: Listeners[ServiceEvent] = Listeners()
        rights = rights_of(config)  # a bad [admin] or [dm] key is a ConfigError naming it, before anything starts
        self.admin_pubkey = admin_pubkey_of(config)
        # [admin] and [dm] as the file says now: followed while the service runs (service/live_policy.py).
        self.policy = LivePolicy(config.path or config.origin, self.env, rights, warn=self._warn)
        self.policy.add_listener(self._rights_changed)
        self._soul = load_soul_template(config.soul, config_path=config.path)
        self.model = ModelService(config, self.env, self.data_dir, own_env=own_env, key_file=key_file)
        # Who allows a tool that acts (an MCP server's, write_file, post_note): the TUI registers who asks the person.
        self.permissions = permission_gate(config, allow_tools)
        self.registry = build_base_registry(admin=self.admin_pubkey is not None, tasks=True, notes=True,
                                             offer_aliases=config.tools.offer_aliases)
        # [[mcp.servers]]: started with the service (in the background), their tools in the registry after ours.
        self.mcp = McpServers(config.mcp, self.registry, self.env)
        self.mcp.add_listener(self._mcp_changed)
        self._withdraw: list[Callable[[], object]] = []
        self.attached_to = attach_agent_of(config)  # the agent this window is attached to (hex), or None
        self._parts: Parts | None = None

    # --- the event stream ------------------------------------------------------------------------------
    def add_listener(self, cb: Callable[[ServiceEvent], None]) -> Callable[[], None]:
        return self._events.add(cb)

    def _warn(self, message: str, *, lasting: bool = False) -> None:
        log.warning("%s", message)
        self._events.emit(ServiceWarning(message, lasting))

    def _rights_changed(self, change: RightsChanged) -> None:
        """[admin] or [dm] changed in the file: the DM inbox reads the rights itself; the admin's context and the
        embedded relay's allow-list follow here (not when attached: the admin is then this window's own key)."""
        if self.attached_to is not None or not change.new.readable or change.new.dm == change.old.dm:
            return  # unreadable: nobody's rights meanwhile, nothing to follow; or only [dm] guest_tools changed
        self.admin_pubkey = change.new.dm.admin
        parts = self._parts
        if parts is not None:
            parts.runtime.daemons.spawn(self._follow_people(parts, change.new))

    async def _follow_people(self, parts: Parts, rights: Rights) -> None:
        runtime = parts.runtime
        await parts.identity.switch_admin(rights.dm.admin)
        if runtime.relay_keeper is not None:
            await runtime.relay_keeper.take_options(
                runtime.embedded_relay_options(self.config, rights.dm.admin, sorted(rights.dm.allow)))

    def _mcp_changed(self, status: McpServerStatus) -> None:
        """A server started, failed or went away: the views are told (the self pane), a failure also as a warning."""
        if status.state == "failed":
            self._warn(f"MCP server {status.line}")
        statuses = self.mcp.statuses()
        self._events.emit(McpServersChanged(tuple(s.line for s in statuses),
                                            tuple(s.line for s in statuses if s.state == "failed")))

    # --- the parts, once started ---------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._parts is not None

    @property
    def parts(self) -> Parts:
        if self._parts is None:
            raise AgentError("the service has not started yet", "Not started")
        return self._parts

    @property
    def runtime(self) -> Runtime:
        """The started objects themselves (key, pool, stores): for the commands and tests that need them."""
        return self.parts.runtime

    @property
    def documents(self) -> DocumentService:
        return self.parts.documents

    @property
    def chat(self) -> Conversation:
        """The chat: with the agent here (chat.py), or with the one this window is attached to (attached_chat.py)."""
        return self.parts.chat

    @property
    def prompt(self) -> PromptService | None:
        """The agent's prompt (dry runs, the tools it is offered): None when attached, for the agent assembles its
        prompt where it runs (:data:`~.conversation.PROMPT_ELSEWHERE` says so)."""
        return self.parts.prompt

    @property
    def identity(self) -> IdentityService:
        return self.parts.identity

    @property
    def soul(self) -> SoulService:
        return self.parts.soul

    @property
    def merges(self) -> MergeService:
        return self.parts.merges

    @property
    def relays(self) -> RelayService:
        return self.parts.relays

    @property
    def bundle(self) -> BundleService:
        return self.parts.bundle

    def wait_longer_for_signer(self) -> int:
        """The person gives the remote signer's approval more time: the requests waiting for one (after an auth_url)
        wait ``[signer] auth_timeout_s`` more from now. How many requests that was (0: none waits, or no signer)."""
        remote = self._parts.runtime.remote_signer if self._parts is not None else None
        return remote.wait_longer() if remote is not None else 0

    @property
    def attached_session(self) -> str | None:
        """Attached to an agent elsewhere: the one conversation with it (None otherwise, or not started)."""
        return self._parts.chat.agent_session if self._parts is not None else None

    def on_embedded_relay_move(self, cb: Callable[[str], object]) -> Callable[[], None]:
        """``cb(url)`` each time the embedded relay comes back on another address while this service runs (stopped,
        then found or started again elsewhere); returns its withdrawal. Nothing when there is no embedded relay."""
        keeper = self.runtime.relay_keeper
        return keeper.moves.add(cb) if keeper is not None else (lambda: None)

    @property
    def attached_relays(self) -> list[str] | None:
        """Attached: the relays the agent reads (where messages go, and replies are read); None otherwise."""
        return self._parts.chat.agent_relays if self._parts is not None else None

    @property
    def dm(self) -> DmService | None:
        """The direct-message inbox (None when this service does not answer them, or has not started)."""
        return self._parts.dm if self._parts is not None else None

    # --- lifecycle ----------------------------------------------------------------------------------
    async def __aenter__(self) -> AppService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self, *, publish_identity: bool | None = None, read_only: bool | None = None) -> None:
        """Key, embedded relay, pool, documents, caches, live subscriptions, own profile.

        ``read_only`` (``prompt``, ``memory show``/``history``): nothing of its own is published — no profile,
        no repair of lagging relays; only saves already waiting in the outbox are delivered.
        Relay trouble never raises (see ``relays.states()``); a bad key raises NostrError/ConfigError.
        """
        if self._parts is not None:
            return
        if self._key_file_problem:
            self._warn(self._key_file_problem)
        read_only = self.read_only if read_only is None else read_only
        attach = await open_attach_target(self.config, self.data_dir, self.env, client_options=self._client_options)
        if attach is not None:  # a window onto an agent elsewhere: publishes nothing of the agent's, answers no DM
            self.admin_pubkey, read_only, publish_identity = attach.admin_pubkey, True, False
            notice = attach.first_attach_notice()
            if notice:
                self._warn(notice, lasting=True)
        try:
            parts = await build_parts(
                self.config, data_dir=self.data_dir, env=self.env, admin_pubkey=self.admin_pubkey,
                policy=self.policy, soul=self._soul, registry=self.registry, model=self.model,
                gate=self.permissions, emit=self._events.emit, warn=self._warn, clock=self._clock,
                client_options=self._client_options, read_only=read_only,
                answer_dms=self.answer_dms and attach is None, attach=attach)
        except BaseException:
            if attach is not None:  # the admin's remote signer, when there is one, is not left connected
                await attach.close()
            raise
        self._parts = parts
        try:
            self._withdraw.append(await keep_always(self.permissions, self.data_dir))
            if attach is None and self.start_mcp:  # attached, tools run at the agent elsewhere
                self.mcp.start()
            await self._bring_up(parts, read_only=read_only, publish_identity=publish_identity)
        except BaseException:
            await self.stop()  # a half-started service leaves no relay or socket behind
            raise

    async def _bring_up(self, parts: Parts, *, read_only: bool, publish_identity: bool | None) -> None:
        runtime, identity = parts.runtime, parts.identity
        readable = runtime.documents_readable
        async with asyncio.TaskGroup() as tg:
            if readable:
                tg.create_task(runtime.store.load())
            for cache in runtime.caches:
                tg.create_task(identity.load(cache))
        if readable:
            # The newest version kept here of each document (an edit the relays did not confirm, or the last one
            # that reads when the relays' newest does not) is the document unless the relays gave a newer one that
            # reads.
            await runtime.sync.restore_newest_known()
            await runtime.saves.restore_unsigned()  # edits a previous run kept for the signer: signed once it answers
            parts.documents.started()
            runtime.store.start_live()
        else:
            self._warn("attached without the agent's key: chat and the inspector work; its memory, soul and tasks "
                       "need its remote signer here ([signer] bunker, docs/attach.md)")
        identity.follow()
        await parts.chat.start()  # attached: the conversation with the agent, read and followed
        if read_only:  # a command that only reads still finishes what an earlier run left in the outbox
            await parts.documents.deliver_pending()
        # What the last run (or this one) left unsent goes out now; relays that lag get the newest.
        if readable:
            runtime.daemons.spawn(runtime.publisher.run())
            runtime.sync.start_checks(delay=RECONCILE_START_DELAY_S)
        if parts.dm is not None:
            await parts.dm.start()
        if self.policy.path is not None and self.attached_to is None and not read_only:  # [admin], [dm] followed
            runtime.daemons.spawn(self.policy.watch())
        wanted = publish_identity if publish_identity is not None else self.config.agent.publish_profile
        if wanted and not read_only:  # a read-only command publishes nothing of its own
            parts.soul.publish_configured()
            intents = startup_intents(self.config)
            await identity.publish_own(skip_kinds=frozenset(i.kind for i in intents))
            if intents:
                runtime.tasks.spawn(publish_startup_events(runtime, intents, self._clock, self._warn))

    async def stop(self) -> None:
        parts, self._parts = self._parts, None
        if parts is not None:
            if parts.dm is not None:  # the DM being answered finishes first
                await parts.dm.stop(self.config.llm.turn_timeout_s + 3 * self.config.relays.timeout_s)
            await parts.chat.stop()
            await parts.chat.settle()  # a cancelled turn's message is saved before the database closes
            await self.mcp.stop()
            while self._withdraw:
                self._withdraw.pop()()
            await parts.runtime.stop()

    def preload_llm(self) -> threading.Thread | None:
        """The model client for the turns to come, once the service runs and a model is configured: the helper
        process is set up to start when a model is first needed (nothing starts now: an app at rest keeps ~200 MiB
        less); with ``[llm] worker_process = false`` litellm's import starts here, in a thread (returned)."""
        if self._parts is None or self.attached_to is not None or not self.model.should_preload():
            return None
        return preload_llm(self.config.llm.worker_process, self.config.llm.helper_idle_exit_s)
