"""The shared embedded relay as its own OS process (``python -m didactyl_tui.nostr.embedded_relay.daemon``).

It owns the database for its whole life (``flock`` on ``<database>.owner``), serves
:class:`~.server.EmbeddedRelay`, proving in every handshake that asks (a fresh nonce) that it is the data dir's
relay with the secret of ``relay.key`` (:mod:`didactyl_tui.nostr.relay_proof`), announces itself in the data
dir's ``relay.lock``, and ends on SIGTERM/SIGINT/SIGHUP or after ``idle_exit_s`` seconds with no client
connected (no websocket open, no identity question). The lock file goes with it.

SIGUSR1 reloads its options from ``relay.options.json`` (see :mod:`.options`): a change of who may write
applies at once, with every connection kept; any other change restarts the relay inside this process, on
the same port, with the same instance id and key (clients reconnect, and check the proof again). The same signal
moves it to the address ``relay.address.json`` asks for, only while no client is connected (a move cuts every
connection off, and a client cannot follow a port it does not know); otherwise it stays and says why.
``relay.lock`` then says what it enforces, where it listens, and the answer to the request.

Running apart from the app, a flood against the relay never stalls the app's UI loop, and a CLI command
needs no relay of its own: it finds this one (see :mod:`.shared`).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request

from ...errors import RelayError
from .. import relay_proof
from ..relay_proof import ProofKey
from . import options as relay_options_file
from .limits import DEFAULT_IDLE_EXIT_S
from .lockfile import (
    KEY_FILE,
    LOCK_FILE,
    RELAY_DB,
    AskedAddress,
    FileLock,
    RelayLock,
    ensure_proof_key,
    owner_lock_path,
    read_lock,
    remove_lock,
    write_lock,
)
from .server import EmbeddedRelay, freeze_startup_objects

log = logging.getLogger(__name__)

OWNER_WAIT_S = 3.0  # a launcher's check holds the owner lock for microseconds; a live relay, for ever
MAX_LOG_BYTES = 1024 * 1024  # what one relay process may write to its log

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_DATABASE_BUSY = 3  # another relay process serves this database


class InstanceRelay(EmbeddedRelay):
    """The embedded relay, proving to whoever asks that it is the data dir's relay instance ``instance_token``:
    an HMAC keyed by ``proof_key`` (which never leaves this process) over the asker's nonce and the connection's
    endpoints, in the handshake's response headers. The NIP-11 document carries nothing of it."""

    def __init__(self, *args: Any, proof_key: ProofKey, instance_token: str, stopping: asyncio.Event | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.proof_key = proof_key
        self.instance_token = instance_token
        self.stopping = stopping or asyncio.Event()
        self.last_identity_question = time.monotonic()
        self.last_identity_asker = ""  # host:port of the newest question, for the idle watch's log

    def identity_headers(self, connection: ServerConnection, request: Request) -> dict[str, str]:
        nonce = request.headers.get(relay_proof.CHALLENGE_HEADER)
        if nonce is None:
            return {}
        # A launcher asks just before it connects: counting the question as activity keeps the idle exit from
        # closing the relay between that answer and the connection.
        self.last_identity_question = time.monotonic()
        self.last_identity_asker = relay_proof.endpoint(connection.remote_address)
        # A stopping relay still proves who it is, and says it is stopping: a launcher then waits for a successor
        # instead of taking it for an impostor.
        return relay_proof.answer(self.proof_key, nonce, self.instance_token, stopping=self.stopping.is_set(),
                                  client=relay_proof.endpoint(connection.remote_address),
                                  server=relay_proof.endpoint(connection.local_address))


class CappedLogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Log to stderr (the log file) until ``max_bytes``, then say so once and drop the rest."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(sys.stderr)
        self.remaining = max_bytes

    def emit(self, record: logging.LogRecord) -> None:
        if self.remaining <= 0:
            return
        line = self.format(record)
        self.remaining -= len(line) + 1
        if self.remaining <= 0:
            record = logging.makeLogRecord({"msg": "log limit reached; further messages are dropped",
                                            "levelno": logging.WARNING, "levelname": "WARNING"})
        super().emit(record)


def configure_logging(max_bytes: int = MAX_LOG_BYTES) -> None:
    handler = CappedLogHandler(max_bytes)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("websockets").setLevel(logging.WARNING)  # a line per HTTP probe is noise


def _address_in_use(exc: RelayError) -> bool:
    cause = exc.__cause__
    return isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE


def _taken(port: int) -> str:
    return f"port {port} is taken by another program"


async def _start_relay(db_path: Path, host: str, port: int, key: ProofKey, token: str, stopping: asyncio.Event,
                       options: Mapping[str, Any], *, fallback: bool = True) -> tuple[InstanceRelay, str]:
    """Listen on ``port``; when another program has it and ``fallback``, on a free port (recorded in the lock
    file). The relay, and why it is not on ``port`` ("" when it is)."""
    try:
        relay = InstanceRelay(db_path, host, port, proof_key=key, instance_token=token, stopping=stopping, **options)
    except TypeError as exc:  # an option EmbeddedRelay does not take
        raise RelayError(f"bad relay options: {exc}") from exc
    try:
        await relay.start()
    except RelayError as exc:
        if port == 0 or not fallback or not _address_in_use(exc):
            raise
        relay = InstanceRelay(db_path, host, 0, proof_key=key, instance_token=token, stopping=stopping, **options)
        await relay.start()
        log.warning("%s; listening on %s instead", _taken(port), relay.url)
        return relay, _taken(port)
    return relay, ""


class _Serving:
    """The relay this process serves now (replaced whole when a reload changes more than who may write or moves
    it), the options it enforces, and the address it was last asked for."""

    def __init__(self, relay: InstanceRelay, options: dict[str, Any], db: Path, token: str, stop: asyncio.Event,
                 lock_path: Path, started_at: float, asked: AskedAddress) -> None:
        self.relay, self.options, self.db, self.token, self.stop = relay, options, db, token, stop
        self.lock_path, self.started_at, self.asked = lock_path, started_at, asked
        self.digest = relay_options_file.digest(options)

    def announce(self) -> None:
        """(Re)write relay.lock: where the relay listens, what it enforces, the last address asked for."""
        relay = self.relay
        write_lock(self.lock_path, RelayLock(os.getpid(), relay.host, relay.port, self.token, str(self.db),
                                             self.started_at, self.digest,
                                             relay_options_file.normalized(self.options), self.asked))

    def _requested_options(self) -> dict[str, Any]:
        """The options a launcher wrote to relay.options.json, or those in force when they are not usable."""
        path = self.lock_path.with_name(relay_options_file.OPTIONS_FILE)
        try:
            wanted = relay_options_file.read_request(path)
            relay_options_file.digest(wanted)
        except FileNotFoundError:
            return self.options
        except (OSError, RelayError, TypeError, ValueError) as exc:
            log.warning("reload: %s is not usable (%s); the options stay as they are", path,
                        getattr(exc, "message", None) or exc)
            return self.options
        return wanted

    def _requested_address(self) -> tuple[str, int, str] | None:
        path = self.lock_path.with_name(relay_options_file.ADDRESS_FILE)
        try:
            return relay_options_file.read_address_request(path)
        except (OSError, RelayError) as exc:
            log.warning("reload: %s is not usable (%s); the relay stays where it is", path,
                        getattr(exc, "message", None) or exc)
            return None

    async def reload(self) -> None:
        """Take the options and the address launchers wrote (SIGUSR1). Bad options are logged and the relay keeps
        what it enforces; a move is made only while no client is connected, else the answer says why not."""
        wanted = self._requested_options()
        digest = relay_options_file.digest(wanted)
        restart = digest != self.digest and not relay_options_file.only_access_differs(self.options, wanted)
        if restart:
            try:
                # checks the options; opens nothing
                InstanceRelay(self.db, proof_key=self.relay.proof_key, instance_token=self.token, **wanted)
            except (TypeError, RelayError) as exc:
                log.warning("reload: bad relay options (%s); the options stay as they are", exc)
                wanted, digest, restart = self.options, self.digest, False
        address = self._requested_address()
        old = self.relay
        if address is not None and address[0] and not relay_options_file.listens_as_asked(old.host, old.port,
                                                                                          *address[:2]):
            await self._move(*address, wanted, restart)
        else:
            if address is not None:  # there already; or (no host) no move asked: answered, the last ask kept
                self.asked = AskedAddress(*address) if address[0] else replace(self.asked, request=address[2])
            if restart:
                await old.stop()
                self.relay, _ = await _start_relay(self.db, old.host, old.port, old.proof_key, self.token, self.stop,
                                                   wanted)
                log.info("reload: restarted on %s with options %s (were %s)", self.relay.url, digest, self.digest)
            elif digest != self.digest:
                old.set_access(wanted.get("allowed_writers"), wanted.get("gift_wrap_recipients") or ())
                log.info("reload: who may write changed (options %s -> %s); connections kept", self.digest, digest)
            else:
                log.info("reload: the options asked for are those in force (%s)", digest)
        self.options, self.digest = wanted, digest
        self.announce()

    async def _move(self, host: str, port: int, request: str, options: dict[str, Any], restart: bool) -> None:
        """Listen on ``host:port`` with ``options`` when no client is connected; otherwise (or when that address
        cannot be listened on) stay where it is, restarted there if ``restart``, and say why in ``asked``."""
        old = self.relay
        clients = old.connections
        if clients:
            self.asked = AskedAddress(host, port, request, AskedAddress.CLIENTS,
                                      f"{clients} client{'s were' if clients > 1 else ' was'} connected")
            log.info("reload: not moving to %s:%d: %s", host, port, self.asked.detail)
            if restart:
                await old.stop()
                self.relay, _ = await _start_relay(self.db, old.host, old.port, old.proof_key, self.token, self.stop,
                                                   options)
            else:
                old.set_access(options.get("allowed_writers"), options.get("gift_wrap_recipients") or ())
            return
        await old.stop()
        try:
            self.relay, _ = await _start_relay(self.db, host, port, old.proof_key, self.token, self.stop, options,
                                               fallback=False)
        except RelayError as exc:
            taken = _address_in_use(exc)
            self.asked = AskedAddress(host, port, request, AskedAddress.TAKEN if taken else AskedAddress.UNAVAILABLE,
                                      _taken(port) if taken else exc.message)
            log.warning("reload: not moving to %s:%d: %s; staying on %s", host, port, self.asked.detail, old.url)
            self.relay, _ = await _start_relay(self.db, old.host, old.port, old.proof_key, self.token, self.stop,
                                               options)
            return
        self.asked = AskedAddress(host, port, request)
        log.info("reload: moved from %s to %s (nobody was connected)", old.url, self.relay.url)


async def _watch_idle(serving: _Serving, idle_exit_s: float, stop: asyncio.Event) -> None:
    tick = min(1.0, max(0.05, idle_exit_s / 4))
    last_busy = time.monotonic()
    held_since, said, said_asked = time.monotonic(), False, False  # held: clients connected without a break since
    while not stop.is_set():
        now = time.monotonic()
        relay = serving.relay
        if relay.connections:  # who keeps the relay up is said once a hold, should someone wonder why it runs on
            if now - last_busy > 2 * tick:  # none at the last look: a new hold
                held_since = now
            last_busy = now
            if not said and now - held_since >= idle_exit_s:
                said = True
                log.info("idle exit waits: %d client(s) connected (%s)", relay.connections, relay.describe_clients())
        else:
            said = False
            if not said_asked and now - last_busy >= 2 * idle_exit_s > now - relay.last_identity_question:
                said_asked = True  # no client for two idle periods, yet questions keep it up
                log.info("idle exit waits: identity questions keep coming, the last from %s", relay.last_identity_asker)
        if now - max(last_busy, relay.last_identity_question) >= idle_exit_s:
            log.info("no client for %gs: stopping", idle_exit_s)
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), tick)


async def _reload_on_request(serving: _Serving, requested: asyncio.Event, stop: asyncio.Event) -> None:
    while not stop.is_set():
        waiter = asyncio.ensure_future(requested.wait())
        stopper = asyncio.ensure_future(stop.wait())
        await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        stopper.cancel()
        if stop.is_set():
            return
        requested.clear()
        try:
            await serving.reload()
        except (OSError, RelayError) as exc:  # the relay could not come back: stop rather than serve nothing
            log.error("reload failed: %s; stopping", getattr(exc, "message", None) or exc)
            stop.set()


def _install_stop_signals(stop: asyncio.Event) -> list[signal.Signals]:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            continue
        installed.append(sig)
    return installed


async def run_relay_process(
    data_dir: Path,
    *,
    db_path: Path | None = None,
    host: str = "127.0.0.1",
    port: int = 7447,
    idle_exit_s: float = DEFAULT_IDLE_EXIT_S,
    relay_options: Mapping[str, Any] | None = None,
    announce: bool = False,
) -> int:
    """Serve the data dir's relay until a signal or ``idle_exit_s`` idle seconds (0: never); an exit code.

    ``relay_options`` are keyword arguments for :class:`EmbeddedRelay` (limits, allow-list).
    ``announce`` prints the URL on stdout once it listens (``didactyl relay`` in a terminal).
    """
    # Meant to run in a process of its own: everything it creates (database, WAL, log) is private.
    os.umask(0o077)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    db = (db_path or data_dir / RELAY_DB).absolute()  # as launchers compare it
    lock_path = data_dir / LOCK_FILE
    try:
        key = ensure_proof_key(data_dir)  # read here once: it never leaves this process
    except (OSError, RelayError) as exc:
        why = exc.message if isinstance(exc, RelayError) else f"cannot make {data_dir / KEY_FILE}: {exc.strerror}"
        print(f"error: {why}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    owner = FileLock(owner_lock_path(db))
    try:
        owned = await owner.acquire(OWNER_WAIT_S)
    except OSError as exc:
        print(f"error: cannot lock {owner.path}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    if not owned:
        other = read_lock(lock_path)
        where = f" on {other.url} (pid {other.pid})" if other is not None and other.db == str(db) else ""
        print(f"error: another embedded relay already serves {db}{where}", file=sys.stderr, flush=True)
        return EXIT_DATABASE_BUSY
    try:
        return await _serve(db, host, port, idle_exit_s, dict(relay_options or {}), announce, lock_path, key)
    finally:
        owner.release()


async def _serve(db: Path, host: str, port: int, idle_exit_s: float, options: dict[str, Any], announce: bool,
                 lock_path: Path, key: ProofKey) -> int:
    token = secrets.token_hex(16)  # this instance's id: not a secret (relay.lock names it; proofs bind it)
    stop = asyncio.Event()
    reload_requested = asyncio.Event()
    installed = _install_stop_signals(stop)
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
        loop.add_signal_handler(signal.SIGUSR1, reload_requested.set)
        installed.append(signal.SIGUSR1)
    try:
        try:
            relay, why = await _start_relay(db, host, port, key, token, stop, options)
            asked = AskedAddress(host, port, "", AskedAddress.TAKEN if why else "", why)
            serving = _Serving(relay, options, db, token, stop, lock_path, time.time(), asked)
        except (RelayError, TypeError, ValueError) as exc:
            print(f"error: {getattr(exc, 'message', None) or exc}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        freeze_startup_objects()
        try:
            serving.announce()
            log.info("serving %s on %s (pid %d, idle exit %s, options %s)", db, relay.url, os.getpid(),
                     f"{idle_exit_s:g}s" if idle_exit_s > 0 else "never", serving.digest)
            if announce:
                print(relay.url, flush=True)
                print(f"database: {db} (Ctrl-C to stop)", file=sys.stderr, flush=True)
            async with asyncio.TaskGroup() as tasks:
                if idle_exit_s > 0:
                    tasks.create_task(_watch_idle(serving, idle_exit_s, stop))
                tasks.create_task(_reload_on_request(serving, reload_requested, stop))
                await stop.wait()
        except OSError as exc:
            print(f"error: cannot write {lock_path}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        finally:
            # The pointer goes first, so nobody is sent to a relay that is closing; the database lock
            # is released last, by the caller.
            remove_lock(lock_path, token)
            await serving.relay.stop()
            log.info("stopped")
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    return EXIT_OK
