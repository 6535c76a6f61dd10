"""The running TUI answers a NIP-17 DM from the admin (rust-nostr's client) and shows the DM session live:
a notification naming the counterpart, the session listed as "DM: <name>", its assembly in the inspector, and
in the self pane what became of the direct messages (delivered, not answered by cause)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import ADMIN_KEY
from dm_support import replies_for
from llm_stub import LlmStub, Reply
from relay_servers import fast_client_kwargs
from tui_support import SIZE, TEST_KEY, Clock, LabelledApp, make_config, make_env, started, wait_for

from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService

nostr_sdk = pytest.importorskip("nostr_sdk")
pytestmark = pytest.mark.usefixtures("warm_litellm")


async def test_the_tui_answers_a_dm_and_shows_its_session_live(tmp_path: Path) -> None:
    admin = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("On it."))
        config = make_config(llm_base_url=stub.base_url, publish_profile=False)
        config.admin.pubkey = ADMIN_KEY.npub
        env = make_env()
        service = AppService(config, data_dir=tmp_path, env=env, clock=Clock(), answer_dms=True)
        app = LabelledApp(config, data_dir=tmp_path, env=env, service=service)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            wrap = nostr_sdk.nip17_make_private_msg(admin, nostr_sdk.PublicKey.parse(TEST_KEY.public_key_hex),
                                                    "are you there?")
            async with RelayPool([service.relays.embedded_url], **fast_client_kwargs()) as pool:
                assert (await pool.publish(Event.from_json(wrap.as_json()), timeout=3)).any_accepted
                await wait_for(pilot, lambda: service.dm.counts.get("answer"), 30, "the DM to arrive")

                def notified() -> bool:
                    return any("Direct message with" in str(n.message) for n in app._notifications)

                await wait_for(pilot, notified, 30, lambda: f"a DM notification in {list(app._notifications)}")
                await wait_for(pilot, lambda: app.main_screen.inspector.entries, 30, "the DM's assembly")
                replies: list[Event] = []

                async def reply_arrived() -> bool:
                    replies[:] = await replies_for(pool, ADMIN_KEY)
                    return bool(replies)

                for _ in range(300):  # bounded: ~30 s
                    if await reply_arrived():
                        break
                    await pilot.pause(0.1)
                stranger = nostr_sdk.nip17_make_private_msg(nostr_sdk.Keys.generate(),
                                                            nostr_sdk.PublicKey.parse(TEST_KEY.public_key_hex), "hi")
                assert (await pool.publish(Event.from_json(stranger.as_json()), timeout=3)).any_accepted
                await pilot.press("f3")
                main = app.main_screen
                await wait_for(pilot, lambda: main.self_panes(), 10, "the self pane")

                def dm_line() -> str:
                    view = main.self_panes()[0].query_one("#dm-status")
                    return str(view.render()) if view.display else ""

                await wait_for(pilot, lambda: "1 delivered; not answered: stranger 1" in dm_line(), 30,
                               lambda: f"the DM status in the self pane, not {dm_line()!r}")
            [session] = await service.chat.sessions.list(include_empty=True)
            assert session.title.startswith("DM: npub1") and session.message_count == 2
    gift = nostr_sdk.UnwrappedGift.from_gift_wrap(admin, nostr_sdk.Event.from_json(replies[0].to_json()))
    assert gift.rumor().content() == "On it."
    assert "are you there?" in str(stub.requests[0].messages)


async def test_the_inspector_names_a_guests_policy_and_each_section_withheld(tmp_path: Path) -> None:
    from didactyl_tui.nostr.keys import SecretKey
    from didactyl_tui.tui.widgets.assembly_tree import AssemblyTree

    guest_key = SecretKey.from_hex("6e" * 32)
    guest = nostr_sdk.Keys.parse(guest_key.secret_hex())
    async with LlmStub() as stub:
        stub.script(Reply.text_reply("Hello, guest."))
        config = make_config(llm_base_url=stub.base_url, publish_profile=False)
        config.admin.pubkey = ADMIN_KEY.npub
        config.dm.allow = [guest_key.npub]
        env = make_env()
        service = AppService(config, data_dir=tmp_path, env=env, clock=Clock(), answer_dms=True)
        app = LabelledApp(config, data_dir=tmp_path, env=env, service=service)
        async with app.run_test(size=SIZE) as pilot:
            await started(pilot)
            wrap = nostr_sdk.nip17_make_private_msg(guest, nostr_sdk.PublicKey.parse(TEST_KEY.public_key_hex),
                                                    "what do you remember about your admin?")
            async with RelayPool([service.relays.embedded_url], **fast_client_kwargs()) as pool:
                assert (await pool.publish(Event.from_json(wrap.as_json()), timeout=3)).any_accepted
                await wait_for(pilot, lambda: app.main_screen.inspector.entries, 30, "the guest's assembly")
            tree = app.main_screen.inspector.query_one(AssemblyTree)
            [entry] = tree.entries.values()
            node = tree.node_for(entry.number)
            labels = [str(child.label) for child in node.children]
            sections = next(child for child in node.children if str(child.label).startswith("Sections:"))
            withheld = [str(n.label) for n in sections.children if "skipped: withheld" in str(n.label)]
    assert labels[0].startswith("Policy: guest · ") and "withheld, only what is for everyone" in labels[0]
    assert "a conversation with npub1" in labels[0] and "who is not the admin" in labels[0]
    names = [label.split(" ")[0] for label in withheld]
    assert {"admin_identity", "admin_profile", "short_term_memory", "tasks"} <= set(names)
    assert all("withheld: for the admin only; this is a conversation with npub1" in label for label in withheld)
    assert "memory_save" not in stub.requests[0].tool_names
