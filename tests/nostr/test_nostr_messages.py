"""NIP-01 wire messages: every type parses back to what was serialised, malformed frames say why,
prefixes are read case-insensitively, and the subscription id sniffed from a frame's head is the
one a full parse finds (or nothing)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.messages import (
    BAD_EVENT,
    BAD_JSON,
    BAD_MESSAGE,
    UNKNOWN_MESSAGE,
    ClientAuth,
    ClientClose,
    ClientEvent,
    ClientReq,
    MessageError,
    Prefix,
    RelayAuth,
    RelayClosed,
    RelayEose,
    RelayEvent,
    RelayNotice,
    RelayOk,
    parse_client_message,
    parse_relay_message,
    sniff_event_id,
    sniff_subscription_id,
)

SK = SecretKey.from_hex("0d" * 32)
EV = sign_event(SK, kind=1, content='hi "there"\n', created_at=1_700_000_000, tags=[["t", "x"]])


@pytest.mark.parametrize("msg", [
    RelayEvent.of("sub1", EV),
    RelayOk(EV.id, True, ""),
    RelayOk(EV.id, False, "blocked: you are banned"),
    RelayEose("sub1"),
    RelayClosed("sub1", "auth-required: sign in"),
    RelayNotice("\x1b]52;c;aGk=\x07 kept as sent"),
    RelayAuth("challenge-1"),
])
def test_relay_messages_round_trip(msg: object) -> None:
    assert parse_relay_message(msg.to_json()) == msg  # type: ignore[attr-defined]
    assert parse_relay_message(msg.to_json().encode()) == msg  # type: ignore[attr-defined]


@pytest.mark.parametrize("msg", [
    ClientEvent.of(EV),
    ClientReq("sub1", ({"kinds": [1]}, {"authors": [SK.public_key_hex], "limit": 5})),
    ClientClose("sub1"),
    ClientAuth.of(EV),
])
def test_client_messages_round_trip(msg: object) -> None:
    assert parse_client_message(msg.to_json()) == msg  # type: ignore[attr-defined]


def test_serialisation_is_compact_utf8_json() -> None:
    assert RelayEose("s").to_json() == '["EOSE","s"]'
    assert RelayNotice("é").to_json() == '["NOTICE","é"]'
    assert ClientEvent.of(EV).to_list() == ["EVENT", EV.to_dict()]


@pytest.mark.parametrize(("frame", "kind"), [
    ("not json {", BAD_JSON),
    (b"\xff\xfe", BAD_JSON),
    ("[" * 100_000, BAD_JSON),
    ('{"a": 1}', BAD_MESSAGE),
    ("[]", BAD_MESSAGE),
    ("[1, 2]", BAD_MESSAGE),
    ('["OK"]', BAD_MESSAGE),
    ('["OK","id","yes",""]', BAD_MESSAGE),
    ('["EOSE"]', BAD_MESSAGE),
    ('["EOSE", 5]', BAD_MESSAGE),
    ('["CLOSED"]', BAD_MESSAGE),
    ('["AUTH", ""]', BAD_MESSAGE),
    ('["EVENT","s"]', BAD_MESSAGE),
    ('["EVENT","s",{},{}]', BAD_MESSAGE),
    ('["EVENT",1,{}]', BAD_MESSAGE),
    ('["EVENT","s",[1]]', BAD_EVENT),
    ('["REQ","s",{}]', UNKNOWN_MESSAGE),  # a client message is no relay message
])
def test_malformed_relay_frames_say_why(frame: str | bytes, kind: str) -> None:
    with pytest.raises(MessageError) as err:
        parse_relay_message(frame)
    assert err.value.kind == kind


def test_missing_optional_texts_are_empty() -> None:
    assert parse_relay_message('["OK","x",true]') == RelayOk("x", True, "")
    assert parse_relay_message('["OK","x",false,7]') == RelayOk("x", False, "")
    assert parse_relay_message('["CLOSED","s"]') == RelayClosed("s", "")
    assert parse_relay_message('["NOTICE"]') == RelayNotice("")


@pytest.mark.parametrize(("frame", "kind"), [
    ('["EVENT"]', BAD_MESSAGE),
    ('["EVENT",{"id":"abc"},1]', BAD_MESSAGE),
    ('["REQ","s"]', BAD_MESSAGE),
    ('["REQ","s",[]]', BAD_MESSAGE),
    ('["REQ",5,{}]', BAD_MESSAGE),
    ('["CLOSE"]', BAD_MESSAGE),
    ('["COUNT","s",{}]', UNKNOWN_MESSAGE),
])
def test_malformed_client_frames_say_why(frame: str, kind: str) -> None:
    with pytest.raises(MessageError) as err:
        parse_client_message(frame)
    assert err.value.kind == kind


def test_a_malformed_client_event_keeps_its_claimed_id_for_the_answer() -> None:
    with pytest.raises(MessageError) as err:
        parse_client_message('["EVENT",{"id":"abc"},1]')
    assert err.value.event_id == "abc"


@pytest.mark.parametrize(("reason", "prefix"), [
    ("duplicate: already have it", Prefix.DUPLICATE),
    ("Blocked: no", Prefix.BLOCKED),
    ("rate-limited: slow down", Prefix.RATE_LIMITED),
    ("auth-required: sign in", Prefix.AUTH_REQUIRED),
    ("replaced: have a newer version", Prefix.REPLACED),
    ("pow: difficulty 20", Prefix.POW),
    ("mute: muted", Prefix.MUTE),
    ("restricted: members only", Prefix.RESTRICTED),
    ("invalid: bad signature", Prefix.INVALID),
    ("error: unknown", Prefix.ERROR),
    ("no prefix at all", None),
    ("made-up: prefix", None),
    ("", None),
])
def test_prefixes(reason: str, prefix: Prefix | None) -> None:
    assert Prefix.of(reason) is prefix
    assert RelayOk("x", False, reason).prefix is prefix
    assert RelayClosed("s", reason).prefix is prefix


def test_prefix_builds_a_reason() -> None:
    assert Prefix.INVALID.reason("bad signature") == "invalid: bad signature"
    assert Prefix.of(Prefix.RATE_LIMITED.reason("x")) is Prefix.RATE_LIMITED


@given(st.text(min_size=1, max_size=64))
def test_the_sniffed_subscription_id_is_the_parsed_one_or_none(sub_id: str) -> None:
    frame = json.dumps(["EVENT", sub_id, EV.to_dict()], ensure_ascii=False).encode("utf-8", "surrogatepass")
    sniffed = sniff_subscription_id(frame)
    assert sniffed is None or sniffed == sub_id
    if sub_id.isascii() and sub_id.isalnum():  # plain ids are always read
        assert sniffed == sub_id


@pytest.mark.parametrize("frame", [
    b'["EOSE","sub"]',
    b'["EVENT","with \\"escape","x"]',
    b'["EVENT","' + b"x" * 65 + b'",{}]',
    b'["EVENT",5,{}]',
    b"",
])
def test_sniffing_gives_up_rather_than_guess(frame: bytes) -> None:
    assert sniff_subscription_id(frame) is None


def test_the_event_id_of_a_frame_too_big_to_parse_can_be_read() -> None:
    big = ClientEvent.of(EV).to_json().encode()
    assert sniff_event_id(big) == EV.id
    assert sniff_event_id(b'["EVENT",{"kind":1,"id" : "' + b"a" * 64 + b'"') == "a" * 64  # truncated, spaced
    assert sniff_event_id(b'["EVENT",{"id":"ABC"}]') is None
    assert sniff_event_id(b"not json") is None
