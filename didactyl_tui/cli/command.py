"""What every command shares: the exit codes, the one way to write to the terminal (cleaned), reading a text or a
file argument, the service for one command, and a session id resolved from a prefix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..config import Config
from ..terminal_text import StreamCleaner, clean, json_text, one_line
from .parser import UsageError

if TYPE_CHECKING:  # crypto, relays, SQLite: imported by the commands that start the service, when they do
    from ..service.app import AppService

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Output:
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


def read_text(value: str, stdin: TextIO) -> str:
    if value == "-":
        return stdin.read()
    return value


def read_file(path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    try:
        return Path(path).expanduser().read_text("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None


def open_service(config: Config, data: Path, env: Mapping[str, str], out: Output, *,
                 read_only: bool = False, allow_tools: Sequence[str] = (), mcp: bool = False) -> AppService:
    """The service for one command; ``read_only`` commands publish nothing of their own (the outbox's waiting
    saves are still delivered); ``allow_tools``: tools that act allowed for this command (``--allow``); ``mcp``: it
    runs turns, so the MCP servers start with it."""
    from ..service.app import AppService
    from ..service.events import ServiceWarning

    service = AppService(config, data_dir=data, env=env, read_only=read_only, allow_tools=tuple(allow_tools),
                         start_mcp=mcp)
    service.add_listener(lambda ev: out.warn(ev.message) if isinstance(ev, ServiceWarning) else None)
    return service


async def resolve_session(service: AppService, id_or_prefix: str) -> str:
    from ..errors import AgentError

    try:
        return str(await service.chat.sessions.resolve(id_or_prefix))
    except AgentError as exc:
        raise UsageError(exc.message) from None


