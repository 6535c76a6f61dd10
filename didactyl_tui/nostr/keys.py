"""Keys: generate, load (hex or nsec), derive the x-only public key, BIP-340 sign and verify.

The secret never leaves :class:`SecretKey` by accident: its ``repr``/``str`` are redacted and the raw
hex is only available through the explicitly named :meth:`SecretKey.secret_hex`.
"""

from __future__ import annotations

import os
import re

import secp256k1

from ..errors import NostrError

_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
# Order of the secp256k1 group: a secret key must be in [1, N-1].
_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def _check_secret(raw: bytes) -> None:
    if len(raw) != 32:
        raise NostrError("a secret key is 32 bytes (64 hex characters)", "Bad key")
    if not 0 < int.from_bytes(raw, "big") < _N:
        raise NostrError("that secret key is outside the secp256k1 range", "Bad key")


class SecretKey:
    """A Nostr secret key. Never printed, never logged."""

    __slots__ = ("_raw", "_sk", "_pub")

    def __init__(self, raw: bytes) -> None:
        _check_secret(raw)
        self._raw = bytes(raw)
        self._sk = secp256k1.PrivateKey(self._raw, raw=True)
        self._pub = self._sk.pubkey.serialize(compressed=True)[1:].hex()

    # --- constructors -------------------------------------------------------------------
    @classmethod
    def generate(cls) -> SecretKey:
        while True:
            raw = os.urandom(32)
            if 0 < int.from_bytes(raw, "big") < _N:
                return cls(raw)

    @classmethod
    def from_hex(cls, text: str) -> SecretKey:
        text = text.strip()
        if not _HEX64.match(text):
            raise NostrError("a hex secret key is 64 hex characters", "Bad key")
        return cls(bytes.fromhex(text))

    @classmethod
    def from_nsec(cls, text: str) -> SecretKey:
        from .nip19 import decode_nsec  # local import: nip19 is a sibling pure module

        return cls(bytes.fromhex(decode_nsec(text.strip())))

    @classmethod
    def parse(cls, text: str) -> SecretKey:
        """Accept either an ``nsec1…`` string or 64 hex characters."""
        text = text.strip()
        if text.lower().startswith("nsec1"):
            return cls.from_nsec(text)
        if _HEX64.match(text):
            return cls.from_hex(text)
        raise NostrError("expected an nsec1… key or 64 hex characters", "Bad key")

    # --- public data --------------------------------------------------------------------
    @property
    def public_key_hex(self) -> str:
        """The x-only public key, 64 lowercase hex characters."""
        return self._pub

    @property
    def npub(self) -> str:
        from .nip19 import encode_npub

        return encode_npub(self._pub)

    # --- secret data (explicit) ---------------------------------------------------------
    def secret_hex(self) -> str:
        """The raw secret as hex. Only for NIP-44 key agreement and writing the key file."""
        return self._raw.hex()

    def nsec(self) -> str:
        from .nip19 import encode_nsec

        return encode_nsec(self._raw.hex())

    # --- signing ------------------------------------------------------------------------
    def sign(self, msg: bytes) -> bytes:
        """BIP-340 Schnorr signature (64 bytes). Deterministic: the binding takes no aux randomness."""
        return self._sk.schnorr_sign(msg, None, raw=True)

    def __repr__(self) -> str:
        return f"SecretKey(pubkey={self._pub[:12]}…, secret=<redacted>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._pub)


def is_hex_pubkey(text: str) -> bool:
    return bool(_HEX64.match(text))


def is_curve_point(pubkey_hex: str) -> bool:
    """Whether a 64-hex x-only key is the x of a point on secp256k1 (about half of all 64-hex strings are not)."""
    if not _HEX64.match(pubkey_hex):
        return False
    try:
        secp256k1.PublicKey(b"\x02" + bytes.fromhex(pubkey_hex), raw=True)
    except Exception:  # the binding raises a bare Exception for x values off the curve
        return False
    return True


def verify_signature(pubkey_hex: str, msg: bytes, sig: bytes) -> bool:
    """BIP-340 verify with an x-only public key. Never raises: any malformed input is ``False``."""
    if len(sig) != 64 or not _HEX64.match(pubkey_hex):
        return False
    try:
        pub = secp256k1.PublicKey(b"\x02" + bytes.fromhex(pubkey_hex), raw=True)
        return bool(pub.schnorr_verify(msg, sig, None, raw=True))
    except Exception:  # the binding raises on x not on the curve
        return False
