"""One embedded relay per data dir, shared by every didactyl process (the app, the CLI, a second window).

:func:`ensure_shared_relay` finds the relay the data dir's ``relay.lock`` points to and checks its
identity, or starts one as a detached process (:mod:`.process`) and waits, bounded, until it answers.
Launchers take turns on ``relay.launch.lock``, so two processes starting at once end with one relay; the
relay itself holds the database's owner lock for its life, so a second relay on the same database can never run.

Identity: the server on the lock file's port must prove, for a fresh nonce, that it holds the data dir's
``relay.key`` and is the instance the lock file names (:func:`ask_identity`, :mod:`..relay_proof`). Nothing
another local user can read is enough: a lock file another user wrote is not read, and a server that answers
without the proof is never used, logged and named in :attr:`SharedRelay.distrusted` for the user.

A lock file whose process is gone, or whose port does not prove it while nobody owns the database, is stale and
taken over. A configured port held by another program is not mistaken for ours: the new relay listens on a free
port and records it.

With ``reconfigure``, a running relay whose options (limits, allow-list) differ from the launcher's is asked
to take the launcher's (``relay.options.json`` and SIGUSR1, see :mod:`.options`), and waited for (bounded):
a change of [admin] or [dm] allow reaches the relay without anyone restarting it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...errors import RelayError
from ..relay_proof import ProofKey, Proven
from . import options as relay_options_file
from .limits import DEFAULT_IDLE_EXIT_S  # not from .process: the app does not load the relay itself
from .lockfile import (
    LAUNCH_LOCK_FILE,
    LOCK_FILE,
    LOG_FILE,
    RELAY_DB,
    AskedAddress,
    FileLock,
    RelayLock,
    ensure_proof_key,
    inspect_lock,
    lock_is_held,
    owner_lock_path,
    pid_running,
    read_lock,
    read_proof_key,
    remove_stale_lock,
)
from .probe import DEFAULT_PROBE_TIMEOUT_S, ask_identity
from .spawn import last_line, relay_command, spawn, terminate

log = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT_S = 15.0  # a cold Python start on a loaded 2-core box takes a few seconds
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class SharedRelay:
    """The data dir's relay as this process found or started it."""

    url: str
    started_by_us: bool
    pid: int
    host: str
    port: int
    token: str  # the instance id (relay.lock names it; not a secret)
    db_path: Path
    requested_port: int
    proof_key: ProofKey = field(repr=False, compare=False)  # what a client checks the relay's proof with
    options_digest: str = ""  # of the options the relay enforces ("" from an older relay)
    options: dict[str, Any] = field(default_factory=dict)  # what it enforces (normalized)
    reloaded: bool = False  # this launcher had it take new options
    # What was found while looking and not trusted (a lock file of another user, a server on the lock file's port
    # that did not prove it is this data dir's relay): one line each, for the user. Also logged.
    distrusted: tuple[str, ...] = ()
    listen_host: str = ""  # the address it listens on (``host`` is where a client reaches it: 0.0.0.0 -> 127.0.0.1)
    asked: AskedAddress | None = None  # the address last asked of it and why it is not there (None: an older relay)
    moved: bool = False  # this launcher had it move to the address asked for
    news: bool = False  # this launcher started it, or had an answer about its address that relay.lock did not hold

    @property
    def port_fallback(self) -> bool:
        """The requested port was held by another program, so the relay listens elsewhere."""
        return self.requested_port not in (0, self.port)

    def listens_as_asked(self, host: str, port: int) -> bool:
        """It listens on ``host:port`` (port 0: any), or it cannot be asked to move (a relay of an older version)."""
        return self.asked is None or relay_options_file.listens_as_asked(self.listen_host, self.port, host, port)

    @property
    def not_where_asked(self) -> AskedAddress | None:
        """The address last asked of it, when it does not listen there (with the reason)."""
        return self.asked if self.asked is not None and self.asked.refused else None


def _shared(lock: RelayLock, started_by_us: bool, requested_port: int, key: ProofKey) -> SharedRelay:
    return SharedRelay(lock.url, started_by_us, lock.pid, lock.connect_host, lock.port, lock.token, Path(lock.db),
                       requested_port, key, lock.options_digest, lock.options, listen_host=lock.host,
                       asked=lock.asked, news=started_by_us)


@dataclass(slots=True)
class _Search:
    """One launcher's look for the data dir's relay: the key it checks proofs with, and what it did not trust."""

    data_dir: Path
    db: Path
    key: ProofKey
    requested_port: int
    probe_timeout_s: float
    notes: list[str] = field(default_factory=list)

    def distrust(self, note: str) -> None:
        if note not in self.notes:  # the loops below look again every few ms: each thing is named once
            self.notes.append(note)
            log.warning("%s", note)

    def result(self, lock: RelayLock, started_by_us: bool) -> SharedRelay:
        return replace(_shared(lock, started_by_us, self.requested_port, self.key), distrusted=tuple(self.notes))

    async def proves(self, relay: SharedRelay | RelayLock) -> Proven | None:
        """What the server where ``relay`` says it listens proves (None: nothing; a server that answered without
        the proof is named in the notes)."""
        where = relay.url
        host = relay.host if isinstance(relay, SharedRelay) else relay.connect_host
        answer = await ask_identity(host, relay.port, self.key, self.probe_timeout_s)
        if answer.proven is None and answer.spoke:
            self.distrust(f"{answer.describe(where)}: nothing is sent to it")
        return answer.proven

    async def verified(self, lock: RelayLock | None) -> bool:
        """The lock file points at a live relay that proves it is the one that wrote the file: its process runs and
        the server on its port proves, for a fresh nonce, that it holds the data dir's key, is the instance the file
        names, and is not stopping."""
        if lock is None or not pid_running(lock.pid):
            return False
        proven = await self.proves(lock)
        return proven is not None and not proven.stopping and secrets.compare_digest(proven.instance, lock.token)

    async def find(self) -> SharedRelay | None:
        lock_path = self.data_dir / LOCK_FILE
        lock, problem = inspect_lock(lock_path)
        if problem:
            self.distrust(f"{lock_path} is not trusted: {problem}")
        if lock is None or lock.db != str(self.db) or not await self.verified(lock):
            return None
        return self.result(lock, False)


async def find_shared_relay(
    data_dir: Path,
    db_path: Path | None = None,
    *,
    requested_port: int = 0,
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
) -> SharedRelay | None:
    """The data dir's running relay for ``db_path`` (default ``relay.sqlite3``), identity proven; or None.
    Raises :class:`RelayError` when the data dir's ``relay.key`` is not private to this user."""
    data_dir = data_dir.absolute()
    key = read_proof_key(data_dir)
    if key is None:
        return None  # no relay of this data dir ever ran (each makes the key first)
    return await _Search(data_dir, (db_path or data_dir / RELAY_DB).absolute(), key, requested_port,
                         probe_timeout_s).find()


async def ensure_shared_relay(
    data_dir: Path,
    host: str = "127.0.0.1",
    port: int = 7447,
    *,
    db_path: Path | None = None,
    idle_exit_s: float = DEFAULT_IDLE_EXIT_S,
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
    relay_options: Mapping[str, Any] | None = None,
    reconfigure: bool = False,
    move: bool = True,
) -> SharedRelay:
    """The data dir's relay: found and its identity proven, or started (detached) and waited for.

    ``host``/``port``/``idle_exit_s`` apply only when a relay is started here; ``relay_options`` and the address
    too, unless ``reconfigure``: then a running relay enforcing other options, or listening elsewhere, is asked to
    take these options and move to ``host:port`` (bounded by ``start_timeout_s``; compare ``options_digest`` with
    :func:`.options.digest` to know whether it took them; it moves only while no client is connected, and
    :attr:`SharedRelay.not_where_asked` says why it did not). Without ``move`` only the options are asked for (a
    launcher that is itself connected to the relay: a move is refused anyway, and the last answer is kept).
    ``relay_options`` are JSON-able keyword arguments for :class:`EmbeddedRelay` (limits, allow-list),
    passed on the relay's command line or in ``relay.options.json`` (so never a secret). Raises
    :class:`RelayError` (one line, for the user) when no relay can be found or started within
    ``start_timeout_s``. What was not trusted on the way is in :attr:`SharedRelay.distrusted`.
    """
    if not 0 <= port <= 65535:
        raise RelayError(f"the embedded relay's port must be 0..65535, not {port}")
    if not 0 <= idle_exit_s < math.inf:  # also refuses nan
        raise RelayError(f"the embedded relay's idle exit must be a number of seconds >= 0, not {idle_exit_s}")
    try:
        options = json.dumps(dict(relay_options or {}), separators=(",", ":"))
        wanted = relay_options_file.digest(relay_options or {})
    except (TypeError, ValueError) as exc:
        raise RelayError(f"the embedded relay's options are not JSON: {exc}") from exc
    data_dir = data_dir.absolute()
    db = (db_path or data_dir / RELAY_DB).absolute()
    try:
        key = read_proof_key(data_dir)
        notes: list[str] = []
        if key is not None:  # else no relay of this data dir ever ran: there is nothing to find
            search = _Search(data_dir, db, key, port, probe_timeout_s)
            found = await search.find()
            if found is not None and (not reconfigure or (found.options_digest == wanted
                                                          and (not move or found.listens_as_asked(host, port)))):
                return found
            notes = search.notes
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        search = _Search(data_dir, db, ensure_proof_key(data_dir), port, probe_timeout_s, notes)
        launch = FileLock(data_dir / LAUNCH_LOCK_FILE)
        if not await launch.acquire(start_timeout_s + probe_timeout_s):
            raise RelayError(f"another didactyl is starting the embedded relay of {data_dir} and has not "
                             f"finished within {start_timeout_s + probe_timeout_s:g}s")
        try:
            if reconfigure:
                found = await search.find()
                if found is not None:
                    if found.options_digest == wanted and (not move or found.listens_as_asked(host, port)):
                        return found
                    taken = await _reconfigure(search, found, dict(relay_options or {}), wanted,
                                               (host, port) if move else ("", 0), time.monotonic() + start_timeout_s)
                    if taken is not None:
                        return taken
            command = relay_command(data_dir, db, host, port, idle_exit_s, options)
            return await _find_or_start(search, command, start_timeout_s)
        finally:
            launch.release()
    except OSError as exc:  # the data dir or its lock files cannot be read, created or locked
        where = exc.filename or data_dir
        raise RelayError(f"cannot use the embedded relay's files in {where}: {exc.strerror or exc}") from exc


async def _reconfigure(search: _Search, relay: SharedRelay, options: dict[str, Any], wanted: str,
                       address: tuple[str, int], deadline: float) -> SharedRelay | None:
    """Holding the launch lock: ask ``relay`` to take ``options`` and to listen on ``address``, and wait until its
    lock file answers. The relay as it is then (its old options and address if it did not take them in time), or
    None when it went away (then a new one is started with ``options``, there)."""
    relay_options_file.write_request(search.data_dir / relay_options_file.OPTIONS_FILE, options)
    request = ""
    if relay.asked is not None:  # an older relay cannot move: it is only asked for options
        request = secrets.token_hex(8)
        relay_options_file.write_address_request(search.data_dir / relay_options_file.ADDRESS_FILE, *address,
                                                 request)
    proven = await search.proves(relay)
    if proven is None or proven.instance != relay.token:
        return None  # gone since it was found: a reused pid is never signalled
    try:
        os.kill(relay.pid, signal.SIGUSR1)
    except ProcessLookupError:
        return None
    lock_path = search.data_dir / LOCK_FILE
    while True:
        lock = read_lock(lock_path)
        if lock is not None and lock.token == relay.token and (
                (lock.asked.request == request) if request and lock.asked is not None
                else lock.options_digest == wanted):
            if await search.verified(lock):
                now = search.result(lock, False)
                before = relay.not_where_asked
                news = (now.asked is not None and now.asked.refused != "" and (
                    before is None or (before.host, before.port, before.refused)
                    != (now.asked.host, now.asked.port, now.asked.refused)))
                return replace(now, reloaded=now.options_digest == wanted != relay.options_digest,
                               moved=(lock.host, lock.port) != (relay.listen_host, relay.port), news=news)
        if not pid_running(relay.pid):
            return None  # e.g. an older relay, which SIGUSR1 ends: a new one starts with these options
        if time.monotonic() >= deadline:
            return replace(relay, distrusted=tuple(search.notes))
        await asyncio.sleep(_POLL_S)


async def _find_or_start(search: _Search, command: list[str], start_timeout_s: float) -> SharedRelay:
    """Holding the launch lock: the relay another launcher just started, or a new one."""
    data_dir, db = search.data_dir, search.db
    lock_path = data_dir / LOCK_FILE
    deadline = time.monotonic() + start_timeout_s
    while True:
        found = await search.find()
        if found is not None:
            return found
        if not lock_is_held(owner_lock_path(db)):
            # Nobody serves the database: what the lock file says about it is stale (a lock file naming
            # another database is left to that relay; ours replaces it either way).
            stale = read_lock(lock_path)
            if stale is None or stale.db == str(db):
                remove_stale_lock(lock_path, stale)
            return await _start(search, command, deadline)
        # A relay owns the database but does not prove it is here (yet): it is starting, stopping, or stuck.
        if time.monotonic() >= deadline:
            lock = read_lock(lock_path)
            who = f" (pid {lock.pid}, {lock.url})" if lock is not None else ""
            raise RelayError(f"an embedded relay holds {db}{who} but does not answer with its proof of identity "
                             f"(stuck, or an older didactyl's); stop it or see {data_dir / LOG_FILE}")
        await asyncio.sleep(_POLL_S * 2)


async def _start(search: _Search, command: list[str], deadline: float) -> SharedRelay:
    data_dir = search.data_dir
    log_path = data_dir / LOG_FILE
    try:
        proc = await asyncio.to_thread(spawn, command, data_dir, log_path)
    except OSError as exc:
        raise RelayError(f"cannot start the embedded relay: {exc.strerror or exc}") from exc
    lock_path = data_dir / LOCK_FILE
    while True:
        lock = read_lock(lock_path)
        if lock is not None and lock.pid == proc.pid and await search.verified(lock):
            return search.result(lock, True)
        code = proc.poll()
        if code is not None:
            # Another relay may have taken the database meanwhile (``didactyl relay`` by hand).
            found = await search.find()
            if found is not None:
                return found
            raise RelayError(f"the embedded relay exited at start ({last_line(log_path) or f'code {code}'})")
        if time.monotonic() >= deadline:
            await asyncio.to_thread(terminate, proc)
            raise RelayError(f"the embedded relay did not answer within its start time; see {log_path}")
        await asyncio.sleep(_POLL_S)


async def stop_shared_relay(relay: SharedRelay, timeout: float = 5.0) -> bool:
    """Ask the relay process to stop (SIGTERM) and wait up to ``timeout``; True once it is gone.

    Only signals the pid after the relay proved its identity again, so a reused pid is never hit.
    """
    answer = await ask_identity(relay.host, relay.port, relay.proof_key)
    if answer.proven is None or answer.proven.instance != relay.token:
        return not pid_running(relay.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(relay.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_running(relay.pid):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True
