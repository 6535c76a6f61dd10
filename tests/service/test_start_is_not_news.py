"""What a start finds is not news: the second start of the service on a data dir (the app's, and `serve`'s) tells
of nothing "newer" — no SoulChanged, no concurrent-edit offer, no warning, no "newer" line in the log — while the
same notices still fire on the event they name (a soul published elsewhere while the service runs)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from agent_support import AGENT_KEY, soul_event, wait_for
from relay_servers import EmbeddedRelayUnderTest, fast_client_kwargs

from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.soul.template import SoulTemplate, TemplateSection
from didactyl_tui.config import Config
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import DocumentChanged, ServiceEvent, ServiceWarning, SoulChanged


def _config(url: str) -> Config:
    cfg = Config()
    cfg.relays.embedded.enabled = False
    cfg.relays.urls = [url]
    cfg.relays.timeout_s = 3.0
    cfg.memory.backend = "none"
    return cfg


def _service(url: str, data: Path, heard: list[ServiceEvent]) -> AppService:
    svc = AppService(_config(url), data_dir=data, env={"DIDACTYL_NSEC": AGENT_KEY.nsec()},
                     relay_client_options=fast_client_kwargs())
    svc.add_listener(heard.append)
    return svc


def _news(heard: list[ServiceEvent]) -> list[ServiceEvent]:
    return [e for e in heard if isinstance(e, SoulChanged | ServiceWarning)
            or (isinstance(e, DocumentChanged) and e.lost_local)]


async def test_a_second_start_tells_of_nothing_newer_and_a_soul_published_meanwhile_is_told(
        relay: EmbeddedRelayUnderTest, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="didactyl")
    data = tmp_path / "data"
    first: list[ServiceEvent] = []
    async with _service(relay.url, data, first) as svc:  # the first run publishes the config's soul, saves memory
        await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)
        assert svc.soul.view().event_id is not None
        assert (await svc.documents.save(DocumentKey.SHORT_TERM, "Ada likes tea.")).any_accepted
        await svc.parts.runtime.tasks.settle(10)
        soul_id = svc.soul.view().event_id
    assert not [e for e in first if isinstance(e, SoulChanged)]

    for _ in range(2):  # the next starts find that soul: the one in use, never "newer"
        caplog.clear()
        heard: list[ServiceEvent] = []
        async with _service(relay.url, data, heard) as svc:
            await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)
            # A question to the history thread queues behind its judging of every version seen at start.
            await svc.documents.history(DocumentKey.SHORT_TERM)
            assert svc.soul.view().event_id == soul_id
        assert _news(heard) == []
        assert not [r.getMessage() for r in caplog.records if "newer" in r.getMessage()]

    # The notice fires on what it names: a soul another program publishes while the service runs.
    heard = []
    async with _service(relay.url, data, heard) as svc:
        await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)
        other = SoulTemplate((TemplateSection("persona", "system", None, "You are Elsewhere.", True),), "test")
        ev = soul_event(AGENT_KEY, other, int(time.time()) + 5)
        async with RelayPool([relay.url], **fast_client_kwargs()) as pool:
            assert (await pool.publish(ev)).any_accepted
        await wait_for(lambda: any(isinstance(e, SoulChanged) for e in heard), timeout=15)
    assert [(e.event_id, e.sections) for e in heard if isinstance(e, SoulChanged)] == [(ev.id, ("persona",))]
    assert any(f"a newer soul is in use: event {ev.id[:12]}" in r.getMessage() for r in caplog.records)
