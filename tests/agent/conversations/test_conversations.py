"""ConversationStore on a real SQLite file: sessions, messages with tool calls, the history budget, export."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from didactyl_tui.agent.conversations.store import ConversationStore
from didactyl_tui.agent.conversations.turns import group_turns, repair_tool_pairs
from didactyl_tui.agent.llm import tokens
from didactyl_tui.errors import AgentError


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        self.t += 1
        return self.t


@pytest.fixture
def store(tmp_path: Path):
    s = ConversationStore(tmp_path / "data" / "conversations.sqlite3", clock=Clock())
    yield s
    s.close()


def tool_turn(n: int, question: str, answer: str) -> list[dict]:
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}a", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
            {"id": f"c{n}b", "type": "function", "function": {"name": "my_memory", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": f"c{n}a", "content": '{"sum": 3}'},
        {"role": "tool", "tool_call_id": f"c{n}b", "content": "likes tea"},
        {"role": "assistant", "content": answer},
    ]


def test_round_trip_keeps_the_openai_shape(store: ConversationStore) -> None:
    sid = store.new_session()
    msgs = tool_turn(1, "What is 1+2 and what do I like?", "3, and tea.")
    assert store.append(sid, msgs) == range(5)  # the positions they took
    assert store.messages(sid) == msgs
    calls = store.tool_calls(sid)
    assert [(c.call_id, c.name, c.arguments, c.result) for c in calls] == [
        ("c1a", "add", '{"a": 1, "b": 2}', '{"sum": 3}'),
        ("c1b", "my_memory", "{}", "likes tea"),
    ]


def test_sessions_titles_order_and_counts(store: ConversationStore) -> None:
    a = store.new_session()
    b = store.new_session()
    store.append(a, [{"role": "user", "content": "  Plan my\ntrip to Lisbon in May, with a day in Sintra and good food "
                                                  "please, thanks"}])
    store.append(b, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    store.append(a, [{"role": "assistant", "content": "Sure."}])  # a is now the most recent
    infos = store.list_sessions()
    assert [i.id for i in infos] == [a, b]
    assert infos[0].title.startswith("Plan my trip to Lisbon in May") and len(infos[0].title) <= 60
    assert infos[0].title.endswith("…") and "\n" not in infos[0].title
    assert (infos[0].message_count, infos[1].message_count) == (2, 2)
    assert infos[1].title == "hi"
    assert infos[0].updated_at > infos[0].created_at


def test_title_stays_the_first_user_message(store: ConversationStore) -> None:
    sid = store.new_session()
    store.append(sid, [{"role": "user", "content": "first question"}])
    store.append(sid, [{"role": "user", "content": "second question"}])
    assert store.session(sid).title == "first question"


def test_append_is_all_or_nothing(store: ConversationStore) -> None:
    sid = store.new_session()
    store.append(sid, [{"role": "user", "content": "kept"}])
    with pytest.raises(AgentError):
        store.append(sid, [{"role": "assistant", "content": "ok"}, {"role": "tool", "content": "no id"}])
    with pytest.raises(AgentError):
        store.append(sid, [{"role": "wizard", "content": "?"}])
    with pytest.raises(AgentError, match="no conversation"):
        store.append("nope", [{"role": "user", "content": "x"}])
    assert store.messages(sid) == [{"role": "user", "content": "kept"}]


def test_persists_across_reopen_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    s1 = ConversationStore(path)
    sid = s1.new_session()
    s1.append(sid, [{"role": "user", "content": [{"type": "text", "text": "parts survive"}]}])
    s1.close()
    s2 = ConversationStore(path)
    assert s2.messages(sid) == [{"role": "user", "content": [{"type": "text", "text": "parts survive"}]}]
    assert s2.list_sessions()[0].id == sid
    s2.close()
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_delete_session_removes_messages_and_calls(store: ConversationStore, tmp_path: Path) -> None:
    sid = store.new_session()
    keep = store.new_session()
    store.append(sid, tool_turn(1, "q", "a"))
    store.append(keep, [{"role": "user", "content": "stay"}])
    assert store.delete_session(sid) is True
    assert store.delete_session(sid) is False
    assert store.messages(sid) == [] and store.tool_calls(sid) == []
    assert [i.id for i in store.list_sessions()] == [keep]


def test_concurrent_appends_from_threads(store: ConversationStore) -> None:
    sid = store.new_session()
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(20):
                store.append(sid, [{"role": "user", "content": f"{n}-{i}"}, {"role": "assistant", "content": "ok"}])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    msgs = store.messages(sid)
    assert len(msgs) == 160
    # Each append stayed contiguous: every user message is followed by its assistant reply.
    assert all(msgs[i]["role"] == "user" and msgs[i + 1]["role"] == "assistant" for i in range(0, 160, 2))


# --- history budget -------------------------------------------------------------------------------


def turn_cost(model: str, turn: list[dict]) -> int:
    return sum(tokens.PER_MESSAGE_OVERHEAD + tokens.count_tokens(model, tokens.message_text(m)) for m in turn)


def test_history_keeps_newest_whole_turns_within_budget(store: ConversationStore) -> None:
    sid = store.new_session()
    turns = [tool_turn(n, f"question number {n} " * 5, f"answer number {n} " * 5) for n in range(6)]
    for t in turns:
        store.append(sid, t)
    model = "openai/stub-model"
    costs = [turn_cost(model, t) for t in turns]
    budget = costs[-1] + costs[-2] + costs[-3] // 2  # room for two whole turns and half of a third
    history, dropped = store.history_for_prompt(sid, model, budget)
    assert history == turns[-2] + turns[-1]
    assert dropped == 4 * 5
    # An assistant message with tool calls always comes with all of its results.
    for i, m in enumerate(history):
        if m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            assert [r["tool_call_id"] for r in history[i + 1 : i + 1 + len(ids)]] == ids


def test_history_all_none_and_max_turns(store: ConversationStore) -> None:
    sid = store.new_session()
    for n in range(3):
        store.append(sid, [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}])
    everything, dropped = store.history_for_prompt(sid, "m", 10_000)
    assert len(everything) == 6 and dropped == 0
    nothing, dropped = store.history_for_prompt(sid, "m", 0)
    assert nothing == [] and dropped == 6
    last_one, dropped = store.history_for_prompt(sid, "m", 10_000, max_turns=1)
    assert last_one == [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}] and dropped == 4


def test_history_repairs_unanswered_tool_calls(store: ConversationStore) -> None:
    sid = store.new_session()
    store.append(sid, [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "x1", "type": "function", "function": {"name": "add", "arguments": "{}"}},
            {"id": "x2", "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "x1", "content": "one result only"},
        {"role": "user", "content": "next"},
    ])
    history, _ = store.history_for_prompt(sid, "m", 10_000)
    assert history == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Let me check."},
                       {"role": "user", "content": "next"}]


def test_repair_and_grouping_helpers() -> None:
    orphan = [{"role": "tool", "tool_call_id": "z", "content": "?"}, {"role": "user", "content": "u"}]
    assert repair_tool_pairs(orphan) == [{"role": "user", "content": "u"}]
    msgs = [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    assert [len(t) for t in group_turns(msgs)] == [1, 2, 1]


def test_history_never_starts_with_a_non_user_message(store: ConversationStore) -> None:
    sid = store.new_session()
    store.append(sid, [{"role": "assistant", "content": "Welcome!"}, {"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "hello"}])
    history, dropped = store.history_for_prompt(sid, "m", 10_000)
    assert history[0] == {"role": "user", "content": "hi"} and dropped == 1


def whole_conversation_history(messages: list[dict], model: str, budget: int,
                               max_turns: int | None) -> list[dict]:
    """The selection rule applied to the whole conversation at once: what the windowed read must equal."""
    kept: list[list[dict]] = []
    used = 0
    for turn in reversed(group_turns(repair_tool_pairs(messages))):
        if max_turns is not None and len(kept) >= max_turns:
            break
        cost = turn_cost(model, turn)
        if used + cost > budget:
            break
        kept.append(turn)
        used += cost
    chosen = [m for turn in reversed(kept) for m in turn]
    while chosen and chosen[0]["role"] != "user":
        chosen.pop(0)
    return chosen


@pytest.mark.parametrize("seed", range(6))
def test_the_windowed_history_equals_the_whole_conversation_rule(store: ConversationStore, seed: int) -> None:
    import random

    rng = random.Random(seed)
    sid = store.new_session()
    stored: list[dict] = [{"role": "assistant", "content": "Welcome!"}] if seed % 2 else []
    for n in range(rng.randint(20, 150)):  # across several pages of rows
        kind = rng.random()
        if kind < 0.3:
            turn = tool_turn(n, f"q{n} " * rng.randint(1, 30), f"a{n} " * rng.randint(1, 30))
        elif kind < 0.4:  # an unanswered call, repaired away
            turn = [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": "x", "tool_calls": [
                {"id": f"u{n}", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}]
        else:
            turn = [{"role": "user", "content": f"q{n} " * rng.randint(1, 40)},
                    {"role": "assistant", "content": f"a{n} " * rng.randint(1, 80)}]
        stored += turn
    store.append(sid, stored)
    for budget in (0, 50, 400, 3000, 10**9):
        for max_turns in (None, 1, 7):
            got, dropped = store.history_for_prompt(sid, "m", budget, max_turns=max_turns)
            assert got == whole_conversation_history(stored, "m", budget, max_turns)
            assert dropped == len(stored) - len(got)


def test_the_store_opens_its_file_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "data" / "conversations.sqlite3"
    store = ConversationStore(path)
    assert not path.exists()
    store.open()
    assert path.exists()
    store.close()


def test_oversized_tool_arguments_are_stored_as_a_placeholder(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3", max_argument_chars=1000)
    sid = store.new_session()
    big = '{"content": "' + "x" * 5000 + '"}'
    store.append(sid, [{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": big}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Error: too big"}])
    (call,) = store.messages(sid)[1]["tool_calls"]
    assert "_omitted" in call["function"]["arguments"] and "5,0" in call["function"]["arguments"]
    assert store.tool_calls(sid)[0].arguments == call["function"]["arguments"]
    store.close()


# --- export ---------------------------------------------------------------------------------------


def test_export_markdown(store: ConversationStore) -> None:
    sid = store.new_session()
    store.append(sid, tool_turn(1, "What is 1+2?", "It is **3**."))
    md = store.export_markdown(sid)
    assert md.startswith("# What is 1+2?\n")
    assert "## You\n\nWhat is 1+2?" in md
    assert "**Tool call** `add`" in md and '{"a": 1, "b": 2}' in md
    assert "**Tool result** (`c1a`)" in md and '{"sum": 3}' in md
    assert md.rstrip().endswith("It is **3**.")
    with pytest.raises(AgentError):
        store.export_markdown("missing")


def test_the_tail_starts_at_a_message_of_the_users_and_the_rest_reads_before_it(store: ConversationStore) -> None:
    sid = store.new_session()
    messages = [m for n in range(10) for m in tool_turn(n, f"q{n}", f"a{n}")]  # 5 messages a turn
    store.append(sid, messages)
    earlier, before, until, tail = store.messages_tail(sid, 12)  # 12 back lands inside a turn: starts at the next
    assert tail == messages[40:] and earlier == 40 and until == 50
    assert store.messages(sid, before) == messages[:40]  # and the rest is exactly what came before
    store.append(sid, [{"role": "user", "content": "later"}])  # written meanwhile: not in "before" it
    assert store.messages(sid, before) == messages[:40]
    assert store.messages_tail(sid, 1000) == (0, 0, 51, [*messages, {"role": "user", "content": "later"}])
    assert store.append(sid, [{"role": "assistant", "content": "after"}]) == range(51, 52)  # at the "until" read


def test_a_tail_with_no_message_of_the_users_is_the_whole_chat(store: ConversationStore) -> None:
    sid = store.new_session()
    answers = [{"role": "user", "content": "q"}] + [{"role": "assistant", "content": f"part {n}"} for n in range(9)]
    store.append(sid, answers)
    assert store.messages_tail(sid, 4) == (0, 0, 10, answers)
    assert store.messages_tail(store.new_session(), 4) == (0, 0, 0, [])
