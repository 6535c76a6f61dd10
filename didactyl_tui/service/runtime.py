"""The started objects: key, relays, stores, caches, conversations, memory backend. Built together, in dependency
order, by :func:`open_runtime` (a half-built runtime closes what it opened), never ``None`` afterwards, closed
together by :meth:`Runtime.stop`. The service's parts are built on it (parts.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent.background import BackgroundTasks
from ..agent.conversations.store import ConversationStore
from ..agent.documents.codec import DocumentCodec
from ..agent.documents.deferred import UnsignedEdits
from ..agent.documents.history import DocumentHistory
from ..agent.documents.history_thread import HistoryThread
from ..agent.documents.keys import DocumentKey
from ..agent.documents.outbox import Outbox
from ..agent.documents.publisher import DocumentPublisher
from ..agent.documents.saving import Change, DocumentSaves
from ..agent.documents.store import DocumentStore
from ..agent.documents.sync import DocumentSync
from ..agent.identity.cache import IdentityCache, pubkey_hex
from ..agent.memory.backend import MemoryManager, create_memory_manager
from ..agent.private_files import ensure_data_dir, permission_warnings, tighten_sqlite_files
from ..agent.tasks.task_list import TaskBook
from ..agent.tools.context import AgentToolContext
from ..agent.tools.note_poster import NotePoster
from ..config import Config
from ..errors import AgentError, RelayError
from ..nostr.keys import SecretKey
from ..nostr.nip46_channel import AuthChallenge
from ..nostr.pool import RelayPool
from ..nostr.relay_guard import FailedEvents
from ..nostr.remote_signer import RemoteSigner
from ..nostr.results import ConnectionState
from ..nostr.signer import Signer
from .agent_signer import AgentSigner, check_stored_key, open_agent_signer, plan_signer
from .attach import AttachTarget, KeyElsewhereSigner, check_attached_signer
from .events import (
    RelayStateChanged,
    SelfContextChanged,
    ServiceEvent,
    ServiceWarning,
    SignerApprovalAsked,
    SignerStateChanged,
)
from .identity_caches import IdentityCaches
from .relay_address import address_line, asked_address
from .relay_keeper import EmbeddedRelayKeeper
from .sessions import open_conversations

log = logging.getLogger("didactyl.service")

RELAY_DB = "relay.sqlite3"
MEMORY_FOLDER = "memory"
OUTBOX_DB = "memory.sqlite3"
HISTORY_DB = "memory-history.sqlite3"


@dataclass
class ServiceToolContext(AgentToolContext):
    """What the model's tool calls run with: the documents, the caches, the config, the one save path."""

    config: Config | None = None
    data_dir: Path | None = None


@dataclass
class Runtime:
    key: SecretKey | None  # the agent's key in hand; None when it is in a remote signer (NIP-46)
    signer: Signer  # every signature and NIP-44 operation of the agent's key
    pool: RelayPool
    relay_keeper: EmbeddedRelayKeeper | None  # the embedded relay (its own process: outlives this runtime)
    outbox: Outbox
    history: DocumentHistory
    publisher: DocumentPublisher
    store: DocumentStore
    sync: DocumentSync
    saves: DocumentSaves  # THE save path of every document
    identities: IdentityCaches  # the agent's and the admin's (replaced when [admin] changes while running)
    tool_context: ServiceToolContext
    conversations: ConversationStore
    memory_manager: MemoryManager
    timeout_s: float
    closers: contextlib.AsyncExitStack
    tasks: BackgroundTasks = field(default_factory=BackgroundTasks)  # let finish at stop, then cancelled
    daemons: BackgroundTasks = field(default_factory=BackgroundTasks)  # cancelled at stop, never waited for
    documents_readable: bool = True  # false when attached without the agent's key: its documents are not loaded
    signer_keys: tuple[str, ...] = ()  # a remote signer's keys the embedded relay lets write (its NIP-46 traffic)
    remote_signer: RemoteSigner | None = None  # the agent's key in a NIP-46 signer: its connection
    key_made: Path | None = None  # the agent's key file, when this start made it

    @property
    def embedded_relay_url(self) -> str | None:
        return self.relay_keeper.relay.url if self.relay_keeper is not None else None

    def embedded_relay_options(self, config: Config, admin: str | None, dm_peers: list[str]) -> dict[str, Any]:
        """What the embedded relay enforces for these people (who may write, whose gift wraps it takes)."""
        return config.relays.embedded.relay_options(self.signer.public_key, admin, dm_peers, list(self.signer_keys))

    @property
    def caches(self) -> list[IdentityCache]:
        return self.identities.all()

    async def stop(self) -> None:
        self.sync.stop_checks()
        # Let publishes under way finish (each is bounded by the relay timeout), then cancel the rest.
        await self.tasks.settle(self.timeout_s + 1)
        await self.tasks.cancel(self.timeout_s + 1)
        # The retry loop and consensus checks are cancelled, not awaited: the outbox keeps what is unsent.
        await self.daemons.cancel(self.timeout_s + 1)
        await self.saves.stop(self.timeout_s + 1)  # a burst's last text is signed and sent (the history keeps it)
        await self.sync.stop(self.timeout_s + 1)
        await self.closers.aclose()


def relay_client_defences(config: Config) -> dict[str, Any]:
    """The ``[relays]`` keys that defend each relay client against a hostile relay, as RelayClient arguments."""
    r = config.relays
    return {"verify_rate": r.verify_rate, "verify_burst": r.verify_burst, "frame_rate": r.frame_rate,
            "frame_burst": r.frame_burst, "health_window": r.invalid_window, "max_invalid_share": r.max_invalid_share,
            "penalty_base": r.penalty_base_s, "penalty_max": r.penalty_max_s,
            "failed_events": FailedEvents(r.failed_events_max)}


async def start_embedded_relay(config: Config, data_dir: Path, warn: Callable[[str], None],
                               relay_options: Mapping[str, Any] | None = None) -> Any:
    """The data dir's shared loopback relay, found or started as its own process (None when it cannot be:
    the user is warned). It outlives this process and exits by itself when idle, so nothing stops it here."""
    from ..nostr.embedded_relay.options import digest
    from ..nostr.embedded_relay.shared import ensure_shared_relay

    try:
        # A relay already running with other options (an older [admin] or [dm] allow), or elsewhere than
        # [relays] embedded_host and embedded_port ask, is asked to take these options and move (with nobody on it).
        relay = await ensure_shared_relay(data_dir, *asked_address(config),
                                          idle_exit_s=config.relays.embedded_idle_exit_s,
                                          relay_options=relay_options, reconfigure=True)
    except RelayError as exc:
        warn(f"the embedded relay is not available: {exc.message}")
        return None
    for note in relay.distrusted:  # a lock file or a server that did not prove it is ours: never used
        warn(f"the embedded relay: {note}")
    if relay.reloaded:
        log.info("the embedded relay (pid %d) now enforces this config's options (%s)", relay.pid,
                 relay.options_digest)
    elif relay.options_digest != digest(relay_options or {}):
        warn(f"the embedded relay (pid {relay.pid}) did not take this config's options and keeps enforcing "
             f"those it had; see {data_dir / 'relay.log'} (or stop it: it starts again as needed)")
    if relay.moved:
        log.info("the embedded relay (pid %d) moved to %s, as the config asks", relay.pid, relay.url)
    line = address_line(relay, config)
    if line and relay.news:  # said by the didactyl that learns it; `relay status` says it every time
        warn(line)
    # The relay process creates its files 0600 (umask 077); an older version's files are made private here.
    await asyncio.to_thread(tighten_sqlite_files, data_dir / RELAY_DB)
    return relay


def _open_or_in_memory(opener: Callable[[Path], Any], path: Path, lost: str, warn: Callable[[str], None]) -> Any:
    try:
        return opener(path)
    except AgentError as exc:
        warn(f"{exc.message}; {lost} only until didactyl quits")
        return opener(Path(":memory:"))


async def open_runtime(
    config: Config,
    data_dir: Path,
    env: Mapping[str, str],
    *,
    admin_pubkey: str | None,
    clock: Callable[[], float],
    client_options: Mapping[str, Any],
    emit: Callable[[ServiceEvent], None],
    warn: Callable[[str], None],
    codecs: Mapping[DocumentKey, DocumentCodec[Any]],
    read_only: bool,
    on_auth_url: Callable[[AuthChallenge], None] | None = None,
    attach: AttachTarget | None = None,
) -> Runtime:
    """Open everything (no fetching yet), each object given what it needs when it is made. Files and SQLite open
    on worker threads, off the event loop. ``read_only``: nothing of its own is repaired on lagging relays."""
    closers = contextlib.AsyncExitStack()
    try:
        return await _open(config, data_dir, env, closers, admin_pubkey=admin_pubkey, clock=clock,
                           client_options=client_options, emit=emit, warn=warn, codecs=codecs,
                           read_only=read_only, on_auth_url=on_auth_url, attach=attach)
    except BaseException:
        await closers.aclose()  # a half-started service leaves no relay or socket behind
        raise


async def _open(config: Config, data_dir: Path, env: Mapping[str, str], closers: contextlib.AsyncExitStack, *,
                admin_pubkey: str | None, clock: Callable[[], float], client_options: Mapping[str, Any],
                emit: Callable[[ServiceEvent], None], warn: Callable[[str], None],
                codecs: Mapping[DocumentKey, DocumentCodec[Any]],
                read_only: bool,
                on_auth_url: Callable[[AuthChallenge], None] | None, attach: AttachTarget | None) -> Runtime:
    await asyncio.to_thread(ensure_data_dir, data_dir)
    if on_auth_url is None:  # the app's warnings reach the person: in a notification, or on a command's stderr
        def on_auth_url(challenge: AuthChallenge) -> None:
            line = (f"the remote signer asks you to approve ({challenge.method}): open {challenge.url} — waiting up "
                    f"to {challenge.wait_s:g} s")
            log.warning("%s", line)
            emit(SignerApprovalAsked(line, url=challenge.url, method=challenge.method, wait_s=challenge.wait_s))
    plan = await asyncio.to_thread(plan_signer, config, data_dir)
    relay = relay_options = None
    if plan is not None and plan.uses_embedded_relay and config.relays.embedded:
        # The signer listens on our relay: it runs first, admitting the signer's requests and replies.
        relay_options = config.relays.embedded.relay_options(plan.agent_pubkey or "", admin_pubkey, dm_peers(config),
                                                             plan.writers)
        relay = await start_embedded_relay(config, data_dir, warn, relay_options)
    if attach is not None and plan is None:  # attached without the agent's signer: its public key only
        agent = AgentSigner(KeyElsewhereSigner(attach.agent), None, None, None)
    else:
        agent = await open_agent_signer(config, data_dir, env, on_auth_url=on_auth_url,
                                        on_reachable=lambda up: emit(SignerStateChanged(up)),
                                        client_options=client_options, client_key=plan.client_key if plan else None)
    closers.push_async_callback(_quietly, agent.close)
    if attach is not None:
        check_attached_signer(attach, agent.public_key)
    key, signer, me = agent.key, agent.signer, agent.public_key
    # As ssh does: say when group or others can reach the data dir, the key or a database (nothing is refused).
    for line in await asyncio.to_thread(permission_warnings, data_dir, agent.key_path):
        warn(line)
    urls: list[str] = []
    # The relay process's limits and allow-list (the agent's and the admin's keys may write, and a remote signer's
    # with this app's client key): given to the relay when this process starts it, and to a running relay that
    # enforces others (it reloads them).
    if config.relays.embedded:
        writers = plan.writers if plan else None
        wanted = config.relays.embedded.relay_options(me, admin_pubkey, dm_peers(config), writers)
        if relay is None or wanted != relay_options:
            relay_options = wanted
            relay = await start_embedded_relay(config, data_dir, warn, relay_options)
    if relay is not None:
        urls.append(relay.url)
    urls += [u for u in config.run_relay_urls if u not in urls]
    if attach is not None:  # where the agent reads: its messages go there, its replies are read there
        urls += [u for u in attach.relays.urls if u not in urls]
    if not urls:
        warn("no relay is available: memory saves will not be published")
    # NIP-42 as the agent (its key, or through its remote signer); attached, as the admin: DM relays often give gift
    # wraps only to the key they are for.
    auth = attach.admin if attach is not None else key or agent.signer
    # The embedded relay's client checks the relay's proof of identity in every handshake (#30).
    proof_keys = {relay.url: relay.proof_key} if relay is not None else None
    pool = RelayPool(urls, auth_key=auth, proof_keys=proof_keys, **{**relay_client_defences(config), **client_options})
    closers.push_async_callback(_quietly, pool.close)
    outbox = await asyncio.to_thread(_open_or_in_memory, Outbox, data_dir / OUTBOX_DB,
                                     "unsent memory edits are kept", warn)
    closers.callback(_quietly_sync, outbox.close)
    history = await asyncio.to_thread(_open_or_in_memory, DocumentHistory, data_dir / HISTORY_DB,
                                      "memory versions are kept", warn)
    closers.callback(_quietly_sync, history.close)
    # While this run's relays are an override they never receive the public relay list (it waits in the outbox).
    overridden = config.relays_override is not None
    publisher = DocumentPublisher(pool, outbox, timeout=config.relays.timeout_s,
                                held_kinds=frozenset({DocumentKey.RELAYS.kind}) if overridden else frozenset())
    store = DocumentStore(signer, pool, codecs, relay_timeout=config.relays.timeout_s, clock=clock)
    closers.push_async_callback(_quietly, store.stop_live)
    store.add_warning_listener(warn)
    unsigned = None
    if agent.remote is not None:  # edits made while the signer is away wait on disk, beside the outbox
        unsigned = await asyncio.to_thread(_open_or_in_memory, UnsignedEdits, data_dir / OUTBOX_DB,
                                           "edits waiting for the signer are kept", warn)
        closers.callback(_quietly_sync, unsigned.close)
    history_thread = HistoryThread(history, store.pubkey, warn)
    sync = DocumentSync(store, publisher, outbox, history_thread, warn=warn, repairs=not read_only,
                        not_repaired=frozenset({DocumentKey.RELAYS}) if overridden else frozenset())
    saves = DocumentSaves(store, publisher, history_thread, warn=warn, clock=clock,
                          sign_ahead_max_s=config.memory.sign_ahead_max_s, unsigned=unsigned)
    pool.add_state_listener(lambda url, state: emit(RelayStateChanged(url, state)))
    pool.add_state_listener(sync.relay_state_changed)
    readable = not isinstance(agent.signer, KeyElsewhereSigner)
    # Attached without the agent's key its documents are not loaded: its profile, contacts and relay list are then
    # read from the relays like anyone's (they are public).
    agent_cache = IdentityCache(me, clock=clock, own_documents=readable)
    agent_cache.add_listener(lambda: emit(SelfContextChanged("agent")))
    admin_cache = None
    if admin_pubkey is not None:
        admin_cache = IdentityCache(admin_pubkey, clock=clock)
        admin_cache.add_listener(lambda: emit(SelfContextChanged("admin")))
    # The task list changes through the document sync: under the document's save lock, on the list in use.
    tasks = TaskBook(lambda: store.value(DocumentKey.TASKS),
                     lambda derive: saves.save(DocumentKey.TASKS, Change(derive)), clock=clock)
    # post_note acts on the world: the permission gate asks before it runs (service/permissions.py), not the poster.
    notes = NotePoster(signer, lambda ev: pool.publish(ev, config.relays.timeout_s), None, clock)
    tool_context = ServiceToolContext(memory=store, saves=saves, agent=agent_cache, admin=admin_cache,
                                      files_root=data_dir / MEMORY_FOLDER, tasks=tasks, notes=notes, config=config,
                                      data_dir=data_dir, relays_in_use=tuple(pool.urls),
                                      embedded_relay=relay.url if relay is not None else None)

    def tools_follow_admin(cache: IdentityCache | None) -> None:
        tool_context.admin = cache

    identities = IdentityCaches(agent_cache, admin_cache, on_admin=tools_follow_admin)
    conversations = await asyncio.to_thread(open_conversations, data_dir)
    closers.callback(_quietly_sync, conversations.close)
    manager = create_memory_manager(config, data_dir, env)
    closers.push_async_callback(_quietly, manager.aclose)
    daemons = BackgroundTasks()
    if agent.watch is not None:
        daemons.spawn(agent.watch.watch())  # a remote signer that stops answering is pinged until it is back
    if agent.remote is not None and agent.stored:  # does the signer still sign with the key signer.json names?
        def wrong_key(line: str) -> None:
            log.warning("%s", line)
            emit(ServiceWarning(line, lasting=True))  # the person must act on it

        daemons.spawn(check_stored_key(agent.remote, retry_s=config.signer.ping_interval_s, warn=wrong_key))
    keeper = None
    if relay is not None:
        keeper = EmbeddedRelayKeeper(relay, pool, daemons, config, data_dir, warn, relay_options)
        pool.add_state_listener(keeper.state_changed)
    runtime = Runtime(key, signer, pool, keeper, outbox, history, publisher, store, sync, saves, identities,
                      tool_context, conversations, manager, config.relays.timeout_s, closers,
                      daemons=daemons, documents_readable=readable, remote_signer=agent.remote,
                      signer_keys=tuple(plan.writers) if plan is not None and plan.writers else (),
                      key_made=agent.key_path if agent.created else None)
    await pool.start()
    return runtime


def dm_peers(config: Config) -> list[str]:
    """``[dm] allow`` as hex (checked by AppService already; anything unreadable is left out here)."""
    out = []
    for text in config.dm.allow:
        try:
            out.append(pubkey_hex(text))
        except ValueError:
            continue
    return out


async def _quietly(close: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):
        await close()


def _quietly_sync(close: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):
        close()


def connected(states: Mapping[str, ConnectionState]) -> int:
    return sum(1 for s in states.values() if s is ConnectionState.CONNECTED)
