"""The relays are the reality for the agent's identity (kinds 0/3/10002); config.toml is the intent for the first
publish. A profile another client (rust-nostr) published with a picture and a nip05 survives read-only commands,
app starts and restarts; the drift is shown field by field; "adopt" and "republish merged" both keep the picture."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_support import AGENT_KEY
from cli_support import outside_env
from relay_servers import fast_client_kwargs

from didactyl_tui.agent.identity.cache import IdentityCache, desired_profile, identity_drift, own_identity_drafts
from didactyl_tui.config_file import load_config
from didactyl_tui.nostr.embedded_relay.shared import find_shared_relay
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.kinds import METADATA
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService

nostr_sdk = pytest.importorskip("nostr_sdk")

CONFIG = '[agent]\nname = "Bot"\nabout = "An agent."\npicture = ""\n[relays]\nembedded_port = 0\ntimeout_s = 2.0\n' \
         '[memory]\nbackend = "none"\n'
THEIRS = {"name": "Renamed elsewhere", "picture": "https://example.org/p.png", "nip05": "bot@example.org"}


def setup_env(tmp_path: Path) -> dict[str, str]:
    cfg_dir = tmp_path / "config" / "didactyl"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    (cfg_dir / "config.toml").write_text(CONFIG)
    env = outside_env()
    env.update(DIDACTYL_DATA_DIR=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               HOME=str(tmp_path / "home"), DIDACTYL_NSEC=AGENT_KEY.nsec())
    return env


def service(env: dict[str, str]) -> AppService:
    return AppService(load_config(None, env), data_dir=Path(env["DIDACTYL_DATA_DIR"]), env=env,
                      relay_client_options=fast_client_kwargs())


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "didactyl_tui", *args], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done


async def relay_url(env: dict[str, str]) -> str:
    relay = await find_shared_relay(Path(env["DIDACTYL_DATA_DIR"]))
    assert relay is not None
    return relay.url


async def profile_on_relay(url: str) -> Event:
    async with RelayPool([url], **fast_client_kwargs()) as pool:
        events = await pool.query([{"authors": [AGENT_KEY.public_key_hex], "kinds": [METADATA]}], timeout=3)
    assert len(events) == 1
    return events[0]


async def rust_publishes_profile(url: str, fields: dict[str, str], created_at: int) -> str:
    """Another Nostr client (rust-nostr) with the agent's key publishes a kind 0."""
    keys = nostr_sdk.Keys.parse(AGENT_KEY.secret_hex())
    client = nostr_sdk.Client()
    await client.add_relay(nostr_sdk.RelayUrl.parse(url))
    await client.connect()
    try:
        builder = nostr_sdk.EventBuilder(nostr_sdk.Kind(METADATA), json.dumps(fields))
        event = builder.custom_created_at(nostr_sdk.Timestamp.from_secs(created_at)).finalize(keys)
        output = await client.send_event(event)
    finally:
        await client.shutdown()
    assert output.success, output
    return output.id.to_hex()


async def first_publish_then_rust_edit(env: dict[str, str]) -> tuple[str, str]:
    async with service(env) as svc:
        await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)
    url = await relay_url(env)
    ours = await profile_on_relay(url)
    assert json.loads(ours.content) == {"name": "Bot", "about": "An agent."}  # the config's first publish
    # Newer than ours, and not from the future (we never date a replacement more than a few seconds ahead).
    await asyncio.sleep(max(0.0, ours.created_at + 2 - time.time()))
    theirs_id = await rust_publishes_profile(url, THEIRS, ours.created_at + 1)
    assert (await profile_on_relay(url)).id == theirs_id
    return url, theirs_id


async def test_a_profile_from_another_client_survives_read_only_commands_and_restarts(tmp_path: Path) -> None:
    env = setup_env(tmp_path)
    url, theirs_id = await first_publish_then_rust_edit(env)
    await asyncio.to_thread(cli, env, "prompt")
    await asyncio.to_thread(cli, env, "memory", "show", "--type", "short_term")
    assert (await profile_on_relay(url)).id == theirs_id

    for _ in range(2):  # app start, and restart
        async with service(env) as svc:
            await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)
            [drift] = svc.identity.drift()
            assert drift.kind == METADATA and drift.event.id == theirs_id
            # Field by field: the name differs, about is only in the config; picture and nip05 are kept.
            assert {c.field: (c.relays, c.config) for c in drift.changes} == {
                "name": ("Renamed elsewhere", "Bot"), "about": ("", "An agent.")}
            assert svc.identity.snapshot().agent.profile == THEIRS
        assert (await profile_on_relay(url)).id == theirs_id

    shown = json.loads((await asyncio.to_thread(cli, env, "identity", "show", "--json")).stdout)
    assert shown["profile"] == THEIRS and [d["event_id"] for d in shown["drift"]] == [theirs_id]
    text = (await asyncio.to_thread(cli, env, "identity", "show")).stdout
    assert 'drift:   name: relays "Renamed elsewhere" · config "Bot"' in text
    assert (await profile_on_relay(url)).id == theirs_id

    # Republish merged: the config's fields over theirs, picture and nip05 kept.
    async with service(env) as svc:
        outcomes = await svc.identity.republish_merged()
        assert outcomes[METADATA].any_accepted and svc.identity.drift() == []
    merged = await profile_on_relay(url)
    assert json.loads(merged.content) == {**THEIRS, "name": "Bot", "about": "An agent."}
    async with service(env) as svc:  # a restart publishes nothing more, reports no drift
        await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)
        assert svc.identity.drift() == []
    assert (await profile_on_relay(url)).id == merged.id


async def test_adopt_keeps_the_relays_version_and_stops_the_notice(tmp_path: Path) -> None:
    env = setup_env(tmp_path)
    url, theirs_id = await first_publish_then_rust_edit(env)
    adopted = json.loads((await asyncio.to_thread(cli, env, "identity", "adopt", "--json")).stdout)
    assert adopted == {"adopted": [METADATA]}
    for _ in range(2):
        async with service(env) as svc:
            await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)
            assert svc.identity.drift() == []
            assert svc.identity.snapshot().agent.profile == THEIRS
    assert (await profile_on_relay(url)).id == theirs_id  # picture and nip05 still there: nothing published

    # A later change to the config is new intent: published over the adopted version, nothing deleted.
    config_file = tmp_path / "config" / "didactyl" / "config.toml"
    config_file.write_text(config_file.read_text().replace('name = "Bot"', 'name = "Bot 2"'))
    async with service(env) as svc:
        await asyncio.wait_for(svc.parts.runtime.tasks.settle(10), 15)
        assert svc.identity.drift() == []
    assert json.loads((await profile_on_relay(url)).content) == {**THEIRS, "name": "Bot 2", "about": "An agent."}


async def test_the_self_pane_shows_the_drift_and_republishes_merged(tmp_path: Path) -> None:
    from tui_support import LabelledApp, started, wait_for

    from didactyl_tui.tui.widgets.self_pane import SelfPane

    env = setup_env(tmp_path)
    url, theirs_id = await first_publish_then_rust_edit(env)
    cfg = load_config(None, env)
    data = Path(env["DIDACTYL_DATA_DIR"])
    app = LabelledApp(cfg, data_dir=data, env=env, service=AppService(cfg, data_dir=data, env=env))
    async with app.run_test(size=(130, 48)) as pilot:
        await started(pilot)
        app.main_screen.panes.show_pane("self")
        pane = app.main_screen.query_one(SelfPane)
        box = pane.query_one("#identity-drift")
        await wait_for(pilot, lambda: box.display, 10, "the drift notice")
        text = str(pane.query_one("#identity-drift-text").render())
        assert "Identity drift" in text and 'name: relays "Renamed elsewhere" · config "Bot"' in text
        assert (await profile_on_relay(url)).id == theirs_id
        pane.query_one("#republish-identity").press()
        await wait_for(pilot, lambda: not box.display, 10, "the notice to go")

        async def republished() -> bool:  # in use here at once, on the relay once the publish is answered
            return (await profile_on_relay(url)).id != theirs_id

        await wait_for(pilot, republished, 10, "the merged profile on the relay")
    merged = await profile_on_relay(url)
    assert json.loads(merged.content) == {**THEIRS, "name": "Bot", "about": "An agent."}


def test_merge_never_deletes_a_field_and_lists_only_grow() -> None:
    assert desired_profile({"picture": "p", "nip05": "n", "name": "x"}, name="", about="", picture="") == {
        "picture": "p", "nip05": "n", "name": "x"}
    assert desired_profile({"picture": "p"}, name="N", about="", picture="q") == {"picture": "q", "name": "N"}
    cache = IdentityCache(AGENT_KEY.public_key_hex, clock=lambda: 2_000_000_000)
    other = "b" * 64
    cache.ingest_many([sign_event(AGENT_KEY, kind=3, content="", created_at=1_750_000_000, tags=[["p", other]]),
                       sign_event(AGENT_KEY, kind=0, content='{"name":"x"}', created_at=1_750_000_000)])
    drafts = own_identity_drafts(cache, name="x", about="", picture="", contacts=["c" * 64], relay_urls=[])
    [contacts] = drafts
    assert [t[1] for t in contacts.tags] == [other, "c" * 64]  # the contact added elsewhere is kept
    [drift] = identity_drift(cache.view(), drafts, known_ids=[])
    assert [(c.field, c.config) for c in drift.changes] == [("contacts", "+ " + "c" * 64)]
    assert identity_drift(cache.view(), drafts, known_ids=[cache.event(3).id]) == []


async def test_a_relay_override_is_for_one_run_and_never_publishes_the_relay_list(tmp_path: Path) -> None:
    """``DIDACTYL_RELAYS=… didactyl tasks``: the run uses the override's relays; the agent's kind 10002 stays the one
    published from the file (no new version, not on the override's relays either), and state.toml's recorded intent
    is unchanged, so the next run without the override has nothing to republish."""
    from relay_servers import EmbeddedRelayUnderTest

    from didactyl_tui.nostr.kinds import RELAY_LIST
    from didactyl_tui.service.state import read_state

    home, other = EmbeddedRelayUnderTest(tmp_path / "home.sqlite3"), EmbeddedRelayUnderTest(tmp_path / "other.sqlite3")
    await home.start()
    await other.start()
    try:
        env = setup_env(tmp_path)
        (tmp_path / "config" / "didactyl" / "config.toml").write_text(
            CONFIG.replace("[relays]\n", f'[relays]\nembedded = false\nurls = ["{home.url}"]\n'))

        async def relay_lists(url: str) -> list[Event]:
            async with RelayPool([url], **fast_client_kwargs()) as pool:
                return await pool.query([{"authors": [AGENT_KEY.public_key_hex], "kinds": [RELAY_LIST]}], timeout=3)

        # The first run that may publish (a save; `tasks` only reads) publishes the file's intent.
        await asyncio.to_thread(cli, env, "memory", "save", "--type", "long_term", "--content", "first run")
        [published] = await relay_lists(home.url)
        assert [t[1] for t in published.tags if t[0] == "r"] == [home.url]
        intent = read_state(Path(env["DIDACTYL_DATA_DIR"]))["identity_intent"]

        overridden = {**env, "DIDACTYL_RELAYS": f"{home.url},{other.url}"}
        await asyncio.to_thread(cli, overridden, "tasks", "--json")
        await asyncio.to_thread(cli, overridden, "memory", "save", "--type", "short_term", "--content", "via both")
        await asyncio.to_thread(cli, overridden, "identity", "publish")  # an explicit publish leaves it alone too
        assert [ev.id for ev in await relay_lists(home.url)] == [published.id]
        assert await relay_lists(other.url) == []
        assert read_state(Path(env["DIDACTYL_DATA_DIR"]))["identity_intent"] == intent

        # The override was in use for those runs: the memory save reached the other relay too.
        async with RelayPool([other.url], **fast_client_kwargs()) as pool:
            assert await pool.query([{"authors": [AGENT_KEY.public_key_hex], "kinds": [30078]}], timeout=3)
        await asyncio.to_thread(cli, env, "tasks")  # back without it: nothing new to publish
        assert [ev.id for ev in await relay_lists(home.url)] == [published.id]
    finally:
        await home.stop()
        await other.stop()
