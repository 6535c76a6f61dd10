"""Fixtures shared by more than one folder of tests/ (a folder's own live in its conftest.py; plain helpers in the
support modules beside this file, tests/*_support.py, llm_stub.py, relay_servers.py, ...)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import model_helper_template
import pytest
from llm_stub import LlmStub, Reply
from mcp_support import everything_server  # noqa: F401  (pytest fixture)
from nip46_outside_support import outside_bunker_dir  # noqa: F401  (pytest fixture)
from relay_servers import (  # noqa: F401  (any_relay, embedded_relay, rust_relay: fixtures)
    EmbeddedRelayUnderTest,
    any_relay,
    embedded_relay,
    running_relay,
    rust_relay,
)
from shared_relay_support import kill_shared_relays

_RUN_FOLDER = pytest.StashKey[Path]()  # the run's temp folder: the model helpers' template


@pytest.fixture(autouse=True)
def _end_shared_relays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A shared relay process outlives the service that started it (its job): each test ends those it
    started (every relay whose data dir lies under this session's temp dir)."""
    yield
    kill_shared_relays(tmp_path_factory.getbasetemp())


def pytest_configure(config: pytest.Config) -> None:
    # Set by the first pytest process; xdist's workers and every process the tests start inherit them.
    if os.environ.get(model_helper_template.ENV) is not None:
        return
    folder = Path(tempfile.mkdtemp(prefix="didactyl-suite-"))
    config.stash[_RUN_FOLDER] = folder
    # The suite's model helpers are forked from one template that imported litellm once, not each started afresh
    # (~8 s of CPU each): tests/model_helper_template.py.
    os.environ[model_helper_template.ENV] = model_helper_template.command(folder)
    # Where Python is told not to write bytecode ($PYTHONDONTWRITEBYTECODE), each of the few hundred processes a run
    # starts (commands, relays, workers) would compile the package again: the suite keeps a bytecode cache of its own
    # in the user's cache folder instead (nothing is written in the source tree). It outlives the run: a fresh one
    # costs the next run ~30 s of CPU (litellm alone compiles for ~8 s, and the workers compile the same modules side
    # by side), and Python checks each entry against its source's time and size before using it.
    dont_write = os.environ.get("PYTHONDONTWRITEBYTECODE")
    if dont_write and not os.environ.get("PYTHONPYCACHEPREFIX"):
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = str(_bytecode_cache())

        def as_it_was() -> None:
            os.environ["PYTHONDONTWRITEBYTECODE"] = dont_write
            os.environ.pop("PYTHONPYCACHEPREFIX", None)

        config.add_cleanup(as_it_was)


def _bytecode_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "didactyl-tui-tests" / "pycache"


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_RUN_FOLDER, None)
    if folder is not None:
        model_helper_template.stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
        del os.environ[model_helper_template.ENV]


@pytest.fixture(scope="session")
def warm_litellm() -> None:
    """This process's model helper started and warm, once per test session, outside any test's deadline.

    Model calls go to the helper process (agent/llm/worker_client.py), as in the app: this process never imports
    litellm for them. The helper's start and its first completion take seconds (litellm's import, the OpenAI client,
    its HTTP stack, the tokenizer); a test that happened to be first used to spend its whole wait on that under
    load. Every fixture that starts the LLM stub depends on this one, so order and load do not matter.
    """
    from didactyl_tui.agent.llm import client as llm
    from didactyl_tui.agent.llm.types import LlmSettings

    async def one_call() -> None:
        async with LlmStub() as stub:
            stub.script(Reply.text_reply("warm"))
            settings = LlmSettings(model="openai/stub-model", api_base=stub.base_url, api_key="sk-warm",
                                   timeout_s=60.0, max_retries=0)
            async for _ in llm.stream_chat(settings, [{"role": "user", "content": "warm up"}]):
                pass
        await asyncio.to_thread(llm.count_tokens, "openai/stub-model", "warm up")  # never on a loop's thread

    asyncio.run(one_call())


@pytest.fixture
async def stub(warm_litellm: None) -> AsyncIterator[LlmStub]:
    """The OpenAI-compatible stub server (tests/llm_stub.py) for one test, litellm already warm."""
    async with LlmStub() as server:
        yield server


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[EmbeddedRelayUnderTest]:
    """Our relay on a free port, for one test."""
    async with running_relay(tmp_path) as made:
        yield made


@pytest.fixture
async def relays(tmp_path: Path) -> AsyncIterator[list[EmbeddedRelayUnderTest]]:
    """Two of our relays on free ports, for one test (the outbox, lagging relays, who holds which version)."""
    made = [EmbeddedRelayUnderTest(tmp_path / f"relay{n}.sqlite3") for n in range(2)]
    try:
        for r in made:
            await r.start()
        yield made
    finally:
        for r in made:
            await r.stop()


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The local zone is UTC (times on screen are local: pictures must be the same on every machine)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
