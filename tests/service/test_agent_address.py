"""The agent's address as ``attach`` reads it (service/agent_address.py): the nprofile ``serve`` prints round-trips to
its key and relays, and the relays the agent reads are found where the address points — its kind 10050, else its
kind 10002's read relays, else the relays named with it — on a real relay; with none, nothing is guessed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from relay_servers import fast_client_kwargs

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.kinds import RELAY_LIST
from didactyl_tui.nostr.nip17 import build_dm_relay_list
from didactyl_tui.nostr.nip19 import encode_nprofile
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.agent_address import AgentAddress, attach_command, find_agent_relays, parse_agent

AGENT = AGENT_KEY.public_key_hex


def test_the_line_serve_prints_reads_back_as_the_agent_and_its_relays() -> None:
    line = attach_command(AGENT, ["ws://127.0.0.1:7447", "wss://relay.example"], "ab" * 16)
    _, _, address, flag, secret = line.split()
    assert address.startswith("nprofile1") and (flag, secret) == ("--invite", "ab" * 16)
    parsed = parse_agent(address, ["wss://more.example", "ws://127.0.0.1:7447"])
    assert parsed.pubkey == AGENT
    assert parsed.hints == ("ws://127.0.0.1:7447", "wss://relay.example", "wss://more.example")
    odd = parse_agent(encode_nprofile(AGENT, ["https://not-a-relay", "ws://ok.example"]))
    assert odd.hints == ("ws://ok.example",) and odd.ignored == ("https://not-a-relay",)
    assert parse_agent(AGENT_KEY.npub).pubkey == AGENT == parse_agent(AGENT).pubkey
    for bad in ("nprofile1qqqqqq", "npub1nope", "hello"):
        with pytest.raises(ValueError):
            parse_agent(bad)


async def test_the_agents_relays_are_its_kind_10050_else_its_read_relays_else_those_named(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "a.sqlite3") as relay:
        hinted = AgentAddress(AGENT, (relay.url,))
        found = await find_agent_relays(hinted, [], timeout=3, open_pool=_pool)
        assert found.urls == (relay.url,) and found.source == "the relays its address names"
        nowhere = await find_agent_relays(AgentAddress(AGENT), [relay.url], timeout=3, open_pool=_pool)
        assert nowhere.urls == () and "no relay of the agent's is known" in nowhere.problem()

        now = int(time.time())
        listed = sign_event(AGENT_KEY, kind=RELAY_LIST, content="", created_at=now, tags=[
            ["r", "wss://inbox.example", "read"], ["r", "wss://outbox.example", "write"], ["r", "wss://both.example"]])
        forged = sign_event(ADMIN_KEY, kind=RELAY_LIST, content="", created_at=now + 5, tags=[["r", "wss://evil"]])
        async with RelayPool([relay.url], **fast_client_kwargs()) as pool:
            for ev in (listed, forged):
                assert (await pool.publish(ev, 3)).any_accepted
            read = await find_agent_relays(AgentAddress(AGENT), [relay.url], timeout=3, open_pool=_pool)
            assert read.urls == ("wss://inbox.example", "wss://both.example") and "kind 10002" in read.source
            older = build_dm_relay_list(AGENT_KEY, ["wss://old.example"], created_at=now - 10)
            newer = build_dm_relay_list(AGENT_KEY, ["wss://dm.example", relay.url], created_at=now)
            for ev in (older, newer):
                await pool.publish(ev, 3)
        dm = await find_agent_relays(hinted, [], timeout=3, open_pool=_pool)
        assert dm.urls == ("wss://dm.example", relay.url) and "kind 10050" in dm.source and relay.url in dm.source


def _pool(urls: list[str]) -> RelayPool:
    return RelayPool(urls, **fast_client_kwargs())
