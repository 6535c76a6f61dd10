"""Files and disks (issue #10): private files whatever the directory mode and umask, ssh-style warnings,
a full disk said plainly, and a conversations DB that is not needed until it is used.

The disk-full cases run on a real 1 MiB tmpfs when this process may mount one (root), and always through
SQLite's own ``max_page_count`` ceiling, which raises the same SQLITE_FULL error on the same code path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.agent.documents.history import DocumentHistory
from didactyl_tui.agent.documents.outbox import Outbox
from didactyl_tui.agent.identity.keystore import load_agent_key
from didactyl_tui.agent.memory.backends.recall import RecallBackend
from didactyl_tui.agent.private_files import (
    connect_private,
    is_disk_full,
    permission_warnings,
    storage_error_message,
)
from didactyl_tui.errors import AgentError


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def open_everything(data: Path) -> list[object]:
    """Every database the agent layer creates in the data dir, each written to once."""
    conv = ConversationStore(data / "conversations.sqlite3")
    conv.append(conv.new_session(), [{"role": "user", "content": "my secret plan"}])
    recall = RecallBackend(data / "recall.sqlite3")
    recall.add_turn("s", "my secret plan", "noted")
    outbox = Outbox(data / "memory_outbox.sqlite3")
    history = DocumentHistory(data / "memory_history.sqlite3")
    return [conv, recall, outbox, history]


@pytest.mark.parametrize("dir_mode", [0o755, 0o777])
def test_every_database_and_its_wal_files_are_0600_whatever_the_dir_mode_and_umask(tmp_path: Path,
                                                                                    dir_mode: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, dir_mode)
    with umask(0o000 if dir_mode == 0o777 else 0o022):
        stores = open_everything(data)
    try:
        files = sorted(p for p in data.iterdir() if p.is_file())
        names = {p.name for p in files}
        assert {"conversations.sqlite3", "conversations.sqlite3-wal", "recall.sqlite3-wal",
                "memory_outbox.sqlite3", "memory_history.sqlite3"} <= names
        wrong = {p.name: f"{mode(p):04o}" for p in files if mode(p) != 0o600}
        assert not wrong
    finally:
        for s in stores:
            s.close()  # type: ignore[attr-defined]


def test_files_an_older_run_left_readable_are_tightened_on_open(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    ConversationStore(db).new_session()
    for p in tmp_path.iterdir():
        os.chmod(p, 0o644)
    store = ConversationStore(db)
    store.list_sessions()
    assert {p.name: mode(p) for p in tmp_path.iterdir()} == {p.name: 0o600 for p in tmp_path.iterdir()}
    store.close()


def test_a_symlink_planted_as_the_database_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    os.chmod(victim, 0o644)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.sqlite3").symlink_to(victim)
    with pytest.raises(OSError):
        connect_private(tmp_path / "data" / "x.sqlite3")
    assert mode(victim) == 0o644 and victim.read_text() == "untouched"


def test_permission_warnings_name_the_place_and_the_fix(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    loaded = load_agent_key(data, {})
    assert loaded.path is not None
    assert permission_warnings(data, loaded.path) == []
    os.chmod(data, 0o755)
    os.chmod(loaded.path, 0o640)
    (data / "recall.sqlite3").write_bytes(b"")
    os.chmod(data / "recall.sqlite3", 0o644)
    lines = permission_warnings(data, loaded.path)
    assert len(lines) == 3
    assert f"chmod 700 {data}" in lines[0] and "0755" in lines[0]
    assert f"chmod 600 {loaded.path}" in lines[1] and "0640" in lines[1]
    assert "recall.sqlite3" in lines[2]
    assert all("nsec" not in line for line in lines)


def test_recall_can_be_told_not_to_keep_long_term_memory(tmp_path: Path) -> None:
    path = tmp_path / "recall.sqlite3"
    recall = RecallBackend(path)
    recall.index_long_term("The vault code is 4471-zebra.")
    assert recall.search("vault zebra", 3)
    recall.close()
    off = RecallBackend(path, index_long_term=False)
    assert off.index_long_term("The vault code is 4471-zebra.") == 0
    assert off.search("vault zebra", 3) == []
    off.add_turn("s", "hello", "hi")  # chat turns are still indexed
    assert off.search("hello", 3)
    off._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[union-attr]
    off.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"4471-zebra" not in raw  # the earlier copy was deleted and zeroed (secure_delete)


# --- disk full ----------------------------------------------------------------------------------------


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount_point)],
                          capture_output=True, timeout=20)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root); the max_page_count case covers the same path")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=20)


def fill(path: Path) -> None:
    """Take every free byte of the filesystem holding ``path``."""
    with contextlib.suppress(OSError), open(path / "filler", "wb") as fh:
        for _ in range(10_000):
            fh.write(b"\0" * 4096)
            fh.flush()


def assert_disk_full_said_plainly(exc: AgentError) -> None:
    assert "disk full" in exc.message
    assert "rollback" not in exc.message and "no transaction" not in exc.message


def test_a_conversation_save_on_a_full_disk_says_disk_full(tiny_tmpfs: Path) -> None:
    store = ConversationStore(tiny_tmpfs / "conversations.sqlite3")
    session = store.new_session()
    store.append(session, [{"role": "user", "content": "kept"}])
    fill(tiny_tmpfs)
    with pytest.raises(AgentError) as caught:
        for n in range(200):
            store.append(session, [{"role": "user", "content": f"{n} " + "y" * 50_000}])
    assert_disk_full_said_plainly(caught.value)
    assert store.messages(session)[0] == {"role": "user", "content": "kept"}  # nothing earlier was lost
    store.close()


def test_opening_the_conversations_db_on_a_full_disk_fails_only_when_used(tiny_tmpfs: Path) -> None:
    fill(tiny_tmpfs)
    store = ConversationStore(tiny_tmpfs / "conversations.sqlite3")  # no I/O yet: a memory save needs none
    with pytest.raises(AgentError) as caught:
        store.list_sessions()
    assert "cannot open the conversation database" in caught.value.message
    assert "disk full" in caught.value.message


def test_sqlite_full_through_max_page_count_says_disk_full(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    session = store.new_session()
    store.append(session, [{"role": "user", "content": "kept"}])
    store._conn().execute("PRAGMA max_page_count=40")
    with pytest.raises(AgentError) as caught:
        for n in range(200):
            store.append(session, [{"role": "user", "content": f"{n} " + "z" * 20_000}])
    assert_disk_full_said_plainly(caught.value)
    assert caught.value.message.startswith("disk full: the conversation could not be written")
    assert store.messages(session)[0]["content"] == "kept"
    store.close()


def test_an_unopenable_conversations_db_costs_nothing_until_used(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("a file where the data dir should be")
    store = ConversationStore(tmp_path / "not-a-dir" / "conversations.sqlite3")
    with pytest.raises(AgentError, match="cannot open the conversation database"):
        store.new_session()
    store.close()


def test_disk_full_is_recognised_from_errno_and_sqlite() -> None:
    import errno
    import sqlite3

    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(sqlite3.OperationalError("database or disk is full"))
    assert not is_disk_full(sqlite3.OperationalError("database is locked"))
    line = storage_error_message(OSError(errno.ENOSPC, "x"), "the memory")
    assert line.startswith("disk full: the memory could not be written")


def test_a_memory_edit_on_a_full_outbox_says_disk_full(tmp_path: Path) -> None:
    from agent_support import AGENT_KEY, memory_event

    outbox = Outbox(tmp_path / "memory_outbox.sqlite3")
    outbox.enqueue(memory_event(AGENT_KEY, "kept", 1_750_000_000))
    outbox._db.execute("PRAGMA max_page_count=12")
    with pytest.raises(AgentError) as caught:
        for n in range(100):
            outbox.enqueue(memory_event(AGENT_KEY, "x" * 30_000 + str(n), 1_750_000_001 + n))
    assert_disk_full_said_plainly(caught.value)
    assert "locked" not in caught.value.message
    outbox.close()


def test_opening_a_database_again_keeps_the_locks_this_process_holds(tmp_path: Path) -> None:
    # Closing any descriptor of a file drops this process's POSIX locks on it: the second open must not.
    import sqlite3
    import sys

    path = tmp_path / "memory_outbox.sqlite3"
    holder = connect_private(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    os.chmod(path, 0o644)  # an older run's mode, so the reopen has something to fix
    second = connect_private(path, isolation_level=None)
    probe = ("import sqlite3, sys\n"
             "db = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
             "try:\n    db.execute('BEGIN IMMEDIATE'); print('got the lock')\n"
             "except sqlite3.OperationalError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "database is locked"
    assert mode(path) == 0o600
    holder.execute("ROLLBACK")
    for db in (holder, second):
        db.close()
    assert isinstance(second, sqlite3.Connection)
