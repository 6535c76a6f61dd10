"""Keys: generate, parse hex/nsec, derive the public key, and never show the secret."""

from __future__ import annotations

import pytest
from vectors import load_json, spec_nsec

from didactyl_tui.errors import NostrError
from didactyl_tui.nostr.keys import SecretKey, is_hex_pubkey, verify_signature

NIP19 = load_json("nip19.json")["nips_19md"]
NSEC = {**NIP19["nsec"][0], "bech32": spec_nsec(NIP19["nsec"][0])}  # derived: no full nsec in the repository
NPUB_OF_NSEC = NIP19["npub"][1]  # the nsec example's public key (see vectors README)
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def test_generate_makes_distinct_valid_keys() -> None:
    a, b = SecretKey.generate(), SecretKey.generate()
    assert a != b
    assert is_hex_pubkey(a.public_key_hex) and a.public_key_hex == a.public_key_hex.lower()
    sig = a.sign(b"\x01" * 32)
    assert verify_signature(a.public_key_hex, b"\x01" * 32, sig)
    assert not verify_signature(b.public_key_hex, b"\x01" * 32, sig)


def test_from_hex_and_nsec_agree() -> None:
    from_hex = SecretKey.from_hex(NSEC["hex"])
    from_nsec = SecretKey.from_nsec(NSEC["bech32"])
    assert from_hex == from_nsec
    assert from_hex.public_key_hex == NPUB_OF_NSEC["hex"]
    assert from_hex.npub == NPUB_OF_NSEC["bech32"]
    assert from_hex.nsec() == NSEC["bech32"]
    assert from_hex.secret_hex() == NSEC["hex"]


@pytest.mark.parametrize(
    "text",
    [
        NSEC["hex"],
        NSEC["hex"].upper(),
        f"  {NSEC['hex']}\n",
        NSEC["bech32"],
        NSEC["bech32"].upper(),
        f" {NSEC['bech32']} ",
    ],
)
def test_parse_accepts_hex_and_nsec(text: str) -> None:
    assert SecretKey.parse(text).public_key_hex == NPUB_OF_NSEC["hex"]


def test_secret_never_in_repr_or_str() -> None:
    sk = SecretKey.from_hex(NSEC["hex"])
    for text in (repr(sk), str(sk), f"{sk}", f"{sk!r}", repr([sk]), repr({"k": sk})):
        assert NSEC["hex"] not in text
        assert NSEC["hex"][:16] not in text
        assert NSEC["bech32"] not in text
        assert "redacted" in text


def test_no_instance_dict_to_leak_through() -> None:
    sk = SecretKey.generate()
    assert not hasattr(sk, "__dict__")  # vars(sk) cannot dump the secret


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "expected an nsec1"),
        ("abc", "expected an nsec1"),
        ("00" * 32, "outside the secp256k1 range"),
        (f"{N:064x}", "outside the secp256k1 range"),
        ("ff" * 32, "outside the secp256k1 range"),
        ("zz" * 32, "expected an nsec1"),
        (NIP19["npub"][0]["bech32"], "expected an nsec1"),
        (NSEC["bech32"][:-1] + ("q" if NSEC["bech32"][-1] != "q" else "p"), "checksum"),
    ],
)
def test_parse_rejects_bad_keys(text: str, reason: str) -> None:
    with pytest.raises(NostrError, match=reason) as exc:
        SecretKey.parse(text)
    if len(text) > 10:
        assert text not in str(exc.value)


def test_from_nsec_wrong_prefix() -> None:
    with pytest.raises(NostrError, match="expected nsec, got npub"):
        SecretKey.from_nsec(NIP19["npub"][0]["bech32"])


def test_from_hex_wrong_length() -> None:
    with pytest.raises(NostrError, match="64 hex"):
        SecretKey.from_hex("ab" * 31)
    with pytest.raises(NostrError, match="32 bytes"):
        SecretKey(b"\x01" * 31)


def test_largest_valid_key() -> None:
    sk = SecretKey.from_hex(f"{N - 1:064x}")
    assert is_hex_pubkey(sk.public_key_hex)


def test_equality_and_hash() -> None:
    a = SecretKey.from_hex(NSEC["hex"])
    b = SecretKey.from_nsec(NSEC["bech32"])
    assert a == b and hash(a) == hash(b)
    assert len({a, b, SecretKey.generate()}) == 2
    assert a != NSEC["hex"]


def test_is_hex_pubkey() -> None:
    assert is_hex_pubkey("ab" * 32)
    assert not is_hex_pubkey("ab" * 31)
    assert not is_hex_pubkey("gg" * 32)
