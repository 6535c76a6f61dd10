"""The agent's prompt reports for its replies in an attached window: each reply's assembly as the agent built it
(or why it is not available), read off the loop, sent to the inspector and kept with the chat, whether its turn
waited for it or it came later (a late reply, a reply to the admin's message from another client)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ..agent.conversations.assembly_log import SavedAssembly
from ..agent.conversations.session_kind import SessionKind
from ..agent.dm.prompt_report import RemoteReport, ReportError, read_report, unavailable_assembly
from ..agent.llm.usage import Usage
from ..agent.soul.prompt_record import PromptAssembly
from .attach_link import AttachLink, LinkMessage
from .events import PromptAssembled, ServiceEvent


class ReplyPrompts:
    def __init__(self, link: AttachLink, agent: str, *, report_wait_s: float, clock: Callable[[], float],
                 emit: Callable[[ServiceEvent], None],
                 keep: Callable[[str, SessionKind, SavedAssembly], Awaitable[None]]) -> None:
        """``keep``: saves an assembly with the chat (the chat service's log of assemblies)."""
        self._link, self._agent, self._wait_s = link, agent, report_wait_s
        self._clock, self._emit, self._keep = clock, emit, keep

    async def report(self, reply: LinkMessage, wait: float) -> RemoteReport | str | None:
        """The agent's prompt report for ``reply`` within ``wait`` seconds (None: none came; a str: why it cannot be
        read)."""
        rumor = await self._link.report_for(reply.id, wait)
        if rumor is None:
            return None
        try:
            return await asyncio.to_thread(read_report, rumor)
        except ReportError as exc:
            return exc.message

    async def show(self, session_id: str, kind: SessionKind, report: RemoteReport | str | None,
                   reply: str) -> tuple[PromptAssembly, Usage]:
        """A reply's prompt (the agent's report, or why there is none) to the inspector and the chat's saved ones."""
        assembly, usage = self._assembly_of(report)
        self._emit(PromptAssembled(assembly))
        usage = usage or Usage()
        await self._keep(session_id, kind, SavedAssembly(
            assembly, reply=reply, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            cost_usd=usage.cost_usd))
        return assembly, usage

    def _assembly_of(self, report: RemoteReport | str | None) -> tuple[PromptAssembly, Usage | None]:
        if isinstance(report, RemoteReport):
            return report.assembly, report.usage
        why = (f"the agent's prompt assembly could not be read: {report}" if report is not None else
               f"the agent sent no prompt assembly for this reply within {self._wait_s:g} s (its [dm] prompt_report "
               "may be off)")
        return unavailable_assembly(why, created_at=self._clock(), agent=self._agent), None
