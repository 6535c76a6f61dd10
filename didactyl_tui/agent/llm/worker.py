"""The model client's own process: ``python -m didactyl_tui.agent.llm.worker``.

litellm spends ~0.3 ms of CPU on every streamed chunk (bench/stream_bench.py: 3.4 s for a 10,000-chunk reply
consumed raw). In the app's process that time is taken from the one thread that also paints the reply and
echoes keys; a thread does not help (the GIL: measured worse). Here it runs on the other core, and the app
receives plain chunks over a pipe (``llm.worker_client``).

Protocol: one JSON object per line. In (stdin): ``{"op": "stream", "id", "settings", "messages", "tools",
"env"}`` and ``{"op": "cancel", "id"}``; ``{"op": "count", "id", "texts"}`` (token counts, ``llm.tokens``: the
app loads no tokenizer of its own) and ``{"op": "info", "id", "model"}`` (litellm's model table).
Out (the original stdout; fd 1 is pointed at stderr so a stray print from litellm cannot corrupt the channel):
``{"id", "c": [text, tool_calls, finish, usage]}`` per chunk, then ``{"id", "end": true}`` or
``{"id", "error": {...}}``; ``{"id", "counts": [...]}``; ``{"id", "info": {"context_window": n}}``;
``{"id": 0, "ready": true}`` once litellm is imported (which starts at once; false if that failed). The retry
policy and every timeout are ``llm.stream_in_process``'s, unchanged. The process ends when its stdin closes (the
app stopped or died).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any


async def _serve(out: Any) -> None:
    from . import client as llm
    from . import tokens
    from .errors import LlmError
    from .worker_wire import chunk_row, settings_from_data

    loop = asyncio.get_running_loop()

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        out.flush()

    # litellm's import (~8 s) starts now, beside the app's first frames, not at the first turn; a call that
    # comes meanwhile waits for it (the import lock).
    preloading = loop.run_in_executor(None, llm.preload)
    # Ready (true) or not (the import failed: each call will say why): either way, nobody waits for it any more.
    preloading.add_done_callback(lambda f: send({"id": 0, "ready": not (f.cancelled() or f.exception())}))
    reader = asyncio.StreamReader(limit=256 * 1024 * 1024)  # a request carries the whole prompt
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: dict[int, asyncio.Task[None]] = {}

    async def run(request_id: int, request: dict[str, Any]) -> None:
        env = request.get("env")
        if isinstance(env, dict) and env != dict(os.environ):
            os.environ.clear()  # the app's environment as it is now (a key set or removed since we started)
            os.environ.update(env)
        try:
            async for chunk in llm.stream_in_process(settings_from_data(request["settings"]), request["messages"],
                                                     request.get("tools")):
                send({"id": request_id, "c": chunk_row(chunk)})
            send({"id": request_id, "end": True})
        except LlmError as err:
            send({"id": request_id, "error": {"message": err.message, "kind": err.kind,
                                              "retry_after": err.retry_after, "status": err.status}})
        except asyncio.CancelledError:
            send({"id": request_id, "end": True})
        except Exception as exc:  # never a traceback: the app shows one line
            send({"id": request_id, "error": {"message": f"The model call failed: {type(exc).__name__}",
                                              "kind": "server", "retry_after": None, "status": None}})
        finally:
            tasks.pop(request_id, None)

    async def answer(request_id: int, request: dict[str, Any]) -> None:
        """Token counts (at once: they need tiktoken, not litellm), or the model table's facts (once litellm is
        imported)."""
        try:
            if request.get("op") == "count":
                texts = [str(t) for t in request.get("texts") or ()]
                counts = await loop.run_in_executor(None, lambda: [tokens.count_tokens("", t) for t in texts])
                send({"id": request_id, "counts": counts})
            else:
                await asyncio.shield(preloading)  # one import for every waiting request
                model = str(request.get("model") or "")
                send({"id": request_id, "info": {"context_window": llm.context_window(model)}})
        except Exception as exc:  # never a traceback: the app falls back to its own count
            send({"id": request_id, "error": {"message": type(exc).__name__, "kind": "server",
                                              "retry_after": None, "status": None}})
        finally:
            tasks.pop(request_id, None)

    while True:
        line = await reader.readline()
        if not line:
            break
        try:
            request = json.loads(line)
            request_id = int(request["id"])
        except (ValueError, KeyError, TypeError):
            continue
        if request.get("op") == "stream":
            tasks[request_id] = asyncio.create_task(run(request_id, request))
        elif request.get("op") in ("count", "info"):
            tasks[request_id] = asyncio.create_task(answer(request_id, request))
        elif request.get("op") == "cancel" and request_id in tasks:
            tasks[request_id].cancel()
    # The app is gone: no goodbyes (a litellm import still under way would hold a normal exit for seconds).
    out.flush()
    os._exit(0)


def main() -> None:
    channel = os.dup(1)
    os.dup2(2, 1)  # litellm's banners, if any, go where the app does not read
    # Whole lines, one write each (blocking: when the app reads slowly the pipe fills and the stream waits).
    out = os.fdopen(channel, "wb", buffering=1 << 16)
    try:
        asyncio.run(_serve(out))
    except KeyboardInterrupt:
        pass
    finally:
        try:
            out.flush()
        except OSError:
            pass


if __name__ == "__main__":
    main()
