"""BIP-340 official vectors: verification on every row, exact signatures where the binding can sign."""

from __future__ import annotations

import pytest
from vectors import load_csv

from didactyl_tui.nostr.keys import SecretKey, verify_signature

ROWS = load_csv("bip340-test-vectors.csv")
ZERO_AUX = "00" * 32
# The binding's schnorr_sign passes no aux randomness, which BIP-340 defines as all-zero aux_rand:
# only those rows have a signature we can reproduce byte for byte.
SIGNABLE = [r for r in ROWS if r["secret key"] and r["aux_rand"] == ZERO_AUX.upper()]
WITH_SECRET = [r for r in ROWS if r["secret key"]]


def _row_id(row: dict[str, str]) -> str:
    return f"row{row['index']}"


def test_vector_file_is_complete() -> None:
    assert [int(r["index"]) for r in ROWS] == list(range(19))
    assert {r["verification result"] for r in ROWS} == {"TRUE", "FALSE"}
    # Rows 0 and 15-18 have zero aux_rand; if this set shrank we would silently test less.
    assert [int(r["index"]) for r in SIGNABLE] == [0, 15, 16, 17, 18]


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_verify(row: dict[str, str]) -> None:
    expected = row["verification result"] == "TRUE"
    got = verify_signature(row["public key"], bytes.fromhex(row["message"]), bytes.fromhex(row["signature"]))
    assert got is expected, row["comment"]


@pytest.mark.parametrize("row", SIGNABLE, ids=_row_id)
def test_sign_exact(row: dict[str, str]) -> None:
    sk = SecretKey.from_hex(row["secret key"])
    sig = sk.sign(bytes.fromhex(row["message"]))
    assert sig.hex() == row["signature"].lower()


@pytest.mark.parametrize("row", WITH_SECRET, ids=_row_id)
def test_public_key_and_own_signature(row: dict[str, str]) -> None:
    sk = SecretKey.from_hex(row["secret key"])
    assert sk.public_key_hex == row["public key"].lower()
    msg = bytes.fromhex(row["message"])
    sig = sk.sign(msg)
    assert verify_signature(sk.public_key_hex, msg, sig)
    # One flipped bit of the message must break it.
    if msg:
        assert not verify_signature(sk.public_key_hex, bytes([msg[0] ^ 1]) + msg[1:], sig)


def test_verify_rejects_malformed_input() -> None:
    row = ROWS[0]
    msg, sig = bytes.fromhex(row["message"]), bytes.fromhex(row["signature"])
    assert verify_signature(row["public key"], msg, sig)
    assert not verify_signature(row["public key"], msg, sig[:63])
    assert not verify_signature(row["public key"][:62], msg, sig)
    assert not verify_signature("zz" * 32, msg, sig)
