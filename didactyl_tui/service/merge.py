"""The merge view's service: a concurrent edit's draft, merged from the common base of the two versions, and the
configured model's proposal for the conflicts still marked in it. Nothing here saves: the person does, through the
document's one save path.

The common base is found in the history this device kept (``agent/documents/merge.merge_base``); with none — a
writer that does not name its base, a chain older than the history — the draft is a two-way merge in which every
difference is a conflict, and says why. A JSON document (the soul, the task list) whose merged draft does not read
says so with the reason: it is shown as it is, never silently replaced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..agent.documents.history import DocumentHistory
from ..agent.documents.keys import DocumentKey
from ..agent.documents.merge import END, MIDDLE, START, conflicts_left, merge_base, merge_three_way, merge_two_way
from ..agent.documents.saving import DocumentSaves
from ..errors import AgentError
from ..nostr.event import Event
from .conversation import NO_MODEL_HERE
from .documents import DocumentService
from .labels import short_id
from .model import ModelService
from .views import DocumentVersionView

MODEL_DRAFT_TIMEOUT_S = 120.0  # the longest the model may take to propose a resolution


@dataclass(frozen=True, slots=True)
class MergeDraft:
    """Where the person starts: the merged text, how many conflicts it marks, and what it was merged from."""

    text: str
    conflicts: int
    base_id: str | None  # the common base of the three-way merge; None: two-way (``why_two_way`` says why)
    why_two_way: str = ""
    problem: str | None = None  # the merged JSON document does not read (only when no conflict is marked)


def _base_of(history: DocumentHistory, ours: Event, theirs: Event) -> str | None:
    def lookup(event_id: str) -> Event | None:
        version = history.get(event_id)
        return version.event if version is not None else None

    return merge_base(lookup, ours, theirs)


async def draft_merge(history: DocumentHistory, version: Callable[[str], Awaitable[DocumentVersionView]],
                      check: Callable[[str], object], ours_id: str, theirs_id: str) -> MergeDraft:
    """``ours_id`` and ``theirs_id`` (versions of one document) merged from their common base. ``version``: one
    version of it from the history by id (AgentError when it is not there); ``check``: the document's own check of
    a text (its codec's: AgentError saying why it does not read). History reads and decryption run off the loop."""
    ours, theirs = await version(ours_id), await version(theirs_id)
    base_id = await asyncio.to_thread(_base_of, history, ours.event, theirs.event)
    base_text: str | None = None
    why = ("no common base is known on this device: one of the versions does not name the version it was edited "
           "from (another Nostr client), or its chain goes back further than this device's history")
    if base_id is not None:
        try:
            base = await version(base_id)
            base_text = await asyncio.to_thread(lambda: base.content)
        except AgentError as exc:
            why = f"their common base {short_id(base_id)} is not readable on this device ({exc.message})"
    ours_text, theirs_text = await asyncio.to_thread(lambda: (ours.content, theirs.content))
    if base_text is not None:
        result = await asyncio.to_thread(merge_three_way, base_text, ours_text, theirs_text)
    else:
        result = await asyncio.to_thread(merge_two_way, ours_text, theirs_text)
    text = result.text
    problem = None if result.conflicts else await asyncio.to_thread(_problem, check, text)
    return MergeDraft(text, len(result.conflicts), base_id if base_text is not None else None,
                      "" if base_text is not None else why, problem)


def _problem(check: Callable[[str], object], text: str) -> str | None:
    try:
        check(text)
    except AgentError as exc:
        return exc.message
    return None


_INSTRUCTIONS = f"""\
You resolve merge conflicts in a document ({{what}}). Two people edited it at the same time; where their \
edits clash, the document shows both versions between marker lines:

{START}
(the lines one writer has)
{MIDDLE}
(the lines the other writer has)
{END}

Replace every marked region with the lines that keep what both writers meant (take one side, or combine them). \
Leave every line outside the markers exactly as it is. Reply with the whole resolved document and nothing else: \
no explanation, no code fence, no marker lines."""


async def resolve_with_model(complete: Callable[[list[dict[str, Any]], int], Awaitable[str]], what: str,
                             draft: str, limit_chars: int) -> str:
    """The model's resolution of the conflicts marked in ``draft`` (a proposal: the caller shows it as a diff and
    the person accepts it or not). ``complete(messages, max_chars)``: one completion with the model in use.
    AgentError when there is nothing to resolve or the model's answer is unusable."""
    if not conflicts_left(draft):
        raise AgentError("no conflict is marked in the draft: nothing for the model to resolve", "Merge")
    messages = [{"role": "system", "content": _INSTRUCTIONS.format(what=what)},
                {"role": "user", "content": draft}]
    # Room for a reply somewhat longer than the document may be (a combination of both sides).
    reply = await complete(messages, 2 * max(limit_chars, len(draft)))
    text = _unfenced(reply)
    if not text.strip():
        raise AgentError("the model proposed an empty document; the draft is unchanged", "Merge")
    return text if text.endswith("\n") or not draft.endswith("\n") else text + "\n"


def _unfenced(reply: str) -> str:
    """The reply without a code fence around the whole of it (models add one although asked not to)."""
    lines = reply.strip("\n").split("\n")
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        return "\n".join(lines[1:-1]) + "\n"
    return reply


class MergeService:
    """The merge view's part: a concurrent edit's draft, and the configured model's proposal for its conflicts."""

    def __init__(self, documents: DocumentService, *, saves: DocumentSaves, history: DocumentHistory,
                 model: ModelService | None) -> None:
        """``saves``: checks a draft as its document (the save path's check); ``history``: where the common base is
        found; ``model``: the model in use, None when it runs elsewhere (attached): no model draft then."""
        self._documents, self._saves, self._history, self._model = documents, saves, history, model

    async def draft(self, key: DocumentKey, ours_id: str, theirs_id: str) -> MergeDraft:
        """Two concurrent versions merged three-way from their common base (found in the history), conflicts marked;
        two-way, every difference a conflict, when no base is known."""
        saves = self._saves
        return await draft_merge(self._history, lambda eid: self._documents.version(key, eid),
                                 lambda text: saves.check(key, text), ours_id, theirs_id)

    async def model_draft(self, key: DocumentKey, draft: str) -> str:
        """The configured model's resolution of the conflicts marked in ``draft``: a proposal, nothing is saved."""
        model = self._model
        if model is None:
            raise AgentError(NO_MODEL_HERE, "Attached")
        snap = self._documents.snapshot(key)
        return await resolve_with_model(
            lambda messages, n: model.complete(messages, max_chars=n, timeout_s=MODEL_DRAFT_TIMEOUT_S),
            f"the agent's {snap.type.title.lower()}", draft, snap.limit_chars)
