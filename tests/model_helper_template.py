"""Model helpers for the test suite, forked from a template that imported litellm once (test-only).

Every app, ``chat`` and ``serve`` the suite starts runs a model helper (agent/llm/worker.py), and each helper
imports litellm: ~8 s of CPU, about twenty times a run. tests/conftest.py names this file's *shim* in
``$DIDACTYL_TEST_MODEL_HELPER``, which the app's side (agent/llm/worker_client.py) runs instead of
``python -m didactyl_tui.agent.llm.worker``. The shim hands its stdin, stdout and stderr, its environment and
working directory to the *template* over a Unix socket, and exits with the status of the helper forked for it.
The template imported litellm once; each child takes those three descriptors and runs the helper's own
``main()``: the same code and protocol on the same pipes, so the app cannot tell (but for the missing import).
A shim killed kills its helper; a helper that ends ends its shim. The first shim that finds no template starts
one (under a lock); the template ends with the pytest process that set the variable.

    python model_helper_template.py shim DIR OWNER_PID       (what $DIDACTYL_TEST_MODEL_HELPER runs)
    python model_helper_template.py template DIR OWNER_PID FD
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
from pathlib import Path

ENV = "DIDACTYL_TEST_MODEL_HELPER"  # agent/llm/worker_client.py's TEST_HELPER_ENV
MAX_REQUEST_BYTES = 1 << 20  # a shim's environment and working directory
# What a helper's first model call imports beyond litellm itself (~0.8 s of CPU each): the template loads them
# too when they exist. Only a saving: a name this litellm lacks is skipped.
WARM_MODULES = (
    "openai", "anyio._backends._asyncio", "tiktoken_ext.openai_public", "litellm.litellm_core_utils.default_encoding",
    "litellm.litellm_core_utils.streaming_chunk_builder_utils", "litellm.llms.openai.chat.gpt_audio_transformation",
    "litellm.llms.openai_like.dynamic_config", "litellm.llms.litellm_proxy.chat.transformation", "litellm.proxy._types",
)


def command(folder: Path) -> str:
    """The value of ``$DIDACTYL_TEST_MODEL_HELPER`` for a run owned by this process, its socket in ``folder``."""
    return json.dumps([sys.executable, str(Path(__file__).resolve()), "shim", str(folder), str(os.getpid())])


def stop(folder: Path) -> None:
    """End the template of ``folder``, if one was started (its helpers end with their apps)."""
    with contextlib.suppress(OSError, ValueError):
        os.kill(int((folder / "template.pid").read_text()), signal.SIGTERM)


# --- the shim: one per helper, in the app's place of the helper ---------------------------------------------------


def _dial(path: Path) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        raise
    return conn


def _template_connection(folder: Path, owner: int) -> socket.socket:
    path = folder / "template.sock"
    with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
        return _dial(path)
    with open(folder / "template.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one shim starts the template; the others find it
        with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
            return _dial(path)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a template that died left its socket
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(str(path))
        listener.listen(128)  # bound before the template imports litellm: shims queue here meanwhile
        with open(folder / "template.log", "ab") as log:
            subprocess.Popen([sys.executable, __file__, "template", str(folder), str(owner), str(listener.fileno())],
                             pass_fds=[listener.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
        listener.close()
        return _dial(path)


def shim(folder: Path, owner: int) -> int:
    """Hand this process's stdin, stdout and stderr to a helper forked by the template; return its exit status."""
    conn = _template_connection(folder, owner)
    request = json.dumps({"env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [request], [0, 1, 2])
    said = os.dup(2)  # the last words of a failure, if any (the app keeps its helper's last stderr line)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the helper holds the pipes now: the app sees their ends when it does
        os.dup2(devnull, fd)
    try:
        status = conn.recv(16)  # the helper's exit status
    except OSError:
        status = b""
    if not status:
        os.write(said, f"the suite's model helper template went away (see {folder}/template.log)\n".encode())
        return 1
    code = int(status)
    if code < 0:  # killed by a signal: so is this process, as the helper's own would be
        os.kill(os.getpid(), -code)
    return code


# --- the template: litellm imported once, a helper forked per shim ------------------------------------------------


def _become_helper(fds: list[int], request: dict, selector: selectors.BaseSelector, conn: socket.socket) -> None:
    """In the forked child: the shim's descriptors as 0, 1 and 2, its environment, then the helper's main()."""
    from didactyl_tui.agent.llm import worker

    for key in list(selector.get_map().values()):  # the template's sockets and watches are not the helper's
        if isinstance(key.fileobj, socket.socket):
            key.fileobj.close()  # through the object: nothing closes that number again later
        else:
            os.close(key.fd)
    selector.close()
    conn.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        worker.main()
    finally:
        os._exit(0)


def template(folder: Path, owner: int, listen_fd: int) -> None:
    import importlib

    from didactyl_tui.agent.llm import client, tokens, worker  # noqa: F401  (worker: what each child runs)

    (folder / "template.pid").write_text(str(os.getpid()))
    listener = socket.socket(fileno=listen_fd)
    client.preload()
    tokens.count_here("warm")  # the tokenizer's files, read once
    for name in WARM_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    owner_fd = os.pidfd_open(owner)
    selector.register(owner_fd, selectors.EVENT_READ, ("owner",))
    selector.register(listener, selectors.EVENT_READ, ("accept",))
    try:
        while True:
            for key, _ in selector.select():
                what = key.data
                if what[0] == "owner":
                    return  # the pytest run is over
                if what[0] == "accept":
                    _fork_one(listener, selector)
                elif what[0] == "helper":  # a helper ended: tell its shim, which exits with its status
                    _, pid, conn = what
                    _, status = os.waitpid(pid, 0)
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    with contextlib.suppress(KeyError, OSError):
                        selector.unregister(conn)
                        conn.send(str(os.waitstatus_to_exitcode(status)).encode())
                    conn.close()
                else:  # "shim": its shim is gone (killed): so is its helper
                    _, pid = what
                    selector.unregister(key.fileobj)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
    finally:
        with contextlib.suppress(FileNotFoundError):
            (folder / "template.sock").unlink()


def _fork_one(listener: socket.socket, selector: selectors.BaseSelector) -> None:
    conn, _ = listener.accept()
    try:
        data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST_BYTES, 3)
        request = json.loads(data)
    except (OSError, ValueError):
        conn.close()
        return
    if len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_helper(fds, request, selector, conn)
    for fd in fds:
        os.close(fd)
    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, ("helper", pid, conn))
    selector.register(conn, selectors.EVENT_READ, ("shim", pid))


if __name__ == "__main__":
    mode, where, owner_pid = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    if mode == "shim":
        sys.exit(shim(where, owner_pid))
    template(where, owner_pid, int(sys.argv[4]))
