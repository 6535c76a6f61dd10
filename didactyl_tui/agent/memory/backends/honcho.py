"""The ``honcho`` memory backend, on the ``honcho-ai`` SDK (hosted or self-hosted Honcho servers).

Unconfigured (no ``[honcho] base_url``) or unreachable, it is unavailable and silently skipped: the probe is
short and its answer cached, so ``is_available()`` never waits on the network. When up, each turn gets
Honcho's session context (summary, what it has concluded about the user), interactive turns are added to
the Honcho session, and the model may ask Honcho a question about the user (``honcho_ask``).

The SDK is imported lazily (it costs ~0.5 s), only when the backend is configured.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...tools.registry import Tool, build_tool

log = logging.getLogger("didactyl.memory")

HEADING = "## Honcho context"
_ID_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def _safe_id(value: str) -> str:
    return _ID_SAFE.sub("-", value)[:100] or "default"


class HonchoBackend:
    id = "honcho"

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        workspace: str = "didactyl",
        user_peer: str = "admin",
        agent_peer: str = "agent",
        probe_timeout_s: float = 2.0,
        request_timeout_s: float = 8.0,
        recheck_s: float = 60.0,
        context_tokens: int = 800,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.strip().rstrip("/")
        self._api_key = api_key or None
        self.workspace = _safe_id(workspace)
        self.user_peer_id = _safe_id(user_peer)
        self.agent_peer_id = _safe_id(agent_peer)
        self.probe_timeout_s = probe_timeout_s
        self.request_timeout_s = request_timeout_s
        self.recheck_s = recheck_s
        self.context_tokens = context_tokens
        self._clock = clock
        self._available = False
        self._probed_at: float | None = None
        self._probe_lock = asyncio.Lock()
        self._client: Any = None
        self._sessions: dict[str, Any] = {}
        self._peers: dict[str, Any] = {}
        self.last_error: str | None = None

    def __repr__(self) -> str:  # never the key
        return f"HonchoBackend(base_url={self.base_url!r}, workspace={self.workspace!r})"

    @classmethod
    def from_config(cls, honcho_cfg: Any, env: Mapping[str, str] | None = None, **kw: Any) -> HonchoBackend:
        """From ``config.HonchoConfig``: the key comes from the variable named by ``api_key_env``."""
        env = os.environ if env is None else env
        key_var = (getattr(honcho_cfg, "api_key_env", "") or "").strip()
        return cls(base_url=getattr(honcho_cfg, "base_url", "") or "", api_key=env.get(key_var) if key_var else None,
                   workspace=getattr(honcho_cfg, "workspace", "") or "didactyl", **kw)

    @property
    def configured(self) -> bool:
        return bool(self.base_url)

    # --- availability -----------------------------------------------------------------------------

    def is_available(self) -> bool:
        """The cached probe result (False until a probe succeeded); never touches the network."""
        return self.configured and self._available

    async def probe(self) -> bool:
        """Check the server (get-or-create the workspace) with a short timeout; cached for ``recheck_s``."""
        if not self.configured:
            return False
        async with self._probe_lock:
            now = self._clock()
            if self._probed_at is not None and now - self._probed_at < self.recheck_s:
                return self._available
            self._probed_at = now
            try:
                client = self._get_client()
                async with asyncio.timeout(self.probe_timeout_s):
                    await client.aio.get_configuration()
            except Exception as exc:
                self._mark_down(exc)
            else:
                if not self._available:
                    log.info("honcho backend: %s is reachable", self.base_url)
                self._available = True
                self.last_error = None
            return self._available

    def _mark_down(self, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if self._available or self.last_error is None:
            log.info("honcho backend unavailable (%s): %s", self.base_url, reason)
        self._available = False
        self.last_error = reason

    def _get_client(self) -> Any:
        if self._client is None:
            from honcho import Honcho  # lazy: only when configured

            self._client = Honcho(base_url=self.base_url, api_key=self._api_key, workspace_id=self.workspace,
                                  timeout=self.request_timeout_s, max_retries=0)
        return self._client

    async def _peer(self, peer_id: str) -> Any:
        if peer_id not in self._peers:
            self._peers[peer_id] = await self._get_client().aio.peer(peer_id)
        return self._peers[peer_id]

    async def _session(self, session_id: str) -> Any:
        sid = _safe_id(session_id)
        if sid not in self._sessions:
            user = await self._peer(self.user_peer_id)
            agent = await self._peer(self.agent_peer_id)
            self._sessions[sid] = await self._get_client().aio.session(sid, peers=[user, agent])
        return self._sessions[sid]

    # --- MemoryBackend ----------------------------------------------------------------------------

    async def query_context(self, session_id: str, user_message: str) -> str | None:
        if not self.is_available():
            return None
        try:
            session = await self._session(session_id)
            ctx = await session.aio.context(summary=True, tokens=self.context_tokens, peer_target=self.user_peer_id,
                                            search_query=user_message[:1000] or None)
        except Exception as exc:
            self._on_failure(exc)
            return None
        parts: list[str] = []
        if getattr(ctx, "summary", None) is not None and ctx.summary.content:
            parts.append(f"Summary of this conversation so far: {ctx.summary.content.strip()}")
        if getattr(ctx, "peer_representation", None):
            parts.append(f"What Honcho has concluded about the user:\n{ctx.peer_representation.strip()}")
        if getattr(ctx, "peer_card", None):
            parts.append("User card: " + "; ".join(str(c) for c in ctx.peer_card))
        if not parts:
            return None
        return "\n\n".join([HEADING, *parts])

    def tools(self) -> list[Tool]:
        return [build_tool(self.honcho_ask, name="honcho_ask", family="memory")]

    async def honcho_ask(self, question: str) -> str:
        """Ask Honcho, the long-term memory service, a question about the user (their preferences, history, facts).

        Args:
            question: A natural-language question, e.g. "What does the user do for work?"
        """
        try:
            peer = await self._peer(self.user_peer_id)
            answer = await peer.aio.chat(question)
        except Exception as exc:
            self._on_failure(exc)
            return f"Error: Honcho did not answer ({type(exc).__name__})."
        return str(answer) if answer else "Honcho has no answer to that yet."

    async def record_turn(self, session_id: str, user_message: str, reply: str) -> None:
        if not self.is_available():
            return
        try:
            session = await self._session(session_id)
            user = await self._peer(self.user_peer_id)
            agent = await self._peer(self.agent_peer_id)
            messages = [user.message(user_message)]
            if reply.strip():
                messages.append(agent.message(reply))
            await session.aio.add_messages(messages)
        except Exception as exc:
            self._on_failure(exc)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._sessions.clear()
        self._peers.clear()
        http = getattr(client, "_async_http_built", None) if client is not None else None
        if http:
            # The SDK builds its async HTTP client lazily and exposes no close(); release its connections.
            try:
                await http[1].close()
            except Exception as exc:
                log.debug("honcho client close failed: %s", exc)

    def _on_failure(self, exc: BaseException) -> None:
        """Network trouble marks the backend down until the next probe; other errors are just logged."""
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & {"ConnectionError", "TimeoutError", "ConnectError", "TimeoutException", "ServerError"}:
            self._mark_down(exc)
            self._probed_at = self._clock()
        else:
            log.warning("honcho backend: %s: %s", type(exc).__name__, exc)
