"""agent.llm: settings, streaming chunks, error mapping and the retry policy — real litellm against the stub."""

from __future__ import annotations

import email.utils
import time
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from llm_stub import LlmStub, Reply, ToolCall

from didactyl_tui.agent.llm import client as llm
from didactyl_tui.agent.llm import errors as llm_errors
from didactyl_tui.agent.llm import tokens
from didactyl_tui.agent.llm.client import map_error, stream_chat
from didactyl_tui.agent.llm.errors import LlmError
from didactyl_tui.agent.llm.types import LlmChunk, LlmSettings
from didactyl_tui.config import LlmConfig

KEY = "sk-test-abcdefghijklmnop"


@pytest.fixture
def litellm_here() -> None:
    """litellm in this process too (the price table, the tokenizer with litellm loaded); calls go to the helper."""
    llm.preload()


def settings_for(stub: LlmStub, **kw: Any) -> LlmSettings:
    return LlmSettings(**{"model": "openai/stub-model", "api_base": stub.base_url, "api_key": KEY, "timeout_s": 3.0,
                          "max_retries": 1, "retry_backoff_s": 0.01, **kw})


async def chunks_of(settings: LlmSettings, tools: list[dict] | None = None) -> list[LlmChunk]:
    return [c async for c in stream_chat(settings, [{"role": "user", "content": "hi"}], tools)]


TOOL = {"type": "function", "function": {"name": "lookup", "description": "Look up.",
                                         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}


async def test_stream_chat_yields_text_tool_call_fragments_finish_and_usage(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("lookup", '{"q": "weather in Oslo"}', id="call_1"), text="Checking.",
                            usage=(30, 9)))
    chunks = await chunks_of(settings_for(stub), [TOOL])
    assert "".join(c.text for c in chunks) == "Checking."
    fragments = [d for c in chunks for d in c.tool_calls]
    assert {d.index for d in fragments} == {0}
    assert [d.id for d in fragments if d.id] == ["call_1"] and [d.name for d in fragments if d.name] == ["lookup"]
    assert "".join(d.arguments for d in fragments) == '{"q": "weather in Oslo"}'
    assert [c.finish_reason for c in chunks if c.finish_reason] == ["tool_calls"]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert usage and (usage[-1].prompt_tokens, usage[-1].completion_tokens) == (30, 9)
    body = stub.requests[0].body
    assert body["tools"] == [TOOL] and body["stream_options"] == {"include_usage": True}


async def test_no_tools_key_when_no_tools(stub: LlmStub) -> None:
    stub.script(Reply.text_reply("plain"))
    await chunks_of(settings_for(stub))
    assert "tools" not in stub.requests[0].body


async def test_no_usage_reported_leaves_usage_empty(stub: LlmStub) -> None:
    # A server that ignores stream_options sends no usage chunk: nothing breaks, usage stays unknown.
    stub.script(Reply.text_reply("fine"))
    stub_chunks = stub._stream_chunks(Reply.text_reply("x"), include_usage=False)
    assert all("usage" not in c for c in stub_chunks)
    chunks = await chunks_of(settings_for(stub))
    assert "".join(c.text for c in chunks) == "fine"


async def test_rate_limit_error_carries_retry_after(stub: LlmStub) -> None:
    stub.script(Reply.rate_limited(42))
    with pytest.raises(LlmError) as info:
        await chunks_of(settings_for(stub, max_retry_wait_s=10))
    err = info.value
    assert err.kind == "rate_limit" and err.retry_after == 42 and err.retryable and err.status == 429
    assert err.one_line().startswith("LLM rate limited: Rate limited by http://127.0.0.1:")
    assert "\n" not in err.one_line() and "litellm." not in err.message and "OpenAIException" not in err.message


async def test_backoff_between_server_error_retries(stub: LlmStub) -> None:
    stub.script(Reply.server_error(), Reply.server_error(), Reply.text_reply("ok"))
    chunks = await chunks_of(settings_for(stub, max_retries=2, retry_backoff_s=0.2))
    assert "".join(c.text for c in chunks) == "ok"
    t = [r.at for r in stub.requests]
    assert t[1] - t[0] >= 0.19 and t[2] - t[1] >= 0.39  # doubling backoff


async def test_bad_request_and_unknown_model_are_not_retried(stub: LlmStub) -> None:
    stub.script(Reply.error(400, "Invalid value for 'temperature'."), Reply.error(404, "The model does not exist.",
                                                                                code="model_not_found"))
    with pytest.raises(LlmError) as first:
        await chunks_of(settings_for(stub, max_retries=3))
    assert first.value.kind == "bad_request" and "temperature" in first.value.message
    with pytest.raises(LlmError) as second:
        await chunks_of(settings_for(stub, max_retries=3))
    assert second.value.kind == "bad_request" and "does not know the model 'openai/stub-model'" in second.value.message
    assert len(stub.requests) == 2


async def test_the_stub_also_answers_without_streaming(stub: LlmStub) -> None:
    stub.script(Reply.tools(ToolCall("lookup", "{}", id="c9"), text="t"))
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{stub.base_url}/chat/completions",
                             json={"model": "stub-model", "messages": [], "stream": False}) as resp:
            body = await resp.json()
    message = body["choices"][0]["message"]
    assert message["tool_calls"][0]["id"] == "c9" and body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"]["total_tokens"] == 18


# --- pure parts -----------------------------------------------------------------------------------


def test_settings_from_config_reads_the_key_from_the_named_variable() -> None:
    cfg = LlmConfig(model=" openai/gpt-4o-mini ", api_base="", api_key_env="MY_KEY", timeout_s=12, max_retries=3)
    s = LlmSettings.from_config(cfg, {"MY_KEY": KEY})
    assert (s.model, s.api_base, s.api_key, s.timeout_s, s.max_retries) == ("openai/gpt-4o-mini", None, KEY, 12, 3)
    assert KEY not in repr(s)
    assert LlmSettings.from_config(LlmConfig(), {}).configured is False


def test_map_error_for_plain_exceptions() -> None:
    s = LlmSettings(model="openai/x", api_base="http://h/v1", api_key=KEY, timeout_s=7)
    assert map_error(TimeoutError(), s).kind == "timeout"
    assert "7 s" in map_error(TimeoutError(), s).message
    refused = ConnectionRefusedError(111, "Connection refused")
    assert map_error(refused, s).kind == "connection"
    weird = map_error(ValueError(f"bad things with {KEY}"), s)
    assert weird.kind == "server" and KEY not in weird.message and "ValueError" in weird.message
    original = LlmError("x", "auth")
    assert map_error(original, s) is original
    with pytest.raises(ValueError):
        LlmError("x", "nonsense")


def test_map_error_follows_the_cause_chain_to_a_refused_connection() -> None:
    s = LlmSettings(model="openai/x", api_base="http://h/v1")
    try:
        try:
            raise ConnectionRefusedError(111, "refused")
        except ConnectionRefusedError as inner:
            raise RuntimeError("Connection error.") from inner
    except RuntimeError as outer:
        assert map_error(outer, s).kind == "connection"


def test_retry_after_parsing() -> None:
    def exc(headers: dict[str, str]) -> Any:
        return SimpleNamespace(response=SimpleNamespace(headers=headers))

    assert llm_errors.retry_after(exc({"retry-after": "3"})) == 3
    assert llm_errors.retry_after(exc({"retry-after-ms": "1500"})) == 1.5
    later = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 15 < llm_errors.retry_after(exc({"retry-after": later})) <= 20
    assert llm_errors.retry_after(exc({})) is None
    assert llm_errors.retry_after(exc({"retry-after": "soon"})) is None


def test_retry_policy() -> None:
    s = LlmSettings(model="m", max_retries=2, retry_backoff_s=1.0, max_retry_wait_s=10)
    rate = LlmError("r", "rate_limit", retry_after=4)
    assert llm_errors.retry_delay(rate, 0, s) == 4
    assert llm_errors.retry_delay(LlmError("r", "rate_limit", retry_after=11), 0, s) is None  # beyond the cap
    assert 1.0 <= llm_errors.retry_delay(LlmError("s", "server"), 0, s) <= 1.1
    assert 2.0 <= llm_errors.retry_delay(LlmError("s", "connection"), 1, s) <= 2.2
    assert llm_errors.retry_delay(LlmError("s", "server"), 2, s) is None  # retries used up
    for kind in ("auth", "timeout", "context_length", "bad_request", "not_configured"):
        assert llm_errors.retry_delay(LlmError("x", kind), 0, s) is None


def test_detail_strips_litellm_prefixes_and_masks_keys() -> None:
    e = Exception("litellm.RateLimitError: RateLimitError: OpenAIException - Slow down\nTraceback (most recent...)")
    assert llm_errors.safe_detail(e, None) == "Slow down"
    assert llm_errors.safe_detail(Exception(f"key {KEY} was wrong"), KEY) == "key *** was wrong"
    assert llm_errors.safe_detail(Exception("Incorrect API key provided: sk-proj-abcdefgh1234"), None) == \
        "Incorrect API key provided: sk-***"


def test_cost_known_and_unknown_models(litellm_here: None) -> None:
    assert llm.cost_usd("openai/stub-model", 100, 10) is None
    cost = llm.cost_usd("gpt-4o-mini", 1_000_000, 0)
    assert cost is not None and cost > 0


def test_token_counts_are_tiktokens_with_litellm_loaded_too(litellm_here: None, monkeypatch) -> None:
    """One tokenizer whatever is loaded (agent/tokens.py): litellm's own counter would load ~110 MiB more.

    Counted in this process: a model helper that an earlier test in this worker started makes the helper the
    counter, and when it has stopped since (it leaves when unused) counts are estimates until one runs again, as in
    the app at rest (seen once, seed 3118679567). The helper's own counts are checked where it is started."""
    assert llm.is_loaded()
    monkeypatch.setattr(tokens, "_remote_counter", None)  # this process's counter, whatever ran before
    assert tokens.counter_backend() == "tiktoken"
    assert llm.count_tokens("gpt-4o-mini", "hello world") == 2
    assert llm.count_tokens("gpt-4o-mini", [{"role": "user", "content": "hello world"}]) == \
        2 + tokens.PER_MESSAGE_OVERHEAD + tokens.REPLY_PRIMING


async def test_errors_print_nothing_and_an_unprefixed_model_gets_a_hint(stub: LlmStub, capsys) -> None:
    stub.script(Reply.unauthorized())
    with pytest.raises(LlmError):
        await chunks_of(settings_for(stub))
    with pytest.raises(LlmError) as info:
        await chunks_of(LlmSettings(model="mystery-model", timeout_s=2, max_retries=0))
    assert info.value.kind == "bad_request"
    assert "provider prefix" in info.value.message and '"openai/mystery-model"' in info.value.message
    out = capsys.readouterr()
    assert out.out == ""  # litellm's "Provider List..." / feedback banners would corrupt the TUI


async def test_a_missing_key_is_one_line_naming_the_variable_to_set(stub: LlmStub, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LlmError) as info:
        await chunks_of(settings_for(stub, api_key=None, max_retries=0))
    err = info.value
    assert err.kind == "auth" and not err.retryable  # not a "server error 500" worth retrying
    assert "export OPENAI_API_KEY=" in err.message and "\n" not in err.message
    assert "api_key_env" in err.message and stub.requests == []  # litellm refused before any request
    # With [llm] api_key_env set, that variable is the one named.
    with pytest.raises(LlmError) as info:
        await chunks_of(settings_for(stub, api_key=None, api_key_env="MY_LLM_KEY", max_retries=0))
    assert "export MY_LLM_KEY=" in info.value.message and "OPENAI_API_KEY" not in info.value.message


def test_missing_key_variable_for_other_providers() -> None:
    anthropic = LlmSettings(model="anthropic/claude-sonnet-4-5")
    err = map_error(RuntimeError("Missing Anthropic API Key - no key is set. Please set `ANTHROPIC_API_KEY`"),
                    anthropic)
    assert err.kind == "auth" and "export ANTHROPIC_API_KEY=" in err.message
    assert llm_errors.key_variable(LlmSettings(model="groq/llama3")) == "GROQ_API_KEY"
