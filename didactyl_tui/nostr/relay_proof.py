"""Proof that a server is the data dir's own embedded relay, given once per connection in the HTTP handshake (#30).

The data dir (0700) holds a secret only its owner can read: ``relay.key`` (0600). A client that must reach its own
relay sends a fresh nonce in its websocket upgrade request (a launcher, in a plain GET); the relay answers in its
response headers with its instance id, whether it is stopping, and an HMAC-SHA256 keyed by the secret over the
nonce, those two facts and **both TCP endpoints of that very connection** as each side sees them. The client checks
it before it sends a single frame. So:

* nothing another local user can read — the NIP-11 document, ``relay.lock``, the port, ``/proc`` — lets a server
  answer: the secret never leaves the relay process, only HMACs of fresh nonces do;
* an answer is good for one nonce: a server that saw an earlier handshake cannot replay it;
* a server on the relay's old port that passes the challenge on to the real relay (now listening elsewhere) gets an
  answer naming its own connection's endpoints, which the client does not accept (on loopback both sides see the
  same four-tuple).

Pure: the nonce and the endpoints are passed in; nothing here reads a clock, a socket or a file.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass

CHALLENGE_HEADER = "X-Didactyl-Relay-Challenge"
INSTANCE_HEADER = "X-Didactyl-Relay-Instance"
STATE_HEADER = "X-Didactyl-Relay-State"
PROOF_HEADER = "X-Didactyl-Relay-Proof"

KEY_BYTES = 32
NONCE_BYTES = 16  # 128 bits: never repeats
SERVING, STOPPING = "serving", "stopping"
_LABEL = b"didactyl embedded relay proof v1"
_NONCE = re.compile(rf"[0-9a-f]{{{2 * NONCE_BYTES}}}")
_INSTANCE = re.compile(r"[0-9a-f]{8,64}")
_PROOF = re.compile(r"[0-9a-f]{64}")


class ProofError(ValueError):
    """A server's answer does not prove it is the relay: the message says why, in a few words."""


class ProofKey:
    """The data dir's relay secret. Its repr never shows it; nothing but :func:`answer` and :func:`check` use it."""

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes) -> None:
        if len(secret) != KEY_BYTES:
            raise ValueError(f"a relay proof key is {KEY_BYTES} bytes, not {len(secret)}")
        self._secret = bytes(secret)

    @classmethod
    def from_hex(cls, text: str) -> ProofKey:
        """The key as ``relay.key`` holds it (hex); ValueError when it is not one."""
        try:
            return cls(bytes.fromhex(text.strip()))
        except ValueError:
            raise ValueError(f"not {2 * KEY_BYTES} hex digits") from None

    def hex(self) -> str:
        """For ``relay.key`` only."""
        return self._secret.hex()

    def __repr__(self) -> str:
        return "ProofKey(…)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProofKey) and hmac.compare_digest(self._secret, other._secret)

    def __hash__(self) -> int:
        return hash(hashlib.sha256(self._secret).digest())

    def _mac(self, message: bytes) -> str:
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Proven:
    """What a server proved: which relay instance it is, and whether it is stopping (no longer to be used)."""

    instance: str
    stopping: bool


def endpoint(address: object) -> str:
    """A socket address as both ends of a loopback connection write it: ``127.0.0.1:7447``, ``[::1]:7447``
    (an IPv4 address seen through a dual-stack socket, ``::ffff:127.0.0.1``, is written as IPv4)."""
    if not isinstance(address, tuple) or len(address) < 2:
        return repr(address)
    host, port = str(address[0]), address[1]
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return f"{host}:{port}"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def is_nonce(text: str | None) -> bool:
    return text is not None and _NONCE.fullmatch(text) is not None


def _message(nonce: str, instance: str, state: str, client: str, server: str) -> bytes:
    # No field holds a newline (hex, a state word, an endpoint written by endpoint()): the joins are unambiguous.
    return _LABEL + b"\n" + "\n".join((nonce, instance, state, client, server)).encode()


def answer(key: ProofKey, nonce: str, instance: str, *, stopping: bool, client: str, server: str) -> dict[str, str]:
    """The relay's response headers for a request carrying ``nonce`` on the connection ``client`` → ``server``
    (as the relay sees it); empty when the nonce is not one (nothing is signed for it)."""
    if not is_nonce(nonce) or _INSTANCE.fullmatch(instance) is None or "\n" in client + server:
        return {}
    state = STOPPING if stopping else SERVING
    return {INSTANCE_HEADER: instance, STATE_HEADER: state,
            PROOF_HEADER: key._mac(_message(nonce, instance, state, client, server))}


def check(key: ProofKey, nonce: str, *, client: str, server: str, instance: str | None, state: str | None,
          proof: str | None) -> Proven:
    """Check a server's answer to ``nonce`` on the connection ``client`` → ``server`` (as the client sees it);
    the header values as received (None: absent). Raises :class:`ProofError` saying what is wrong."""
    if proof is None:
        raise ProofError("it gave no proof of identity")
    if instance is None or _INSTANCE.fullmatch(instance) is None or state not in (SERVING, STOPPING) \
            or _PROOF.fullmatch(proof) is None:
        raise ProofError("its proof of identity is malformed")
    if not hmac.compare_digest(key._mac(_message(nonce, instance, state, client, server)), proof):
        raise ProofError("its proof of identity is wrong")
    return Proven(instance, state == STOPPING)
