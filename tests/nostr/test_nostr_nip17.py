"""NIP-17 direct messages and kind 10050, including interop both ways with rust-nostr (nostr-sdk)."""

from __future__ import annotations

import random

import pytest
from vectors import load_json

from didactyl_tui.errors import NostrError
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.filters import matches, validate_filter
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.kinds import DIRECT_MESSAGE, DM_RELAY_LIST, GIFT_WRAP
from didactyl_tui.nostr.nip17 import (
    MAX_DM_RELAYS,
    MAX_MESSAGE_BYTES,
    MAX_RECIPIENTS,
    NotADirectMessage,
    build_dm_relay_list,
    delivery_relays,
    dm_relay_list_filter,
    dm_relay_list_with,
    dm_relays_of,
    gift_wrap_filter,
    make_message,
    open_message,
    open_message_with,
    wrap_message,
    wrap_message_with,
)
from didactyl_tui.nostr.nip59 import (
    DecryptFailed,
    Rumor,
    SenderMismatch,
    WrapRejected,
    gift_wrap,
    seal_with,
    wrap_with_rng,
)
from didactyl_tui.nostr.signer import LocalSigner

nostr_sdk = pytest.importorskip("nostr_sdk")

NOW = 1_750_000_000


def _keys(n: int = 3, seed: int = 11) -> list[SecretKey]:
    rng = random.Random(seed)
    return [SecretKey(rng.randbytes(32)) for _ in range(n)]


def test_the_nip17_example_opens_as_a_direct_message() -> None:
    keys = load_json("nip17-nip59-keys.json")["nip17"]
    receiver = SecretKey.from_hex(keys["receiver_secret_hex"])
    sender = SecretKey.from_hex(keys["sender_secret_hex"])
    for entry in load_json("nip01-events.json")["valid"]:
        ev = Event.from_dict(entry["event"])
        if ev.kind != GIFT_WRAP:
            continue
        me = receiver if ev.first_tag("p") == receiver.public_key_hex else sender
        dm = open_message(ev, me)
        assert (dm.text, dm.id, dm.sender) == (keys["message"], keys["rumor_id"], sender.public_key_hex)
        assert dm.recipients == (receiver.public_key_hex,)
        assert dm.room == frozenset({sender.public_key_hex, receiver.public_key_hex})
        assert dm.wrap_id == ev.id
        rust = nostr_sdk.UnwrappedGift.from_gift_wrap(nostr_sdk.Keys.parse(me.secret_hex()),
                                                      nostr_sdk.Event.from_json(ev.to_json()))
        assert rust.rumor().id().to_hex() == dm.id  # the reference reads the vector as we do


def test_a_message_is_wrapped_for_each_recipient_and_the_sender_and_opens_the_same_everywhere() -> None:
    alice, bob, carol = _keys()
    rumor = make_message(alice.public_key_hex, [bob.public_key_hex, carol.public_key_hex], "lunch?",
                         created_at=NOW, reply_to="cd" * 32, subject="plans")
    wraps = wrap_message(rumor, alice, now=NOW, rng=random.Random(3))
    assert list(wraps) == [bob.public_key_hex, carol.public_key_hex, alice.public_key_hex]
    assert len({w.pubkey for w in wraps.values()}) == 3  # a fresh wrapper key per wrap
    for key in (bob, carol, alice):
        dm = open_message(wraps[key.public_key_hex], key)
        assert (dm.id, dm.text, dm.sender, dm.reply_to, dm.subject) == (rumor.id, "lunch?", alice.public_key_hex,
                                                                        "cd" * 32, "plans")
    assert list(wrap_message(rumor, alice, now=NOW, copy_to_self=False)) == [bob.public_key_hex, carol.public_key_hex]


async def test_through_a_signer_a_message_opens_and_wraps_as_with_the_key_in_hand() -> None:
    """The signer forms (the key behind a Signer, as with NIP-46) and the key-in-hand forms read each other's wraps,
    and make the same checks."""
    alice, bob, carol = _keys()
    rumor = make_message(alice.public_key_hex, [bob.public_key_hex], "tea at 4?", created_at=NOW, subject="tea")
    wraps = await wrap_message_with(rumor, LocalSigner(alice), now=NOW, rng=random.Random(5))
    assert list(wraps) == [bob.public_key_hex, alice.public_key_hex]
    assert open_message(wraps[bob.public_key_hex], bob).subject == "tea"
    back = wrap_message(rumor, alice, now=NOW, rng=random.Random(6))
    for key in (bob, alice):
        dm = await open_message_with(back[key.public_key_hex], LocalSigner(key))
        assert (dm.id, dm.text, dm.sender) == (rumor.id, "tea at 4?", alice.public_key_hex)
    with pytest.raises(WrapRejected, match="not addressed to this key"):
        await open_message_with(back[bob.public_key_hex], LocalSigner(carol))
    forged = Event.from_dict({**back[bob.public_key_hex].to_dict(), "tags": [["p", carol.public_key_hex]]})
    with pytest.raises(WrapRejected):  # the id no longer matches
        await open_message_with(forged, LocalSigner(carol))
    with pytest.raises(NostrError, match="rumor's author"):
        await seal_with(rumor, LocalSigner(carol), bob.public_key_hex, created_at=NOW)
    # carol seals a rumor that claims alice wrote it: refused as with the key in hand
    claimed = LocalSigner(carol).encrypt_now(bob.public_key_hex, rumor.to_json())
    lie = gift_wrap(sign_event(carol, kind=13, created_at=NOW, content=claimed), bob.public_key_hex,
                    wrapper_key=_keys(1, seed=9)[0], created_at=NOW)
    with pytest.raises(SenderMismatch):
        await open_message_with(lie, LocalSigner(bob))
    # a seal encrypted for bob, wrapped to carol: the wrap opens, the seal does not
    sealed = await seal_with(rumor, LocalSigner(alice), bob.public_key_hex, created_at=NOW)
    misdirected = gift_wrap(sealed, carol.public_key_hex, wrapper_key=_keys(1, seed=7)[0], created_at=NOW)
    with pytest.raises(DecryptFailed, match="the seal does not decrypt"):
        await open_message_with(misdirected, LocalSigner(carol))
    relay_list = await dm_relay_list_with(LocalSigner(alice), ["wss://a.example", "wss://a.example"], created_at=NOW)
    assert relay_list.pubkey == alice.public_key_hex and relay_list.is_valid()
    assert relay_list.tags == build_dm_relay_list(alice, ["wss://a.example"], created_at=NOW).tags
    assert dm_relays_of(relay_list) == ["wss://a.example"]


def test_make_message_refuses_what_cannot_be_sent() -> None:
    alice, bob, _ = _keys()
    with pytest.raises(NostrError, match="needs some text"):
        make_message(alice.public_key_hex, [bob.public_key_hex], "  ", created_at=NOW)
    with pytest.raises(NostrError, match="at most 32,000 UTF-8 bytes"):
        make_message(alice.public_key_hex, [bob.public_key_hex], "é" * (MAX_MESSAGE_BYTES // 2 + 1), created_at=NOW)
    with pytest.raises(NostrError, match="at least one recipient"):
        make_message(alice.public_key_hex, [], "hi", created_at=NOW)
    with pytest.raises(NostrError, match="not a 64-hex"):
        make_message(alice.public_key_hex, ["npub1nope"], "hi", created_at=NOW)
    many = [f"{i:064x}" for i in range(1, MAX_RECIPIENTS + 2)]
    with pytest.raises(NostrError, match=f"at most {MAX_RECIPIENTS} recipients"):
        make_message(alice.public_key_hex, many, "hi", created_at=NOW)
    with pytest.raises(NostrError, match="reply_to"):
        make_message(alice.public_key_hex, [bob.public_key_hex], "hi", created_at=NOW, reply_to="x")


def test_the_largest_message_still_fits_both_nip44_layers() -> None:
    alice, bob, _ = _keys()
    text = "€" * (MAX_MESSAGE_BYTES // 3)
    wraps = wrap_message(make_message(alice.public_key_hex, [bob.public_key_hex], text, created_at=NOW), alice,
                         now=NOW, rng=random.Random(5))
    assert open_message(wraps[bob.public_key_hex], bob).text == text


def test_a_wrapped_rumor_of_another_kind_or_not_naming_us_is_not_a_direct_message() -> None:
    alice, bob, carol = _keys()
    reaction = Rumor.build(alice.public_key_hex, kind=7, content="+", created_at=NOW, tags=[("p", bob.public_key_hex)])
    with pytest.raises(NotADirectMessage, match="kind 7 rumor"):
        open_message(wrap_with_rng(reaction, alice, bob.public_key_hex, now=NOW, rng=random.Random(1)), bob)
    to_carol = make_message(alice.public_key_hex, [carol.public_key_hex], "for carol", created_at=NOW)
    with pytest.raises(NotADirectMessage, match="does not name this key"):
        open_message(wrap_with_rng(to_carol, alice, bob.public_key_hex, now=NOW, rng=random.Random(1)), bob)
    bad_p = Rumor.build(alice.public_key_hex, kind=DIRECT_MESSAGE, content="x", created_at=NOW, tags=[("p", "zz")])
    with pytest.raises(NotADirectMessage, match="bad recipient tag"):
        open_message(wrap_with_rng(bad_p, alice, bob.public_key_hex, now=NOW, rng=random.Random(1)), bob)


def test_gift_wrap_filter_matches_wraps_for_us_only() -> None:
    alice, bob, carol = _keys()
    wraps = wrap_message(make_message(alice.public_key_hex, [bob.public_key_hex], "hi", created_at=NOW), alice,
                         now=NOW, rng=random.Random(9))
    f = validate_filter(gift_wrap_filter(bob.public_key_hex, since=NOW - 3 * 86400))
    assert matches(f, wraps[bob.public_key_hex]) and not matches(f, wraps[alice.public_key_hex])
    assert gift_wrap_filter(carol.public_key_hex, since=-5)["since"] == 0


# --- kind 10050 --------------------------------------------------------------------------------


def test_dm_relay_list_builds_and_parses_and_refuses_bad_urls() -> None:
    alice, _, _ = _keys()
    ev = build_dm_relay_list(alice, ["ws://127.0.0.1:7447", "wss://inbox.example/", "ws://127.0.0.1:7447"],
                             created_at=NOW)
    assert ev.kind == DM_RELAY_LIST and ev.is_valid() and ev.content == ""
    assert dm_relays_of(ev) == ["ws://127.0.0.1:7447", "wss://inbox.example/"]
    assert matches(dm_relay_list_filter([alice.public_key_hex]), ev)
    for bad in (["https://x.example"], [], [f"wss://r{i}.example" for i in range(MAX_DM_RELAYS + 1)]):
        with pytest.raises(NostrError):
            build_dm_relay_list(alice, bad, created_at=NOW)
    hostile = sign_event(alice, kind=DM_RELAY_LIST, content="", created_at=NOW,
                         tags=[("relay", "javascript:alert(1)"), ("relay", " wss://ok.example "), ("relay",),
                               *(("relay", f"wss://r{i}.example") for i in range(50))])
    parsed = dm_relays_of(hostile)
    assert parsed[0] == "wss://ok.example" and len(parsed) == MAX_DM_RELAYS
    assert dm_relays_of(sign_event(alice, kind=10002, content="", created_at=NOW, tags=[("relay", "wss://a")])) == []
    assert dm_relays_of(None) == []
    assert delivery_relays(ev, ["ws://127.0.0.1:1"]) == ["ws://127.0.0.1:7447", "wss://inbox.example/"]
    assert delivery_relays(None, ["ws://a", "ws://b", "ws://a"]) == ["ws://a", "ws://b"]


# --- interop with rust-nostr -------------------------------------------------------------------


def test_rust_nostr_sends_a_dm_and_we_open_it_then_our_reply_opens_in_rust_nostr() -> None:
    admin = nostr_sdk.Keys.generate()
    (agent,) = _keys(1, seed=21)
    agent_pub = nostr_sdk.PublicKey.parse(agent.public_key_hex)
    incoming = nostr_sdk.nip17_make_private_msg(admin, agent_pub, "what is on my list today? ✅")
    dm = open_message(Event.from_json(incoming.as_json()), agent)
    assert dm.text == "what is on my list today? ✅"
    assert dm.sender == admin.public_key().to_hex()

    reply = make_message(agent.public_key_hex, [dm.sender], "two tasks: groceries, call Ana", created_at=NOW,
                         reply_to=dm.id)
    wraps = wrap_message(reply, agent, now=NOW, rng=random.Random(4))
    received = nostr_sdk.Event.from_json(wraps[dm.sender].to_json())
    assert received.verify()
    gift = nostr_sdk.UnwrappedGift.from_gift_wrap(admin, received)
    assert gift.sender().to_hex() == agent.public_key_hex
    rumor = gift.rumor()
    assert rumor.content() == "two tasks: groceries, call Ana"
    assert rumor.kind().as_u16() == DIRECT_MESSAGE
    assert rumor.id().to_hex() == reply.id
    assert ["e", dm.id] in [t.to_vec() for t in rumor.tags()]


def test_rust_nostr_refuses_a_wrap_we_tampered_with_as_we_refuse_its() -> None:
    admin = nostr_sdk.Keys.generate()
    (agent,) = _keys(1, seed=22)
    reply = make_message(agent.public_key_hex, [admin.public_key().to_hex()], "hi", created_at=NOW)
    good = wrap_message(reply, agent, now=NOW, rng=random.Random(4))[admin.public_key().to_hex()]
    tampered = Event.from_dict({**good.to_dict(), "content": good.content[:-4] + "AAA="})
    assert not nostr_sdk.Event.from_json(tampered.to_json()).verify()
    incoming = nostr_sdk.nip17_make_private_msg(admin, nostr_sdk.PublicKey.parse(agent.public_key_hex), "x")
    data = Event.from_json(incoming.as_json()).to_dict()
    with pytest.raises(NostrError, match="id does not match"):
        open_message(Event.from_dict({**data, "content": data["content"][:-4] + "AAA="}), agent)


def test_rust_nostr_reads_our_dm_relay_list() -> None:
    (agent,) = _keys(1, seed=23)
    ev = build_dm_relay_list(agent, ["ws://127.0.0.1:7447", "wss://inbox.example"], created_at=NOW)
    rust_ev = nostr_sdk.Event.from_json(ev.to_json())
    assert rust_ev.verify()
    urls = [str(u) for u in nostr_sdk.nip17_extract_relay_list(rust_ev)]
    assert [u.rstrip("/") for u in urls] == ["ws://127.0.0.1:7447", "wss://inbox.example"]
