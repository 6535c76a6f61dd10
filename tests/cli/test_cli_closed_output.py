"""A command whose output the reader closed (``didactyl … | head -1``) ends quietly: exit 0, nothing on stderr (no
BrokenPipeError line, no "Exception ignored" from the interpreter's last flush). The reader here closed the pipe
before the command wrote anything, so every run meets it (``head`` only sometimes does, by timing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_support import cli_env
from tui_support import TEST_KEY

from didactyl_tui.agent.conversations.store import ConversationStore


def closed_output(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone: the first write meets a closed pipe
    try:
        return subprocess.run([sys.executable, "-m", "didactyl_tui", *args], env=env, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)


def test_sessions_list_and_memory_show_end_quietly_when_the_reader_closed_the_output(tmp_path: Path) -> None:
    env = cli_env(tmp_path, DIDACTYL_NSEC=TEST_KEY.nsec())
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    store = ConversationStore(data / "conversations.sqlite3")
    session = store.new_session()
    store.append(session, [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    store.close()
    for args in (("sessions", "list"), ("sessions", "show", session), ("soul", "show")):
        done = closed_output(env, *args)
        assert (done.returncode, done.stderr) == (0, ""), (args, done.stderr)
