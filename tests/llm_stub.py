"""An OpenAI-compatible chat-completions stub server for the LLM tests (real HTTP, real litellm).

A test scripts the replies in order (one per request), points litellm at ``stub.base_url`` with the model
``openai/stub-model``, and afterwards asserts on ``stub.requests`` (the JSON bodies received)::

    async with LlmStub() as stub:
        stub.script(Reply.text("Hello there"), Reply.tool_calls(ToolCall("get_time", "{}")))

Replies: streamed or whole text (paced, if asked, at so many chunks a second), tool calls (several per round,
malformed arguments, unknown names), a final usage chunk when the request asks for it, HTTP errors (429 +
Retry-After, 500, 401, 400 context_length_exceeded) and a hang. ``GET /v1/models`` lists ``stub.models`` (None: a 404).
A request with nothing scripted gets a 500 whose message says so, unless a responder is set
(``stub.respond(fn)``): then ``fn(request)`` makes the reply, e.g. from the last user message (concurrent turns,
whose order no script can know).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_ids = itertools.count(1)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # raw JSON text, sent as-is (so a test can send malformed JSON)
    id: str = ""


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build with the class methods."""

    kind: str  # "ok" | "error" | "hang"
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    text_chunks: tuple[str, ...] | None = None  # how the text is split into stream deltas
    usage: tuple[int, int] = (11, 7)  # prompt, completion tokens reported
    status: int = 200
    error_body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    hang_s: float = 0.0
    chunk_delay_s: float = 0.0  # pause between stream chunks
    chunks_per_s: float = 0.0  # paced: chunk n leaves n / chunks_per_s after the first (0: as fast as it can)
    fail_after_chunks: int | None = None  # drop the connection after this many stream chunks
    pauses: tuple[tuple[int, float], ...] = ()  # (text piece index, seconds to pause after sending it)
    end_pause_s: float = 0.0  # pause after the finish chunk, before the usage chunk and [DONE] (a stream ending late)
    repeat: tuple[str, int] | None = None  # (piece, count): a long text stream generated as it is sent
    arg_chunk_chars: int = 7  # size of the tool-argument fragments

    @classmethod
    def text_reply(cls, text: str, *, chunks: list[str] | None = None, usage: tuple[int, int] = (11, 7),
                   chunk_delay_s: float = 0.0, fail_after_chunks: int | None = None,
                   pauses: dict[int, float] | None = None, chunks_per_s: float = 0.0,
                   end_pause_s: float = 0.0) -> Reply:
        return cls("ok", text=text, text_chunks=tuple(chunks) if chunks is not None else None, usage=usage,
                   chunk_delay_s=chunk_delay_s, fail_after_chunks=fail_after_chunks,
                   pauses=tuple(sorted((pauses or {}).items())), chunks_per_s=chunks_per_s, end_pause_s=end_pause_s)

    @classmethod
    def tools(cls, *calls: ToolCall, text: str = "", usage: tuple[int, int] = (13, 5),
              arg_chunk_chars: int = 7) -> Reply:
        return cls("ok", text=text, tool_calls=tuple(calls), usage=usage, arg_chunk_chars=arg_chunk_chars)

    @classmethod
    def endless(cls, piece: str, count: int, *, chunk_delay_s: float = 0.0) -> Reply:
        """``piece`` + its number streamed ``count`` times (never built whole): a huge reply, or a slow drip."""
        return cls("ok", repeat=(piece, count), chunk_delay_s=chunk_delay_s)

    @classmethod
    def error(cls, status: int, message: str, *, code: str | None = None, err_type: str = "invalid_request_error",
              headers: dict[str, str] | None = None) -> Reply:
        body = {"error": {"message": message, "type": err_type, "param": None, "code": code}}
        return cls("error", status=status, error_body=body, headers=dict(headers or {}))

    @classmethod
    def rate_limited(cls, retry_after: float) -> Reply:
        return cls.error(429, "Rate limit reached for requests", code="rate_limit_exceeded",
                         err_type="requests", headers={"Retry-After": f"{retry_after:g}"})

    @classmethod
    def server_error(cls) -> Reply:
        return cls.error(500, "The server had an error while processing your request.", err_type="server_error")

    @classmethod
    def unauthorized(cls, *, echo_key: bool = False) -> Reply:
        """401; with ``echo_key`` the message quotes the key the client sent, as some providers do."""
        message = "Incorrect API key provided: {key}." if echo_key else "Incorrect API key provided."
        return cls.error(401, message, code="invalid_api_key")

    @classmethod
    def context_too_long(cls) -> Reply:
        return cls.error(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens.",
            code="context_length_exceeded",
        )

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Reply:
        return cls("hang", hang_s=seconds)


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float  # time.monotonic() when it arrived

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.body.get("tools") or []]

    @property
    def last_user_text(self) -> str:
        users = [m.get("content") for m in self.messages if m.get("role") == "user"]
        return users[-1] if users and isinstance(users[-1], str) else ""


class LlmStub:
    """The stub server; bind with ``await start()`` (or ``async with``), a free port on 127.0.0.1."""

    model_id = "stub-model"

    def __init__(self) -> None:
        self.requests: list[ReceivedRequest] = []
        # What GET /v1/models lists (None: 404, as servers without a list answer); the headers of each such GET.
        self.models: list[str] | None = [self.model_id, "stub-large"]
        self.model_list_requests: list[dict[str, str]] = []
        self._script: deque[Reply] = deque()
        self._responder: Callable[[ReceivedRequest], Reply] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.open_streams = 0  # streamed replies being sent right now (a client that hung up ends its own)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        self._script.extend(replies)

    def respond(self, responder: Callable[[ReceivedRequest], Reply] | None) -> None:
        """Answer every request the script does not with ``responder(request)``."""
        self._responder = responder

    @property
    def pending(self) -> int:
        """Scripted replies not consumed yet."""
        return len(self._script)

    async def start(self) -> LlmStub:
        app = web.Application(client_max_size=64 * 1024 * 1024)  # requests carrying big tool arguments
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> LlmStub:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- the endpoints -----------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        self.model_list_requests.append(dict(request.headers))
        if self.models is None:
            return web.json_response({"error": {"message": "stub: no model list"}}, status=404)
        created = int(time.time())
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "stub"} for name in self.models]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "body is not JSON"}}, status=400)
        received = ReceivedRequest(request.path, dict(request.headers), body, time.monotonic())
        self.requests.append(received)
        if self._script:
            reply = self._script.popleft()
        elif self._responder is not None:
            reply = self._responder(received)
        else:
            return web.json_response(
                {"error": {"message": "stub: no scripted response left", "type": "server_error"}}, status=500
            )
        if reply.kind == "hang":
            await asyncio.sleep(reply.hang_s)
            return web.json_response({"error": {"message": "stub: hung"}}, status=504)
        if reply.kind == "error":
            body = reply.error_body
            if "{key}" in json.dumps(body):
                key = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                body = json.loads(json.dumps(body).replace("{key}", key))
            return web.json_response(body, status=reply.status, headers=reply.headers)
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, reply, include_usage)
        return web.json_response(self._whole(reply))

    def _base(self) -> dict[str, Any]:
        return {"id": f"chatcmpl-stub{next(_ids)}", "created": int(time.time()), "model": self.model_id}

    @staticmethod
    def _call_id(call: ToolCall, n: int) -> str:
        return call.id or f"call_stub_{n}"

    def _whole(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": self._call_id(c, n), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for n, c in enumerate(reply.tool_calls)
            ]
        prompt, completion = reply.usage
        return {
            **self._base(),
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }

    def _stream_chunks(self, reply: Reply, include_usage: bool) -> Iterator[dict[str, Any]]:
        """The chunks, generated one by one (a huge scripted reply is never held whole)."""
        base = {**self._base(), "object": "chat.completion.chunk"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        if reply.text:
            pieces = list(reply.text_chunks) if reply.text_chunks is not None else _split_words(reply.text)
            for i, piece in enumerate(pieces):
                c = chunk({"content": piece})
                pause = dict(reply.pauses).get(i)
                if pause:
                    c["_pause_after"] = pause  # stripped before sending
                yield c
        if reply.repeat is not None:
            piece, count = reply.repeat
            # Numbered: litellm stops a stream that repeats one chunk too often (a model stuck in a loop).
            for n in range(count):
                yield chunk({"content": f"{piece}{n}"})
        step = max(1, reply.arg_chunk_chars)
        for n, call in enumerate(reply.tool_calls):
            yield chunk({"tool_calls": [{
                "index": n, "id": self._call_id(call, n), "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]})
            # Arguments arrive in fragments, as real servers send them.
            for i in range(0, len(call.arguments), step):
                yield chunk({"tool_calls": [{"index": n, "function": {"arguments": call.arguments[i:i + step]}}]})
        finish = chunk({}, "tool_calls" if reply.tool_calls else "stop")
        if reply.end_pause_s:
            finish["_pause_after"] = reply.end_pause_s
        yield finish
        if include_usage:
            prompt, completion = reply.usage
            yield {**base, "choices": [], "usage": {
                "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}

    async def _stream(self, request: web.Request, reply: Reply, include_usage: bool) -> web.StreamResponse:
        self.open_streams += 1
        try:
            return await self._stream_body(request, reply, include_usage)
        finally:
            self.open_streams -= 1

    async def _stream_body(self, request: web.Request, reply: Reply, include_usage: bool) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for n, data in enumerate(self._stream_chunks(reply, include_usage)):
            if reply.chunks_per_s:  # on a fixed schedule: a late chunk does not delay the ones after it
                wait = started + n / reply.chunks_per_s - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            if reply.fail_after_chunks is not None and n >= reply.fail_after_chunks:
                # Cut the connection mid-stream (no [DONE]).
                if request.transport is not None:
                    request.transport.close()
                return resp
            pause = data.pop("_pause_after", 0.0)
            try:
                await resp.write(f"data: {json.dumps(data)}\n\n".encode())
            except (ConnectionError, RuntimeError):  # the client went away (e.g. it cut a huge reply)
                return resp
            if reply.chunk_delay_s or pause:
                await asyncio.sleep(reply.chunk_delay_s + pause)
        try:
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return resp


def _split_words(text: str) -> list[str]:
    """Split like a tokenizer would, roughly: each word with its leading space."""
    pieces: list[str] = []
    current = ""
    for ch in text:
        if ch == " " and current:
            pieces.append(current)
            current = ""
        current += ch
    if current:
        pieces.append(current)
    return pieces
