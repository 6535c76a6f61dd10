"""RemoteSigner (NIP-46) end to end over our embedded relay, against the scripted bunker of tests/nip46_bunker.py:
connect and the session, a user key that is not the signer's, auth_url challenges, two answers, timeouts, the
decrypt cache, parallel requests, switch_relays, logout, nostrconnect://, and the size bound."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from nip46_bunker import ScriptedBunker, bunker_and_signer
from relay_servers import eventually, fast_client_kwargs, free_port

from didactyl_tui.errors import (
    NostrError,
    RelayError,
    SignerKeyMismatchError,
    SignerRefusedError,
    SignerUnreachableError,
)
from didactyl_tui.nostr import nip46_uri
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.kinds import SIGNER_KEY_CHECK
from didactyl_tui.nostr.nip46 import Method
from didactyl_tui.nostr.nip46_channel import MAX_AUTH_URLS_SHOWN, AuthChallenge
from didactyl_tui.nostr.nip46_invitation import make_invitation
from didactyl_tui.nostr.nip46_session import RemoteSignerSession
from didactyl_tui.nostr.plaintext_cache import PlaintextCache
from didactyl_tui.nostr.remote_signer import RemoteSigner
from didactyl_tui.nostr.signer import LocalSigner, Signer

USER = SecretKey.from_hex("00" * 31 + "81")
TRANSPORT = SecretKey.from_hex("00" * 31 + "82")
PEER = LocalSigner(SecretKey.from_hex("00" * 31 + "83"))
T0 = 1_700_000_000


def fast(**overrides: Any) -> dict[str, Any]:
    return {"request_timeout": 10.0, **fast_client_kwargs(), **overrides}


@pytest.fixture
async def relay(tmp_path: Path) -> Any:
    async with EmbeddedRelay(tmp_path / "relay.db") as r:
        yield r


def from_peer(text: str) -> str:
    return PEER.encrypt_now(USER.public_key_hex, text)


# --- connect, the user key, the session ---------------------------------------------------------------------
async def test_the_user_key_may_differ_from_the_signers_and_events_verify_with_the_users(relay: EmbeddedRelay) -> None:
    sessions: list[RemoteSignerSession] = []
    async with bunker_and_signer(relay.url, USER, signer_key=TRANSPORT,
                                 signer_kwargs={"on_session": sessions.append}) as (bunker, signer):
        assert signer.signer_pubkey == TRANSPORT.public_key_hex != signer.public_key == USER.public_key_hex
        # get_public_key follows connect; then the signer proves it signs with that key
        assert bunker.methods()[:3] == ["connect", "get_public_key", "sign_event"]
        assert signer.session.key_checked
        ev = await signer.sign_event(kind=1, content="hello", created_at=T0, tags=[])
        assert ev.pubkey == USER.public_key_hex and ev.is_valid()
        assert signer.session.user_pubkey == USER.public_key_hex
        assert sessions == []  # a new connection is the caller's to store, once it checked out
        assert signer.session.client_pubkey == signer.client_pubkey in bunker.connected
        assert "redacted" in repr(signer) and signer.session.client_secret_hex not in repr(signer)


async def test_connect_sends_the_secret_once_and_a_wrong_or_reused_secret_is_refused(relay: EmbeddedRelay) -> None:
    async with ScriptedBunker([relay.url], USER, secret="right") as bunker:
        wrong = nip46_uri.BunkerUri(bunker.pubkey, (relay.url,), "wrong").to_uri()
        with pytest.raises(SignerRefusedError, match="refused connect: invalid connection secret"):
            await RemoteSigner.from_bunker(wrong, **fast())
        first = await RemoteSigner.from_bunker(bunker.bunker_uri(), **fast())
        await first.close()
        assert bunker.received[-4].params[:2] == (bunker.pubkey, "right")
        with pytest.raises(SignerRefusedError, match="invalid connection secret"):  # single use
            await RemoteSigner.from_bunker(bunker.bunker_uri(), **fast())


async def test_a_connect_answer_that_echoes_the_secret_is_accepted_and_any_other_is_not(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER, secret="s3", connect_result="s3") as (_, signer):
        await signer.ping()
    async with ScriptedBunker([relay.url], USER, secret="s4", connect_result="whatever") as bunker:
        with pytest.raises(SignerRefusedError, match="neither 'ack' nor our secret"):
            await RemoteSigner.from_bunker(bunker.bunker_uri(), **fast())


async def test_a_stored_session_starts_without_a_new_connect(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER) as (bunker, signer):
        session = RemoteSignerSession.from_json(signer.session.to_json())  # as the app stores it
        await signer.close()
        connects = bunker.methods().count("connect")
        async with RemoteSigner(session, **fast()) as again:
            assert again.public_key == USER.public_key_hex  # known from the session: no round trip
            ev = await again.sign_event(kind=1, content="after a restart", created_at=T0, tags=[])
            assert ev.is_valid()
        assert bunker.methods().count("connect") == connects
        assert bunker.methods()[-1] == "sign_event"


async def test_before_the_user_key_is_known_it_is_not_yet_a_signer(relay: EmbeddedRelay) -> None:
    session = RemoteSignerSession.new(SecretKey.generate(), TRANSPORT.public_key_hex, [relay.url])
    signer = RemoteSigner(session, **fast())
    assert not isinstance(signer, Signer)
    with pytest.raises(NostrError, match="not told us the user's key yet"):
        _ = signer.public_key


async def test_a_session_whose_user_key_changed_is_refused(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER) as (_, signer):
        other = RemoteSignerSession(signer.session.client_secret_hex, signer.signer_pubkey, signer.relays,
                                    TRANSPORT.public_key_hex)
        async with RemoteSigner(other, **fast()) as stale:
            with pytest.raises(SignerKeyMismatchError, match="now signs as npub1"):
                await stale.get_public_key()
            with pytest.raises(SignerKeyMismatchError, match="the key it named"):  # and each signature says so
                await stale.sign_event(kind=1, content="x", created_at=T0, tags=[])


async def test_a_first_connect_to_a_signer_that_names_a_key_it_does_not_sign_with_is_refused(
        relay: EmbeddedRelay) -> None:
    """get_public_key names one key, the signer signs with another: the key check refuses the connection, and the
    session is never handed over to be stored."""
    sessions: list[RemoteSignerSession] = []
    async with ScriptedBunker([relay.url], USER, signer_key=TRANSPORT, secret="s",
                              names_key=PEER.public_key) as bunker:
        with pytest.raises(SignerKeyMismatchError) as refused:
            await RemoteSigner.from_bunker(bunker.bunker_uri(), **fast(on_session=sessions.append))
        assert refused.value.message.startswith("the remote signer named the key npub1")
        assert "it does not hold the key it named" in refused.value.message
        assert sessions == []
        [check] = [r for r in bunker.received if r.method == "sign_event"]
        assert f'"kind":{SIGNER_KEY_CHECK}' in check.params[0] and "never published" in check.params[0]


async def test_the_key_check_refused_by_the_signer_says_what_was_asked(relay: EmbeddedRelay) -> None:
    async with ScriptedBunker([relay.url], USER, secret="s", refuse={"sign_event": "kind not allowed"}) as bunker:
        with pytest.raises(SignerRefusedError, match=r"checking the signer's key: .*kind not allowed"):
            await RemoteSigner.from_bunker(bunker.bunker_uri(), **fast())


async def test_ping_and_a_refusal_shown_as_one_clean_line(relay: EmbeddedRelay) -> None:
    refusal = "denied\x1b]52;c;ZXZpbA==\x07 by\nthe user"
    async with bunker_and_signer(relay.url, USER, refuse={"sign_event": refusal}) as (_, signer):
        await signer.ping()
        with pytest.raises(SignerRefusedError) as info:
            await signer.sign_event(kind=1, content="x", created_at=T0, tags=[])
        assert str(info.value) == "the remote signer refused sign_event: denied by the user"
        assert isinstance(info.value, NostrError)


# --- auth_url -----------------------------------------------------------------------------------------------
async def test_an_auth_url_is_handed_to_the_app_and_the_request_completes_after_it(relay: EmbeddedRelay) -> None:
    challenges: list[AuthChallenge] = []
    url = "https://signer.example/approve?request=1"
    async with bunker_and_signer(relay.url, USER, auth_url=url, auth_methods={"sign_event"},
                                 signer_kwargs={"on_auth_url": challenges.append, "request_timeout": 1.5,
                                                "auth_timeout": 30.0}) as (bunker, signer):
        loop = asyncio.get_running_loop()
        asked = loop.time()
        task = asyncio.create_task(signer.sign_event(kind=1, content="needs approval", created_at=T0, tags=[]))
        assert await eventually(lambda: challenges, 10)
        assert [(c.url, c.method) for c in challenges] == [(url, "sign_event")]
        assert 0 < challenges[0].wait_s <= 30.0
        # The person takes longer than the request timeout to approve: the wait is now the auth timeout's.
        # (This sleep is the fact under test: time passing beyond request_timeout does not end the request.)
        await asyncio.sleep(max(0.0, asked + 2.0 - loop.time()))
        assert not task.done()
        await bunker.approve()
        async with asyncio.timeout(10):
            ev = await task
        assert ev.is_valid() and ev.content == "needs approval"
        assert signer.counts["auth_urls"] == 1


async def test_an_auth_url_without_anyone_to_show_it_or_not_a_web_address_is_refused(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER, auth_url="https://signer.example/a",
                                 auth_methods={"ping"}) as (_, signer):
        with pytest.raises(SignerRefusedError, match=r"https://signer\.example/a, and nothing here can show"):
            await signer.ping()
    async with bunker_and_signer(relay.url, USER, auth_url="javascript:alert(1)", auth_methods={"ping"},
                                 signer_kwargs={"on_auth_url": lambda c: None}) as (_, signer):
        with pytest.raises(SignerRefusedError, match="not a web page"):
            await signer.ping()


async def test_an_auth_url_never_approved_ends_at_the_auth_timeout(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER, auth_url="https://signer.example/a", auth_methods={"ping"},
                                 signer_kwargs={"on_auth_url": lambda c: None, "request_timeout": 0.3,
                                                "auth_timeout": 0.3}) as (_, signer):
        with pytest.raises(SignerUnreachableError, match=r"did not answer ping within 0\.3 s: it asked for approval "
                                                         r"once \(last at https://signer\.example/a\)"):
            await signer.ping()


async def test_a_signer_that_challenges_endlessly_ends_at_one_deadline(relay: EmbeddedRelay) -> None:
    """A new auth_url every 50 ms (after a burst of 8) never pushes the request's deadline back: it ends at the auth
    timeout counted from when it was sent, with the reason; only the first few challenges reach the app."""
    challenges: list[AuthChallenge] = []
    async with bunker_and_signer(relay.url, USER, signer_kwargs={"on_auth_url": challenges.append,
                                                                 "request_timeout": 1.0, "auth_timeout": 2.0}) as (
            bunker, signer):
        bunker.auth_url, bunker.rechallenge_every, bunker.rechallenge_burst = "https://signer.example/a", 0.05, 8
        async with asyncio.timeout(60):  # without one deadline, this request would wait for ever
            with pytest.raises(SignerUnreachableError) as ended:
                await signer.sign_event(kind=1, content="never signed", created_at=T0, tags=[])
        assert ended.value.message.startswith("the remote signer did not sign within 2 s: it asked for approval ")
        assert "(last at https://signer.example/a?n=" in ended.value.message and "sent no answer" in ended.value.message
        assert bunker.challenges_sent > MAX_AUTH_URLS_SHOWN
        assert 1 <= len(challenges) == signer.counts["auth_urls"] <= MAX_AUTH_URLS_SHOWN
        assert all(c.wait_s <= 2.0 for c in challenges)  # each says the one deadline, never a later one


async def test_the_person_can_give_an_approval_more_time(relay: EmbeddedRelay) -> None:
    """Only the person moves the deadline (the app offers "wait longer"): the request then outlives its auth timeout
    and completes once approved."""
    challenges: list[AuthChallenge] = []
    async with bunker_and_signer(relay.url, USER, auth_url="https://signer.example/slow", auth_methods={"sign_event"},
                                 signer_kwargs={"on_auth_url": challenges.append, "request_timeout": 0.5,
                                                "auth_timeout": 0.5}) as (bunker, signer):
        assert signer.wait_longer() == 0  # nothing waits for an approval
        loop = asyncio.get_running_loop()
        asked = loop.time()
        task = asyncio.create_task(signer.sign_event(kind=1, content="approved late", created_at=T0, tags=[]))
        assert await eventually(lambda: challenges, 10)
        assert signer.wait_longer(30.0) == 1
        # (This sleep is the fact under test: the auth timeout passes and the request still waits.)
        await asyncio.sleep(max(0.0, asked + 1.5 - loop.time()))
        assert not task.done()
        await bunker.approve()
        async with asyncio.timeout(10):
            assert (await task).content == "approved late"


async def test_an_auth_url_is_shown_without_bidirectional_overrides_or_invisible_characters(
        relay: EmbeddedRelay) -> None:
    """U+202E would show "https://bank.example/\u202emoc.live" as ending in "evil.com": the URL shown (and opened) is
    the one without it."""
    challenges: list[AuthChallenge] = []
    hidden = "\u202e\u2066\u200f\u200b\u061c\ufeff"
    async with bunker_and_signer(relay.url, USER, auth_url=f"https://bank.example/{hidden}moc.live\u2069\u202c",
                                 auth_methods={"ping"},
                                 signer_kwargs={"on_auth_url": challenges.append}) as (bunker, signer):
        task = asyncio.create_task(signer.ping())
        assert await eventually(lambda: challenges, 10)
        assert challenges[0].url == "https://bank.example/moc.live"
        await bunker.approve()
        await asyncio.wait_for(task, 10)


# --- first reply wins; timeouts -----------------------------------------------------------------------------
async def test_only_the_first_reply_counts(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER, answers=2) as (_, signer):
        ev = await signer.sign_event(kind=1, content="once", created_at=T0, tags=[])  # the 2nd answer is an error
        assert ev.is_valid()
        assert await eventually(lambda: signer.counts["late_replies"] >= 1, 10)


async def test_two_signers_holding_the_key_both_answer_and_the_first_is_taken(relay: EmbeddedRelay) -> None:
    async with (
        ScriptedBunker([relay.url], USER, secret="shared") as one,
        ScriptedBunker([relay.url], USER, secret="shared") as two,
    ):
        signer = await RemoteSigner.from_bunker(one.bunker_uri(), **fast())
        try:
            assert one.connected == two.connected == {signer.client_pubkey}
            payload = from_peer("both can read this")
            assert await signer.nip44_decrypt(PEER.public_key, payload) == "both can read this"
            assert await eventually(lambda: signer.counts["late_replies"] >= 4, 10)  # one per request
            assert signer.counts["replies"] == signer.counts["requests"]
        finally:
            await signer.close()


async def test_a_silent_signer_times_out_with_a_clear_error(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER, signer_kwargs={"request_timeout": 0.3}) as (bunker, signer):
        bunker.silent = True
        with pytest.raises(SignerUnreachableError, match=r"did not answer sign_event within 0\.3s") as info:
            await signer.sign_event(kind=1, content="x", created_at=T0, tags=[])
        assert isinstance(info.value, RelayError)
        assert bunker.methods()[-1] == "sign_event"  # it was sent: the signer said nothing
    async with ScriptedBunker([relay.url], USER, silent=True) as quiet:
        with pytest.raises(SignerUnreachableError, match="did not answer connect"):
            await RemoteSigner.from_bunker(quiet.bunker_uri(), **fast(request_timeout=0.3))


async def test_unreachable_relays_fail_fast_naming_them(relay: EmbeddedRelay) -> None:
    dead = f"ws://127.0.0.1:{free_port()}"
    session = RemoteSignerSession.new(SecretKey.generate(), TRANSPORT.public_key_hex, [dead])
    async with RemoteSigner(session, **fast(request_timeout=30.0, ready_timeout=0.2)) as signer:
        # Not "did not answer within 30s": the relay refused the connection, so the request fails at once.
        with pytest.raises(SignerUnreachableError, match=f"cannot reach the remote signer: no relay took the ping "
                                                         f"request .*{dead}"):
            await signer.ping()


async def test_a_closed_or_logged_out_signer_says_so(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER) as (bunker, signer):
        session = signer.session
        await signer.logout()
        assert signer.closed and bunker.connected == set()
        assert bunker.methods()[-1] == "logout"
        with pytest.raises(NostrError, match="logged out"):
            await signer.ping()
        # The signer forgot this client: the old session is refused there too.
        async with RemoteSigner(session, **fast()) as again:
            with pytest.raises(SignerRefusedError, match="unauthorized"):
                await again.ping()
        await again.close()
        with pytest.raises(NostrError, match="closed"):
            await again.ping()


async def test_close_ends_a_waiting_request(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER) as (bunker, signer):
        bunker.silent = True
        task = asyncio.create_task(signer.ping())
        payload = from_peer("shared by two callers")
        decrypts = [asyncio.create_task(signer.nip44_decrypt(PEER.public_key, payload)) for _ in range(2)]
        assert await eventually(lambda: bunker.methods()[-2:] in (["ping", "nip44_decrypt"],
                                                                  ["nip44_decrypt", "ping"]), 10)
        await signer.close()
        for waiting in (task, *decrypts):
            with pytest.raises(SignerUnreachableError, match="closed"):
                await waiting


# --- the decrypt cache and parallel requests ----------------------------------------------------------------
async def test_a_repeated_decrypt_is_no_round_trip(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER) as (bunker, signer):
        payload = from_peer("memory, version 1")
        assert await signer.nip44_decrypt(PEER.public_key, payload) == "memory, version 1"
        assert await signer.nip44_decrypt(PEER.public_key, payload) == "memory, version 1"
        assert bunker.methods().count("nip44_decrypt") == 1 and signer.counts["cache_hits"] == 1
        # What we encrypted ourselves reads back for free (a save, then the event coming back from a relay).
        mine = await signer.nip44_encrypt(USER.public_key_hex, "saved here")
        assert await signer.nip44_decrypt(USER.public_key_hex, mine) == "saved here"
        assert bunker.methods().count("nip44_decrypt") == 1
        # The same payload decrypted by several callers at once: one request.
        other = from_peer("asked three times at once")
        texts = await asyncio.gather(*(signer.nip44_decrypt(PEER.public_key, other) for _ in range(3)))
        assert texts == ["asked three times at once"] * 3
        assert bunker.methods().count("nip44_decrypt") == 2


async def test_the_cache_is_bounded(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER, signer_kwargs={"cache_entries": 2}) as (bunker, signer):
        payloads = [from_peer(f"doc {i}") for i in range(3)]
        for p in payloads:
            await signer.nip44_decrypt(PEER.public_key, p)
        assert len(signer.cache) == 2
        await signer.nip44_decrypt(PEER.public_key, payloads[0])  # evicted: asked again
        assert bunker.methods().count("nip44_decrypt") == 4


def test_the_plaintext_cache_bounds_entries_and_characters() -> None:
    cache = PlaintextCache(max_entries=3, max_chars=20)
    cache.put(("p", "aa"), "1234")  # 6 characters
    cache.put(("p", "bb"), "1234")
    cache.put(("p", "cc"), "1234")
    assert len(cache) == 3 and cache.chars == 18
    assert cache.get(("p", "aa")) == "1234"  # now most recent
    cache.put(("p", "dd"), "1234")  # over both bounds: the least recent ("bb") goes
    assert cache.get(("p", "bb")) is None and cache.get(("p", "aa")) == "1234" and cache.chars == 18
    cache.put(("p", "ee"), "x" * 30)  # larger than the whole cache: not kept
    assert cache.get(("p", "ee")) is None and len(cache) == 3


async def test_concurrent_requests_are_sent_together(relay: EmbeddedRelay) -> None:
    # The bunker answers nothing until 8 requests wait: sent one after another, the first would never be answered.
    async with bunker_and_signer(relay.url, USER) as (bunker, signer):
        bunker.hold_until = 8
        payloads = [from_peer(f"task {i}") for i in range(8)]
        texts = await asyncio.gather(*(signer.nip44_decrypt(PEER.public_key, p) for p in payloads))
        assert texts == [f"task {i}" for i in range(8)]


# --- switch_relays ------------------------------------------------------------------------------------------
async def test_switch_relays_moves_to_the_signers_relays(tmp_path: Path) -> None:
    sessions: list[RemoteSignerSession] = []
    async with EmbeddedRelay(tmp_path / "a.db") as a, EmbeddedRelay(tmp_path / "b.db") as b:
        async with ScriptedBunker([a.url, b.url], USER, secret="s") as bunker:
            signer = await RemoteSigner.from_bunker(bunker.bunker_uri([a.url]), switch_relays=False,
                                                    on_session=sessions.append, **fast())
            try:
                assert signer.relays == (a.url,)
                assert await signer.switch_relays() is False  # the signer names none: nothing changes
                bunker.switch_to = [b.url]
                assert await signer.switch_relays() is True
                assert signer.relays == (b.url,) == sessions[-1].relays
                assert await signer.switch_relays() is False  # already there
                await a.stop()  # the old relay goes away: the signer is reached on the new one
                await signer.ping()
            finally:
                await signer.close()


async def test_a_new_connection_asks_for_the_signers_relays_at_once(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "a.db") as a, EmbeddedRelay(tmp_path / "b.db") as b:
        async with ScriptedBunker([a.url, b.url], USER, secret="s", switch_to=[b.url]) as bunker:
            signer = await RemoteSigner.from_bunker(bunker.bunker_uri([a.url]), **fast())
            try:
                assert bunker.methods() == ["connect", "get_public_key", "sign_event", "switch_relays"]
                assert signer.relays == (b.url,) == signer.session.relays
            finally:
                await signer.close()


# --- nostrconnect:// ----------------------------------------------------------------------------------------
async def test_nostrconnect_waits_for_the_signer_to_answer_with_our_secret(relay: EmbeddedRelay) -> None:
    key, uri = make_invitation([relay.url], perms=["sign_event:1", "nip44_encrypt"], name="didactyl")
    listening = asyncio.Event()
    async with ScriptedBunker([relay.url], USER, signer_key=TRANSPORT) as bunker:
        task = asyncio.create_task(RemoteSigner.from_nostrconnect(uri, key, timeout=10, on_listening=listening.set,
                                                                   **fast()))
        async with asyncio.timeout(10):
            await listening.wait()
        # Someone who saw the URI but not... the secret: an answer without it is ignored.
        impostor = ScriptedBunker([relay.url], SecretKey.generate())
        async with impostor:
            await impostor.accept(uri.to_uri().replace(uri.secret, "guessed"))
        await bunker.accept(uri.to_uri())
        async with asyncio.timeout(15):
            signer = await task
        try:
            assert signer.signer_pubkey == TRANSPORT.public_key_hex
            assert signer.public_key == USER.public_key_hex
            assert signer.session.client_pubkey == key.public_key_hex
            ev = await signer.sign_event(kind=1, content="scanned", created_at=T0, tags=[])
            assert ev.pubkey == USER.public_key_hex and ev.is_valid()
        finally:
            await signer.close()


async def test_nostrconnect_nobody_answers_in_time(relay: EmbeddedRelay) -> None:
    key, uri = make_invitation([relay.url])
    with pytest.raises(SignerUnreachableError, match="no signer answered the nostrconnect:// invitation"):
        await RemoteSigner.from_nostrconnect(uri, key, timeout=0.3, **fast())
    with pytest.raises(NostrError, match="another client key"):
        await RemoteSigner.from_nostrconnect(uri, SecretKey.generate(), timeout=0.3, **fast())


# --- the size bound -----------------------------------------------------------------------------------------
async def test_a_text_over_the_bound_is_refused_before_anything_is_sent(relay: EmbeddedRelay) -> None:
    async with bunker_and_signer(relay.url, USER) as (bunker, signer):
        sent = len(bunker.received)
        with pytest.raises(NostrError, match=r"41,000 bytes.*at most 40,960"):
            await signer.nip44_encrypt(PEER.public_key, "m" * 41_000)
        too_long = LocalSigner(USER).encrypt_now(PEER.public_key, "m" * 41_000)  # made with the key elsewhere
        with pytest.raises(NostrError, match="at most 54,704"):
            await signer.nip44_decrypt(PEER.public_key, too_long)
        with pytest.raises(NostrError, match="65,535"):
            await signer.sign_event(kind=1, content="c" * 70_000, created_at=T0, tags=[])
        assert len(bunker.received) == sent
        assert Method.NIP44_ENCRYPT not in bunker.methods()


# --- direct messages through the signer (NIP-17/59 with the key elsewhere) ---------------------------------------
async def test_a_direct_message_is_opened_and_answered_through_the_remote_signer(relay: EmbeddedRelay) -> None:
    """rust-nostr sends the agent a DM; the agent, whose key is only in the bunker, opens it and replies; rust-nostr
    opens the reply. Each seal is the signer's work (one encrypt, one sign), each unwrap two decrypts."""
    nostr_sdk = pytest.importorskip("nostr_sdk")
    from didactyl_tui.nostr.event import Event
    from didactyl_tui.nostr.nip17 import make_message, open_message_with, wrap_message_with

    admin = nostr_sdk.Keys.generate()
    incoming = nostr_sdk.nip17_make_private_msg(admin, nostr_sdk.PublicKey.parse(USER.public_key_hex), "hi agent ✅")
    async with bunker_and_signer(relay.url, USER) as (bunker, signer):
        checks = bunker.methods().count("sign_event")  # the connection's key check
        dm = await open_message_with(Event.from_json(incoming.as_json()), signer)
        assert (dm.text, dm.sender) == ("hi agent ✅", admin.public_key().to_hex())
        assert bunker.methods().count("nip44_decrypt") == 2  # the wrap, then the seal
        reply = make_message(USER.public_key_hex, [dm.sender], "hello admin", created_at=T0, reply_to=dm.id)
        wraps = await wrap_message_with(reply, signer, now=T0)
        assert list(wraps) == [dm.sender, USER.public_key_hex]  # the admin's, then the agent's own copy
        assert bunker.methods().count("sign_event") - checks == 2 and bunker.methods().count("nip44_encrypt") == 2
    gift = nostr_sdk.UnwrappedGift.from_gift_wrap(admin, nostr_sdk.Event.from_json(wraps[dm.sender].to_json()))
    assert gift.sender().to_hex() == USER.public_key_hex and gift.rumor().content() == "hello admin"


# --- NIP-42 through the signer ----------------------------------------------------------------------------
async def test_a_relay_that_asks_for_nip42_is_signed_in_through_the_remote_signer(relay: EmbeddedRelay,
                                                                                  tmp_path: Path) -> None:
    from didactyl_tui.nostr.event import sign_event
    from didactyl_tui.nostr.relay import RelayClient
    from didactyl_tui.nostr.results import Verdict

    async with bunker_and_signer(relay.url, USER) as (bunker, signer), \
            EmbeddedRelay(tmp_path / "auth.db", require_auth=True) as guarded:
        note = sign_event(USER, kind=1, content="signed in through the bunker", created_at=T0, tags=[])
        async with RelayClient(guarded.url, auth_key=signer, **fast_client_kwargs()) as client:
            result = await client.publish(note, timeout=10)
            assert result.verdict is Verdict.ACCEPTED, result
            assert client.authenticated and "sign_event" in bunker.methods()
        assert [e.id for e in await guarded.query([{"ids": [note.id]}])] == [note.id]

        class Refusing:  # a signer that cannot sign: the sign-in fails with its reason, nothing hangs
            public_key = USER.public_key_hex

            async def sign_event(self, **_: Any) -> Any:
                raise NostrError("no key here")

        async with RelayClient(guarded.url, auth_key=Refusing(), **fast_client_kwargs()) as client:  # type: ignore[arg-type]
            result = await client.publish(sign_event(USER, kind=1, content="x", created_at=T0 + 1, tags=[]), timeout=5)
            assert result.verdict is Verdict.REJECTED
            assert "the signer did not sign our AUTH: no key here" in result.message
