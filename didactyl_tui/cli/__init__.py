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
import dataclasses
import logging
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from ..config import Config, data_dir, load_config
from ..errors import ConfigError, DidactylError, NostrError
from ..terminal_text import StreamCleaner, clean, json_text, one_line

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEBUG_ENV = "DIDACTYL_DEBUG"
MEMORY_TYPES = ("short_term", "long_term")

LaunchTui = Callable[[Config, Path, Mapping[str, str], "str | None"], None]  # ..., the session to open


class UsageError(DidactylError):
    """Bad command-line input (exit 2)."""

    title = "Usage"


class CommandFailed(DidactylError):
    """The command ran but did not succeed (exit 1)."""

    title = "Failed"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), not the usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see: {self.prog} --help)", "Usage")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="didactyl", description="A terminal chat client with an AI agent whose memory lives on "
                     "Nostr. With no command, opens the terminal app.")
    parser.add_argument("--config", metavar="PATH", help="config file (default: $DIDACTYL_CONFIG, then "
                        "$XDG_CONFIG_HOME/didactyl/config.toml)")
    opening = parser.add_mutually_exclusive_group()
    opening.add_argument("--continue", action="store_true", dest="open_last",
                         help="open the app on the most recent conversation")
    opening.add_argument("--session", metavar="ID", dest="open_session",
                         help="open the app on this conversation (an ID or a unique prefix: didactyl sessions list)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("keygen", help="create the agent's key file (<data dir>/agent.key, mode 0600)")
    p.add_argument("--force", action="store_true", help="replace an existing key (the old identity is lost)")

    p = sub.add_parser("whoami", help="print the agent's npub and hex public key (never the secret)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("relay", help="serve this data dir's shared embedded relay in the foreground (exit 3 if one "
                       "already serves it)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=7447, help="port (default 7447; 0 picks a free one)")
    p.add_argument("--db", metavar="PATH", help="SQLite file (default <data dir>/relay.sqlite3)")

    p = sub.add_parser("chat", help="one turn with the agent; prints the reply")
    p.add_argument("--message", "-m", required=True, metavar="TEXT", help="the message ('-' reads stdin)")
    p.add_argument("--session", metavar="ID", help="continue this conversation (default: a new one)")
    p.add_argument("--json", action="store_true",
                   help='print {"session_id", "reply", "tool_calls", "prompt", "cut"}')

    p = sub.add_parser("prompt", help="assemble the next prompt without calling the model (a dry run)")
    p.add_argument("--message", "-m", metavar="TEXT", help="the user's message to include ('-' reads stdin)")
    p.add_argument("--session", metavar="ID", help="include this conversation's history")
    p.add_argument("--json", action="store_true", help="print the prompt record as JSON")

    sub.add_parser("serve", help="run the agent headless: answer NIP-17 direct messages from the admin and "
                   "[dm] allow; logs to stderr; SIGTERM stops it after the current turn")

    soul = sub.add_parser("soul", help="show, publish, edit or list the versions of the agent's soul (kind 31120)")
    ssub = soul.add_subparsers(dest="soul_command", metavar="ACTION", parser_class=_Parser, required=True)
    p = ssub.add_parser("show", help="the soul in use (read from the relays at start) and its event")
    p.add_argument("--json", action="store_true", help="print JSON (the event id and the soul document)")
    p = ssub.add_parser("publish", help="check the soul, then publish it as a new version (default: the soul "
                        "in the config or soul file)")
    p.add_argument("--file", metavar="PATH", help="a soul document (didactyl-soul/1 JSON) or a soul file in the "
                   "list format ('-' reads stdin)")
    p.add_argument("--plain", action="store_true", help="publish it unencrypted (default: NIP-44 to the agent)")
    p.add_argument("--json", action="store_true", help="print the event id and each relay's verdict as JSON")
    p = ssub.add_parser("edit", help="edit the soul's JSON document in $VISUAL/$EDITOR; checked and published "
                        "when it changed")
    p.add_argument("--plain", action="store_true", help="publish it unencrypted (default: NIP-44 to the agent)")
    p = ssub.add_parser("history", help="every version of the soul seen here, newest first")
    p.add_argument("--json", action="store_true", help="print JSON")

    bundle = sub.add_parser("bundle", help="back up or restore the agent (signed events and conversations)")
    bsub = bundle.add_subparsers(dest="bundle_command", metavar="ACTION", parser_class=_Parser, required=True)
    p = bsub.add_parser("export", help="write memory, soul, tasks, identity and conversations to FILE (0600)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = bsub.add_parser("import", help="verify every signature in FILE, then republish its events through the "
                        "outbox and restore its conversations")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("tasks", help="list the agent's tasks (open, in progress, done, cancelled)")
    p.add_argument("--json", action="store_true", help="print JSON")

    mem = sub.add_parser("memory", help="show or save the agent's memory")
    msub = mem.add_subparsers(dest="memory_command", metavar="ACTION", parser_class=_Parser, required=True)
    p = msub.add_parser("show", help="print a memory (decrypted)")
    p.add_argument("--type", required=True, choices=MEMORY_TYPES, dest="memory_type")
    p.add_argument("--version", metavar="EVENT_ID", help="print a past version from the history instead (an id "
                   "or a prefix of at least 4 characters; e.g. your text that lost to a concurrent edit)")
    p.add_argument("--json", action="store_true",
                   help="print JSON with the event id, the relays and what is still pending in the outbox")
    p = msub.add_parser("save", help="replace a memory (encrypt, sign, publish to every relay)")
    p.add_argument("--type", required=True, choices=MEMORY_TYPES, dest="memory_type")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--content", metavar="TEXT", help="the new text")
    src.add_argument("--file", metavar="PATH", help="read the new text from a file ('-' for stdin)")
    p.add_argument("--json", action="store_true", help="print the event id and each relay's verdict as JSON")
    p = msub.add_parser("status", help="which version of the memory each relay holds (read back by id); "
                        "--fix sends the newest to lagging relays")
    p.add_argument("--type", choices=MEMORY_TYPES, dest="memory_type", help="one memory (default: both)")
    p.add_argument("--fix", action="store_true", help="send the newest version to relays that lag")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = msub.add_parser("history", help="list every version of a memory seen here (own saves and other devices')")
    p.add_argument("--type", required=True, choices=MEMORY_TYPES, dest="memory_type")
    p.add_argument("--json", action="store_true", help="print JSON (ids, times, origins, sizes, notes; no text)")
    ident = sub.add_parser("identity", help="show, publish or adopt the agent's public profile, contacts and relays")
    isub = ident.add_subparsers(dest="identity_command", metavar="ACTION", parser_class=_Parser, required=True)
    p = isub.add_parser("show", help="what the relays hold, and any drift from config.toml (publishes nothing)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = isub.add_parser("publish", help="publish config.toml's fields merged into the relays' versions "
                        "(fields it does not set are kept)")
    p.add_argument("--json", action="store_true", help="print each kind's event id and relay verdicts as JSON")
    p = isub.add_parser("adopt", help="take the relays' versions as ours: drift is no longer reported")
    p.add_argument("--json", action="store_true", help="print JSON")
    _add_sessions_parser(sub)
    return parser


def _add_sessions_parser(sub: Any) -> None:
    """``sessions list|show|export|rename|delete`` (run by cli/sessions.py; defined here: the parser is built
    before the TUI's first frame, which must not import the command modules)."""
    ses = sub.add_parser("sessions", help="list, show, export, rename or delete saved chats")
    ssub = ses.add_subparsers(dest="sessions_command", metavar="ACTION", parser_class=_Parser, required=True)
    p = ssub.add_parser("list", help="the saved chats, newest first (id, time, messages, title)")
    p.add_argument("--all", action="store_true", help="include chats with no message")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = ssub.add_parser("show", help="print a chat's messages")
    p.add_argument("session", metavar="ID", help="the session id (or a unique prefix)")
    p.add_argument("--json", action="store_true", help="print JSON: the session and its messages (OpenAI format)")
    p = ssub.add_parser("export", help="print a chat as markdown (or JSON)")
    p.add_argument("session", metavar="ID", help="the session id (or a unique prefix)")
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    p.add_argument("--output", "-o", metavar="PATH", help="write to this file (mode 0600) instead of stdout")
    p = ssub.add_parser("rename", help="give a chat a new title")
    p.add_argument("session", metavar="ID", help="the session id (or a unique prefix)")
    p.add_argument("title", help="the new title")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = ssub.add_parser("delete", help="delete a chat with its messages (cannot be undone)")
    p.add_argument("session", metavar="ID", help="the session id (or a unique prefix)")
    p.add_argument("--json", action="store_true", help="print JSON")


# --- helpers ------------------------------------------------------------------------------------


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
    exit 3 when one already serves it. Its limits and allow-list come from ``[relays.embedded]``."""
    from ..service import ENV_NSEC, admin_pubkey_of, dm_peers, key_file_path, load_agent_key, run_relay_process

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0..65535, not {args.port}")
    config = load_config(args.config, dict(env))
    data = data_dir(dict(env))
    embedded = config.relays.embedded
    if env.get(ENV_NSEC, "").strip() or key_file_path(data).exists():
        agent = load_agent_key(data, env, create=False).key.public_key_hex
        options = embedded.relay_options(agent, admin_pubkey_of(config), dm_peers(config))
    elif embedded.allow_list:
        raise CommandFailed(f"no agent key yet ({key_file_path(data)} does not exist): the relay's allow-list "
                            "needs it; run `didactyl keygen` (or set [relays.embedded] allow_list = false)", "No key")
    else:
        options = {"limits": dataclasses.asdict(embedded.relay_limits())}
    db = Path(args.db).expanduser() if args.db else None
    try:
        return asyncio.run(run_relay_process(data, db_path=db, host=args.host, port=args.port, idle_exit_s=0,
                                             relay_options=options, announce=True))
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return EXIT_OK


async def _chat(args: argparse.Namespace, config: Config, data: Path, env: Mapping[str, str], out: _Out,
                message: str) -> int:
    from ..service import SessionKind, TextDelta, TurnFailed, TurnFinished, TurnStarted

    async with _service(config, data, env, out) as service:
        session = await _resolve_session(service, args.session) if args.session else await service.new_session()
        assembly = None
        finished: TurnFinished | None = None
        streamed = False
        cleaner = StreamCleaner()
        async for event in service.run_turn(session, message, SessionKind.HEADLESS_CHAT):
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
                "session_id": session,
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
        from .open_session import session_to_open

        launch_tui(config, data, env, session_to_open(data, last=args.open_last, session_id=args.open_session))
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
    if command == "soul":
        from . import soul

        if args.soul_command == "publish":
            return asyncio.run(soul.publish(args, config, data, env, out, stdin))
        command_of = {"show": soul.show, "edit": soul.edit, "history": soul.history}
        return asyncio.run(command_of[args.soul_command](args, config, data, env, out))
    if command == "bundle":
        from . import bundle

        run_bundle = bundle.export if args.bundle_command == "export" else bundle.import_
        return asyncio.run(run_bundle(args, config, data, env, out))
    if command == "tasks":
        from . import tasks

        return asyncio.run(tasks.show(args, config, data, env, out))
    if command == "memory":
        from . import memory

        if args.memory_command == "show":
            return asyncio.run(memory.show(args, config, data, env, out))
        if args.memory_command == "status":
            return asyncio.run(memory.status(args, config, data, env, out))
        if args.memory_command == "history":
            return asyncio.run(memory.history(args, config, data, env, out))
        content = args.content if args.content is not None else _read_file(args.file, stdin)
        return asyncio.run(memory.save(args, config, data, env, out, content))
    if command == "identity":
        from . import identity

        return asyncio.run(identity.run(args, config, data, env, out))
    raise UsageError(f"unknown command {command!r}")
