"""The stdio transport to an MCP server, bounded: the SDK's own reads a line of any length into memory (a server that
never ends a line would exhaust ours), so the program is started here and spoken to in the SDK's terms (streams of
``SessionMessage``) with each message at most ``max_line_bytes``. The program runs in its own process group with
exactly the environment given (nothing inherited), its stderr where the caller says; stopping it closes its stdin,
then ends its whole group (SIGTERM, then SIGKILL), each step bounded."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import IO, Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

STOP_GRACE_S = 2.0  # after stdin is closed, before SIGTERM; and after SIGTERM, before SIGKILL
_GONE = (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)


class Transport:
    """What went wrong with the pipe itself (``problem``: a message over the bound), for the server's reason."""

    def __init__(self) -> None:
        self.problem: str | None = None


@contextlib.asynccontextmanager
async def stdio_transport(command: str, args: Sequence[str], env: Mapping[str, str], stderr: IO[str],
                          max_line_bytes: int, transport: Transport) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``command args`` and yield (read stream, write stream) for the SDK's ``ClientSession``."""
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    process = await anyio.open_process([command, *args], env=dict(env), stderr=stderr, start_new_session=True)
    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    write_send, write_recv = anyio.create_memory_object_stream[Any](0)

    async def reader() -> None:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        async with read_send:
            while True:
                try:
                    line = await lines.receive_until(b"\n", max_line_bytes)
                except anyio.DelimiterNotFound:
                    transport.problem = f"sent a message over {max_line_bytes:,} bytes ([mcp] max_message_bytes)"
                    _signal(process, signal.SIGKILL)
                    return
                except _GONE:
                    return
                if not line.strip():
                    continue
                try:
                    item: Any = SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
                except ValueError as exc:  # the session hands it to its message handler; the call waits its bound
                    item = exc
                try:
                    await read_send.send(item)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def writer() -> None:
        assert process.stdin is not None
        with contextlib.suppress(*_GONE):
            async with write_recv:
                async for message in write_recv:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode("utf-8"))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        try:
            yield read_recv, write_send
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
            tasks.cancel_scope.cancel()


def _signal(process: Any, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)  # its own group: what it started goes too


async def _exited(process: Any, within_s: float) -> bool:
    with anyio.move_on_after(within_s):
        await process.wait()
        return True
    return process.returncode is not None


async def _stop(process: Any) -> None:
    with contextlib.suppress(*_GONE):
        await process.stdin.aclose()
    if not await _exited(process, STOP_GRACE_S):
        _signal(process, signal.SIGTERM)
        if not await _exited(process, STOP_GRACE_S):
            _signal(process, signal.SIGKILL)
            await _exited(process, STOP_GRACE_S)
    with contextlib.suppress(*_GONE), anyio.move_on_after(STOP_GRACE_S):
        await process.aclose()
