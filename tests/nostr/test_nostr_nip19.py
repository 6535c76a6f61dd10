"""NIP-19: every case of the shared vectors, round trips, and a clear error for each fault."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vectors import load_json, spec_nsec

from didactyl_tui.errors import NostrError
from didactyl_tui.nostr import nip19
from didactyl_tui.nostr.keys import SecretKey

VEC = load_json("nip19.json")
NIPS = VEC["nips_19md"]
TOOLS = VEC["nostr_tools_tests"]
NPUB = NIPS["npub"][0]
PK = NPUB["hex"]


@pytest.mark.parametrize("case", NIPS["npub"], ids=lambda c: c["bech32"][:12])
def test_npub_vectors(case: dict) -> None:
    assert nip19.encode_npub(case["hex"]) == case["bech32"]
    assert nip19.decode_npub(case["bech32"]) == case["hex"]
    assert nip19.decode(case["bech32"]) == ("npub", case["hex"])


@pytest.mark.parametrize("case", NIPS["nsec"], ids=lambda c: c["hex"][:8])
def test_nsec_vectors(case: dict) -> None:
    nsec = spec_nsec(case)  # encoded from the hex, its SHA-256 checked against the spec's string
    assert nip19.decode_nsec(nsec) == case["hex"]
    # The vector's secret derives the second npub example's public key.
    sk = SecretKey.from_nsec(nsec)
    assert sk.npub == NIPS["npub"][1]["bech32"]
    assert sk.nsec() == nsec


@pytest.mark.parametrize("case", NIPS["nprofile"], ids=lambda c: c["bech32"][:16])
def test_nprofile_vectors(case: dict) -> None:
    ptr = nip19.decode_nprofile(case["bech32"])
    assert ptr == nip19.ProfilePointer(case["pubkey"], case["relays"])
    assert nip19.encode_nprofile(case["pubkey"], case["relays"]) == case["bech32"]
    assert nip19.decode(case["bech32"]) == ("nprofile", ptr)


@pytest.mark.parametrize("case", TOOLS["naddr"], ids=lambda c: c["identifier"])
def test_naddr_vectors(case: dict) -> None:
    ptr = nip19.decode_naddr(case["bech32"])
    assert ptr.identifier == case["identifier"]
    assert ptr.pubkey == case["pubkey"]
    assert ptr.kind == case["kind"]
    if "relays" in case:
        assert ptr.relays == case["relays"]
        # Same TLV order as we write: the encoding is byte-identical.
        assert nip19.encode_naddr(ptr.identifier, ptr.pubkey, ptr.kind, ptr.relays) == case["bech32"]
    for relay in case.get("relays_contain", []):
        assert relay in ptr.relays
    # Whatever the order on the wire, our re-encoding decodes to the same pointer.
    again = nip19.encode_naddr(ptr.identifier, ptr.pubkey, ptr.kind, ptr.relays)
    assert nip19.decode_naddr(again) == ptr
    assert nip19.decode(case["bech32"]) == ("naddr", ptr)


@pytest.mark.parametrize("case", TOOLS["invalid"], ids=lambda c: c["bech32"])
def test_invalid_vectors_raise(case: dict) -> None:
    with pytest.raises(NostrError, match="malformed"):
        nip19.decode(case["bech32"])


# --- errors ---------------------------------------------------------------------------------


def _flip_last_char(text: str) -> str:
    return text[:-1] + ("q" if text[-1] != "q" else "p")


def test_bad_checksum() -> None:
    with pytest.raises(NostrError, match="checksum"):
        nip19.decode_npub(_flip_last_char(NPUB["bech32"]))


def test_wrong_prefix_names_both() -> None:
    nsec = spec_nsec(NIPS["nsec"][0])
    with pytest.raises(NostrError, match="expected npub, got nsec") as exc:
        nip19.decode_npub(nsec)
    assert nsec not in str(exc.value)
    with pytest.raises(NostrError, match="expected nsec, got npub"):
        nip19.decode_nsec(NPUB["bech32"])
    with pytest.raises(NostrError, match="expected note, got npub"):
        nip19.decode_note(NPUB["bech32"])


def test_bad_character() -> None:
    bad = NPUB["bech32"][:10] + "b" + NPUB["bech32"][11:]
    with pytest.raises(NostrError, match="invalid character at position 10"):
        nip19.decode_npub(bad)
    with pytest.raises(NostrError, match="printable ASCII"):
        nip19.decode_npub(NPUB["bech32"][:10] + "é" + NPUB["bech32"][11:])


def test_mixed_case_rejected_but_one_case_accepted() -> None:
    text = NPUB["bech32"]
    assert nip19.decode_npub(text.upper()) == PK
    with pytest.raises(NostrError, match="mixed"):
        nip19.decode_npub(text[:8] + text[8:].upper())


def test_wrong_data_length() -> None:
    short = nip19.bech32_encode("npub", bytes(31))
    with pytest.raises(NostrError, match="npub must encode 32 bytes, got 31"):
        nip19.decode_npub(short)
    with pytest.raises(NostrError, match="note must encode 32 bytes, got 33"):
        nip19.decode(nip19.bech32_encode("note", bytes(33)))


def test_missing_separator_and_short_strings() -> None:
    for text in ("", "npub", "1qqqqqq", "npub1qqqq"):
        with pytest.raises(NostrError):
            nip19.decode(text)


def test_bech32m_checksum_is_not_bech32() -> None:
    # Same data and hrp, checksum computed with the bech32m constant: must not be accepted.
    hrp, data = "npub", bytes.fromhex(PK)
    words = nip19._convert_bits(data, 8, 5, pad=True)
    poly = nip19._polymod([*nip19._hrp_expand(hrp), *words, 0, 0, 0, 0, 0, 0]) ^ 0x2BC830A3
    text = (
        hrp
        + "1"
        + "".join(nip19._CHARSET[w] for w in words)
        + "".join(nip19._CHARSET[(poly >> 5 * (5 - i)) & 31] for i in range(6))
    )
    with pytest.raises(NostrError, match="checksum"):
        nip19.decode_npub(text)


def test_nonzero_padding_bits_rejected() -> None:
    # 32 bytes = 256 bits -> 52 words with 4 padding bits; set one of them and re-checksum.
    words = nip19._convert_bits(bytes.fromhex(PK), 8, 5, pad=True)
    words[-1] |= 1
    poly = nip19._polymod([*nip19._hrp_expand("npub"), *words, 0, 0, 0, 0, 0, 0]) ^ 1
    text = (
        "npub1"
        + "".join(nip19._CHARSET[w] for w in words)
        + "".join(nip19._CHARSET[(poly >> 5 * (5 - i)) & 31] for i in range(6))
    )
    with pytest.raises(NostrError, match="padding"):
        nip19.decode_npub(text)


def test_unknown_prefix() -> None:
    with pytest.raises(NostrError, match="unknown NIP-19 prefix 'nrelay'"):
        nip19.decode(nip19.bech32_encode("nrelay", b"wss://x"))


def test_bad_hex_inputs() -> None:
    for bad in ("", PK[:-1], PK + "00", "g" * 64):
        with pytest.raises(NostrError, match="64 hex"):
            nip19.encode_npub(bad)
    assert nip19.encode_npub(PK.upper()) == NPUB["bech32"]


def test_too_long_string() -> None:
    with pytest.raises(NostrError, match="limit"):
        nip19.decode("npub1" + "q" * 6000)


def test_long_tlv_beyond_bip173_limit() -> None:
    relays = [f"wss://relay{i}.example.com" for i in range(8)]
    text = nip19.encode_nprofile(PK, relays)
    assert len(text) > 90
    assert nip19.decode_nprofile(text) == nip19.ProfilePointer(PK, relays)


# --- TLV ------------------------------------------------------------------------------------


def _tlv(*entries: tuple[int, bytes]) -> bytes:
    return b"".join(bytes((t, len(v))) + v for t, v in entries)


def test_nevent_round_trip_all_fields() -> None:
    eid = "ab" * 32
    text = nip19.encode_nevent(eid, ["wss://a.example", "wss://b.example"], author=PK, kind=30023)
    ptr = nip19.decode_nevent(text)
    assert ptr == nip19.EventPointer(eid, ["wss://a.example", "wss://b.example"], PK, 30023)
    assert nip19.decode(text) == ("nevent", ptr)
    bare = nip19.decode_nevent(nip19.encode_nevent(eid))
    assert bare == nip19.EventPointer(eid, [], None, None)


def test_kind_is_32_bit_big_endian() -> None:
    data = _tlv((0, bytes(32)), (3, (0x01020304).to_bytes(4, "big")))
    assert nip19.decode_nevent(nip19.bech32_encode("nevent", data)).kind == 0x01020304
    assert nip19.decode_nevent(nip19.encode_nevent("00" * 32, kind=2**32 - 1)).kind == 2**32 - 1
    with pytest.raises(NostrError, match="kind"):
        nip19.encode_nevent("00" * 32, kind=2**32)


def test_unknown_tlv_types_ignored() -> None:
    data = _tlv((9, b"future"), (0, bytes.fromhex(PK)), (200, b""), (1, b"wss://r.example"))
    assert nip19.decode_nprofile(nip19.bech32_encode("nprofile", data)) == nip19.ProfilePointer(PK, ["wss://r.example"])


@pytest.mark.parametrize(
    ("hrp", "data", "reason"),
    [
        ("nprofile", _tlv((0, bytes(31))), "public key must be 32 bytes, got 31"),
        ("nprofile", _tlv((1, b"wss://x")), "no public key"),
        ("nprofile", bytes((0, 40)) + bytes(32), "claims 40 bytes, only 32 left"),
        ("nevent", _tlv((0, bytes(33))), "event id must be 32 bytes, got 33"),
        ("nevent", _tlv((0, bytes(32)), (2, bytes(5))), "author must be 32 bytes"),
        ("nevent", _tlv((0, bytes(32)), (3, bytes(2))), "kind must be 4 bytes"),
        ("nevent", _tlv((0, bytes(32))) + b"\x01", "cut short"),
        ("naddr", _tlv((2, bytes(32)), (3, bytes(4))), "no identifier"),
        ("naddr", _tlv((0, b"d"), (3, bytes(4))), "no author"),
        ("naddr", _tlv((0, b"d"), (2, bytes(32))), "no kind"),
        ("naddr", _tlv((0, b"\xff"), (2, bytes(32)), (3, bytes(4))), "not valid UTF-8"),
    ],
)
def test_malformed_tlv(hrp: str, data: bytes, reason: str) -> None:
    with pytest.raises(NostrError, match=reason):
        nip19.decode(nip19.bech32_encode(hrp, data))


def test_naddr_empty_identifier() -> None:
    # Replaceable (non-addressable) targets use an empty d; it must survive the round trip.
    ptr = nip19.decode_naddr(nip19.encode_naddr("", PK, 10002))
    assert ptr == nip19.AddressPointer("", PK, 10002, [])


def test_relays_must_be_a_list() -> None:
    with pytest.raises(NostrError, match="list"):
        nip19.encode_nprofile(PK, "wss://r.example")  # type: ignore[arg-type]


@given(st.binary(min_size=32, max_size=32))
def test_npub_note_round_trip(raw: bytes) -> None:
    for enc, dec in ((nip19.encode_npub, nip19.decode_npub), (nip19.encode_note, nip19.decode_note)):
        assert dec(enc(raw.hex())) == raw.hex()


@given(
    st.text(max_size=60),
    st.binary(min_size=32, max_size=32),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.lists(st.text(min_size=1, max_size=40), max_size=4),
)
def test_naddr_round_trip(identifier: str, pub: bytes, kind: int, relays: list[str]) -> None:
    # (hypothesis' text() never yields lone surrogates, so every value here encodes as UTF-8)
    ptr = nip19.AddressPointer(identifier, pub.hex(), kind, relays)
    assert nip19.decode_naddr(nip19.encode_naddr(identifier, pub.hex(), kind, relays)) == ptr


@given(st.text(max_size=120))
def test_decode_never_crashes_with_anything_else(text: str) -> None:
    try:
        nip19.decode(text)
    except NostrError:
        pass
