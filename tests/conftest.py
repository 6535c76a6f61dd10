"""Shared pytest fixtures (generic; area-specific helpers live in their own modules)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from nip46_outside_support import outside_bunker_dir  # noqa: F401  (pytest fixture)
from relay_servers import any_relay, embedded_relay, rust_relay  # noqa: F401  (pytest fixtures)
from shared_relay_support import kill_shared_relays


@pytest.fixture(autouse=True)
def _end_shared_relays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A shared relay process outlives the service that started it (its job): each test ends those it
    started (every relay whose data dir lies under this session's temp dir)."""
    yield
    kill_shared_relays(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def warm_litellm() -> None:
    """Pay litellm's one-time costs once per test session, outside any test's deadline.

    ``import litellm`` takes seconds here, and the first completion imports more (the OpenAI client, its
    HTTP stack, the tokenizer). A test that happened to be first used to spend its whole wait on that
    under load; every fixture that starts the LLM stub depends on this one, so order and load do not matter.
    """
    from llm_stub import LlmStub, Reply

    from didactyl_tui.agent.llm import client as llm
    from didactyl_tui.agent.llm.types import LlmSettings

    async def one_call() -> None:
        async with LlmStub() as stub:
            stub.script(Reply.text_reply("warm"))
            settings = LlmSettings(model="openai/stub-model", api_base=stub.base_url, api_key="sk-warm",
                                       timeout_s=60.0, max_retries=0)
            async for _ in llm.stream_chat(settings, [{"role": "user", "content": "warm up"}]):
                pass
        llm.count_tokens("openai/stub-model", "warm up")

    llm.preload()
    asyncio.run(one_call())
