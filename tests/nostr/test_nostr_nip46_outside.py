"""RemoteSigner against an outside NIP-46 bunker: applesauce-signers' NostrConnectProvider on node, over our
embedded relay (the Signer interface itself is checked against it in test_nostr_signer.py). Skipped, with the
reason, when node or npm is missing or the npm install cannot be done."""

from __future__ import annotations

from pathlib import Path

import pytest
from nip46_outside_support import OutsideBunker
from relay_servers import fast_client_kwargs

from didactyl_tui.errors import NostrError, SignerKeyMismatchError, SignerRefusedError, SignerUnreachableError
from didactyl_tui.nostr import nip46, nip46_uri
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip46 import Method
from didactyl_tui.nostr.remote_signer import RemoteSigner
from didactyl_tui.nostr.signer import LocalSigner

USER = SecretKey.from_hex("00" * 31 + "91")
TRANSPORT = SecretKey.from_hex("00" * 31 + "92")
PEER = LocalSigner(SecretKey.from_hex("00" * 31 + "93"))


async def test_the_whole_session_with_an_outside_bunker(outside_bunker_dir: Path, tmp_path: Path) -> None:
    async with (
        EmbeddedRelay(tmp_path / "relay.db") as relay,
        OutsideBunker(outside_bunker_dir, [relay.url], USER, signer_key=TRANSPORT, secret="outside-secret") as bunker,
    ):
        uri = nip46_uri.BunkerUri.parse(bunker.uri)
        assert uri.signer_pubkey == TRANSPORT.public_key_hex and uri.secret == "outside-secret"
        # applesauce answers connect with our secret (the other form the NIP allows) and switch_relays with null.
        signer = await RemoteSigner.from_bunker(bunker.uri, metadata={"name": "didactyl tests"},
                                                request_timeout=10.0, **fast_client_kwargs())
        try:
            assert signer.public_key == USER.public_key_hex != signer.signer_pubkey
            assert signer.relays == (relay.url,)
            await signer.ping()
            ev = await signer.sign_event(kind=30078, content="x", created_at=1_700_000_000, tags=[["d", "memory"]])
            assert ev.pubkey == USER.public_key_hex and ev.is_valid()
            assert await signer.switch_relays() is False
            await signer.logout()
            with pytest.raises(NostrError, match="logged out"):
                await signer.ping()
        finally:
            await signer.close()


async def test_the_size_bound_is_the_outside_bunkers_too(outside_bunker_dir: Path, tmp_path: Path) -> None:
    async with (
        EmbeddedRelay(tmp_path / "relay.db") as relay,
        OutsideBunker(outside_bunker_dir, [relay.url], USER, secret="s") as bunker,
    ):
        signer = await RemoteSigner.from_bunker(bunker.uri, request_timeout=10.0, **fast_client_kwargs())
        try:
            at_bound = "b" * nip46.MAX_PLAINTEXT_BYTES
            payload = await signer.nip44_encrypt(PEER.public_key, at_bound)
            assert PEER.decrypt_now(USER.public_key_hex, payload) == at_bound
            # One byte more, sent anyway (around our own check): the bunker cannot send its reply back.
            with pytest.raises(SignerRefusedError, match=r"refused nip44_encrypt: invalid plaintext size.*65535"):
                await signer._call(Method.NIP44_ENCRYPT, (PEER.public_key, at_bound + "b"))
        finally:
            await signer.close()


async def test_an_outside_bunker_that_stops_mid_session_gives_a_bounded_wait(outside_bunker_dir: Path,
                                                                             tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.db") as relay:
        bunker = OutsideBunker(outside_bunker_dir, [relay.url], USER, secret="s")
        await bunker.start()
        signer = await RemoteSigner.from_bunker(bunker.uri, request_timeout=10.0, **fast_client_kwargs())
        try:
            await signer.ping()
            await bunker.stop()
            signer.channel.request_timeout = 0.5
            with pytest.raises(SignerUnreachableError, match=r"did not answer ping within 0\.5s"):
                await signer.ping()
        finally:
            await signer.close()
            await bunker.stop()


async def test_an_outside_bunker_that_names_a_key_it_does_not_sign_with_is_refused_at_connect(
        outside_bunker_dir: Path, tmp_path: Path) -> None:
    """applesauce's provider over an upstream whose get_public_key names another key (#30): the key check signed by
    the provider does not verify as that key, and the connection is refused before anything is stored."""
    sessions: list[object] = []
    async with (
        EmbeddedRelay(tmp_path / "relay.db") as relay,
        OutsideBunker(outside_bunker_dir, [relay.url], USER, signer_key=TRANSPORT, secret="s",
                      names_key=PEER.public_key) as bunker,
    ):
        with pytest.raises(SignerKeyMismatchError, match="it does not hold the key it named"):
            await RemoteSigner.from_bunker(bunker.uri, request_timeout=10.0, on_session=sessions.append,
                                           **fast_client_kwargs())
    assert sessions == []
