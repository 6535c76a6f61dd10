"""NIP-17 conversations as the NIP says: a conversation is its set of participants. A three-member group message
(the admin, Bob, the agent; rust-nostr as both people's clients) is answered in that same conversation in each
member's client: the reply's rumor tags every participant, carries the subject and answers the message, and each
member's wrap goes to their own DM relays (Bob's kind 10050 names rust-nostr's relay). The group has a session
of its own, apart from the admin's one-to-one conversation, and — Bob being in it — only the guest tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from dm_support import AGENT_ENV, dm_config, opened, sdk_dm, tags_of, until, wraps_for
from llm_stub import LlmStub, Reply
from relay_servers import RelayUnderTest, fast_client_kwargs

from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip17 import build_dm_relay_list
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService

nostr_sdk = pytest.importorskip("nostr_sdk")
pytestmark = pytest.mark.usefixtures("warm_litellm")
BOB_KEY = SecretKey.from_hex("6d" * 32)
ME, ADMIN, BOB = AGENT_KEY.public_key_hex, ADMIN_KEY.public_key_hex, BOB_KEY.public_key_hex


def _group_message(admin, text: str, subject: str) -> tuple[Event, str]:
    """The admin's client writes one rumor to the agent and Bob, and wraps it for the agent."""
    tags = [nostr_sdk.Tag.parse(["p", ME]), nostr_sdk.Tag.parse(["p", BOB]),
            nostr_sdk.Tag.parse(["subject", subject])]
    rumor = nostr_sdk.EventBuilder(nostr_sdk.Kind(14), text).tags(tags).finalize_unsigned(admin.public_key())
    wrap = Event.from_json(nostr_sdk.nip59_make_gift_wrap(admin, nostr_sdk.PublicKey.parse(ME), rumor).as_json())
    return wrap, opened(nostr_sdk, nostr_sdk.Keys.parse(AGENT_KEY.secret_hex()), wrap).id().to_hex()


async def test_a_three_member_group_is_answered_in_the_same_conversation_in_each_members_client(
        rust_relay: RelayUnderTest, tmp_path: Path) -> None:
    admin, bob = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex()), nostr_sdk.Keys.parse(BOB_KEY.secret_hex())
    async with LlmStub() as stub, RelayPool([rust_relay.url], **fast_client_kwargs()) as on_rust:
        stub.script(Reply.text_reply("Friday at noon works for me."), Reply.text_reply("Just between us: yes."))
        # Bob reads his direct messages on rust-nostr's relay only.
        assert (await on_rust.publish(build_dm_relay_list(BOB_KEY, [rust_relay.url], created_at=1_750_000_000),
                                      timeout=3)).any_accepted
        svc = AppService(dm_config(stub.base_url, admin=ADMIN), data_dir=tmp_path, answer_dms=True, env=AGENT_ENV,
                         relay_client_options=fast_client_kwargs())
        svc.config.relays.urls = [rust_relay.url]  # the agent reads there too (it finds Bob's relay list there)
        async with svc, RelayPool([svc.relays.embedded_url], **fast_client_kwargs()) as ours:
            group_wrap, group_id = _group_message(admin, "Lunch on Friday?", "Friday lunch")
            assert (await ours.publish(group_wrap, timeout=3)).any_accepted
            [for_bob] = await until(lambda: wraps_for(on_rust, BOB), 60, "the reply in Bob's DM relay")
            for_admin = await until(lambda: wraps_for(ours, ADMIN), 30, "the reply in the admin's")
            # The admin's own conversation: a session of its own, with every tool.
            assert (await ours.publish(sdk_dm(nostr_sdk, admin, "and just you?"), timeout=3)).any_accepted
            await until(lambda: len(stub.requests) == 2 and svc.dm.counts.get("own_copy", 0) >= 2, 60,
                        "the one-to-one answer")
            sessions = await svc.chat.sessions.list(include_empty=True)
            ledger = svc.parts.dm.ledger
            await until(lambda: ledger.record(group_id).state == "delivered", 30, "the group reply delivered")
            # Each member's wrap (and our own copy) was taken by a relay that member reads.
            await until(lambda: {pk: state for pk, state, _ in ledger.wraps_of(group_id)} == {
                ADMIN: "delivered", BOB: "delivered", ME: "delivered"}, 30, "every wrap of the group reply taken")
            bob_relays = next(relays for pk, _, relays in ledger.wraps_of(group_id) if pk == BOB)

    assert bob_relays == {rust_relay.url: "accepted"}
    for keys, wrap in ((admin, for_admin[0]), (bob, for_bob)):
        rumor = opened(nostr_sdk, keys, wrap)
        assert rumor.author().to_hex() == ME and rumor.content() == "Friday at noon works for me."
        # The same three people: the same conversation in each client; the subject carried; the message answered.
        assert {rumor.author().to_hex(), *tags_of(rumor, "p")} == {ME, ADMIN, BOB}
        assert tags_of(rumor, "subject") == ["Friday lunch"] and tags_of(rumor, "e") == [group_id]
    group_turn, own_turn = stub.requests
    assert "Lunch on Friday?" in group_turn.last_user_text and group_turn.last_user_text != "Lunch on Friday?"
    assert "memory_save" not in group_turn.tool_names and "post_note" not in group_turn.tool_names
    assert "memory_save" in own_turn.tool_names and own_turn.last_user_text == "and just you?"
    titles = sorted(s.title for s in sessions)
    assert len(titles) == 2 and any(t.endswith("· Friday lunch") and ", " in t for t in titles), titles

