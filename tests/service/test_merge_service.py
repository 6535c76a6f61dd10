"""The merge view's service (``MergeService.draft``, ``model_draft``) on real versions: saved by the service,
published by another device to a real relay, kept in the history. The common base is found through the ``prev``
chain; without one the draft is two-way and says why; a JSON document merges key by key; the model proposes a
resolution (the LLM stub over HTTP) and nothing is saved."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from agent_support import Clock, make_saves, make_store, memory_event, soul_event, wait_for
from llm_stub import LlmStub, Reply
from memory_support import put
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs
from tui_support import TEST_KEY, make_config, make_env

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.soul.content import read_soul_text
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.merge import END, MIDDLE, START, draft_merge

ST = DocumentKey.SHORT_TERM
T0 = 1_750_000_000
BASE = "milk\neggs\nbread\nbutter\njam\ntea\n"
OURS = "milk\nbread\nbutter\nstrawberry jam\ntea\n"  # eggs deleted, jam changed
THEIRS = "milk\neggs\nbread\nbutter\nhoney\ntea\n"  # jam changed otherwise


def _service(relay: EmbeddedRelayUnderTest, tmp_path: Path, clock: Clock, llm: str | None = None) -> AppService:
    cfg = make_config(urls=[relay.url], publish_profile=False, llm_base_url=llm)
    cfg.relays.embedded.enabled = False
    return AppService(cfg, data_dir=tmp_path / "d", env=make_env(), clock=clock,
                      relay_client_options=fast_client_kwargs())


async def _arrived(service: AppService, event_id: str, t: DocumentKey = ST) -> None:
    async def seen() -> bool:
        return any(v.event_id == event_id for v in await service.documents.history(t))

    await wait_for(seen, timeout=10)  # the other device's version, kept in the history


async def _concurrent(service: AppService, relay: EmbeddedRelayUnderTest, clock: Clock) -> tuple[str, str, str]:
    """(base, ours, theirs): we saved base then ours; another device edited the base, not ours (its version names
    base as its prev), and its version is now in our history."""
    base = await service.documents.save(ST, BASE)
    clock.t += 10
    ours = await service.documents.save(ST, OURS)
    theirs = memory_event(TEST_KEY, THEIRS, T0 + 20, prev=base.event_id)
    await put(relay.url, theirs)
    await _arrived(service, theirs.id)
    return base.event_id, ours.event_id, theirs.id


async def test_a_concurrent_edit_merges_from_the_common_base(relay: EmbeddedRelayUnderTest, tmp_path: Path) -> None:
    clock = Clock(T0)
    async with _service(relay, tmp_path, clock) as service:
        base, ours, theirs = await _concurrent(service, relay, clock)
        draft = await service.merges.draft(ST, ours, theirs)
        assert draft.base_id == base and draft.why_two_way == "" and draft.problem is None
        # The deletion stays deleted; the one true conflict is marked, yours first.
        assert draft.text == f"milk\nbread\nbutter\n{START}\nstrawberry jam\n{MIDDLE}\nhoney\n{END}\ntea\n"
        assert draft.conflicts == 1
        # By id prefix too, as the views pass them; either way round the base is the same.
        again = await service.merges.draft(ST, theirs[:12], ours[:12])
        assert again.base_id == base and "eggs" not in again.text


async def test_without_a_common_base_the_draft_is_two_way_and_says_why(relay: EmbeddedRelayUnderTest,
                                                                       tmp_path: Path) -> None:
    clock = Clock(T0)
    async with _service(relay, tmp_path, clock) as service:
        await service.documents.save(ST, BASE)
        clock.t += 10
        ours = await service.documents.save(ST, OURS)
        untagged = memory_event(TEST_KEY, THEIRS, T0 + 20)  # another Nostr client: no prev tag
        await put(relay.url, untagged)
        await _arrived(service, untagged.id)
        draft = await service.merges.draft(ST, ours.event_id, untagged.id)
        assert draft.base_id is None and "no common base" in draft.why_two_way
        # Every difference is marked: the eggs line is offered (theirs has it), never silently restored.
        assert draft.conflicts == 2
        assert draft.text == (f"milk\n{START}\n{MIDDLE}\neggs\n{END}\nbread\nbutter\n{START}\nstrawberry jam\n"
                              f"{MIDDLE}\nhoney\n{END}\ntea\n")


SOUL = """{"format": "didactyl-soul/1", "sections": [
 {"section": "persona", "role": "system", "content": "You are Base."},
 {"section": "style", "role": "system", "content": "Be brief."}]}"""


async def test_two_edits_of_different_soul_sections_merge_cleanly(relay: EmbeddedRelayUnderTest,
                                                                  tmp_path: Path) -> None:
    clock = Clock(T0)
    async with _service(relay, tmp_path, clock) as service:
        base = await service.documents.save(DocumentKey.SOUL, SOUL)
        clock.t += 10
        ours = await service.documents.save(DocumentKey.SOUL, SOUL.replace("You are Base.", "You are Ours."))
        edited = read_soul_text("theirs", SOUL.replace("Be brief.", "Be kind."))
        theirs = soul_event(TEST_KEY, edited, T0 + 20, prev=base.event_id)
        await put(relay.url, theirs)
        await _arrived(service, theirs.id, DocumentKey.SOUL)
        draft = await service.merges.draft(DocumentKey.SOUL, ours.event_id, theirs.id)
        assert draft.base_id == base.event_id and draft.conflicts == 0 and draft.problem is None
        sections = json.loads(draft.text)["sections"]
        assert [s["content"] for s in sections] == ["You are Ours.", "Be kind."]
        clock.t += 15  # (theirs was dated 20 s after the base: a save now must not be dated more than 5 s ahead)
        merged = await service.documents.save(DocumentKey.SOUL, draft.text)
        assert service.soul.view().event_id == merged.event_id


async def test_a_json_draft_that_does_not_read_says_why_and_is_kept_as_it_is(tmp_path: Path) -> None:
    texts = {"b": "{\n \"x\": 1\n}\n", "o": "{\n \"x\": 1\n}\nours\n", "t": "theirs\n{\n \"x\": 1\n}\n"}

    async def version(event_id: str) -> SimpleNamespace:
        base = None if event_id == "b" else "b"
        ev = SimpleNamespace(id=event_id, tags=[["prev", base * 64]] if base else [])
        return SimpleNamespace(event=ev, content=texts[event_id[0]])

    class History:
        def get(self, event_id: str) -> SimpleNamespace | None:
            return SimpleNamespace(event=SimpleNamespace(id="b" * 64, tags=[])) if event_id == "b" * 64 else None

    texts["b" * 64] = texts["b"]
    store = make_store(TEST_KEY, RelayPool([]))
    saves = make_saves(store, RelayPool([]), tmp_path)
    tasks_check = lambda text: saves.check(DocumentKey.TASKS, text)  # noqa: E731
    draft = await draft_merge(History(), version, tasks_check, "o", "t")  # type: ignore[arg-type]
    assert draft.base_id == "b" * 64 and draft.conflicts == 0
    assert draft.text == "theirs\n{\n \"x\": 1\n}\nours\n"  # shown as merged, never replaced by one side
    assert draft.problem == "the task list is not valid JSON"
    memory_check = lambda text: saves.check(DocumentKey.SHORT_TERM, text)  # noqa: E731
    assert (await draft_merge(History(), version, memory_check, "o", "t")).problem is None  # type: ignore[arg-type]


async def test_the_model_proposes_a_resolution_and_nothing_is_saved(relay: EmbeddedRelayUnderTest,
                                                                    tmp_path: Path) -> None:
    clock = Clock(T0)
    async with LlmStub() as stub, _service(relay, tmp_path, clock, llm=stub.base_url) as service:
        _base, ours, theirs = await _concurrent(service, relay, clock)
        draft = await service.merges.draft(ST, ours, theirs)
        resolved = "milk\nbread\nbutter\nstrawberry jam\nhoney\ntea\n"
        stub.script(Reply.text_reply(f"```\n{resolved}```"))  # fenced although asked not to: unwrapped
        assert await service.merges.model_draft(ST, draft.text) == resolved
        [request] = stub.requests
        system, user = request.messages
        assert system["role"] == "system" and "Leave every line outside the markers exactly" in system["content"]
        assert user == {"role": "user", "content": draft.text}
        assert request.tool_names == []  # one completion, no tools
        assert service.documents.snapshot(ST).event_id == theirs  # nothing saved
        with pytest.raises(AgentError, match="no conflict is marked"):
            await service.merges.model_draft(ST, resolved)
        stub.script(Reply.server_error())
        with pytest.raises(AgentError):
            await service.merges.model_draft(ST, draft.text)
        # Bounded: an answer far longer than the document could be is cut off and refused.
        stub.script(Reply.endless(" word", 100_000))
        with pytest.raises(AgentError, match="passed 16,000 characters"):
            await service.merges.model_draft(ST, draft.text)
        assert service.documents.snapshot(ST).event_id == theirs
