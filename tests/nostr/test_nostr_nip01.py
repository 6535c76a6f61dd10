"""NIP-01 events: every entry of the shared vectors, canonical serialization, signing, shape checks."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vectors import load_json

from didactyl_tui.errors import NostrError
from didactyl_tui.nostr.event import Event, compute_id, serialize_for_id, sign_event
from didactyl_tui.nostr.keys import SecretKey, verify_signature
from didactyl_tui.nostr.kinds import KindClass, kind_class

VEC = load_json("nip01-events.json")


def _label(entry: dict) -> str:
    return f"kind{entry['event']['kind']}-{entry['event']['id'][:8]}"


@pytest.mark.parametrize("entry", VEC["valid"], ids=_label)
def test_valid_events(entry: dict) -> None:
    raw = entry["event"]
    ev = Event.from_dict(raw)
    assert ev.computed_id() == raw["id"]
    ev.check()
    assert ev.is_valid()
    assert ev.to_dict() == raw
    assert Event.from_json(ev.to_json()) == ev


@pytest.mark.parametrize("entry", VEC["invalid"], ids=_label)
def test_invalid_events_fail_for_the_stated_reason(entry: dict) -> None:
    expect = entry["expect"]
    ev = Event.from_dict(entry["event"])
    assert not ev.is_valid()
    id_ok = ev.computed_id() == ev.id
    assert id_ok is expect["id_ok"]
    sig_over_stated_id = verify_signature(ev.pubkey, bytes.fromhex(ev.id), bytes.fromhex(ev.sig))
    if "sig_ok_over_stated_id" in expect:
        assert sig_over_stated_id is expect["sig_ok_over_stated_id"]
    if "sig_ok" in expect:
        assert sig_over_stated_id is expect["sig_ok"]
    reason = "invalid: event id does not match" if not expect["id_ok"] else "invalid: bad signature"
    with pytest.raises(NostrError, match=reason):
        ev.check()


def test_vector_file_has_what_the_readme_says() -> None:
    assert len(VEC["valid"]) == 9 and len(VEC["invalid"]) == 3


# --- canonical serialization ---------------------------------------------------------------


def test_serialization_escapes_exactly_what_nip01_says() -> None:
    content = 'q"b\\n\nr\rt\tb\bf\fnul\x00us\x1fdel\x7f é 🦄 /'
    text = serialize_for_id("ab" * 32, 1, 1, [["t", "x"]], content)
    assert text == (
        '[0,"' + "ab" * 32 + '",1,1,[["t","x"]],"q\\"b\\\\n\\nr\\rt\\tb\\bf\\fnul\\u0000us\\u001fdel\x7f é 🦄 /"]'
    )


def test_compute_id_is_sha256_of_utf8_serialization() -> None:
    args = ("cd" * 32, 1700000000, 30078, [["d", "x"], ["e", "1", "wss://r"]], "héllo")
    assert compute_id(*args) == hashlib.sha256(serialize_for_id(*args).encode("utf-8")).hexdigest()


def test_lone_surrogate_is_a_clear_error() -> None:
    with pytest.raises(NostrError, match="UTF-8"):
        compute_id("ab" * 32, 1, 1, [], "\ud800")


# --- signing -------------------------------------------------------------------------------

SK = SecretKey.from_hex("0000000000000000000000000000000000000000000000000000000000000003")


def test_sign_event_verifies_and_is_deterministic() -> None:
    a = sign_event(SK, kind=1, content="hi", created_at=1700000000, tags=[["t", "x"]])
    b = sign_event(SK, kind=1, content="hi", created_at=1700000000, tags=[("t", "x")])
    assert a == b
    assert a.pubkey == SK.public_key_hex
    assert a.tags == (("t", "x"),)
    a.check()


@pytest.mark.parametrize(
    "field, value",
    [("content", "hi!"), ("created_at", 1700000001), ("kind", 2), ("tags", (("t", "y"),))],
)
def test_any_change_breaks_the_id(field: str, value: object) -> None:
    ev = sign_event(SK, kind=1, content="hi", created_at=1700000000, tags=[["t", "x"]])
    data = ev.to_dict()
    data[field] = [list(t) for t in value] if field == "tags" else value  # type: ignore[attr-defined]
    with pytest.raises(NostrError, match="id does not match"):
        Event.from_dict(data).check()


def test_signature_from_another_key_fails() -> None:
    ev = sign_event(SK, kind=1, content="hi", created_at=1700000000)
    other = SecretKey.from_hex("00" * 31 + "05")
    forged = Event(ev.id, other.public_key_hex, ev.created_at, ev.kind, ev.tags, ev.content, ev.sig)
    # Recompute the id for the other pubkey, keep the old signature: id ok, sig bad.
    eid = forged.computed_id()
    forged = Event(eid, other.public_key_hex, ev.created_at, ev.kind, ev.tags, ev.content, ev.sig)
    with pytest.raises(NostrError, match="bad signature"):
        forged.check()


@settings(max_examples=40, deadline=None)
@given(
    st.text(max_size=200),
    st.integers(min_value=0, max_value=2**40),
    st.integers(min_value=0, max_value=65535),
    st.lists(st.lists(st.text(max_size=20), min_size=1, max_size=4), max_size=5),
)
def test_sign_then_parse_round_trip(content: str, created_at: int, kind: int, tags: list[list[str]]) -> None:
    ev = sign_event(SK, kind=kind, content=content, created_at=created_at, tags=tags)
    again = Event.from_json(ev.to_json())
    assert again == ev
    again.check()
    # Independent recomputation of the id straight from the wire JSON.
    wire = json.loads(ev.to_json())
    canon = json.dumps(
        [0, wire["pubkey"], wire["created_at"], wire["kind"], wire["tags"], wire["content"]],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert hashlib.sha256(canon.encode()).hexdigest() == ev.id


# --- shape checks --------------------------------------------------------------------------

GOOD = sign_event(SK, kind=1, content="x", created_at=1).to_dict()


@pytest.mark.parametrize(
    "patch, reason",
    [
        ({"id": "AB" * 32}, "id must be 64 lowercase hex"),
        ({"id": "ab"}, "id must be 64 lowercase hex"),
        ({"pubkey": 5}, "pubkey must be"),
        ({"sig": "00" * 63}, "sig must be 128"),
        ({"created_at": -1}, "created_at"),
        ({"created_at": True}, "created_at"),
        ({"created_at": 1.5}, "created_at"),
        ({"kind": 65536}, "kind"),
        ({"kind": "1"}, "kind"),
        ({"content": None}, "content must be a string"),
        ({"tags": [["t", 1]]}, "tags must be a list of lists of strings"),
        ({"tags": "t"}, "tags must be"),
    ],
)
def test_from_dict_rejects_bad_shapes(patch: dict, reason: str) -> None:
    with pytest.raises(NostrError, match=reason):
        Event.from_dict({**GOOD, **patch})


def test_from_dict_missing_field_and_non_object() -> None:
    data = dict(GOOD)
    del data["sig"]
    with pytest.raises(NostrError, match="missing the field 'sig'"):
        Event.from_dict(data)
    with pytest.raises(NostrError, match="JSON object"):
        Event.from_dict([1, 2])
    with pytest.raises(NostrError, match="not valid JSON"):
        Event.from_json("{")


def test_tag_helpers() -> None:
    ev = sign_event(SK, kind=30078, content="", created_at=1, tags=[["d", "memo"], ["p", "a"], ["p", "b"], ["x"]])
    assert ev.d_tag == "memo"
    assert ev.tag_values("p") == ["a", "b"]
    assert ev.first_tag("p") == "a"
    assert ev.first_tag("x") is None  # a tag with no value has no first value
    assert sign_event(SK, kind=30078, content="", created_at=1).d_tag == ""


@pytest.mark.parametrize(
    "kind, cls",
    [
        (0, KindClass.REPLACEABLE),
        (1, KindClass.REGULAR),
        (2, KindClass.REGULAR),
        (3, KindClass.REPLACEABLE),
        (9999, KindClass.REGULAR),
        (10000, KindClass.REPLACEABLE),
        (19999, KindClass.REPLACEABLE),
        (20000, KindClass.EPHEMERAL),
        (29999, KindClass.EPHEMERAL),
        (30000, KindClass.ADDRESSABLE),
        (39999, KindClass.ADDRESSABLE),
        (40000, KindClass.REGULAR),
    ],
)
def test_kind_classes(kind: int, cls: KindClass) -> None:
    assert kind_class(kind) is cls
