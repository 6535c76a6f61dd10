"""The embedded relay's proof of identity (nostr/relay_proof.py): pure, so every refusal is checked here by value."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from didactyl_tui.nostr import relay_proof
from didactyl_tui.nostr.relay_proof import (
    CHALLENGE_HEADER,
    INSTANCE_HEADER,
    PROOF_HEADER,
    STATE_HEADER,
    ProofError,
    ProofKey,
    Proven,
    answer,
    check,
    endpoint,
)

KEY = ProofKey(bytes(range(32)))
NONCE = "0123456789abcdef" * 2
INSTANCE = "ab" * 16
CLIENT, SERVER = "127.0.0.1:50000", "127.0.0.1:7447"


def relay_answer(key: ProofKey = KEY, nonce: str = NONCE, *, stopping: bool = False, client: str = CLIENT,
                 server: str = SERVER) -> dict[str, str]:
    return answer(key, nonce, INSTANCE, stopping=stopping, client=client, server=server)


def client_check(headers: dict[str, str], key: ProofKey = KEY, nonce: str = NONCE, client: str = CLIENT,
                 server: str = SERVER) -> Proven:
    return check(key, nonce, client=client, server=server, instance=headers.get(INSTANCE_HEADER),
                 state=headers.get(STATE_HEADER), proof=headers.get(PROOF_HEADER))


def test_the_relays_answer_proves_its_instance_and_state() -> None:
    assert client_check(relay_answer()) == Proven(INSTANCE, stopping=False)
    assert client_check(relay_answer(stopping=True)) == Proven(INSTANCE, stopping=True)


def test_the_proof_is_an_hmac_of_the_nonce_the_instance_the_state_and_both_endpoints() -> None:
    """Pinned: a client and a relay of two versions agree, or the label says the version changed."""
    message = b"\n".join([b"didactyl embedded relay proof v1", NONCE.encode(), INSTANCE.encode(), b"serving",
                          CLIENT.encode(), SERVER.encode()])
    assert relay_answer()[PROOF_HEADER] == hmac.new(bytes(range(32)), message, hashlib.sha256).hexdigest()


def test_a_server_without_the_key_cannot_answer() -> None:
    forged = relay_answer(key=ProofKey(b"\x01" * 32))
    with pytest.raises(ProofError, match="wrong"):
        client_check(forged)


def test_an_answer_is_good_for_its_nonce_only() -> None:
    """A server that saw an earlier handshake (the same endpoints, even) cannot replay its answer."""
    earlier = relay_answer(nonce="f" * 32)
    with pytest.raises(ProofError, match="wrong"):
        client_check(earlier)


@pytest.mark.parametrize(("client", "server"), [("127.0.0.1:50001", SERVER), (CLIENT, "127.0.0.1:7448")],
                         ids=["another client port", "another server port"])
def test_an_answer_given_on_another_connection_is_refused(client: str, server: str) -> None:
    """A server on the relay's old port that passes the nonce on to the real relay (now on another port) gets an
    answer for its own connection to the relay: the endpoints differ from the client's connection."""
    relayed = relay_answer(client=client, server=server)
    with pytest.raises(ProofError, match="wrong"):
        client_check(relayed)


@pytest.mark.parametrize(("field", "value"), [(INSTANCE_HEADER, "cd" * 16), (STATE_HEADER, "stopping")])
def test_a_changed_instance_or_state_breaks_the_proof(field: str, value: str) -> None:
    with pytest.raises(ProofError, match="wrong"):
        client_check({**relay_answer(), field: value})


def test_no_proof_and_a_malformed_proof_are_told_apart() -> None:
    with pytest.raises(ProofError, match="no proof"):
        client_check({})
    with pytest.raises(ProofError, match="no proof"):
        client_check({INSTANCE_HEADER: INSTANCE, STATE_HEADER: "serving"})  # what the NIP-11 era relay knew
    for bad in ({**relay_answer(), PROOF_HEADER: "xyz"}, {**relay_answer(), STATE_HEADER: "ready"},
                {**relay_answer(), INSTANCE_HEADER: "a\nb"}, {PROOF_HEADER: "0" * 64}):
        with pytest.raises(ProofError, match="malformed"):
            client_check(bad)


@pytest.mark.parametrize("nonce", ["", "0" * 31, "0" * 33, "G" * 32, "A" * 32, "0" * 31 + "\n"])
def test_the_relay_signs_nothing_but_a_nonce(nonce: str) -> None:
    assert relay_answer(nonce=nonce) == {}


def test_the_key_never_shows() -> None:
    secret = bytes(range(32))
    assert secret.hex() not in repr(KEY) and secret.hex() not in str(KEY)
    assert all(secret.hex() not in value for value in relay_answer().values())
    assert KEY == ProofKey.from_hex(secret.hex() + "\n") and KEY != ProofKey(b"\x00" * 32)
    with pytest.raises(ValueError):
        ProofKey(b"short")
    with pytest.raises(ValueError, match="hex"):
        ProofKey.from_hex("not hex")


@pytest.mark.parametrize(("address", "written"), [
    (("127.0.0.1", 7447), "127.0.0.1:7447"),
    (("::1", 7447, 0, 0), "[::1]:7447"),
    (("::ffff:127.0.0.1", 7447, 0, 0), "127.0.0.1:7447"),  # IPv4 through a dual-stack socket: as the other side sees it
    (("0:0:0:0:0:0:0:1", 80, 0, 0), "[::1]:80"),
])
def test_endpoints_are_written_alike_on_both_sides(address: tuple[object, ...], written: str) -> None:
    assert endpoint(address) == written


def test_the_header_names_are_the_protocols() -> None:
    assert {CHALLENGE_HEADER, INSTANCE_HEADER, STATE_HEADER, PROOF_HEADER} == {
        "X-Didactyl-Relay-Challenge", "X-Didactyl-Relay-Instance", "X-Didactyl-Relay-State", "X-Didactyl-Relay-Proof"}
    assert relay_proof.NONCE_BYTES * 8 >= 128
