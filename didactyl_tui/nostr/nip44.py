"""NIP-44 v2 encryption: secp256k1 ECDH + HKDF + ChaCha20 + HMAC-SHA256, padded plaintext.

Public contract: :func:`get_conversation_key`, :func:`encrypt`, :func:`decrypt` (plus the spec's
:func:`calc_padded_len` and :func:`get_message_keys`, exposed so the official vectors can test
each step). The nonce is a parameter so the vectors replay exactly; ``None`` draws a random one.
Every rejection is a :class:`Nip44Error` with a reason; the MAC is compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re

import secp256k1
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from ..errors import Nip44Error

VERSION = 2
MIN_PLAINTEXT_BYTES = 1
MAX_PLAINTEXT_BYTES = 65535
# Base64 payload and decoded-payload bounds from the spec (version + nonce + padded ct + mac).
_MIN_PAYLOAD_CHARS, _MAX_PAYLOAD_CHARS = 132, 87472
_MIN_DATA_BYTES, _MAX_DATA_BYTES = 99, 65603
_SALT = b"nip44-v2"
_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


def get_conversation_key(sk_hex: str, pk_hex: str) -> bytes:
    """The 32-byte key shared by ``sk`` and the owner of x-only ``pk`` (same both ways)."""
    if not isinstance(sk_hex, str) or not _HEX64.match(sk_hex):
        raise Nip44Error("invalid secret key: expected 64 hex characters")
    sk = bytes.fromhex(sk_hex)
    if not 0 < int.from_bytes(sk, "big") < _N:
        raise Nip44Error("invalid secret key: outside the secp256k1 range")
    if not isinstance(pk_hex, str) or not _HEX64.match(pk_hex):
        raise Nip44Error("invalid public key: expected 64 hex characters")
    try:
        pub = secp256k1.PublicKey(b"\x02" + bytes.fromhex(pk_hex), raw=True)
    except Exception:  # the binding raises a bare Exception for x values off the curve
        raise Nip44Error("invalid public key: not a point on secp256k1") from None
    try:
        shared = pub.tweak_mul(sk)
    except Exception:
        raise Nip44Error("invalid key pair: the shared point could not be computed") from None
    # Unhashed x coordinate: the binding's ecdh() would hash it, which NIP-44 does not want.
    shared_x = shared.serialize(compressed=True)[1:33]
    return hmac.digest(_SALT, shared_x, "sha256")  # HKDF-extract(salt, ikm)


def get_message_keys(conversation_key: bytes, nonce: bytes) -> tuple[bytes, bytes, bytes]:
    """``(chacha_key, chacha_nonce, hmac_key)`` = HKDF-expand(conversation_key, info=nonce, 76)."""
    _check_conversation_key(conversation_key)
    if not isinstance(nonce, bytes | bytearray) or len(nonce) != 32:
        raise Nip44Error("invalid nonce: must be 32 bytes")
    keys = HKDFExpand(algorithm=hashes.SHA256(), length=76, info=bytes(nonce)).derive(bytes(conversation_key))
    return keys[0:32], keys[32:44], keys[44:76]


def calc_padded_len(unpadded_len: int) -> int:
    """Padded length: 32 bytes minimum, then chunks of 32 up to 256 and of next_power/8 above."""
    if unpadded_len < 1:
        raise Nip44Error(f"invalid plaintext length {unpadded_len}")
    if unpadded_len <= 32:
        return 32
    next_power = 1 << (unpadded_len - 1).bit_length()
    chunk = 32 if next_power <= 256 else next_power // 8
    return chunk * ((unpadded_len - 1) // chunk + 1)


def encrypt(plaintext: str, conversation_key: bytes, nonce: bytes | None = None) -> str:
    """Encrypt ``plaintext`` (1..65,535 UTF-8 bytes) to a base64 version-2 payload."""
    if not isinstance(plaintext, str):
        raise Nip44Error("plaintext must be a string")
    _check_conversation_key(conversation_key)
    if nonce is None:
        nonce = os.urandom(32)
    chacha_key, chacha_nonce, hmac_key = get_message_keys(conversation_key, nonce)
    padded = _pad(plaintext)
    ciphertext = _chacha20(chacha_key, chacha_nonce, padded)
    mac = _hmac_aad(hmac_key, ciphertext, nonce)
    return base64.b64encode(bytes((VERSION,)) + bytes(nonce) + ciphertext + mac).decode("ascii")


def decrypt(payload: str, conversation_key: bytes) -> str:
    """Decrypt a base64 version-2 payload; raises :class:`Nip44Error` saying what is wrong."""
    if not isinstance(payload, str):
        raise Nip44Error("payload must be a string")
    _check_conversation_key(conversation_key)
    if payload.startswith("#"):
        raise Nip44Error("unknown encryption version: '#' marks a future non-base64 encoding")
    plen = len(payload)
    if not _MIN_PAYLOAD_CHARS <= plen <= _MAX_PAYLOAD_CHARS:
        raise Nip44Error(
            f"invalid payload length: {plen} characters (expected {_MIN_PAYLOAD_CHARS}..{_MAX_PAYLOAD_CHARS})"
        )
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise Nip44Error("invalid base64 in payload") from None
    dlen = len(data)
    if not _MIN_DATA_BYTES <= dlen <= _MAX_DATA_BYTES:
        raise Nip44Error(
            f"invalid payload length: {dlen} decoded bytes (expected {_MIN_DATA_BYTES}..{_MAX_DATA_BYTES})"
        )
    if data[0] != VERSION:
        raise Nip44Error(f"unknown encryption version {data[0]} (only version {VERSION} is supported)")
    nonce, ciphertext, mac = data[1:33], data[33:-32], data[-32:]
    chacha_key, chacha_nonce, hmac_key = get_message_keys(conversation_key, nonce)
    if not hmac.compare_digest(_hmac_aad(hmac_key, ciphertext, nonce), mac):
        raise Nip44Error("invalid MAC: wrong key, or the payload was altered")
    return _unpad(_chacha20(chacha_key, chacha_nonce, ciphertext))


# --- steps ----------------------------------------------------------------------------------


def _check_conversation_key(conversation_key: bytes) -> None:
    if not isinstance(conversation_key, bytes | bytearray) or len(conversation_key) != 32:
        raise Nip44Error("invalid conversation key: must be 32 bytes")


def _chacha20(key: bytes, nonce12: bytes, data: bytes) -> bytes:
    # cryptography's ChaCha20 takes a 16-byte nonce: 4-byte little-endian counter (0) + 12-byte nonce.
    return Cipher(algorithms.ChaCha20(key, b"\x00" * 4 + nonce12), mode=None).encryptor().update(data)


def _hmac_aad(key: bytes, message: bytes, aad: bytes) -> bytes:
    mac = hmac.new(key, aad, hashlib.sha256)
    mac.update(message)  # no aad + message copy of a 64 KB ciphertext
    return mac.digest()


def _pad(plaintext: str) -> bytes:
    try:
        raw = plaintext.encode("utf-8")
    except UnicodeEncodeError:
        raise Nip44Error("plaintext holds characters that cannot be encoded as UTF-8") from None
    n = len(raw)
    if not MIN_PLAINTEXT_BYTES <= n <= MAX_PLAINTEXT_BYTES:
        raise Nip44Error(
            f"invalid plaintext length: {n:,} UTF-8 bytes (NIP-44 allows {MIN_PLAINTEXT_BYTES} to "
            f"{MAX_PLAINTEXT_BYTES:,})"
        )
    return n.to_bytes(2, "big") + raw + bytes(calc_padded_len(n) - n)


def _unpad(padded: bytes) -> str:
    n = int.from_bytes(padded[0:2], "big")
    raw = padded[2 : 2 + n]
    if n == 0 or len(raw) != n or len(padded) != 2 + calc_padded_len(n):
        raise Nip44Error("invalid padding")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Nip44Error("invalid plaintext: not valid UTF-8") from None
