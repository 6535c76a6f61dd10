"""Memory backends: the manager's one-backend rules and fault isolation, recall's FTS5 index, honcho's
availability (and its calls, against a tiny fake of the few Honcho endpoints it uses)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from relay_servers import free_port

from didactyl_tui.agent.audience import ADMIN_TURN, guest_turn
from didactyl_tui.agent.memory.backend import MemoryBackend, MemoryManager
from didactyl_tui.agent.memory.backends.honcho import HonchoBackend
from didactyl_tui.agent.memory.backends.recall import HEADING, RecallBackend, fts_query, split_paragraphs
from didactyl_tui.agent.tools.registry import Tool, build_tool
from didactyl_tui.config import HonchoConfig


class FakeBackend:
    """A minimal backend whose behaviour each test chooses."""

    def __init__(self, id: str = "fake", *, available: bool = True, context: str | None = "ctx",
                 fail: BaseException | None = None, delay: float = 0.0) -> None:
        self.id = id
        self.available = available
        self.context = context
        self.fail = fail
        self.delay = delay
        self.recorded: list[tuple[str, str, str]] = []

    def is_available(self) -> bool:
        return self.available

    async def query_context(self, session_id: str, user_message: str) -> str | None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise self.fail
        return self.context

    def tools(self) -> list[Tool]:
        def fake_lookup(term: str) -> str:
            """Look something up in the fake memory.

            Args:
                term: what to look for
            """
            return f"found {term}"

        return [build_tool(fake_lookup)]

    async def record_turn(self, session_id: str, user_message: str, reply: str) -> None:
        if self.fail:
            raise self.fail
        self.recorded.append((session_id, user_message, reply))


# --- the manager ----------------------------------------------------------------------------------


def test_one_backend_at_a_time(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="didactyl.memory")
    manager = MemoryManager()
    first, again, other = FakeBackend("a"), FakeBackend("a"), FakeBackend("b")
    assert isinstance(first, MemoryBackend)
    assert manager.register(first) is True
    assert manager.register(again) is True and manager.backend is again
    assert manager.register(other) is False and manager.backend is again
    records = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "didactyl.memory"]
    assert records[0] == ("INFO", "memory backend 'a' registered")
    assert records[1] == ("INFO", "memory backend 'a' replaced")
    assert records[2][0] == "ERROR" and "'b' rejected" in records[2][1] and "'a'" in records[2][1]


async def test_no_backend_or_unavailable_means_no_context_and_no_tools() -> None:
    manager = MemoryManager()
    assert await manager.query_context("s", "hi") is None and manager.tools() == []
    manager.register(FakeBackend(available=False))
    assert await manager.query_context("s", "hi") is None
    assert manager.tools() == [] and await manager.call_tool("fake_lookup", "{}") is None
    await manager.record_turn("s", "u", "r")
    assert manager.backend.recorded == []


async def test_delegates_when_available() -> None:
    manager = MemoryManager()
    backend = FakeBackend(context="## Fake\nremembered")
    manager.register(backend)
    assert await manager.query_context("s", "hi") == "## Fake\nremembered"
    assert manager.tool_names() == ["fake_lookup"]
    outcome = await manager.call_tool("fake_lookup", '{"term": "tea"}')
    assert outcome is not None and outcome.content == "found tea" and not outcome.is_error
    assert await manager.call_tool("not_a_backend_tool", "{}") is None  # falls through to the registry
    await manager.record_turn("s1", "question", "answer")
    assert backend.recorded == [("s1", "question", "answer")]


async def test_backend_failures_never_break_a_turn(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="didactyl.memory")
    manager = MemoryManager(context_timeout_s=0.2)
    manager.register(FakeBackend(fail=RuntimeError("disk on fire")))
    assert await manager.query_context("s", "hi") is None
    await manager.record_turn("s", "u", "r")  # no exception
    assert any("disk on fire" in r.getMessage() for r in caplog.records)

    slow = MemoryManager(context_timeout_s=0.1)
    slow.register(FakeBackend("slow", delay=5))
    assert await slow.query_context("s", "hi") is None
    assert any("longer than" in r.getMessage() for r in caplog.records)

    blank = MemoryManager()
    blank.register(FakeBackend(context="   "))
    assert await blank.query_context("s", "hi") is None


# --- recall ---------------------------------------------------------------------------------------


@pytest.fixture
def recall(tmp_path: Path):
    backend = RecallBackend(tmp_path / "recall.sqlite3", context_chars=600, snippet_chars=200)
    yield backend
    backend.close()


async def test_recall_finds_long_term_memory_and_past_turns(recall: RecallBackend) -> None:
    recall.index_long_term("My sister Alice was born on March 3.\n\nI prefer vim over emacs.\n\nI live in Porto.")
    await recall.record_turn("s1", "Which bike should I buy for commuting?", "A steel touring bike suits you.")
    await recall.record_turn("s1", "What is the capital of France?", "Paris.")

    ctx = await recall.query_context("s2", "When is Alice's birthday?")
    assert ctx is not None and ctx.startswith(HEADING)
    assert "[long-term memory] My sister Alice was born on March 3." in ctx
    assert "vim" not in ctx and "Paris" not in ctx  # only what matches

    ctx = await recall.query_context("s2", "any advice about bikes for commuting")
    assert ctx is not None and "[conversation " in ctx and "steel touring bike" in ctx

    assert await recall.query_context("s2", "quantum chromodynamics") is None
    assert await recall.query_context("s2", "what is the") is None  # stopwords only


async def test_recall_ranks_by_relevance_and_respects_the_budget(recall: RecallBackend) -> None:
    recall.index_long_term("\n\n".join(
        [f"Note {i}: gardening tomatoes basil compost " + "filler words here " * 10 for i in range(10)]
        + ["Tomatoes tomatoes tomatoes: water tomatoes in the morning."]
    ))
    ctx = await recall.query_context("s", "tomatoes")
    assert ctx is not None and len(ctx) <= 600 + 200
    first_hit = ctx.splitlines()[2]
    assert "water tomatoes in the morning" in first_hit  # the densest match ranks first (bm25)


async def test_reindexing_long_term_replaces_the_old_text(recall: RecallBackend) -> None:
    recall.index_long_term("The wifi password hint is 'blue heron'.")
    assert await recall.query_context("s", "wifi heron") is not None
    recall.index_long_term("Nothing about networks any more.")
    assert await recall.query_context("s", "wifi heron") is None


@pytest.mark.parametrize("hostile", [
    'quote " unbalanced', "AND OR NOT", "NEAR(alpha beta, 2)", "col:value", "prefix*", "^start", "(((",
    "a - b + c", "'single'", "\x00null", "emoji 🦖 ünïcödé", "*", "", "   ", '""""', "{braces} [brackets]",
])
async def test_no_user_text_breaks_the_query(recall: RecallBackend, hostile: str) -> None:
    recall.index_long_term("alpha beta value start single null emoji ünïcödé braces brackets")
    await recall.query_context("s", hostile)  # never raises
    result = await recall.memory_query(hostile)
    assert isinstance(result, str)


def test_fts_query_quotes_plain_words() -> None:
    assert fts_query('Tell me about "Project X" OR NOT alpha*') == '"project" OR "alpha"'
    assert fts_query("the and of") is None


async def test_memory_query_tool_through_the_manager(recall: RecallBackend) -> None:
    manager = MemoryManager()
    manager.register(recall)
    recall.index_long_term("Favourite tea: genmaicha.")
    (tool,) = manager.tools()
    assert tool.name == "memory_query" and tool.visible
    assert tool.parameters["required"] == ["query"]
    outcome = await manager.call_tool("memory_query", '{"query": "favourite tea"}')
    assert outcome is not None and not outcome.is_error and "genmaicha" in outcome.content
    missing = await manager.call_tool("memory_query", '{"query": "coffee"}')
    assert missing is not None and missing.content.startswith("No matches for 'coffee'")


async def test_recall_forgets_a_deleted_session(recall: RecallBackend) -> None:
    await recall.record_turn("gone", "my locker code is 4417", "noted")
    recall.forget_session("gone")
    assert await recall.query_context("s", "locker code") is None


def test_split_paragraphs_cuts_long_blocks() -> None:
    text = "Short one.\n\n" + ("A sentence that goes on. " * 60)
    pieces = split_paragraphs(text, max_chars=200)
    assert pieces[0] == "Short one." and all(len(p) <= 200 for p in pieces) and len(pieces) > 5


def test_recall_unavailable_when_its_file_cannot_open(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    backend = RecallBackend(blocker / "sub" / "recall.sqlite3")  # parent is a file
    assert backend.is_available() is False and backend.search("x", 3) == []


# --- honcho ---------------------------------------------------------------------------------------


async def test_honcho_without_config_is_unavailable_and_silent() -> None:
    backend = HonchoBackend.from_config(HonchoConfig(), {})
    assert backend.configured is False
    assert backend.is_available() is False and await backend.probe() is False
    manager = MemoryManager()
    manager.register(backend)
    assert await manager.query_context("s", "hi") is None and manager.tools() == []


async def test_honcho_unreachable_is_unavailable_without_raising() -> None:
    cfg = HonchoConfig(base_url=f"http://127.0.0.1:{free_port()}", api_key_env="HONCHO_TEST_KEY")
    backend = HonchoBackend.from_config(cfg, {"HONCHO_TEST_KEY": "hk-secret-1234"}, probe_timeout_s=2)
    assert "hk-secret-1234" not in repr(backend)
    manager = MemoryManager()
    manager.register(backend)
    assert await manager.probe() is False
    assert backend.last_error and "Connection" in backend.last_error
    assert await manager.query_context("s", "hi") is None
    assert manager.tools() == []
    await manager.record_turn("s", "u", "r")
    await manager.aclose()


class FakeHoncho:
    """Just the endpoints the backend calls, with the response shapes the SDK validates."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        path = request.path
        self.requests.append((request.method, path, body))
        now = "2026-01-01T00:00:00Z"
        parts = path.strip("/").split("/")  # v3 workspaces <w> [peers|sessions] ...
        if path == "/v3/workspaces":
            return web.json_response({"id": body["id"], "created_at": now})
        workspace = parts[2]
        if parts[3:] == ["peers"]:
            return web.json_response({"id": body["id"], "workspace_id": workspace, "created_at": now})
        if parts[3:] == ["sessions"]:
            return web.json_response({"id": body["id"], "workspace_id": workspace, "is_active": True,
                                      "created_at": now})
        if parts[3] == "sessions" and parts[5:] == ["context"]:
            return web.json_response({
                "messages": [],
                "summary": {"content": "They talked about bikes.", "message_id": "m1", "summary_type": "short",
                            "created_at": now, "token_count": 5},
                "peer_representation": "The user commutes by bike and prefers steel frames.",
                "peer_card": ["Lives in Porto", "Cyclist"],
            })
        if parts[3] == "sessions" and parts[5:] == ["messages"]:
            return web.json_response([
                {"id": f"m{i}", "content": m["content"], "peer_id": m["peer_id"], "session_id": parts[4],
                 "created_at": now, "workspace_id": workspace, "token_count": 3}
                for i, m in enumerate(body["messages"])
            ])
        if parts[3] == "peers" and parts[5:] == ["chat"]:
            return web.json_response({"content": "They work as a nurse."})
        return web.json_response({"detail": "not faked"}, status=404)


@pytest.fixture
async def fake_honcho():
    server = FakeHoncho()
    await server.start()
    yield server
    await server.stop()


async def test_honcho_context_record_and_ask(fake_honcho: FakeHoncho) -> None:
    backend = HonchoBackend(base_url=fake_honcho.url, api_key="hk-test", workspace="didactyl test")
    manager = MemoryManager()
    manager.register(backend)
    assert manager.tools() == []  # not probed yet: nothing offered
    assert await manager.probe() is True

    ctx = await manager.query_context("sess1", "which bike?")
    assert ctx is not None and ctx.startswith("## Honcho context")
    assert "They talked about bikes." in ctx and "steel frames" in ctx and "Lives in Porto; Cyclist" in ctx
    context_calls = [r for r in fake_honcho.requests if r[1].endswith("/context")]
    assert context_calls and context_calls[0][1] == "/v3/workspaces/didactyl-test/sessions/sess1/context"

    await manager.record_turn("sess1", "I ride every day", "Nice!")
    (added,) = [r for r in fake_honcho.requests if r[1].endswith("/messages")]
    assert added[2]["messages"] == [{"content": "I ride every day", "peer_id": "admin"},
                                    {"content": "Nice!", "peer_id": "agent"}]

    assert manager.tool_names() == ["honcho_ask"]
    outcome = await manager.call_tool("honcho_ask", '{"question": "What is their job?"}')
    assert outcome is not None and outcome.content == "They work as a nurse."
    await manager.aclose()


async def test_the_manager_probes_before_asking_for_context(fake_honcho: FakeHoncho) -> None:
    manager = MemoryManager()
    manager.register(HonchoBackend(base_url=fake_honcho.url))
    ctx = await manager.query_context("s", "bikes")  # no explicit probe first
    assert ctx is not None and "steel frames" in ctx
    await manager.aclose()


async def test_honcho_going_down_marks_it_unavailable(fake_honcho: FakeHoncho) -> None:
    backend = HonchoBackend(base_url=fake_honcho.url, recheck_s=3600)
    assert await backend.probe() is True
    await fake_honcho.stop()
    await fake_honcho.start()  # a new port: the old URL now refuses connections
    assert await backend.query_context("s", "hello") is None
    assert backend.is_available() is False
    assert await backend.probe() is False  # cached until recheck_s passes: no new network wait
    await backend.aclose()


# --- wiring -----------------------------------------------------------------------------------------


async def test_create_memory_manager_from_config(tmp_path: Path) -> None:
    from didactyl_tui.agent.memory.backend import RECALL_DB, create_memory_manager
    from didactyl_tui.config import Config

    cfg = Config()
    assert cfg.memory.backend == "recall"
    manager = create_memory_manager(cfg, tmp_path, {})
    assert manager.backend_id == "recall" and manager.is_available()
    assert (tmp_path / RECALL_DB).exists()
    await manager.index_long_term("The spare key is under the blue pot.")
    ctx = await manager.query_context("s", "where is the spare key?")
    assert ctx is not None and "blue pot" in ctx
    await manager.record_turn("old", "my bike lock code is 2231", "Noted.")
    assert "2231" in (await manager.query_context("s", "bike lock code") or "")
    await manager.forget_session("old")
    assert await manager.query_context("s", "bike lock code") is None
    manager.close()
    assert manager.is_available() is False

    cfg.memory.backend = "honcho"
    honcho = create_memory_manager(cfg, tmp_path, {})
    assert honcho.backend_id == "honcho" and not honcho.is_available()
    cfg.memory.backend = "none"
    assert create_memory_manager(cfg, tmp_path, {}).backend is None


# --- whom the context is for (agent/audience.py) ----------------------------------------------------------


async def test_a_guest_recalls_only_its_own_conversation_and_the_admin_never_a_guests(recall: RecallBackend) -> None:
    manager = MemoryManager()
    manager.register(recall)
    recall.index_long_term("The admin's locker code is zebra4471.")
    await manager.record_turn("admin-chat", "my bike lock code is 1234", "Noted.")
    await manager.record_conversation_turn("guest-chat", "my bike is red", "Nice bike.")
    await manager.record_conversation_turn("other-guest", "my bike is blue", "Nice too.")

    admin, none = await manager.context_for("admin-chat", "bike lock code", ADMIN_TURN)
    assert none is None and admin is not None and "1234" in admin and "zebra4471" in admin
    assert "red" not in admin and "blue" not in admin  # a guest's words never reach the admin's prompt
    tool = await manager.call_tool("memory_query", '{"query": "bike"}')
    assert tool is not None and "1234" in tool.content and "red" not in tool.content

    guest, none = await manager.context_for("guest-chat", "what about my bike lock code?", guest_turn("a guest's"))
    assert none is None and guest is not None and "red" in guest
    assert "1234" not in guest and "zebra4471" not in guest and "blue" not in guest
    # A new guest conversation recalls nothing at all.
    assert await manager.context_for("new-guest", "bike lock code", guest_turn("a guest's")) == (None, None)
    await recall.aclose()


async def test_a_backend_that_cannot_keep_to_one_conversation_gives_a_guest_nothing_and_says_why() -> None:
    backend = FakeBackend("honcho-like", context="everything the admin ever said")
    manager = MemoryManager()
    manager.register(backend)
    context, withheld = await manager.context_for("s", "hi", guest_turn("a conversation with Bob"))
    assert context is None
    assert withheld == ("withheld: the honcho-like backend draws on the admin's conversations and cannot keep to "
                        "this one's; this is a conversation with Bob")
    await manager.record_conversation_turn("s", "I am Bob", "Hello Bob")
    assert backend.recorded == []  # nor does it learn a guest's words
    assert await manager.context_for("s", "hi", ADMIN_TURN) == ("everything the admin ever said", None)
