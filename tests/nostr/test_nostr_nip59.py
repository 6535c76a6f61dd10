"""NIP-59 gift wraps: the spec's example events open; every layer's check refuses what it must."""

from __future__ import annotations

import json
import random

import pytest
from vectors import load_json

from didactyl_tui.errors import NostrError
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.kinds import GIFT_WRAP, SEAL
from didactyl_tui.nostr.nip59 import (
    MAX_BACKDATE_SECONDS,
    DecryptFailed,
    Rumor,
    RumorRejected,
    SealRejected,
    SenderMismatch,
    UnwrapError,
    WrapRejected,
    gift_wrap,
    open_seal,
    open_seal_with,
    seal,
    unwrap,
    unwrap_seal,
    unwrap_seal_with,
    wrap,
    wrap_with_rng,
)
from didactyl_tui.nostr.signer import LocalSigner

NOW = 1_750_000_000


def _vector_events(kind: int) -> list[Event]:
    return [Event.from_dict(e["event"]) for e in load_json("nip01-events.json")["valid"] if e["event"]["kind"] == kind]


def _keys() -> tuple[SecretKey, SecretKey, SecretKey]:
    rng = random.Random(7)
    return tuple(SecretKey(rng.randbytes(32)) for _ in range(3))  # type: ignore[return-value]


def _rumor(author: SecretKey, text: str = "hello", kind: int = 14) -> Rumor:
    return Rumor.build(author.public_key_hex, kind=kind, content=text, created_at=NOW, tags=[("p", "ab" * 32)])


def test_the_nip59_example_seal_opens_to_its_rumor_once_wrapped_to_the_recipient() -> None:
    keys = load_json("nip17-nip59-keys.json")["nip59"]
    author = SecretKey.from_hex(keys["author_secret_hex"])
    recipient = SecretKey.from_hex(keys["recipient_secret_hex"])
    (sealed,) = _vector_events(SEAL)
    assert sealed.pubkey == author.public_key_hex
    wrapped = gift_wrap(sealed, recipient.public_key_hex, wrapper_key=_keys()[2], created_at=NOW)
    opened = unwrap(wrapped, recipient)
    assert opened.rumor.content == keys["message"]
    assert opened.rumor.id == keys["rumor_id"]
    assert opened.rumor.kind == 1
    assert opened.sender == author.public_key_hex
    assert opened.seal == sealed


def test_the_nip17_example_wraps_open_for_the_receiver_and_for_the_sender_copy() -> None:
    keys = load_json("nip17-nip59-keys.json")["nip17"]
    sender = SecretKey.from_hex(keys["sender_secret_hex"])
    receiver = SecretKey.from_hex(keys["receiver_secret_hex"])
    wraps = {w.first_tag("p"): w for w in _vector_events(GIFT_WRAP)}
    for me in (receiver, sender):
        opened = unwrap(wraps[me.public_key_hex], me)
        assert opened.rumor.content == keys["message"]
        assert opened.rumor.id == keys["rumor_id"]
        assert opened.sender == sender.public_key_hex
    with pytest.raises(WrapRejected, match="not addressed"):
        unwrap(wraps[receiver.public_key_hex], sender)


def test_wrap_then_unwrap_round_trips_and_the_outer_layers_hide_the_sender() -> None:
    alice, bob, wrapper = _keys()
    rumor = _rumor(alice, "ça va? 🌙")
    wrapped = wrap(rumor, alice, bob.public_key_hex, wrapper_key=wrapper, seal_created_at=NOW - 5,
                   wrap_created_at=NOW - 9)
    assert wrapped.kind == GIFT_WRAP and wrapped.is_valid()
    assert wrapped.pubkey == wrapper.public_key_hex != alice.public_key_hex
    assert wrapped.tags == (("p", bob.public_key_hex),)
    assert alice.public_key_hex not in wrapped.to_json()
    opened = unwrap(wrapped, bob)
    assert opened.rumor == rumor and opened.seal.created_at == NOW - 5 and opened.seal.tags == ()


def test_wrap_with_rng_is_reproducible_from_its_seed_and_backdates_within_two_days() -> None:
    alice, bob, _ = _keys()
    rumor = _rumor(alice)
    first = wrap_with_rng(rumor, alice, bob.public_key_hex, now=NOW, rng=random.Random(1))
    again = wrap_with_rng(rumor, alice, bob.public_key_hex, now=NOW, rng=random.Random(1))
    other = wrap_with_rng(rumor, alice, bob.public_key_hex, now=NOW, rng=random.Random(2))
    assert first == again
    assert other.pubkey != first.pubkey and other.content != first.content
    for w in (first, other):
        opened = unwrap(w, bob)
        for ts in (w.created_at, opened.seal.created_at):
            assert NOW - MAX_BACKDATE_SECONDS <= ts <= NOW
    # the default draws from the system's randomness: two wraps never share a wrapper key
    a = wrap_with_rng(rumor, alice, bob.public_key_hex, now=NOW)
    b = wrap_with_rng(rumor, alice, bob.public_key_hex, now=NOW)
    assert a.pubkey != b.pubkey


def test_a_seal_is_only_made_by_the_rumors_author() -> None:
    alice, bob, _ = _keys()
    with pytest.raises(NostrError, match="rumor's author"):
        seal(_rumor(alice), bob, alice.public_key_hex, created_at=NOW)


# --- every check refuses -----------------------------------------------------------------------


def _resign(ev: Event, key: SecretKey, **changes: object) -> Event:
    data = {"kind": ev.kind, "content": ev.content, "created_at": ev.created_at, "tags": ev.tags, **changes}
    return sign_event(key, **data)  # type: ignore[arg-type]


def test_a_wrap_of_another_kind_or_with_a_bad_signature_is_refused() -> None:
    alice, bob, wrapper = _keys()
    good = wrap(_rumor(alice), alice, bob.public_key_hex, wrapper_key=wrapper, seal_created_at=NOW,
                wrap_created_at=NOW)
    with pytest.raises(WrapRejected, match="kind 4"):
        unwrap(_resign(good, wrapper, kind=4), bob)
    forged = Event.from_dict({**good.to_dict(), "sig": good.sig[:-2] + ("00" if good.sig[-2:] != "00" else "01")})
    with pytest.raises(WrapRejected, match="bad signature"):
        unwrap(forged, bob)
    altered = Event.from_dict({**good.to_dict(), "created_at": good.created_at + 1})
    with pytest.raises(WrapRejected, match="id does not match"):
        unwrap(altered, bob)


def test_a_wrap_tagged_for_us_but_encrypted_to_someone_else_fails_to_decrypt() -> None:
    alice, bob, wrapper = _keys()
    sealed = seal(_rumor(alice), alice, alice.public_key_hex, created_at=NOW)
    wrapped = gift_wrap(sealed, alice.public_key_hex, wrapper_key=wrapper, created_at=NOW,
                        extra_tags=[("p", bob.public_key_hex)])
    with pytest.raises(DecryptFailed, match="gift wrap does not decrypt"):
        unwrap(wrapped, bob)


def _wrap_raw(inner_json: str, bob: SecretKey, wrapper: SecretKey) -> Event:
    key = nip44.get_conversation_key(wrapper.secret_hex(), bob.public_key_hex)
    return sign_event(wrapper, kind=GIFT_WRAP, content=nip44.encrypt(inner_json, key), created_at=NOW,
                      tags=[("p", bob.public_key_hex)])


def test_the_seal_must_be_a_signed_kind_13_event() -> None:
    alice, bob, wrapper = _keys()
    with pytest.raises(SealRejected, match="no JSON event"):
        unwrap(_wrap_raw("not json", bob, wrapper), bob)
    with pytest.raises(SealRejected, match="no JSON event"):
        unwrap(_wrap_raw("[" * 20_000 + "]" * 20_000, bob, wrapper), bob)  # bounded by NIP-44's size
    with pytest.raises(SealRejected, match="bad seal"):
        unwrap(_wrap_raw('{"kind": 13}', bob, wrapper), bob)
    note = sign_event(alice, kind=1, content="hi", created_at=NOW)
    with pytest.raises(SealRejected, match="kind 1, not a kind 13"):
        unwrap(_wrap_raw(note.to_json(), bob, wrapper), bob)
    sealed = seal(_rumor(alice), alice, bob.public_key_hex, created_at=NOW)
    bad_sig = {**sealed.to_dict(), "sig": "11" * 64}
    with pytest.raises(SealRejected, match="bad signature"):
        unwrap(_wrap_raw(json.dumps(bad_sig), bob, wrapper), bob)


def test_a_seal_encrypted_to_someone_else_fails_to_decrypt() -> None:
    alice, bob, wrapper = _keys()
    sealed = seal(_rumor(alice), alice, wrapper.public_key_hex, created_at=NOW)
    with pytest.raises(DecryptFailed, match="seal does not decrypt"):
        unwrap(gift_wrap(sealed, bob.public_key_hex, wrapper_key=wrapper, created_at=NOW), bob)


def _seal_raw(rumor_json: str, author: SecretKey, bob: SecretKey) -> Event:
    key = nip44.get_conversation_key(author.secret_hex(), bob.public_key_hex)
    return sign_event(author, kind=SEAL, content=nip44.encrypt(rumor_json, key), created_at=NOW)


def test_a_rumor_with_a_wrong_id_or_shape_is_refused() -> None:
    alice, bob, wrapper = _keys()
    rumor = _rumor(alice).to_dict()
    for bad, reason in (({**rumor, "content": "edited"}, "id does not match"), ({**rumor, "kind": "14"}, "bad rumor"),
                        ("[1, 2]", "no JSON event")):
        text = bad if isinstance(bad, str) else json.dumps(bad)
        wrapped = gift_wrap(_seal_raw(text, alice, bob), bob.public_key_hex, wrapper_key=wrapper, created_at=NOW)
        with pytest.raises(RumorRejected, match=reason):
            unwrap(wrapped, bob)


def test_a_seal_signed_by_someone_else_than_the_rumors_author_is_an_impersonation() -> None:
    alice, bob, mallory = _keys()
    claims_alice = _rumor(alice, "send the admin key to mallory")
    wrapped = gift_wrap(_seal_raw(claims_alice.to_json(), mallory, bob), bob.public_key_hex, wrapper_key=mallory,
                        created_at=NOW)
    with pytest.raises(SenderMismatch) as caught:
        unwrap(wrapped, bob)
    assert isinstance(caught.value, UnwrapError) and isinstance(caught.value, NostrError)
    assert caught.value.one_line().startswith("Gift wrap: the seal was signed by")


def test_unwrap_errors_never_show_the_secret_key() -> None:
    alice, bob, wrapper = _keys()
    sealed = seal(_rumor(alice), alice, wrapper.public_key_hex, created_at=NOW)
    with pytest.raises(UnwrapError) as caught:
        unwrap(gift_wrap(sealed, bob.public_key_hex, wrapper_key=wrapper, created_at=NOW), bob)
    for key in (alice, bob, wrapper):
        assert key.secret_hex() not in str(caught.value)


async def test_the_outer_layer_alone_names_the_proven_sender_and_the_inner_layer_opens_the_rest() -> None:
    alice, bob, wrapper = _keys()
    wrapped = wrap(_rumor(alice, "judge me by my seal"), alice, bob.public_key_hex, wrapper_key=wrapper,
                   seal_created_at=NOW, wrap_created_at=NOW)
    sealed = unwrap_seal(wrapped, bob)
    assert sealed.kind == SEAL and sealed.pubkey == alice.public_key_hex
    assert open_seal(wrapped, sealed, bob) == unwrap(wrapped, bob)
    signer = LocalSigner(bob)
    assert await unwrap_seal_with(wrapped, signer) == sealed
    assert await open_seal_with(wrapped, sealed, signer) == unwrap(wrapped, bob)


def test_a_seal_that_claims_another_author_fails_the_outer_layer() -> None:
    # What a stranger would need to have a wrap judged as the agent's: a seal naming the agent, signed by another key.
    agent, bob, mallory = _keys()
    sealed = seal(_rumor(mallory, "I am the agent"), mallory, bob.public_key_hex, created_at=NOW)
    forged = {**sealed.to_dict(), "pubkey": agent.public_key_hex}
    with pytest.raises(SealRejected, match="id does not match"):
        unwrap_seal(_wrap_raw(json.dumps(forged), bob, mallory), bob)
    stand_in = Event.from_dict({**forged, "sig": "0" * 128})
    forged["id"] = stand_in.computed_id()  # a consistent id, signed by mallory: the signature gives it away
    forged["sig"] = sign_event(mallory, kind=SEAL, content=sealed.content, created_at=NOW).sig
    with pytest.raises(SealRejected, match="bad signature"):
        unwrap_seal(_wrap_raw(json.dumps(forged), bob, mallory), bob)
