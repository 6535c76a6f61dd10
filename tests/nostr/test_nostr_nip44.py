"""NIP-44 v2: every group of the official vectors, plus the contract's error cases."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vectors import load_json

from didactyl_tui.errors import Nip44Error
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.keys import SecretKey

V2 = load_json("nip44.vectors.json")["v2"]
VALID, INVALID = V2["valid"], V2["invalid"]


def test_every_group_is_covered() -> None:
    # If the vector file grows a group, this test makes us look at it.
    assert set(VALID) == {
        "get_conversation_key",
        "get_message_keys",
        "calc_padded_len",
        "encrypt_decrypt",
        "encrypt_decrypt_long_msg",
    }
    assert set(INVALID) == {"encrypt_msg_lengths", "get_conversation_key", "decrypt"}


@pytest.mark.parametrize("case", VALID["get_conversation_key"], ids=lambda c: c["conversation_key"][:8])
def test_get_conversation_key(case: dict) -> None:
    assert nip44.get_conversation_key(case["sec1"], case["pub2"]).hex() == case["conversation_key"]


@pytest.mark.parametrize("case", VALID["get_message_keys"]["keys"], ids=lambda c: c["nonce"][:8])
def test_get_message_keys(case: dict) -> None:
    ck = bytes.fromhex(VALID["get_message_keys"]["conversation_key"])
    chacha_key, chacha_nonce, hmac_key = nip44.get_message_keys(ck, bytes.fromhex(case["nonce"]))
    assert chacha_key.hex() == case["chacha_key"]
    assert chacha_nonce.hex() == case["chacha_nonce"]
    assert hmac_key.hex() == case["hmac_key"]


@pytest.mark.parametrize(("unpadded", "padded"), VALID["calc_padded_len"], ids=lambda v: str(v))
def test_calc_padded_len(unpadded: int, padded: int) -> None:
    assert nip44.calc_padded_len(unpadded) == padded


@pytest.mark.parametrize("case", VALID["encrypt_decrypt"], ids=lambda c: c["payload"][:10])
def test_encrypt_decrypt(case: dict) -> None:
    pub1 = SecretKey.from_hex(case["sec1"]).public_key_hex
    pub2 = SecretKey.from_hex(case["sec2"]).public_key_hex
    ck = nip44.get_conversation_key(case["sec1"], pub2)
    assert ck.hex() == case["conversation_key"]
    assert nip44.get_conversation_key(case["sec2"], pub1) == ck  # symmetric
    payload = nip44.encrypt(case["plaintext"], ck, bytes.fromhex(case["nonce"]))
    assert payload == case["payload"]
    assert nip44.decrypt(payload, ck) == case["plaintext"]


@pytest.mark.parametrize("case", VALID["encrypt_decrypt_long_msg"], ids=lambda c: f"{c['pattern']}x{c['repeat']}")
def test_encrypt_decrypt_long_msg(case: dict) -> None:
    plaintext = case["pattern"] * case["repeat"]
    assert hashlib.sha256(plaintext.encode("utf-8")).hexdigest() == case["plaintext_sha256"]
    ck = bytes.fromhex(case["conversation_key"])
    payload = nip44.encrypt(plaintext, ck, bytes.fromhex(case["nonce"]))
    assert hashlib.sha256(payload.encode("ascii")).hexdigest() == case["payload_sha256"]
    assert nip44.decrypt(payload, ck) == plaintext


@pytest.mark.parametrize("length", INVALID["encrypt_msg_lengths"])
def test_invalid_encrypt_msg_lengths(length: int) -> None:
    with pytest.raises(Nip44Error, match=f"{length:,} UTF-8 bytes"):
        nip44.encrypt("a" * length, bytes(32), bytes(32))


@pytest.mark.parametrize("case", INVALID["get_conversation_key"], ids=lambda c: c["note"])
def test_invalid_get_conversation_key(case: dict) -> None:
    expected = "invalid secret key" if case["note"].startswith("sec1") else "invalid public key"
    with pytest.raises(Nip44Error, match=expected):
        nip44.get_conversation_key(case["sec1"], case["pub2"])


@pytest.mark.parametrize("case", INVALID["decrypt"], ids=lambda c: c["note"])
def test_invalid_decrypt(case: dict) -> None:
    with pytest.raises(Nip44Error) as exc:
        nip44.decrypt(case["payload"], bytes.fromhex(case["conversation_key"]))
    # Our reason starts with the vector's own note (e.g. "invalid MAC", "invalid payload length: 48").
    assert case["note"] in str(exc.value)


# --- contract details -----------------------------------------------------------------------

CK = bytes(range(32))


def test_is_a_value_error() -> None:
    assert issubclass(Nip44Error, ValueError)


def test_random_nonce_when_none() -> None:
    a, b = nip44.encrypt("hello", CK), nip44.encrypt("hello", CK)
    assert a != b
    assert nip44.decrypt(a, CK) == nip44.decrypt(b, CK) == "hello"
    assert base64.b64decode(a)[0] == 2


def test_plaintext_limit_counts_utf8_bytes_not_characters() -> None:
    text = "é" * 40_000  # 40,000 characters, 80,000 bytes
    with pytest.raises(Nip44Error, match="80,000 UTF-8 bytes"):
        nip44.encrypt(text, CK)
    assert nip44.decrypt(nip44.encrypt("é" * 32_767, CK), CK) == "é" * 32_767  # 65,534 bytes


def test_max_length_accepted() -> None:
    text = "z" * 65_535
    assert nip44.decrypt(nip44.encrypt(text, CK), CK) == text


def test_wrong_key_is_invalid_mac() -> None:
    payload = nip44.encrypt("secret memo", CK)
    with pytest.raises(Nip44Error, match="invalid MAC"):
        nip44.decrypt(payload, bytes(32))


def test_tampered_ciphertext_is_invalid_mac() -> None:
    raw = bytearray(base64.b64decode(nip44.encrypt("secret memo", CK)))
    raw[40] ^= 1
    with pytest.raises(Nip44Error, match="invalid MAC"):
        nip44.decrypt(base64.b64encode(bytes(raw)).decode(), CK)


def test_bad_arguments() -> None:
    with pytest.raises(Nip44Error, match="conversation key"):
        nip44.encrypt("x", b"short")
    with pytest.raises(Nip44Error, match="conversation key"):
        nip44.decrypt("A" * 132, "not bytes")  # type: ignore[arg-type]
    with pytest.raises(Nip44Error, match="nonce"):
        nip44.encrypt("x", CK, b"\x00" * 12)
    with pytest.raises(Nip44Error, match="64 hex"):
        nip44.get_conversation_key("12", "ab" * 32)
    with pytest.raises(Nip44Error, match="64 hex"):
        nip44.get_conversation_key("01" * 32, "xyz")
    with pytest.raises(Nip44Error, match="UTF-8"):
        nip44.encrypt("\ud800", CK)
    with pytest.raises(Nip44Error, match="invalid plaintext length"):
        nip44.calc_padded_len(0)


def test_too_long_payload() -> None:
    with pytest.raises(Nip44Error, match="invalid payload length: 87473"):
        nip44.decrypt("A" * 87_473, CK)


def test_secret_never_in_error() -> None:
    sk = "ff" * 32  # above the curve order
    with pytest.raises(Nip44Error) as exc:
        nip44.get_conversation_key(sk, "ab" * 32)
    assert sk not in str(exc.value)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=400), st.binary(min_size=32, max_size=32))
def test_round_trip_and_padding(plaintext: str, nonce: bytes) -> None:
    payload = nip44.encrypt(plaintext, CK, nonce)
    assert nip44.decrypt(payload, CK) == plaintext
    n = len(plaintext.encode("utf-8"))
    # version + nonce + (2-byte length + padded) + mac
    assert len(base64.b64decode(payload)) == 1 + 32 + 2 + nip44.calc_padded_len(n) + 32
