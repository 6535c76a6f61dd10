"""One embedded relay per data dir, as its own process: real processes, real sockets, real locks.

Every relay process a test starts (directly or through a client process) is found by its command line
(``--data-dir`` under the test's tmp_path) and killed in teardown, with bounded waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets
from impostor_relay import ImpostorRelay
from relay_servers import eventually, fast_client_kwargs, free_port
from shared_relay_support import kill_shared_relays, relay_pids

from didactyl_tui.errors import RelayError
from didactyl_tui.nostr.embedded_relay.lockfile import (
    KEY_FILE,
    LOCK_FILE,
    FileLock,
    RelayLock,
    ensure_proof_key,
    lock_is_held,
    owner_lock_path,
    pid_running,
    read_lock,
    write_lock,
)
from didactyl_tui.nostr.embedded_relay.probe import ask_identity, fetch_info_document
from didactyl_tui.nostr.embedded_relay.process import EXIT_DATABASE_BUSY, CappedLogHandler, InstanceRelay
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.embedded_relay.shared import (
    ensure_shared_relay,
    find_shared_relay,
    stop_shared_relay,
)
from didactyl_tui.nostr.embedded_relay.spawn import DAEMON_MODULE
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.nostr.relay_proof import ProofKey

ROOT = Path(__file__).resolve().parents[3]  # the repository (tests/nostr/embedded_relay/ is three below)
SK = SecretKey.from_hex("00" * 31 + "52")
PROCESS_TIMEOUT_S = 60  # a client process: a cold Python start plus a relay start, on a loaded box

# A second didactyl process: finds (or starts) the data dir's relay, optionally publishes an event and
# reads back what the relay holds; prints one JSON line.
CLIENT_SCRIPT = """
import asyncio, json, sys, time
from pathlib import Path
from didactyl_tui.nostr.embedded_relay.shared import ensure_shared_relay
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.nostr.relay import RelayClient
from didactyl_tui.nostr.relay_proof import ProofKey

async def main(data_dir, publish):
    relay = await ensure_shared_relay(Path(data_dir), port=0, idle_exit_s=30)
    out = {"url": relay.url, "pid": relay.pid, "token": relay.token, "started_by_us": relay.started_by_us}
    if publish:
        sk = SecretKey.from_hex("00" * 31 + "52")
        async with RelayClient(relay.url, reconnect=False) as client:
            held = await client.query([{"kinds": [1], "authors": [sk.public_key_hex]}])
            out["held"] = sorted(e.content for e in held)
            ev = sign_event(sk, kind=1, content=publish, created_at=int(time.time()))
            out["accepted"] = (await client.publish(ev)).accepted
    print(json.dumps(out), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    return env


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir; every relay process started under tmp_path is killed afterwards (bounded)."""
    yield tmp_path / "data"
    kill_shared_relays(tmp_path)
    assert relay_pids(tmp_path) == []


async def run_client(data_dir: Path, publish: str = "") -> dict[str, object]:
    args = [sys.executable, "-c", CLIENT_SCRIPT, str(data_dir)] + ([publish] if publish else [])
    proc = await asyncio.create_subprocess_exec(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        out, err = await asyncio.wait_for(proc.communicate(), PROCESS_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


def dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          timeout=PROCESS_TIMEOUT_S, check=True)
    return int(proc.stdout)


def note(content: str) -> Event:
    return sign_event(SK, kind=1, content=content, created_at=int(time.time()))


async def proven_instance(relay: object, key: ProofKey) -> str | None:
    """The instance the server where ``relay`` listens proves to be with ``key`` (None: it proves nothing)."""
    answer = await ask_identity(relay.host, relay.port, key)  # type: ignore[attr-defined]
    return answer.proven.instance if answer.proven is not None else None


def another_key() -> ProofKey:
    return ProofKey(os.urandom(32))


# --- one relay, however many start at once -------------------------------------------------------------


async def test_concurrent_launches_in_three_processes_end_with_one_relay(data_dir: Path) -> None:
    results = await asyncio.gather(*(run_client(data_dir) for _ in range(3)))
    assert len({r["pid"] for r in results}) == 1
    assert len({r["url"] for r in results}) == 1
    assert [r["started_by_us"] for r in results].count(True) == 1
    lock = read_lock(data_dir / LOCK_FILE)
    assert lock is not None and lock.pid == results[0]["pid"] and lock.token == results[0]["token"]
    assert relay_pids(data_dir) == [lock.pid]
    # Launchers took turns: no second relay process was even started (and refused by the database lock).
    assert "already serves" not in (data_dir / "relay.log").read_text()


async def test_concurrent_launches_in_one_process_end_with_one_relay(data_dir: Path) -> None:
    first, second = await asyncio.gather(ensure_shared_relay(data_dir, port=0), ensure_shared_relay(data_dir, port=0))
    assert first.pid == second.pid and first.url == second.url
    assert sorted([first.started_by_us, second.started_by_us]) == [False, True]
    assert relay_pids(data_dir) == [first.pid]


async def test_a_second_process_finds_the_relay_and_events_flow_both_ways(data_dir: Path) -> None:
    ours = await ensure_shared_relay(data_dir, port=0, idle_exit_s=30)
    assert ours.started_by_us
    seen: list[Event] = []
    async with RelayClient(ours.url, **fast_client_kwargs()) as client:
        assert (await client.publish(note("from the app"))).accepted
        client.subscribe([{"kinds": [1], "authors": [SK.public_key_hex]}], seen.append)
        theirs = await run_client(data_dir, publish="from the cli")
        assert theirs["started_by_us"] is False
        assert (theirs["url"], theirs["pid"]) == (ours.url, ours.pid)
        assert theirs["held"] == ["from the app"]
        assert theirs["accepted"] is True
        # The live subscription of the first process sees the second one's event: one relay, one truth.
        assert await eventually(lambda: any(e.content == "from the cli" for e in seen), timeout=10)
    assert relay_pids(data_dir) == [ours.pid]


# --- stale and foreign -------------------------------------------------------------------------------


async def test_a_lock_file_of_a_dead_process_is_taken_over(data_dir: Path) -> None:
    data_dir.mkdir()
    gone = dead_pid()
    stale = RelayLock(gone, "127.0.0.1", free_port(), "stale-token", str(data_dir / "relay.sqlite3"), time.time())
    write_lock(data_dir / LOCK_FILE, stale)
    relay = await ensure_shared_relay(data_dir, port=0)
    assert relay.started_by_us and relay.pid != gone and relay.token != "stale-token"
    lock = read_lock(data_dir / LOCK_FILE)
    assert lock is not None and (lock.pid, lock.token) == (relay.pid, relay.token)


async def test_a_garbage_lock_file_is_taken_over(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / LOCK_FILE).write_text("{not json")
    relay = await ensure_shared_relay(data_dir, port=0)
    assert relay.started_by_us
    assert read_lock(data_dir / LOCK_FILE) is not None


@pytest.mark.parametrize("foreign", ["plain relay", "relay of another data dir", "relay naming the lock's instance"])
async def test_a_foreign_server_on_the_port_is_not_mistaken_for_ours(data_dir: Path, tmp_path: Path,
                                                                     foreign: str) -> None:
    data_dir.mkdir()
    ensure_proof_key(data_dir)
    other_db = tmp_path / "other.sqlite3"
    token = "a" * 32
    server = (EmbeddedRelay(other_db) if foreign == "plain relay"
              else InstanceRelay(other_db, proof_key=another_key(),
                                 instance_token="f" * 32 if foreign == "relay of another data dir" else token))
    async with server:
        # The lock file points at the foreign server, from a live pid (ours): only the identity check
        # can tell it is not the relay that wrote the file.
        claim = RelayLock(os.getpid(), "127.0.0.1", server.port, token, str(data_dir / "relay.sqlite3"), time.time())
        write_lock(data_dir / LOCK_FILE, claim)
        relay = await ensure_shared_relay(data_dir, port=server.port)
        assert relay.started_by_us
        assert relay.port != server.port and relay.port_fallback
        assert [f"{server.url}" in note for note in relay.distrusted] == [True]  # named, for the user
        lock = read_lock(data_dir / LOCK_FILE)
        assert lock is not None and lock.port == relay.port  # the free port is recorded
        assert await proven_instance(relay, relay.proof_key) == relay.token
        async with RelayClient(relay.url, reconnect=False) as client:
            assert (await client.publish(note("to the right relay"))).accepted
        assert await server.count() == 0
        again = await find_shared_relay(data_dir, requested_port=server.port)
        assert again is not None and again.pid == relay.pid


async def test_a_port_held_by_a_silent_program_gets_a_free_port(data_dir: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        relay = await ensure_shared_relay(data_dir, port=port)
        assert relay.started_by_us and relay.port != port


async def test_a_database_owned_by_a_relay_that_does_not_answer_is_never_opened_twice(data_dir: Path) -> None:
    data_dir.mkdir()
    owner = FileLock(owner_lock_path(data_dir / "relay.sqlite3"))
    assert owner.try_acquire()  # stands for a stuck relay process
    try:
        with pytest.raises(RelayError, match=r"holds .* but does not answer"):
            await ensure_shared_relay(data_dir, port=0, start_timeout_s=1.0)
        assert relay_pids(data_dir) == []
    finally:
        owner.release()


def test_a_second_relay_process_on_the_same_database_refuses(data_dir: Path) -> None:
    relay = asyncio.run(ensure_shared_relay(data_dir, port=0))
    proc = subprocess.run([sys.executable, "-m", DAEMON_MODULE, "--data-dir", str(data_dir),
                           "--port", "0"], capture_output=True, text=True, env=_env(), timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == EXIT_DATABASE_BUSY
    assert f"already serves {data_dir / 'relay.sqlite3'} on {relay.url} (pid {relay.pid})" in proc.stderr
    lock = read_lock(data_dir / LOCK_FILE)
    assert lock is not None and lock.token == relay.token


async def test_a_relay_that_cannot_listen_is_reported_in_one_line(data_dir: Path) -> None:
    with pytest.raises(RelayError, match=r"exited at start .*cannot listen") as info:
        await ensure_shared_relay(data_dir, host="192.0.2.1", port=0)  # TEST-NET: not an address of ours
    assert "\n" not in str(info.value)
    assert read_lock(data_dir / LOCK_FILE) is None


# --- lifetime ---------------------------------------------------------------------------------------


def relay_log(data_dir: Path) -> str:
    """The relay's log, to show why it did not stop when a test expected it to."""
    return (data_dir / "relay.log").read_text(errors="replace")


# The idle-exit tests run their relay on a port of this worker's own (free_port): a client of another test still
# reconnecting to a port it once used could otherwise find this relay there, and hold it up.


async def test_idle_exit_waits_for_the_last_client(data_dir: Path) -> None:
    relay = await ensure_shared_relay(data_dir, port=free_port(), idle_exit_s=0.3)
    async with RelayClient(relay.url, reconnect=False) as client:
        await asyncio.sleep(1.5)  # five idle periods with a client connected
        assert pid_running(relay.pid)
        assert (await client.publish(note("still here"))).accepted
        # The log says who holds the relay up, once.
        assert relay_log(data_dir).count("idle exit waits: 1 client(s) connected (127.0.0.1:") == 1
    assert await eventually(lambda: not pid_running(relay.pid), timeout=20), relay_log(data_dir)
    assert not (data_dir / LOCK_FILE).exists()
    assert not lock_is_held(owner_lock_path(relay.db_path))
    # The next process starts a new relay on the same database; nothing was lost.
    again = await ensure_shared_relay(data_dir, port=0)
    assert again.started_by_us and again.pid != relay.pid
    async with RelayClient(again.url, reconnect=False) as client:
        assert [e.content for e in await client.query([{"kinds": [1]}])] == ["still here"]


async def test_sigterm_stops_the_relay_and_removes_its_lock(data_dir: Path) -> None:
    relay = await ensure_shared_relay(data_dir, port=0)
    os.kill(relay.pid, signal.SIGTERM)
    assert await eventually(lambda: not pid_running(relay.pid), timeout=20)
    assert not (data_dir / LOCK_FILE).exists()
    assert not lock_is_held(owner_lock_path(relay.db_path))
    assert "stopped" in (data_dir / "relay.log").read_text()


async def test_stop_shared_relay_signals_only_a_verified_relay(data_dir: Path) -> None:
    relay = await ensure_shared_relay(data_dir, port=0)
    impostor = dataclasses.replace(relay, token="0" * 32)
    assert await stop_shared_relay(impostor, timeout=1.0) is False
    assert pid_running(relay.pid)
    with_another_key = dataclasses.replace(relay, proof_key=another_key())
    assert await stop_shared_relay(with_another_key, timeout=1.0) is False
    assert pid_running(relay.pid)
    assert await stop_shared_relay(relay, timeout=20.0) is True
    assert not (data_dir / LOCK_FILE).exists()


async def test_every_file_is_private(data_dir: Path) -> None:
    relay = await ensure_shared_relay(data_dir, port=0)
    async with RelayClient(relay.url, reconnect=False) as client:
        assert (await client.publish(note("private"))).accepted
    assert (data_dir.stat().st_mode & 0o777) == 0o700
    names = sorted(p.name for p in data_dir.iterdir())
    assert {"relay.key", "relay.lock", "relay.launch.lock", "relay.log", "relay.sqlite3",
            "relay.sqlite3.owner"} <= set(names)
    loose = {p.name: oct(p.stat().st_mode & 0o777) for p in data_dir.iterdir() if p.stat().st_mode & 0o077}
    assert loose == {}


@pytest.mark.parametrize(("port", "idle"), [(-1, 300.0), (65536, 300.0), (0, -1.0), (0, float("inf")),
                                            (0, float("nan"))])
async def test_bad_settings_are_refused_before_anything_starts(data_dir: Path, port: int, idle: float) -> None:
    with pytest.raises(RelayError, match=r"port must be|idle exit must be"):
        await ensure_shared_relay(data_dir, port=port, idle_exit_s=idle)
    assert not data_dir.exists()


async def test_a_killed_relay_is_taken_over(data_dir: Path) -> None:
    relay = await ensure_shared_relay(data_dir, port=0)
    os.kill(relay.pid, signal.SIGKILL)  # no clean-up: the lock file stays behind
    assert await eventually(lambda: not pid_running(relay.pid), timeout=20)
    assert read_lock(data_dir / LOCK_FILE) is not None
    again = await ensure_shared_relay(data_dir, port=0)
    assert again.started_by_us and again.pid != relay.pid
    assert relay_pids(data_dir) == [again.pid]


async def test_an_identity_question_counts_as_activity(data_dir: Path) -> None:
    relay = await ensure_shared_relay(data_dir, port=free_port(), idle_exit_s=2.0)
    for _ in range(17):  # 5 s of questions, never 2 s apart
        assert await proven_instance(relay, relay.proof_key) == relay.token
        await asyncio.sleep(0.3)
    assert pid_running(relay.pid)
    assert await eventually(lambda: not pid_running(relay.pid), timeout=20), relay_log(data_dir)
    # Past two idle periods with no client, the log said whose questions kept the relay up (once).
    assert relay_log(data_dir).count("idle exit waits: identity questions keep coming, the last from 127.0.0.1:") == 1


async def test_a_stopping_relay_still_proves_who_it_is_but_is_not_used(data_dir: Path, tmp_path: Path) -> None:
    data_dir.mkdir()
    key = ensure_proof_key(data_dir)
    stopping = asyncio.Event()
    async with InstanceRelay(tmp_path / "r.sqlite3", proof_key=key, instance_token="b" * 32,
                             stopping=stopping) as relay:
        write_lock(data_dir / LOCK_FILE, RelayLock(os.getpid(), "127.0.0.1", relay.port, "b" * 32,
                                                   str(tmp_path / "r.sqlite3"), time.time()))
        assert (await ask_identity("127.0.0.1", relay.port, key)).proven.stopping is False
        assert await find_shared_relay(data_dir, tmp_path / "r.sqlite3") is not None
        stopping.set()
        answer = await ask_identity("127.0.0.1", relay.port, key)
        assert answer.proven is not None and answer.proven.stopping  # ours, not an impostor: no warning ...
        found = await find_shared_relay(data_dir, tmp_path / "r.sqlite3")
        assert found is None  # ... and no longer used: a launcher waits for its successor


async def test_relay_options_reach_the_relay_process(data_dir: Path) -> None:
    relay = await ensure_shared_relay(data_dir, port=0, relay_options={"limits": {"max_subscriptions": 3}})
    doc = await fetch_info_document(relay.host, relay.port)
    assert doc is not None and doc["limitation"]["max_subscriptions"] == 3


async def test_unknown_relay_options_are_reported_in_one_line(data_dir: Path) -> None:
    with pytest.raises(RelayError, match=r"exited at start .*bad relay options") as info:
        await ensure_shared_relay(data_dir, port=0, relay_options={"no_such_limit": 1})
    assert "\n" not in str(info.value)
    with pytest.raises(RelayError, match="not JSON"):
        await ensure_shared_relay(data_dir, port=0, relay_options={"limits": object()})


async def test_a_server_that_learned_the_token_is_not_trusted_once_the_relay_is_gone(data_dir: Path,
                                                                                     tmp_path: Path) -> None:
    """A server that knows everything another local user can read about the relay — its NIP-11 document, what
    relay.lock says (instance, port, pid), even an answer the relay gave to an earlier question — is not taken for
    it: it cannot prove it holds relay.key. Before #30 the proof was a token served over NIP-11, and only the timing
    of the killed relay's database lock kept this forger out: the kernel drops that lock with the relay's last
    thread, some ms after its pid already looks dead (a zombie leader); the lock is held here to show it."""
    relay = await ensure_shared_relay(data_dir, port=0)
    learned = await fetch_info_document(relay.host, relay.port)
    at = (relay.host, relay.port)
    forger = ImpostorRelay(instance=relay.token, info=learned, proof="replay", relay_at=lambda: at)
    await forger.start()
    try:
        dying_relays_threads = FileLock(owner_lock_path(relay.db_path))
        os.kill(relay.pid, signal.SIGKILL)  # the lock file stays, naming a port anyone may now take
        assert await eventually(lambda: not pid_running(relay.pid), timeout=20)
        assert await eventually(dying_relays_threads.try_acquire, timeout=20)
        # The forger answers with the lock file's instance from a live pid (ours) while the database is owned.
        write_lock(data_dir / LOCK_FILE, RelayLock(os.getpid(), "127.0.0.1", forger.port, relay.token,
                                                   str(relay.db_path), time.time()))
        assert await find_shared_relay(data_dir) is None
        assert forger.questions >= 1  # it was asked, and failed
        dying_relays_threads.release()
        again = await ensure_shared_relay(data_dir, port=0)
        assert again.started_by_us and again.port != forger.port
        assert [forger.url in note and "did not prove" in note for note in again.distrusted] == [True]
        assert forger.upgrades == 0 and forger.frames == []
    finally:
        await forger.stop()


async def test_nothing_that_proves_the_relay_is_readable_by_another_user(data_dir: Path) -> None:
    """The secret is in relay.key (0600, in the 0700 data dir) and nowhere else: not in the NIP-11 document, not in
    relay.lock, not on the relay's command line (which /proc shows every user), not in its log."""
    relay = await ensure_shared_relay(data_dir, port=0, idle_exit_s=30)
    secret = (data_dir / KEY_FILE).read_text().strip()
    assert len(secret) == 64 and (data_dir / KEY_FILE).stat().st_mode & 0o777 == 0o600
    doc = await fetch_info_document(relay.host, relay.port)
    assert doc is not None and "didactyl" not in doc
    readable = [json.dumps(doc), (data_dir / LOCK_FILE).read_text(), (data_dir / "relay.log").read_text(),
                Path(f"/proc/{relay.pid}/cmdline").read_bytes().decode(errors="replace")]
    assert all(secret not in text for text in readable)
    assert relay.token not in json.dumps(doc)  # the instance id is no secret, but NIP-11 has no use for it
    assert secret not in repr(relay)


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a file of another user (needs root)")
async def test_a_lock_file_written_by_another_user_is_never_trusted(data_dir: Path, tmp_path: Path) -> None:
    data_dir.mkdir()
    key = ensure_proof_key(data_dir)
    # Even a server that does prove the data dir's key: the file naming it is not ours.
    async with InstanceRelay(tmp_path / "r.sqlite3", proof_key=key, instance_token="c" * 32) as proving:
        write_lock(data_dir / LOCK_FILE, RelayLock(os.getpid(), "127.0.0.1", proving.port, "c" * 32,
                                                   str(data_dir / "relay.sqlite3"), time.time()))
        os.chown(data_dir / LOCK_FILE, 65534, 65534)
        assert read_lock(data_dir / LOCK_FILE) is None
        relay = await ensure_shared_relay(data_dir, port=0)
        assert relay.started_by_us and relay.port != proving.port
        assert [note.endswith("is not trusted: it was written by another user (uid 65534)")
                for note in relay.distrusted] == [True]
        lock_stat = (data_dir / LOCK_FILE).stat()
        assert lock_stat.st_uid == os.geteuid() and read_lock(data_dir / LOCK_FILE).port == relay.port


async def test_a_lock_file_that_is_a_link_is_never_trusted(data_dir: Path, tmp_path: Path) -> None:
    data_dir.mkdir()
    elsewhere = tmp_path / "elsewhere.lock"
    write_lock(elsewhere, RelayLock(os.getpid(), "127.0.0.1", free_port(), "d" * 32,
                                    str(data_dir / "relay.sqlite3"), time.time()))
    (data_dir / LOCK_FILE).symlink_to(elsewhere)
    relay = await ensure_shared_relay(data_dir, port=0)
    assert relay.started_by_us and any("symbolic link" in note for note in relay.distrusted)
    assert not (data_dir / LOCK_FILE).is_symlink()


@pytest.mark.parametrize("problem", ["readable by others", "another user's", "not a key"])
async def test_a_relay_key_that_is_not_private_proves_nothing(data_dir: Path, problem: str) -> None:
    if problem == "another user's" and os.geteuid() != 0:
        pytest.skip("makes a file of another user (needs root)")
    data_dir.mkdir()
    ensure_proof_key(data_dir)
    path = data_dir / KEY_FILE
    if problem == "readable by others":
        path.chmod(0o644)
    elif problem == "another user's":
        os.chown(path, 65534, 65534)
    else:
        path.write_text("not hex\n")
    with pytest.raises(RelayError, match=r"relay\.key cannot prove the embedded relay's identity") as info:
        await ensure_shared_relay(data_dir, port=0)
    assert "\n" not in str(info.value)
    assert relay_pids(data_dir) == []  # nothing starts on a key that may be known


async def test_the_log_is_rotated_when_big(data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "relay.log").write_bytes(b"old line\n" * 200_000)  # 1.8 MB
    await ensure_shared_relay(data_dir, port=0)
    assert (data_dir / "relay.log.1").stat().st_size == 1_800_000
    assert (data_dir / "relay.log").stat().st_size < 10_000


def test_the_relay_process_log_is_capped(capsys: pytest.CaptureFixture[str]) -> None:
    logger = logging.getLogger("test_shared_relay.flood")
    handler = CappedLogHandler(300)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for i in range(1000):
            logger.warning("client %d does not read its messages", i)
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert len(err) < 600
    assert err.splitlines()[-1] == "log limit reached; further messages are dropped"


async def test_an_unusable_data_dir_is_reported_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data dir should be")
    with pytest.raises(RelayError, match="cannot use the embedded relay's files"):
        await ensure_shared_relay(blocker / "data", port=0)


# --- the relay follows the config: options reloaded in place ------------------------------------------------


def _options(*writers: str, **limits: object) -> dict[str, object]:
    return {"limits": limits, "allowed_writers": list(writers), "gift_wrap_recipients": list(writers)}


async def test_a_running_relay_takes_a_new_allow_list_in_place_and_keeps_its_connections(data_dir: Path) -> None:
    from didactyl_tui.nostr.embedded_relay.options import digest

    agent, admin = SK.public_key_hex, SecretKey.from_hex("00" * 31 + "53")
    first = await ensure_shared_relay(data_dir, port=0, relay_options=_options(agent), reconfigure=True)
    assert first.options_digest == digest(_options(agent)) and not first.reloaded
    states: list[object] = []
    client = RelayPool([first.url], on_state=lambda url, state: states.append(state), **fast_client_kwargs())
    await client.start()
    try:
        assert await client.wait_connected(5)
        by_admin = sign_event(admin, kind=1, content="before", created_at=int(time.time()))
        assert "blocked" in (await client.publish(by_admin, 3)).summary()
        connected_states = len(states)
        wanted = _options(agent, admin.public_key_hex)
        again = await ensure_shared_relay(data_dir, port=0, relay_options=wanted, reconfigure=True)
        assert again.reloaded and again.pid == first.pid and again.url == first.url
        assert again.options_digest == read_lock(data_dir / LOCK_FILE).options_digest == digest(wanted)
        later = sign_event(admin, kind=1, content="after", created_at=int(time.time()))
        assert (await client.publish(later, 3)).any_accepted
        assert len(states) == connected_states  # no reconnect: the same connection, judged by the new list
        # Without reconfigure (a revival), the relay is used as it is.
        same = await ensure_shared_relay(data_dir, port=0, relay_options=_options(agent))
        assert same.options_digest == digest(wanted)
    finally:
        await client.close()


async def test_other_options_restart_the_relay_inside_its_process_on_the_same_port(data_dir: Path) -> None:
    first = await ensure_shared_relay(data_dir, port=0, relay_options=_options(SK.public_key_hex), reconfigure=True)
    async with RelayPool([first.url], **fast_client_kwargs()) as client:
        assert await client.wait_connected(5)
        assert (await client.publish(note("kept across the restart"), 3)).any_accepted
        again = await ensure_shared_relay(data_dir, port=0, relay_options=_options(SK.public_key_hex,
                                                                                   max_subscriptions=3),
                                          reconfigure=True)
        assert again.reloaded and again.pid == first.pid and again.port == first.port
        doc = await fetch_info_document(again.host, again.port)
        assert doc is not None and doc["limitation"]["max_subscriptions"] == 3
        assert await eventually(lambda: client.states()[first.url].value == "connected", 10)  # reconnected
        stored = await client.query([{"authors": [SK.public_key_hex], "kinds": [1]}], 3)
    assert [ev.content for ev in stored] == ["kept across the restart"]


async def test_an_unusable_reload_request_leaves_the_options_in_force(data_dir: Path) -> None:
    from didactyl_tui.nostr.embedded_relay.options import OPTIONS_FILE

    relay = await ensure_shared_relay(data_dir, port=0, relay_options=_options(SK.public_key_hex), reconfigure=True)
    log = data_dir / "relay.log"
    for reloads, garbage in enumerate(("not json", '{"limits": {"no_such_limit": 1}}'), start=1):
        (data_dir / OPTIONS_FILE).write_text(garbage)
        os.kill(relay.pid, signal.SIGUSR1)
        assert await eventually(lambda n=reloads: log.read_text().count("reload:") >= n, 10)
        assert read_lock(data_dir / LOCK_FILE).options_digest == relay.options_digest
        assert await proven_instance(relay, relay.proof_key) == relay.token  # still serving
    assert log.read_text().count("the options stay as they are") == 2


# --- lean: the relay's memory is the relay process's -----------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps (Linux)")
async def test_the_relay_process_runs_without_openssl_and_still_checks_ids(data_dir: Path) -> None:
    """It serves plain ws:// and hashes with Python's own SHA-256 (daemon.without_openssl, #21): no OpenSSL
    library is mapped, and an event whose id does not match its content is still refused."""
    relay = await ensure_shared_relay(data_dir, port=0, idle_exit_s=30)
    maps = Path(f"/proc/{relay.pid}/maps").read_text()
    assert "libssl" not in maps and "libcrypto" not in maps
    good = note("hashed without OpenSSL").to_dict()
    async with websockets.connect(relay.url) as conn:
        await conn.send(json.dumps(["EVENT", good]))
        assert json.loads(await asyncio.wait_for(conn.recv(), 10)) == ["OK", good["id"], True, ""]
        await conn.send(json.dumps(["EVENT", {**good, "content": "changed after signing"}]))
        assert json.loads(await asyncio.wait_for(conn.recv(), 10)) == [
            "OK", good["id"], False, "invalid: event id does not match its content"]


def test_finding_or_starting_the_relay_does_not_load_it() -> None:
    """An app that finds or starts the data dir's relay loads none of the relay's own code (server, store,
    websockets server): that memory is the relay process's alone (#21)."""
    code = ("import sys, didactyl_tui.nostr.embedded_relay.shared; "
            "print(sorted(m for m in sys.modules if m.startswith('didactyl_tui.nostr.embedded_relay.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(),
                         timeout=PROCESS_TIMEOUT_S, check=True).stdout
    loaded = ("limits", "lockfile", "options", "probe", "shared", "spawn")
    assert json.loads(out.replace("'", '"')) == [f"didactyl_tui.nostr.embedded_relay.{name}" for name in loaded]
