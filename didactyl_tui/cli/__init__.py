"""Headless commands: the same AppService paths as the TUI, for scripts and tests.

Exit codes: 0 done; 1 failed (no relay accepted, the model failed, unexpected error); 2 bad input
(arguments, config, key, memory content). Every error is one line on stderr, never a traceback
(``DIDACTYL_DEBUG=1`` shows it). Nothing here prints secret key material.

Kept light at import: the service (and with it the relay code) is imported only by the commands that
need it, and litellm only by ``chat`` (through the agent loop).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..config import Config
from ..config_file import data_dir, load_config
from ..errors import ConfigError, DidactylError, NostrError
from ..terminal_text import StreamCleaner, clean, json_text, one_line
from .parser import MEMORY_TYPES, CommandFailed, UsageError, _Parser, build_parser  # noqa: F401 (re-exported)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEBUG_ENV = "DIDACTYL_DEBUG"

LaunchTui = Callable[[Config, Path, Mapping[str, str], "str | None"], None]  # ..., the session to open


class _Out:
    """The one way the commands write to the terminal. Much of what they print came from outside (relay
    reasons, memory text, the model's reply, config values): every line is stripped of control characters
    and escape sequences here (``terminal_text``), so none reaches the terminal whatever the caller forgot."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self.stdout = stdout
        self.stderr = stderr

    def print(self, text: str = "", *, end: str = "\n") -> None:
        self.stdout.write(clean(text) + end)
        self.stdout.flush()

    def stream(self, cleaner: StreamCleaner, piece: str) -> None:
        """Part of a streamed text (a reply): a sequence cut between two pieces is removed whole."""
        self.stdout.write(cleaner.feed(piece))
        self.stdout.flush()

    def json(self, data: Any) -> None:
        import json  # only the --json commands need it (kept off the TUI's start)

        # json.dumps escapes C0 controls; json_text escapes DEL and C1 too (the data is unchanged).
        self.stdout.write(json_text(json.dumps(data, ensure_ascii=False, indent=2)) + "\n")
        self.stdout.flush()

    def note(self, text: str) -> None:
        """One line on stderr, as it is (after cleaning)."""
        self.stderr.write(one_line(text) + "\n")
        self.stderr.flush()

    def warn(self, text: str) -> None:
        self.note(f"warning: {text}")


def _read_text(value: str, stdin: TextIO) -> str:
    if value == "-":
        return stdin.read()
    return value


def _read_file(path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    try:
        return Path(path).expanduser().read_text("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def _service(config: Config, data: Path, env: Mapping[str, str], out: _Out, *, read_only: bool = False) -> Any:
    """The service for one command; ``read_only`` commands publish nothing of their own (the outbox's waiting
    saves are still delivered)."""
    from ..service import AppService, ServiceWarning

    service = AppService(config, data_dir=data, env=env, read_only=read_only)
    service.add_listener(lambda ev: out.warn(ev.message) if isinstance(ev, ServiceWarning) else None)
    return service


# --- commands -----------------------------------------------------------------------------------


def _document_command(args: argparse.Namespace, command: str, config: Config, data: Path, env: Mapping[str, str],
                      out: _Out, stdin: TextIO) -> int:
    """``memory --type T VERB``, ``soul VERB``, ``tasks [VERB]``: one set of verbs for every document."""
    from . import documents

    verb = args.document_command
    if command == "soul" and (verb == "publish" or (verb == "show" and not args.version)):
        from . import soul

        if verb == "publish":
            return asyncio.run(soul.publish(args, config, data, env, out, stdin))
        return asyncio.run(soul.show(args, config, data, env, out))
    if command == "tasks" and verb is None:
        from . import tasks

        return asyncio.run(tasks.show(args, config, data, env, out))
    key = args.memory_type if command == "memory" else command
    if verb == "status":
        from .parser import DOCUMENT_TYPES

        return asyncio.run(documents.status(args, config, data, env, out, [key] if key else list(DOCUMENT_TYPES)))
    if verb == "save":
        content = args.content if args.content is not None else _read_file(args.file, stdin)
        return asyncio.run(documents.save(args, config, data, env, out, key, content))
    run = {"show": documents.show, "edit": documents.edit, "history": documents.history, "diff": documents.diff,
           "rollback": documents.rollback}[verb]
    return asyncio.run(run(args, config, data, env, out, key))


def cmd_keygen(args: argparse.Namespace, env: Mapping[str, str], out: _Out) -> int:
    from ..service import ENV_NSEC, SecretKey, ensure_data_dir, key_file_path, write_key_file

    data = ensure_data_dir(data_dir(dict(env)))
    key = SecretKey.generate()
    path = write_key_file(key_file_path(data), key, force=args.force)
    out.print(key.npub)
    out.print(key.public_key_hex)
    out.note(f"wrote {path} (mode 0600)")
    if env.get(ENV_NSEC, "").strip():
        out.warn(f"${ENV_NSEC} is set and wins over the key file")
    return EXIT_OK


def cmd_whoami(args: argparse.Namespace, env: Mapping[str, str], out: _Out) -> int:
    from ..service import ENV_NSEC, key_file_path, load_agent_key

    data = data_dir(dict(env))
    if not env.get(ENV_NSEC, "").strip() and not key_file_path(data).exists():
        raise CommandFailed(f"no agent key yet ({key_file_path(data)} does not exist); run `didactyl keygen` "
                            "or start didactyl once", "No key")
    loaded = load_agent_key(data, env, create=False)
    if args.json:
        out.json({"npub": loaded.key.npub, "pubkey": loaded.key.public_key_hex, "source": loaded.source,
                  "key_file": str(loaded.path) if loaded.path else None})
    else:
        out.print(loaded.key.npub)
        out.print(loaded.key.public_key_hex)
    return EXIT_OK


def cmd_relay(args: argparse.Namespace, env: Mapping[str, str], out: _Out) -> int:
    """This data dir's shared relay in the foreground (every didactyl on the data dir finds and uses it);
    exit 3 when one already serves it. Its limits and allow-list come from ``[relays.embedded]``.
    ``relay status``: what the running one enforces."""
    from ..service import embedded_relay_options, key_file_path, run_relay_process

    config = load_config(args.config, dict(env))
    data = data_dir(dict(env))
    if getattr(args, "relay_command", None) == "status":
        return asyncio.run(_relay_status(args, config, data, env, out))
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, not {args.port}")
    options = embedded_relay_options(config, data, env)
    if options is None:
        raise CommandFailed(f"no agent key yet ({key_file_path(data)} does not exist): the relay's allow-list "
                            "needs it; run `didactyl keygen` (or set [relays.embedded] allow_list = false)", "No key")
    db = Path(args.db).expanduser() if args.db else None
    try:
        return asyncio.run(run_relay_process(data, db_path=db, host=args.host, port=args.port, idle_exit_s=0,
                                             relay_options=options, announce=True))
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return EXIT_OK


async def _relay_status(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str],
                        out: _Out) -> int:
    from ..service import embedded_relay_status

    status = await embedded_relay_status(config, data, env)
    if args.json:
        out.json(status.to_json())
    else:
        for line in status.lines():
            out.print(line)
    return EXIT_OK if status.running else EXIT_FAILED


async def _chat(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: _Out,
                message: str) -> int:
    from ..service import SessionKind, TextDelta, TurnFailed, TurnFinished, TurnStarted

    kind = SessionKind.EPHEMERAL_CHAT if args.ephemeral else SessionKind.HEADLESS_CHAT
    async with _service(config, data, env, out) as service:
        if args.session:
            session = await _resolve_session(service, args.session)
        else:  # an ephemeral turn's session is never stored: a fresh id nobody can continue
            session = uuid.uuid4().hex if args.ephemeral else await service.new_session()
        assembly = None
        finished: TurnFinished | None = None
        streamed = False
        cleaner = StreamCleaner()
        async for event in service.run_turn(session, message, kind):
            if isinstance(event, TurnStarted):
                assembly = event.assembly
            elif isinstance(event, TextDelta) and not args.json:
                out.stream(cleaner, event.text)
                streamed = True
            elif isinstance(event, TurnFailed):
                raise CommandFailed(event.message, event.title)
            elif isinstance(event, TurnFinished):
                finished = event
        if finished is None:
            raise CommandFailed("the turn ended without a reply")
        if args.json:
            out.json({
                "session_id": None if args.ephemeral and not args.session else session,
                "ephemeral": bool(args.ephemeral),
                "reply": finished.reply,
                "tool_calls": [{"name": c.name, "arguments": c.arguments, "result": c.result}
                               for c in finished.tool_calls],
                "prompt": assembly.to_json_dict() if assembly is not None else None,
                "cut": finished.cut,
            })
        elif streamed:
            out.print(cleaner.flush())
        else:
            out.print(finished.reply)
        if finished.cut:  # a bound ended the turn early: the reply is partial (and marked so)
            out.warn(f"reply cut short: {finished.cut}")
    return EXIT_OK


async def _resolve_session(service: Any, id_or_prefix: str) -> str:
    from ..errors import AgentError

    try:
        return str(await service.sessions.resolve(id_or_prefix))
    except AgentError as exc:
        raise UsageError(exc.message) from None


# --- entry --------------------------------------------------------------------------------------


class _CleanFormatter(logging.Formatter):
    """Debug logs quote relays and the model: no escape sequence reaches the terminal through them."""

    def format(self, record: logging.LogRecord) -> str:
        return clean(super().format(record))


def _configure_logging(env: Mapping[str, str]) -> None:
    root = logging.getLogger()
    if env.get(DEBUG_ENV):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_CleanFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.basicConfig(level=logging.DEBUG, handlers=[handler])
    elif not root.handlers:
        # Warnings reach the user as ServiceWarning lines; keep Python's last-resort handler quiet.
        root.addHandler(logging.NullHandler())


def _exit_code(exc: DidactylError) -> int:
    if isinstance(exc, UsageError | ConfigError | NostrError):
        return EXIT_USAGE
    return EXIT_FAILED


def run(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    launch_tui: LaunchTui | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Parse ``argv`` and run the command (the TUI when there is none). Returns the exit code."""
    env = dict(os.environ if env is None else env)
    stdin = stdin or sys.stdin
    out = _Out(stdout or sys.stdout, stderr or sys.stderr)
    _configure_logging(env)
    try:
        args = build_parser().parse_args(argv)
        return _dispatch(args, env, out, stdin, launch_tui)
    except DidactylError as exc:
        out.note(f"didactyl: {exc.one_line()}")
        return _exit_code(exc)
    except KeyboardInterrupt:
        out.note("didactyl: interrupted")
        return 130
    except Exception as exc:
        if env.get(DEBUG_ENV):
            out.stderr.write(clean(traceback.format_exc()))
        out.note(f"didactyl: unexpected error: {type(exc).__name__}: {exc} (rerun with {DEBUG_ENV}=1 for details)")
        return EXIT_FAILED


def _dispatch(args: argparse.Namespace, env: dict[str, str], out: _Out, stdin: TextIO,
              launch_tui: LaunchTui | None) -> int:
    command = args.command
    if args.print_version:
        from .. import package_version

        out.print(f"didactyl {package_version()}")
        return 0
    if command is not None and (args.open_last or args.open_session is not None):
        raise UsageError(f"--continue and --session open the app: give them without a command (not {command!r})")
    if command == "keygen":
        return cmd_keygen(args, env, out)
    if command == "whoami":
        return cmd_whoami(args, env, out)
    if command == "relay":
        return cmd_relay(args, env, out)
    config = load_config(args.config, env)
    data = data_dir(env)
    if command is None:
        if launch_tui is None:
            raise UsageError("no command given (see: didactyl --help)")
        session = None
        if args.open_last or args.open_session is not None:  # the first frame imports no session code otherwise
            from .open_session import session_to_open

            session = session_to_open(data, last=args.open_last, session_id=args.open_session)
        launch_tui(config, data, env, session)
        return EXIT_OK
    if command == "chat":
        message = _read_text(args.message, stdin)
        if not message.strip():
            raise UsageError("--message is empty")
        return asyncio.run(_chat(args, config, data, env, out, message))
    if command == "prompt":
        message = _read_text(args.message, stdin) if args.message is not None else None
        from .prompt import prompt

        return asyncio.run(prompt(args, config, data, env, out, message))
    if command == "sessions":
        from . import sessions

        return asyncio.run(sessions.run(args, data, out))
    if command == "serve":
        from .serve import serve

        return asyncio.run(serve(config, data, env, debug=bool(env.get(DEBUG_ENV))))
    if command in ("soul", "tasks", "memory"):
        return _document_command(args, command, config, data, env, out, stdin)
    if command == "bundle":
        from . import bundle

        run_bundle = bundle.export if args.bundle_command == "export" else bundle.import_
        return asyncio.run(run_bundle(args, config, data, env, out))
    if command == "identity":
        from . import identity

        return asyncio.run(identity.run(args, config, data, env, out))
    raise UsageError(f"unknown command {command!r}")
