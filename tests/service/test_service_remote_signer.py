"""The agent's key only in a NIP-46 remote signer (``[signer] bunker``): the scripted bunker of tests/nip46_bunker.py
on a relay of its own, the agent's embedded relay beside it, rust-nostr as the admin's client, the LLM stub.

Start, a memory save by the person and by the model, a DM answered: every event verifies with the agent's key, no
key file is ever written, and a second start reuses the stored connection (no new ``connect``: the bunker's secret
is single-use) and reads the memory back through the signer."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from cli_support import outside_env
from dm_support import dm_config, opened, replies_for, sdk_dm, until
from llm_stub import LlmStub, Reply, ToolCall
from nip46_bunker import ScriptedBunker
from relay_servers import fast_client_kwargs, free_port

from didactyl_tui.agent.documents.codec import DocumentError
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.turn.events import TurnFinished
from didactyl_tui.errors import ConfigError, SignerKeyMismatchError
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip46 import MAX_PLAINTEXT_BYTES
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import ServiceWarning, SignerStateChanged

nostr_sdk = pytest.importorskip("nostr_sdk")
pytestmark = pytest.mark.usefixtures("warm_litellm")
ME = AGENT_KEY.public_key_hex
ENV = {"STUB_KEY": "sk-stub"}  # no $DIDACTYL_NSEC: the key is nowhere on this machine


def _config(base_url: str, bunker: ScriptedBunker):
    cfg = dm_config(base_url, admin=ADMIN_KEY.npub)
    cfg.signer.bunker = bunker.bunker_uri()
    cfg.signer.request_timeout_s = 10.0
    return cfg


async def _saved_then_signer_gone(relay_url: str, data: Path, text: str):
    """A first start with the bunker that saves ``text``, then the bunker gone: the config (short requests) and the
    client keys the bunker served (a bunker back later is told them: it remembers this app)."""
    bunker = ScriptedBunker([relay_url], AGENT_KEY, secret="once")
    await bunker.start()
    cfg = _config("http://127.0.0.1:9/v1", bunker)
    cfg.signer.request_timeout_s = 2.0
    try:
        async with AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs()) as svc:
            await svc.documents.save(DocumentKey.SHORT_TERM, text)
        return cfg, set(bunker.connected)
    finally:
        await bunker.stop()


def _readable_memory(ev) -> str:
    assert ev.pubkey == ME and ev.is_valid()  # signed with the agent's key, by the bunker
    return nip44.decrypt(ev.content, nip44.get_conversation_key(AGENT_KEY.secret_hex(), ME))


async def test_with_the_key_only_in_the_bunker_the_agent_saves_and_answers(tmp_path: Path) -> None:
    admin = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY, secret="single-use") as bunker, LlmStub() as stub:
        cfg = _config(stub.base_url, bunker)
        async with AppService(cfg, data_dir=data, answer_dms=True, env=ENV,
                              relay_client_options=fast_client_kwargs()) as svc:
            assert svc.identity.agent_pubkey == ME and svc.runtime.key is None
            # The person's edit and the model's own memory_save: the same save path, through the signer.
            await svc.documents.save(DocumentKey.LONG_TERM, "The build server is called hopper.")
            stub.script(Reply.tools(ToolCall("memory_save", json.dumps({"type": "short_term",
                                                                        "content": "Ada likes tea"}))),
                        Reply.text_reply("Noted."))
            session = await svc.chat.new_session()
            events = [e async for e in svc.chat.run_turn(session, "Remember that I like tea.")]
            assert isinstance(events[-1], TurnFinished) and events[-1].reply == "Noted."
            assert svc.documents.snapshot(DocumentKey.SHORT_TERM).content == "Ada likes tea"
            relay_url = svc.runtime.embedded_relay_url
            async with RelayPool([relay_url], **fast_client_kwargs()) as client:
                stored = await client.query([{"kinds": [30078], "authors": [ME]}], timeout=5)
                assert sorted(_readable_memory(ev) for ev in stored) == [
                    "Ada likes tea", "The build server is called hopper."]
                # A DM from the admin's client: opened and answered through the signer.
                stub.script(Reply.text_reply("Hello, admin."))
                message = sdk_dm(nostr_sdk, admin, "are you there?")
                assert (await client.publish(message, timeout=5)).any_accepted
                [reply] = await until(lambda: replies_for(client, ADMIN_KEY), 60, "the reply wrap")
            rumor = opened(nostr_sdk, admin, reply)
            assert rumor.content() == "Hello, admin." and rumor.author().to_hex() == ME
        assert {"connect", "get_public_key", "sign_event", "nip44_encrypt", "nip44_decrypt"} <= set(bunker.methods())
        assert not (data / "agent.key").exists()  # never created, never read
        session_file = data / "signer.json"
        assert stat.S_IMODE(os.stat(session_file).st_mode) == 0o600
        assert AGENT_KEY.secret_hex() not in session_file.read_text()  # the client's key, never the agent's

        # A second start: from the stored connection (the secret was single-use), the memory read back.
        connects = bunker.methods().count("connect")
        async with AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs()) as again:
            assert again.documents.snapshot(DocumentKey.SHORT_TERM).content == "Ada likes tea"
            # (in the background: is the key the signer names still the session's? asked before counting)
            await until(lambda: bunker.methods().count("get_public_key") == 2, 30, "the stored key checked")
        asked = len(bunker.methods())
        assert bunker.methods().count("connect") == connects == 1
        assert not (data / "agent.key").exists()
        # whoami names the agent the signer holds (as the session knows it: the signer is not asked).
        env = outside_env()
        env.update(DIDACTYL_DATA_DIR=str(data), DIDACTYL_BUNKER=bunker.bunker_uri(),
                   XDG_CONFIG_HOME=str(tmp_path / "config"))
        who = subprocess.run([sys.executable, "-m", "didactyl_tui", "whoami"], env=env, capture_output=True,
                             text=True, timeout=60)
        assert who.returncode == 0 and who.stdout.split() == [AGENT_KEY.npub, ME], who.stderr
        assert len(bunker.methods()) == asked


async def test_a_key_in_the_environment_and_a_bunker_are_refused_together(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY) as bunker:
        cfg = _config("http://127.0.0.1:9/v1", bunker)
        with pytest.raises(ConfigError, match="both set"):
            async with AppService(cfg, data_dir=tmp_path / "data", env={**ENV, "DIDACTYL_NSEC": AGENT_KEY.nsec()},
                                  relay_client_options=fast_client_kwargs()):
                pass
        assert bunker.methods() == []  # nothing was asked of the signer


async def test_a_bad_bunker_uri_is_one_line_that_never_echoes_what_was_pasted(tmp_path: Path) -> None:
    cfg = dm_config("http://127.0.0.1:9/v1")
    cfg.signer.bunker = AGENT_KEY.nsec()  # a key pasted where the URI goes
    with pytest.raises(ConfigError) as caught:
        async with AppService(cfg, data_dir=tmp_path / "data", env=ENV, relay_client_options=fast_client_kwargs()):
            pass
    assert "bunker://" in caught.value.message and AGENT_KEY.nsec()[:12] not in caught.value.message
    assert not (tmp_path / "data" / "agent.key").exists()


async def test_a_memory_too_big_to_travel_to_the_signer_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """NIP-46 carries NIP-44 inside NIP-44: 41,000 bytes of long-term memory (20,500 characters, under the
    character limit) cannot reach the signer. Refused with the limit named; nothing asked, nothing published."""
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY) as bunker:
        cfg = _config("http://127.0.0.1:9/v1", bunker)
        async with AppService(cfg, data_dir=tmp_path / "data", env=ENV,
                              relay_client_options=fast_client_kwargs()) as svc:
            asked = len(bunker.methods())
            text = "é" * 20_500
            assert len(text.encode()) == 41_000 and len(text) < cfg.memory.long_term_max_chars
            with pytest.raises(DocumentError) as refused:
                await svc.documents.save(DocumentKey.LONG_TERM, text)
            assert "41,000 UTF-8 bytes" in refused.value.message and f"{MAX_PLAINTEXT_BYTES:,}" in refused.value.message
            assert "remote signer" in refused.value.message
            assert len(bunker.methods()) == asked  # nothing went to the signer
            assert await svc.documents.pending_publishes() == []
            # Just under the bound travels.
            fits = "é" * (MAX_PLAINTEXT_BYTES // 2)
            assert (await svc.documents.save(DocumentKey.LONG_TERM, fits)).any_accepted


async def test_with_an_outside_bunker_the_agent_starts_saves_edits_its_soul_and_answers(
        outside_bunker_dir: Path, tmp_path: Path) -> None:
    """The same with applesauce-signers' bunker on node (a public NIP-46 implementation), its transport key not the
    agent's: start, the person's memory save, a soul edit, a DM from rust-nostr answered by the serving agent."""
    from nip46_outside_support import OutsideBunker
    from self_documents_support import soul

    from didactyl_tui.nostr.keys import SecretKey

    admin = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            OutsideBunker(outside_bunker_dir, [bunker_relay.url], AGENT_KEY,
                          signer_key=SecretKey.from_hex("00" * 31 + "a7"), secret="outside") as bunker, \
            LlmStub() as stub:
        cfg = dm_config(stub.base_url, admin=ADMIN_KEY.npub)
        cfg.signer.bunker, cfg.signer.request_timeout_s = bunker.uri, 10.0
        async with AppService(cfg, data_dir=data, answer_dms=True, env=ENV,
                              relay_client_options=fast_client_kwargs()) as svc:
            assert svc.identity.agent_pubkey == ME
            await svc.documents.save(DocumentKey.SHORT_TERM, "Ada likes oolong.")
            await svc.documents.save(DocumentKey.SOUL, soul("Kept in a bunker"))
            async with RelayPool([svc.runtime.embedded_relay_url], **fast_client_kwargs()) as client:
                [memory] = await client.query([{"kinds": [30078], "authors": [ME], "#d": ["short_term_memory"]}],
                                              timeout=5)
                assert _readable_memory(memory) == "Ada likes oolong."
                [soul_event] = await client.query([{"kinds": [31120], "authors": [ME]}], timeout=5)
                assert soul_event.is_valid() and "Kept in a bunker" in _readable_memory(soul_event)
                stub.script(Reply.text_reply("Yes, still here."))
                assert (await client.publish(sdk_dm(nostr_sdk, admin, "still there?"), timeout=5)).any_accepted
                [reply] = await until(lambda: replies_for(client, ADMIN_KEY), 60, "the reply wrap")
            assert opened(nostr_sdk, admin, reply).content() == "Yes, still here."
        assert not (data / "agent.key").exists()


async def test_an_auth_url_challenge_is_shown_to_the_person_and_the_save_completes_once_approved(
        tmp_path: Path) -> None:
    url = "https://signer.example/approve?request=7"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY, auth_methods={"sign_event"}) as bunker:
        cfg = _config("http://127.0.0.1:9/v1", bunker)
        svc = AppService(cfg, data_dir=tmp_path / "data", env=ENV, relay_client_options=fast_client_kwargs())
        shown: list[str] = []
        svc.add_listener(lambda ev: shown.append(ev.message) if isinstance(ev, ServiceWarning) else None)
        async with svc:
            bunker.auth_url = url  # once connected (its key check answered): the save's signature is challenged
            saving = asyncio.create_task(svc.documents.save(DocumentKey.SHORT_TERM, "approved by hand"))
            await until(lambda: any(url in line for line in shown), 20, "the approval link shown")
            assert not saving.done()  # it waits for the person, not for the request timeout
            await bunker.approve()
            assert (await asyncio.wait_for(saving, 20)).any_accepted
        [line] = [line for line in shown if url in line]
        assert "approve (sign_event)" in line


async def test_with_the_signer_away_the_app_opens_on_the_last_known_memory_and_an_edit_waits_for_it(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay:
        cfg, served = await _saved_then_signer_gone(bunker_relay.url, data, "Ada likes tea")
        assert (data / "signer-cache.sqlite3").exists()
        assert stat.S_IMODE(os.stat(data / "signer-cache.sqlite3").st_mode) == 0o600

        # The signer is away: the app opens on what this machine knows; an edit is kept (shown, on disk), not lost.
        svc = AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs())
        warned: list[str] = []
        svc.add_listener(lambda ev: warned.append(ev.message) if isinstance(ev, ServiceWarning) else None)
        async with svc:
            assert svc.documents.snapshot(DocumentKey.SHORT_TERM).content == "Ada likes tea"
            kept = await svc.documents.save(DocumentKey.SHORT_TERM, "Ada likes oolong")
            assert kept.deferred and not kept.any_accepted
            assert svc.documents.snapshot(DocumentKey.SHORT_TERM).content == "Ada likes oolong"  # shown at once
            assert any("signer" in line and "kept here" in line for line in warned), warned
        # Back (the same signer, which remembers this app): the next start signs and publishes the kept edit.
        back = ScriptedBunker([bunker_relay.url], AGENT_KEY)
        back.connected = served
        async with back, AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs()) as svc:
            assert svc.documents.snapshot(DocumentKey.SHORT_TERM).content == "Ada likes oolong"
            async with RelayPool([svc.runtime.embedded_relay_url], **fast_client_kwargs()) as client:
                async def published() -> bool:
                    found = await client.query([{"kinds": [30078], "authors": [ME], "#d": ["short_term_memory"]}],
                                               timeout=5)
                    return any(_readable_memory(ev) == "Ada likes oolong" for ev in found)

                await until(published, 30, "the kept edit signed and published")
        assert "connect" not in back.methods()


async def test_a_signer_that_stops_answering_mid_session_is_shown_away_and_then_back(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay:
        bunker = ScriptedBunker([bunker_relay.url], AGENT_KEY, secret="once")
        await bunker.start()
        cfg = _config("http://127.0.0.1:9/v1", bunker)
        cfg.signer.request_timeout_s, cfg.signer.ping_interval_s = 2.0, 0.2
        svc = AppService(cfg, data_dir=tmp_path / "data", env=ENV, relay_client_options=fast_client_kwargs())
        states: list[bool] = []
        svc.add_listener(lambda ev: states.append(ev.reachable) if isinstance(ev, SignerStateChanged) else None)
        back = ScriptedBunker([bunker_relay.url], AGENT_KEY)
        try:
            async with svc:
                await svc.documents.save(DocumentKey.SHORT_TERM, "before")
                back.connected = set(bunker.connected)
                await bunker.stop()
                kept = await svc.documents.save(DocumentKey.SHORT_TERM, "while away")
                assert kept.deferred and states == [False]
                await back.start()  # the signer returns: seen by the pings, and the kept edit is signed
                await until(lambda: states == [False, True], 20, "the signer seen back")
                assert "ping" in back.methods()
                await until(lambda: back.methods().count("sign_event") >= 1, 30, "the kept edit signed")
                assert (await svc.documents.save(DocumentKey.SHORT_TERM, "after")).any_accepted
        finally:
            await back.stop()


async def test_a_signer_listening_on_the_embedded_relay_gets_through_its_allow_list(tmp_path: Path) -> None:
    """A bunker on this machine that uses the app's own embedded relay: the relay, already running with an
    allow-list that knows neither this app's client key nor the signer's, is told to admit both (their kind 24133
    requests and replies) before the signer is reached."""
    from didactyl_tui.nostr.keys import SecretKey
    from didactyl_tui.service.runtime import start_embedded_relay

    port = free_port()
    cfg = dm_config("http://127.0.0.1:9/v1", admin=ADMIN_KEY.npub)
    cfg.relays.embedded_port, cfg.relays.embedded_idle_exit_s = port, 3.0
    data = tmp_path / "data"
    before = cfg.relays.embedded.relay_options("", ADMIN_KEY.public_key_hex)  # the admin alone may write
    relay = await start_embedded_relay(cfg, data, lambda line: None, before)
    assert relay is not None and relay.url == f"ws://127.0.0.1:{port}"
    transport = SecretKey.from_hex("00" * 31 + "b3")  # the signer's own key: not the agent's
    async with ScriptedBunker([relay.url], AGENT_KEY, signer_key=transport, secret="local") as bunker:
        cfg.signer.bunker, cfg.signer.request_timeout_s = bunker.bunker_uri(), 10.0
        async with AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs()) as svc:
            assert svc.identity.agent_pubkey == ME
            assert (await svc.documents.save(DocumentKey.SHORT_TERM, "via the local bunker")).any_accepted
        assert bunker.connected and "sign_event" in bunker.methods()


async def test_a_backup_is_written_and_restored_through_the_bunker(tmp_path: Path) -> None:
    """``bundle export`` / ``import`` with the key only in the bunker: the conversations part is encrypted and
    signed there (parts it can carry), and read back through it; nothing needs the key in hand."""
    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY, secret="single-use") as bunker, LlmStub() as stub:
        async with AppService(_config(stub.base_url, bunker), data_dir=data, env=ENV,
                              relay_client_options=fast_client_kwargs()) as svc:
            await svc.documents.save(DocumentKey.LONG_TERM, "Backed up through the signer.")
            stub.script(Reply.text_reply("Kept."))
            session = await svc.chat.new_session()
            [_ async for _ in svc.chat.run_turn(session, "x" * 45_000)]  # a conversation over one part's bound
            path = tmp_path / "backup.json"
            report = await svc.bundle.export(path)
            assert report.sessions == 1 and report.events >= 1 and path.stat().st_mode & 0o777 == 0o600
            written = json.loads(path.read_text())
            parts = written["conversations"]
            assert len(parts) >= 2 and all(p["pubkey"] == ME for p in parts)
            assert all(len(nip44.decrypt(p["content"], nip44.get_conversation_key(AGENT_KEY.secret_hex(), ME))
                           .encode()) <= MAX_PLAINTEXT_BYTES for p in parts)
            assert await svc.chat.sessions.delete(session)
            restored = await svc.bundle.import_(path)
            assert restored.sessions == 1
            texts = [m["content"] for m in await svc.chat.session_messages(session)]
            assert texts == ["x" * 45_000, "Kept."]


async def test_tasks_added_with_the_signer_away_wait_for_it_and_are_published_when_it_is_back(tmp_path: Path) -> None:
    """A task list change (the agent's task tools) while the signer does not answer is kept as an edit is: shown and
    used at once, on disk; a second change adds to it without asking the away signer again; after a quit, the next
    start signs and publishes the list with both once the signer answers."""
    from didactyl_tui.agent.documents.deferred import UnsignedEdits
    from didactyl_tui.agent.tasks.task_list import TaskList

    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay:
        cfg, served = await _saved_then_signer_gone(bunker_relay.url, data, "before")
        svc = AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs())
        warned: list[str] = []
        svc.add_listener(lambda ev: warned.append(ev.message) if isinstance(ev, ServiceWarning) else None)
        async with svc:
            tasks = svc.parts.runtime.tool_context.tasks
            first = await tasks.add("water the plants")
            tries = len(warned)
            second = await tasks.add("call Ana", "about Friday")
            shown = svc.documents.snapshot(DocumentKey.TASKS).value
            assert [t.title for t in shown.tasks] == ["water the plants", "call Ana"] and first.id != second.id
            assert [t.title for t in tasks.current.tasks] == ["water the plants", "call Ana"]  # the tools see both
            assert sum("task list is kept here" in line for line in warned) == 1 and len(warned) == tries, warned
        kept = UnsignedEdits(data / "memory.sqlite3")
        try:
            [(_key, text, _base)] = [row for row in kept.all() if row[0] is DocumentKey.TASKS]
        finally:
            kept.close()
        assert [t.title for t in TaskList.from_json(text).tasks] == ["water the plants", "call Ana"]

        back = ScriptedBunker([bunker_relay.url], AGENT_KEY)
        back.connected = served
        async with back, AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs()) as svc:
            async with RelayPool([svc.runtime.embedded_relay_url], **fast_client_kwargs()) as client:
                async def published() -> list[str]:
                    found = await client.query([{"kinds": [30078], "authors": [ME], "#d": ["tasks"]}], timeout=5)
                    return [t.title for ev in found for t in TaskList.from_json(_readable_memory(ev)).tasks]

                assert await until(published, 30, "the kept task list signed and published") == [
                    "water the plants", "call Ana"]


# --- a hostile or broken signer (#30) ----------------------------------------------------------------------------
OTHER_KEY = SecretKey.from_hex("00" * 31 + "c4")  # a key the signer names but does not hold, or holds instead


def _warnings(svc: AppService) -> list[ServiceWarning]:
    shown: list[ServiceWarning] = []
    svc.add_listener(lambda ev: shown.append(ev) if isinstance(ev, ServiceWarning) else None)
    return shown


async def test_a_signer_that_challenges_endlessly_ends_the_save_at_its_deadline_and_the_edit_waits_for_a_retry(
        tmp_path: Path) -> None:
    """A new auth_url every 100 ms for the signature: the save ends at the configured deadline (2 s) with the reason,
    the text is shown and kept on disk, and so is the model's memory_save; both are signed and published once the
    signer answers again."""
    data = tmp_path / "data"
    text = "written while the signer stalls"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY, secret="once") as bunker, LlmStub() as stub:
        cfg = _config(stub.base_url, bunker)
        cfg.signer.request_timeout_s = cfg.signer.auth_timeout_s = 2.0
        svc = AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs())
        shown = _warnings(svc)
        async with svc:
            bunker.auth_url, bunker.auth_methods = "https://signer.example/approve", {"sign_event"}
            bunker.rechallenge_every = 0.1
            async with asyncio.timeout(60):  # without one deadline per request this save never ends
                kept = await svc.documents.save(DocumentKey.SHORT_TERM, text)
            assert kept.deferred and not kept.any_accepted
            [reason] = [w.message for w in shown if "kept here" in w.message]
            assert reason.startswith("the remote signer did not sign within 2 s: it asked for approval ")
            assert "(last at https://signer.example/approve?n=" in reason
            assert reason.endswith("the short-term memory is kept here and will be signed and published when the "
                                   "signer answers")
            assert sum("asks you to approve" in w.message for w in shown) <= 3  # not one line per challenge
            assert svc.documents.snapshot(DocumentKey.SHORT_TERM).content == text  # still there, in use
            from didactyl_tui.agent.documents.deferred import UnsignedEdits

            # The model's memory_save meets the same signer: its turn goes on, its text is kept as well.
            stub.script(Reply.tools(ToolCall("memory_save", json.dumps({"type": "long_term",
                                                                        "content": "saved by the model"}))),
                        Reply.text_reply("Kept."))
            session = await svc.chat.new_session()
            async with asyncio.timeout(60):
                events = [e async for e in svc.chat.run_turn(session, "remember this")]
            assert isinstance(events[-1], TurnFinished) and events[-1].reply == "Kept."
            assert svc.documents.snapshot(DocumentKey.LONG_TERM).content == "saved by the model"
            on_disk = UnsignedEdits(data / "memory.sqlite3")
            try:
                assert sorted((k.value, t) for k, t, _ in on_disk.all()) == [
                    ("long_term", "saved by the model"), ("short_term", text)]
            finally:
                on_disk.close()
            bunker.auth_url = None  # the signer answers again: the kept edits are signed and published
            async with RelayPool([svc.runtime.embedded_relay_url], **fast_client_kwargs()) as client:
                async def published() -> bool:
                    found = await client.query([{"kinds": [30078], "authors": [ME]}], timeout=5)
                    return {"saved by the model", text} <= {_readable_memory(ev) for ev in found}

                await until(published, 30, "the kept edits signed and published")


async def test_a_command_save_against_an_endless_challenger_ends_with_the_reason_and_keeps_the_text(
        tmp_path: Path) -> None:
    """``didactyl memory save``, as the issue found it still waiting at 75 s: it ends (exit 1) at the deadline with
    the reason on stderr, and the text waits on disk for the next run."""
    from cli_support import cli_env

    from didactyl_tui.agent.documents.deferred import UnsignedEdits
    from didactyl_tui.cli import run

    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY, secret="once") as bunker:
        async with AppService(_config("http://127.0.0.1:9/v1", bunker), data_dir=data, env=ENV,
                              relay_client_options=fast_client_kwargs()):
            pass  # the first start: connected, signer.json kept
        bunker.auth_url, bunker.auth_methods, bunker.rechallenge_every = "https://x.example/a", {"sign_event"}, 0.1
        config = ("[relays]\nembedded_port = 0\ntimeout_s = 2.0\n[memory]\nbackend = \"none\"\n"
                  "[agent]\npublish_profile = false\n"
                  f"[signer]\nbunker = \"{bunker.bunker_uri()}\"\nrequest_timeout_s = 2\nauth_timeout_s = 2\n")
        env = cli_env(tmp_path, config, DIDACTYL_DATA_DIR=str(data))
        out, err = io.StringIO(), io.StringIO()
        code = await asyncio.wait_for(asyncio.to_thread(
            run, ["memory", "save", "--type", "short_term", "--content", "kept for later"], env=env, stdout=out,
            stderr=err), 120)
        assert code == 1, err.getvalue()
        lines = err.getvalue().splitlines()
        assert any(line.startswith("warning: the remote signer did not sign within 2 s: it asked for approval")
                   for line in lines), lines
        assert lines[-1].startswith("didactyl: Remote signer: the short-term memory (14 chars) is not signed yet: "
                                    "it is kept on this device"), lines
        on_disk = UnsignedEdits(data / "memory.sqlite3")
        try:
            assert [(k, t) for k, t, _ in on_disk.all()] == [(DocumentKey.SHORT_TERM, "kept for later")]
        finally:
            on_disk.close()


async def test_a_first_connect_to_a_signer_that_does_not_sign_with_the_key_it_names_is_refused_and_kept_nowhere(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY, secret="once", names_key=OTHER_KEY.public_key_hex) as bunker:
        with pytest.raises(SignerKeyMismatchError) as refused:
            async with AppService(_config("http://127.0.0.1:9/v1", bunker), data_dir=data, env=ENV,
                                  relay_client_options=fast_client_kwargs()):
                pass
    line = refused.value.one_line()
    assert "named the key npub1" in line and "but signs with npub1" in line
    assert "refused and nothing was kept" in line
    assert not (data / "signer.json").exists() and not (data / "agent.key").exists()
    assert "sign_event" in bunker.methods() and "nip44_encrypt" not in bunker.methods()  # only the check was asked


def _stored(data: Path, bunker: ScriptedBunker, user: str, *, checked: bool) -> None:
    """signer.json as an earlier run left it: this app's client key, which the bunker serves, and ``user``."""
    from didactyl_tui.agent.identity.signer_session import write_session
    from didactyl_tui.nostr.nip46_session import RemoteSignerSession

    client = SecretKey.generate()
    write_session(data, RemoteSignerSession(client.secret_hex(), bunker.pubkey, tuple(bunker.relays), user, checked))
    bunker.connected.add(client.public_key_hex)


@pytest.mark.parametrize("case", ["kept before the check, naming a key the signer does not sign with",
                                  "the signer's key changed since"])
async def test_a_wrong_stored_key_is_found_at_start_and_explained_with_the_command_that_reconnects(
        tmp_path: Path, case: str) -> None:
    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay:
        if case.startswith("kept before"):  # the bug of #30: get_public_key's wrong answer was stored
            bunker = ScriptedBunker([bunker_relay.url], AGENT_KEY, names_key=OTHER_KEY.public_key_hex)
            _stored(data, bunker, OTHER_KEY.public_key_hex, checked=False)
        else:
            bunker = ScriptedBunker([bunker_relay.url], OTHER_KEY, signer_key=SecretKey.from_hex("00" * 31 + "c5"))
            _stored(data, bunker, ME, checked=True)
        async with bunker:
            svc = AppService(_config("http://127.0.0.1:9/v1", bunker), data_dir=data, env=ENV,
                             relay_client_options=fast_client_kwargs())
            shown = _warnings(svc)
            async with svc:
                [wrong] = await until(lambda: [w for w in shown if "didactyl signer connect" in w.message], 30,
                                      "the wrong key explained")
                assert wrong.lasting  # shown until the person dismisses it
                assert "nothing can be signed until the signer is connected again: didactyl signer connect (with " \
                       "a new bunker:// URI from your signer)" in wrong.message
                assert ("but signs with npub1" if case.startswith("kept before") else "now signs as npub1") \
                    in wrong.message
                # A save says the same (and nothing is published with the wrong key).
                with pytest.raises(SignerKeyMismatchError, match="didactyl signer connect"):
                    await svc.documents.save(DocumentKey.SHORT_TERM, "not with that key")
            assert "connect" not in bunker.methods()


async def test_signer_connect_replaces_the_connection_only_with_one_that_checks_out(tmp_path: Path) -> None:
    """``didactyl signer connect``: to the signer that names a key it does not hold, refused and signer.json left as
    it was; to a signer that signs with the key it names, signer.json and [signer] bunker (no secret) replaced, and
    the next start signs with it."""
    import tomllib

    from cli_support import cli_env

    from didactyl_tui.agent.identity.signer_session import read_session
    from didactyl_tui.cli import run

    data = tmp_path / "data"
    env = cli_env(tmp_path, "[relays]\nembedded_port = 0\n[signer]\nrequest_timeout_s = 10\n",
                  DIDACTYL_DATA_DIR=str(data))

    async def signer_connect(uri: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = await asyncio.wait_for(asyncio.to_thread(run, ["signer", "connect"], env=env, stdin=io.StringIO(uri),
                                                        stdout=out, stderr=err), 60)
        return code, out.getvalue(), err.getvalue()

    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay:
        async with ScriptedBunker([bunker_relay.url], AGENT_KEY, names_key=OTHER_KEY.public_key_hex,
                                  secret="broken") as broken:
            _stored(data, broken, OTHER_KEY.public_key_hex, checked=False)
            before = (data / "signer.json").read_bytes()
            code, _, err = await signer_connect(broken.bunker_uri())
            assert code == 2 and "it does not hold the key it named" in err, err
            assert (data / "signer.json").read_bytes() == before
        right_key = SecretKey.from_hex("00" * 31 + "c6")
        async with ScriptedBunker([bunker_relay.url], AGENT_KEY, signer_key=right_key, secret="fresh") as right:
            code, out, err = await signer_connect(right.bunker_uri())
            assert code == 0 and out.split() == [AGENT_KEY.npub], err
            session = read_session(data)
            assert session is not None and session.user_pubkey == ME and session.key_checked
            assert session.signer_pubkey == right.pubkey
            written = tomllib.loads((tmp_path / "config" / "didactyl" / "config.toml").read_text())
            assert written["signer"]["bunker"].startswith(f"bunker://{right.pubkey}?") \
                and "secret" not in written["signer"]["bunker"]
            cfg = _config("http://127.0.0.1:9/v1", right)
            cfg.signer.bunker = written["signer"]["bunker"]
            async with AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs()) as svc:
                assert (await svc.documents.save(DocumentKey.SHORT_TERM, "signed again")).any_accepted


async def test_a_connection_kept_from_before_the_key_check_is_checked_once_at_start(tmp_path: Path) -> None:
    """A good signer.json written before the check existed: checked in the background at start (one signature, never
    published), then stored as checked; the next start only asks for the key."""
    from didactyl_tui.agent.identity.signer_session import read_session
    from didactyl_tui.nostr.kinds import SIGNER_KEY_CHECK

    data = tmp_path / "data"
    async with EmbeddedRelay(tmp_path / "bunker-relay.sqlite3") as bunker_relay, \
            ScriptedBunker([bunker_relay.url], AGENT_KEY) as bunker:
        _stored(data, bunker, ME, checked=False)
        cfg = _config("http://127.0.0.1:9/v1", bunker)
        svc = AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs())
        shown = _warnings(svc)
        async with svc:
            await until(lambda: read_session(data).key_checked, 30, "the kept connection checked and stored so")
        checks = [r for r in bunker.received if f'"kind":{SIGNER_KEY_CHECK}' in "".join(r.params)]
        assert len(checks) == 1 and not shown
        async with AppService(cfg, data_dir=data, env=ENV, relay_client_options=fast_client_kwargs()):
            await until(lambda: bunker.methods().count("get_public_key") == 2, 30, "the key asked at the next start")
        assert sum(f'"kind":{SIGNER_KEY_CHECK}' in "".join(r.params) for r in bunker.received) == 1


async def test_signer_connect_reaches_a_signer_on_the_embedded_relay_through_its_allow_list(tmp_path: Path) -> None:
    """The embedded relay runs admitting the admin alone; ``didactyl signer connect`` to a bunker listening there has
    it admit this new connection's client key and the signer's key first."""
    from cli_support import cli_env

    from didactyl_tui.agent.identity.signer_session import read_session
    from didactyl_tui.cli import run
    from didactyl_tui.service.runtime import start_embedded_relay

    port = free_port()
    cfg = dm_config("http://127.0.0.1:9/v1", admin=ADMIN_KEY.npub)
    cfg.relays.embedded_port, cfg.relays.embedded_idle_exit_s = port, 3.0
    data = tmp_path / "data"
    relay = await start_embedded_relay(cfg, data, lambda line: None,
                                       cfg.relays.embedded.relay_options("", ADMIN_KEY.public_key_hex))
    assert relay is not None and relay.url == f"ws://127.0.0.1:{port}"
    env = cli_env(tmp_path, f"[relays]\nembedded_port = {port}\nembedded_idle_exit_s = 3\n[admin]\n"
                            f"pubkey = \"{ADMIN_KEY.npub}\"\n[signer]\nrequest_timeout_s = 10\n",
                  DIDACTYL_DATA_DIR=str(data))
    async with ScriptedBunker([relay.url], AGENT_KEY, signer_key=SecretKey.from_hex("00" * 31 + "c7"),
                              secret="local") as bunker:
        out, err = io.StringIO(), io.StringIO()
        code = await asyncio.wait_for(asyncio.to_thread(run, ["signer", "connect"], env=env,
                                                        stdin=io.StringIO(bunker.bunker_uri()), stdout=out,
                                                        stderr=err), 60)
        assert code == 0 and out.getvalue().split() == [AGENT_KEY.npub], err.getvalue()
        session = read_session(data)
        assert session is not None and session.key_checked and session.client_pubkey in bunker.connected
