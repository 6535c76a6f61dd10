"""The Signer interface, written once and run against both implementations: the key in this process
(LocalSigner) and the key in a remote signer reached over a real relay (RemoteSigner, NIP-46), the remote key
held by the scripted bunker of tests/nip46_bunker.py and by an outside one (applesauce-signers on node, skipped
with the reason when node is missing)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nip46_bunker import bunker_and_signer
from nip46_outside_support import OutsideBunker
from relay_servers import fast_client_kwargs

from didactyl_tui.errors import NostrError
from didactyl_tui.nostr import nip46
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.remote_signer import RemoteSigner
from didactyl_tui.nostr.signer import LocalSigner, Signer

USER = SecretKey.from_hex("00" * 31 + "71")
PEER = LocalSigner(SecretKey.from_hex("00" * 31 + "72"))
T0 = 1_700_000_000


@dataclass
class Case:
    signer: Signer
    key: SecretKey  # the key the signer signs with (to check against)


@pytest.fixture(params=["local", "remote", "remote-outside"])
async def case(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Case]:
    if request.param == "local":
        yield Case(LocalSigner(USER), USER)
        return
    if request.param == "remote":
        async with EmbeddedRelay(tmp_path / "relay.db") as relay, bunker_and_signer(relay.url, USER) as (_, signer):
            yield Case(signer, USER)
        return
    folder = request.getfixturevalue("outside_bunker_dir")
    async with (
        EmbeddedRelay(tmp_path / "relay.db") as relay,
        OutsideBunker(folder, [relay.url], USER, signer_key=SecretKey.generate(), secret="outside") as bunker,
    ):
        signer = await RemoteSigner.from_bunker(bunker.uri, request_timeout=10.0, **fast_client_kwargs())
        try:
            yield Case(signer, USER)
        finally:
            await signer.close()


async def test_it_is_a_signer_and_knows_the_users_key(case: Case) -> None:
    assert isinstance(case.signer, Signer)
    assert case.signer.public_key == case.key.public_key_hex


async def test_sign_event_returns_a_valid_event_of_exactly_what_was_asked(case: Case) -> None:
    tags = [["d", "memory"], ["t", "ünïcode ✓"]]
    ev = await case.signer.sign_event(kind=30078, content='line 1\nline "2" ✓', created_at=T0, tags=tags)
    assert ev.is_valid()
    assert ev.pubkey == case.key.public_key_hex
    assert (ev.kind, ev.content, ev.created_at) == (30078, 'line 1\nline "2" ✓', T0)
    assert ev.tags == (("d", "memory"), ("t", "ünïcode ✓"))


async def test_encrypt_gives_what_the_peer_decrypts_and_decrypt_reads_what_the_peer_wrote(case: Case) -> None:
    payload = await case.signer.nip44_encrypt(PEER.public_key, "to the peer ✉")
    assert PEER.decrypt_now(case.key.public_key_hex, payload) == "to the peer ✉"
    from_peer = PEER.encrypt_now(case.key.public_key_hex, "from the peer ✉")
    assert await case.signer.nip44_decrypt(PEER.public_key, from_peer) == "from the peer ✉"


async def test_encrypt_to_self_round_trips_and_matches_the_local_key(case: Case) -> None:
    me = case.key.public_key_hex
    payload = await case.signer.nip44_encrypt(me, "a note to self")
    assert await case.signer.nip44_decrypt(me, payload) == "a note to self"
    assert LocalSigner(case.key).decrypt_now(me, payload) == "a note to self"


async def test_a_text_at_the_remote_bound_round_trips(case: Case) -> None:
    text = ("é" * 1000 + "\n") * (nip46.MAX_PLAINTEXT_BYTES // 2001) + "x" * (nip46.MAX_PLAINTEXT_BYTES % 2001)
    assert len(text.encode()) == nip46.MAX_PLAINTEXT_BYTES
    payload = await case.signer.nip44_encrypt(PEER.public_key, text)
    assert PEER.decrypt_now(case.key.public_key_hex, payload) == text
    back = PEER.encrypt_now(case.key.public_key_hex, text)
    assert await case.signer.nip44_decrypt(PEER.public_key, back) == text


async def test_a_payload_that_does_not_decrypt_is_a_nostr_error(case: Case) -> None:
    payload = PEER.encrypt_now(case.key.public_key_hex, "secret")
    tampered = payload[:-8] + ("A" * 8 if payload[-8:] != "A" * 8 else "B" * 8)
    with pytest.raises(NostrError):
        await case.signer.nip44_decrypt(PEER.public_key, tampered)
    wrong_peer = LocalSigner(SecretKey.from_hex("00" * 31 + "73")).public_key
    with pytest.raises(NostrError):
        await case.signer.nip44_decrypt(wrong_peer, payload)


async def test_a_bad_peer_key_is_a_nostr_error(case: Case) -> None:
    with pytest.raises(NostrError):
        await case.signer.nip44_encrypt("not-a-key", "x")
    with pytest.raises(NostrError):
        await case.signer.nip44_decrypt("00" * 31, "x" * 200)


async def test_concurrent_calls_each_get_their_own_answer(case: Case) -> None:
    texts = [f"message {i}" for i in range(6)]
    payloads = [PEER.encrypt_now(case.key.public_key_hex, t) for t in texts]
    signed, decrypted = await asyncio.gather(
        asyncio.gather(*(case.signer.sign_event(kind=1, content=t, created_at=T0 + i, tags=[])
                         for i, t in enumerate(texts))),
        asyncio.gather(*(case.signer.nip44_decrypt(PEER.public_key, p) for p in payloads)),
    )
    assert [e.content for e in signed] == texts and all(e.is_valid() for e in signed)
    assert list(decrypted) == texts
