"""The model dialog's connection test through the service: the server's model list, a one-token completion,
a missing key named as a one-line fix, an unreachable server; each bounded in time."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import AGENT_KEY
from llm_stub import LlmStub, Reply
from relay_servers import free_port

from didactyl_tui.agent.llm.model_probe import model_names
from didactyl_tui.config import Config
from didactyl_tui.service.app import AppService
from didactyl_tui.service.model import ModelSettings

pytestmark = pytest.mark.usefixtures("warm_litellm")


def service(tmp_path: Path, **env: str) -> AppService:
    return AppService(Config(), data_dir=tmp_path / "d", env={"DIDACTYL_NSEC": AGENT_KEY.nsec(), **env})


async def test_the_check_lists_the_servers_models_and_makes_a_tiny_completion(tmp_path: Path) -> None:
    svc = service(tmp_path, STUB_KEY="sk-stub")  # not started: the dialog can test before the relays are up
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("OK"))
        check = await svc.model.check(ModelSettings("openai/stub-model", stub.base_url, "STUB_KEY"))
        assert check.ok and "answered" in check.line
        assert check.models == ("stub-large", "stub-model")
        assert stub.model_list_requests[0]["Authorization"] == "Bearer sk-stub"
        [request] = stub.requests
        assert request.body["max_tokens"] == 1 and request.headers["Authorization"] == "Bearer sk-stub"
        # No model typed yet: the list alone, to pick from.
        picked = await svc.model.check(ModelSettings("", stub.base_url, "STUB_KEY"))
        assert picked.ok and picked.models and "pick one" in picked.line and len(stub.requests) == 1


async def test_a_missing_key_and_a_dead_server_are_one_line_each(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    svc = service(tmp_path, SOME_KEY="sk-some")
    async with LlmStub() as stub:
        stub.models = None  # a server without a model list: the completion is the test
        check = await svc.model.check(ModelSettings("openai/stub-model", stub.base_url, "EMPTY_KEY_VAR"))
        assert not check.ok and check.models == ()
        assert "export EMPTY_KEY_VAR=" in check.line and "\n" not in check.line
        assert stub.requests == []
    dead = f"http://127.0.0.1:{free_port()}/v1"
    check = await svc.model.check(ModelSettings("openai/stub-model", dead, "SOME_KEY"))
    assert not check.ok and check.line.startswith("Cannot reach") and "\n" not in check.line


def test_model_names_are_bounded_and_printable() -> None:
    payload = {"data": [{"id": "b"}, {"id": "a"}, {"id": "a"}, {"id": "bad\x1b[31m"}, {"id": "x" * 500}, 7,
                        {"id": ""}]}
    assert model_names(payload) == ["a", "b"]
    assert len(model_names({"data": [{"id": f"m{n}"} for n in range(5000)]})) == 500
    assert model_names("not a list") == [] and model_names(["plain", "names"]) == ["names", "plain"]
