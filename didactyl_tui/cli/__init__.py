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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..config import Config
from ..config_file import data_dir, load_config
from ..errors import ConfigError, DidactylError, NostrError
from ..terminal_text import clean
from .command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Output, read_file, read_text
from .parser import UsageError, build_parser

if TYPE_CHECKING:
    from ..service.sessions import StoredTail

DEBUG_ENV = "DIDACTYL_DEBUG"

LaunchTui = Callable[[Config, Path, Mapping[str, str], "StoredTail | None"], None]  # ..., the chat to open


# --- commands -----------------------------------------------------------------------------------


def _document_command(args: argparse.Namespace, command: str, config: Config, data: Path, env: Mapping[str, str],
                      out: Output, stdin: TextIO) -> int:
    """``memory --type T VERB``, ``soul VERB``, ``tasks [VERB]``, ``profile|contacts|relays VERB``: one set of verbs
    for every document."""
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
    from ..service.types import DocumentKey

    # The edge: the document's name on the command line becomes its key here, once.
    name = args.memory_type if command == "memory" else command
    if verb == "status":
        keys = [DocumentKey.parse(name)] if name else [k for k in DocumentKey if k.is_memory]
        return asyncio.run(documents.status(args, config, data, env, out, keys))
    key = DocumentKey.parse(name)
    if verb == "save":
        content = args.content if args.content is not None else read_file(args.file, stdin)
        return asyncio.run(documents.save(args, config, data, env, out, key, content))
    run = {"show": documents.show, "edit": documents.edit, "history": documents.history, "diff": documents.diff,
           "rollback": documents.rollback}[verb]
    return asyncio.run(run(args, config, data, env, out, key))



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
    out = Output(stdout or sys.stdout, stderr or sys.stderr)
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
    except BrokenPipeError:  # the reader closed our output (`| head`): it has what it wanted; end quietly
        _closed(out.stdout)
        return EXIT_OK
    except Exception as exc:
        if env.get(DEBUG_ENV):
            out.stderr.write(clean(traceback.format_exc()))
        out.note(f"didactyl: unexpected error: {type(exc).__name__}: {exc} (rerun with {DEBUG_ENV}=1 for details)")
        return EXIT_FAILED


def _closed(stream: TextIO) -> None:
    """Point an output the reader closed at /dev/null, so the interpreter's last flush of what is still buffered
    does not fail (and print) once more on the way out."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _attached_to(config: Config) -> str | None:
    """``[attach] agent``'s key as hex, or None. The attach module (relay pool, NIP-46, websockets: ~0.1 s to
    import) only when one is set: ``--continue`` reads the chat before the app's first frame (#34)."""
    if not config.attach.agent.strip():
        return None
    from ..service.attach import attach_agent_of

    return attach_agent_of(config)


def _dispatch(args: argparse.Namespace, env: dict[str, str], out: Output, stdin: TextIO,
              launch_tui: LaunchTui | None) -> int:
    command = args.command
    if args.bunker:  # the flag wins over the variable, which wins over the file (config_file.apply_env)
        env = {**env, "DIDACTYL_BUNKER": args.bunker}
    if args.print_version:
        from .. import package_version

        out.print(f"didactyl {package_version()}")
        return 0
    if command is not None and (args.open_last or args.open_session is not None):
        raise UsageError(f"--continue and --session open the app: give them without a command (not {command!r})")
    if command in ("keygen", "whoami"):
        from . import keys

        return (keys.cmd_keygen if command == "keygen" else keys.cmd_whoami)(args, env, out)
    if command == "relay":
        from .relay import cmd_relay

        return cmd_relay(args, env, out)
    config = load_config(args.config, env)
    data = data_dir(env)
    if command is None:
        if launch_tui is None:
            raise UsageError("no command given (see: didactyl --help)")
        session = None
        if args.open_last or args.open_session is not None:  # the first frame imports no session code otherwise
            from ..service.sessions import agent_npub
            from .open_session import session_to_open

            chosen = session_to_open(data, last=args.open_last, session_id=args.open_session,
                                     attached_to=_attached_to(config))
            session, agent = chosen if chosen is not None else (None, None)
            if agent is not None:  # a conversation with an agent elsewhere opens attached to it, never answered here
                config.attach.agent = agent_npub(agent) or ""
        launch_tui(config, data, env, session)
        return EXIT_OK
    if command == "attach":
        if args.agent:
            from ..service.agent_address import parse_agent

            try:
                parse_agent(args.agent)
            except ValueError as exc:
                raise UsageError(f"attach: {exc}") from None
            config.attach.agent = args.agent
        if not config.attach.agent.strip():
            raise UsageError("attach needs the agent's address: didactyl attach NPROFILE (as `didactyl serve` prints "
                             "it), or NPUB --relay URL (or [attach] agent)")
        from ..config_file import relay_url_problem
        from ..service.attach import attach_agent_of

        for url in args.relay:
            if relay_url_problem(url) is not None:
                raise UsageError(f"--relay {url[:100]!r} {relay_url_problem(url)}")
        config.attach.relays = [*config.attach.relays, *args.relay]
        config.invitation = (args.invite or "").strip()
        attach_agent_of(config)  # a bad address is one line here, before the app opens
        if launch_tui is None:
            raise UsageError("attach opens the app, which is not available here")
        launch_tui(config, data, env, None)
        return EXIT_OK
    if command == "invite":
        from .invite import invite

        return asyncio.run(invite(args, config, data, env, out))
    if command == "chat":
        message = read_text(args.message, stdin)
        if not message.strip():
            raise UsageError("--message is empty")
        from .chat import chat

        return asyncio.run(chat(args, config, data, env, out, message))
    if command == "acp":
        if config.attach.agent.strip():
            raise UsageError("acp runs the agent here; [attach] agent makes this app a window onto one that runs "
                             "elsewhere: unset it")
        from .acp import serve_acp

        return asyncio.run(serve_acp(config, data, env, out))
    if command == "mcp":
        from . import mcp

        return asyncio.run(mcp.run(args, config, env, out))
    if command == "prompt":
        typed = read_text(args.message, stdin) if args.message is not None else None
        from .prompt import prompt

        return asyncio.run(prompt(args, config, data, env, out, typed))
    if command == "sessions":
        from . import sessions

        return asyncio.run(sessions.run(args, data, out))
    if command == "serve":
        if config.attach.agent.strip():
            raise UsageError("serve runs the agent here; [attach] agent makes this app a window onto one that runs "
                             "elsewhere: unset it to serve")
        from .serve import serve

        return asyncio.run(serve(config, data, env, debug=bool(env.get(DEBUG_ENV))))
    if command == "signer":
        from .signer import connect

        return asyncio.run(connect(args, config, data, env, out, stdin))
    if command in ("memory", "soul", "tasks", "profile", "contacts", "relays"):
        return _document_command(args, command, config, data, env, out, stdin)
    if command == "bundle":
        from . import bundle

        run_bundle = bundle.export if args.bundle_command == "export" else bundle.import_
        return asyncio.run(run_bundle(args, config, data, env, out))
    if command == "identity":
        from . import identity

        return asyncio.run(identity.run(args, config, data, env, out))
    raise UsageError(f"unknown command {command!r}")
