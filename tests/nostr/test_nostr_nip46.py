"""NIP-46, the pure part: messages, kind 24133 events, bunker:// and nostrconnect:// URIs, the session, and the
largest text that can travel to a remote signer (NIP-44 inside NIP-44)."""

from __future__ import annotations

import json

import pytest

from didactyl_tui.errors import NostrError, SignerKeyMismatchError
from didactyl_tui.nostr import nip44, nip46, nip46_uri
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip46 import Method, Request, Response
from didactyl_tui.nostr.nip46_invitation import make_invitation
from didactyl_tui.nostr.nip46_session import RemoteSignerSession
from didactyl_tui.nostr.nip46_uri import BunkerUri, NostrConnectUri
from didactyl_tui.nostr.terminal_qr import render_qr

CLIENT = SecretKey.from_hex("00" * 31 + "11")
SIGNER = SecretKey.from_hex("00" * 31 + "22")
USER = SecretKey.from_hex("00" * 31 + "33")
PK = SIGNER.public_key_hex
NONCE = bytes(range(32))


# --- messages -----------------------------------------------------------------------------------------------
def test_request_and_response_shapes_are_the_nips() -> None:
    req = Request("abc", "nip44_encrypt", (PK, "héllo\n"))
    assert json.loads(req.to_json()) == {"id": "abc", "method": "nip44_encrypt", "params": [PK, "héllo\n"]}
    assert "héllo" in req.to_json()  # not \u00e9: escapes would eat into the size bound
    assert json.loads(Response("abc", "pong").to_json()) == {"id": "abc", "result": "pong"}
    assert json.loads(Response("abc", "", "no").to_json()) == {"id": "abc", "result": "", "error": "no"}
    assert nip46.parse_message(req.to_json()) == req
    assert nip46.parse_message(Response("abc", "pong").to_json()) == Response("abc", "pong")


def test_a_reply_is_failed_only_with_an_error_and_an_auth_url_is_not_a_failure() -> None:
    assert not Response("1", "ack").failed
    assert not Response("1", "ack", "").failed  # an empty error is no error (as nostr-tools reads it)
    assert Response("1", "", "denied").failed
    challenge = Response("1", nip46.AUTH_URL, "https://signer.example/approve")
    assert challenge.is_auth_url and not challenge.failed
    assert not Response("1", nip46.AUTH_URL).is_auth_url  # no URL: not a challenge


def test_a_relay_list_sent_as_json_rather_than_as_a_string_is_read() -> None:
    msg = nip46.parse_message('{"id":"1","result":["wss://a.example","wss://b.example"]}')
    assert isinstance(msg, Response)
    assert nip46_uri.parse_relay_list(msg.result) == ("wss://a.example", "wss://b.example")
    assert nip46_uri.parse_relay_list(nip46.parse_message('{"id":"1","result":null}').result) is None
    assert nip46_uri.parse_relay_list("null") is None


@pytest.mark.parametrize(("text", "why"), [
    ("not json", "not valid JSON"),
    ("[1,2]", "JSON object"),
    ('{"method":"ping"}', "'id'"),
    ('{"id":"' + "x" * 65 + '","result":"a"}', "'id'"),
    ('{"id":"1","method":"","params":[]}', "'method'"),
    ('{"id":"1","method":"ping","params":[1]}', "'params'"),
    ('{"id":"1","method":"ping","params":"x"}', "'params'"),
    ('{"id":"1","result":5}', "'result'"),
])
def test_bad_messages_are_refused_with_a_reason(text: str, why: str) -> None:
    with pytest.raises(NostrError, match=why):
        nip46.parse_message(text)


# --- kind 24133 events --------------------------------------------------------------------------------------
def test_a_request_event_is_kind_24133_p_tagged_and_nip44_between_the_two_keys() -> None:
    req = Request("r1", Method.PING.value)
    ev = nip46.build_event(CLIENT, PK, req, created_at=1_700_000_000, nonce=NONCE)
    assert ev.kind == 24133 and ev.pubkey == CLIENT.public_key_hex and ev.tags == (("p", PK),)
    assert ev.is_valid()
    ck = nip44.get_conversation_key(SIGNER.secret_hex(), CLIENT.public_key_hex)
    assert nip44.decrypt(ev.content, ck) == req.to_json()  # NIP-44 v2, as the NIP now stands
    assert nip46.read_event(SIGNER, ev) == req
    # Deterministic given the nonce and the time: nothing hidden.
    assert nip46.build_event(CLIENT, PK, req, created_at=1_700_000_000, nonce=NONCE) == ev


def test_reading_an_event_checks_kind_and_recipient() -> None:
    ev = nip46.build_event(CLIENT, PK, Request("r1", "ping"), created_at=1)
    with pytest.raises(NostrError, match="not addressed to us"):
        nip46.read_event(USER, ev)
    other = sign_event(CLIENT, kind=1, content=ev.content, created_at=1, tags=[["p", PK]])
    with pytest.raises(NostrError, match="kind 24133"):
        nip46.read_event(SIGNER, other)
    garbled = sign_event(CLIENT, kind=24133, content="#not-base64", created_at=1, tags=[["p", PK]])
    with pytest.raises(NostrError):
        nip46.read_event(SIGNER, garbled)


def test_a_message_over_65535_bytes_is_refused_naming_the_limit() -> None:
    req = Request("r1", "nip44_encrypt", (PK, "x" * 65_500))
    with pytest.raises(NostrError, match="65,535"):
        nip46.build_event(CLIENT, PK, req, created_at=1)


def test_sign_event_template_and_the_checks_on_the_signed_event() -> None:
    tags = [["d", "memory"], ["client", "didactyl"]]
    template = nip46.event_template(kind=30078, content="c", created_at=5, tags=tags)
    assert json.loads(template) == {"kind": 30078, "content": "c", "tags": tags, "created_at": 5}
    assert nip46.read_template(template) == {"kind": 30078, "content": "c", "tags": tags, "created_at": 5}
    good = sign_event(USER, kind=30078, content="c", created_at=5, tags=tags)
    asked = {"kind": 30078, "content": "c", "created_at": 5, "tags": tags}
    assert nip46.check_signed_event(good.to_json(), pubkey=USER.public_key_hex, **asked) == good
    with pytest.raises(SignerKeyMismatchError, match="the key it named"):
        nip46.check_signed_event(good.to_json(), pubkey=SIGNER.public_key_hex, **asked)
    other = sign_event(USER, kind=30078, content="changed", created_at=5, tags=tags)
    with pytest.raises(NostrError, match="something other"):
        nip46.check_signed_event(other.to_json(), pubkey=USER.public_key_hex, **asked)
    forged = good.to_dict() | {"sig": "00" * 64}
    with pytest.raises(NostrError, match="does not verify"):
        nip46.check_signed_event(json.dumps(forged), pubkey=USER.public_key_hex, **asked)
    with pytest.raises(NostrError, match="malformed"):
        nip46.check_signed_event("{}", pubkey=USER.public_key_hex, **asked)
    with pytest.raises(NostrError, match="nothing"):
        nip46.check_signed_event(None, pubkey=USER.public_key_hex, **asked)


@pytest.mark.parametrize("bad", ['{"kind":"1","content":"","tags":[],"created_at":1}',
                                 '{"kind":1,"content":2,"tags":[],"created_at":1}',
                                 '{"kind":1,"content":"","tags":[[1]],"created_at":1}',
                                 '{"kind":1,"content":"","tags":[],"created_at":-1}', "[]", "nope"])
def test_a_bad_template_is_refused(bad: str) -> None:
    with pytest.raises(NostrError):
        nip46.read_template(bad)


# --- the size bound -----------------------------------------------------------------------------------------
def test_the_largest_text_that_travels_is_40960_bytes_and_it_is_exact() -> None:
    n = nip46.MAX_PLAINTEXT_BYTES
    assert n == 40_960
    # At the bound: the encrypt reply (the payload) and the request (the text) both fit in one NIP-44 message.
    assert nip46.payload_chars(n) == len(nip44.encrypt("a" * n, bytes(32), NONCE))  # the formula is the real size
    reply = Response("0123456789abcdef", nip44.encrypt("a" * n, bytes(32), NONCE)).to_json()
    assert len(reply.encode()) <= 65_535
    nip44.encrypt(reply, bytes(32), NONCE)  # carried as a NIP-44 plaintext: fits
    request = Request("0123456789abcdef", "nip44_encrypt", (PK, "a" * n)).to_json()
    nip44.encrypt(request, bytes(32), NONCE)
    # One byte more and the padded payload jumps a step: the reply alone is over 65,535.
    assert nip46.payload_chars(n + 1) > 65_535
    assert nip46.plaintext_fits(n) and not nip46.plaintext_fits(n + 1) and not nip46.plaintext_fits(0)


def test_check_plaintext_names_the_limit_and_counts_escapes() -> None:
    nip46.check_plaintext("é" * (40_960 // 2))  # 40,960 bytes in 20,480 characters
    with pytest.raises(NostrError, match=r"41,000 bytes.*40,960"):
        nip46.check_plaintext("a" * 41_000)
    with pytest.raises(NostrError, match="41,000 bytes"):
        nip46.check_plaintext("é" * 20_500)  # 20,500 characters, 41,000 bytes
    # 40,000 bytes, but every line break is two bytes once escaped as JSON: 80,000.
    with pytest.raises(NostrError, match="escaped as JSON"):
        nip46.check_plaintext("\n" * 40_000)
    with pytest.raises(NostrError, match="empty"):
        nip46.check_plaintext("")
    assert nip46.escaped_bytes('a"\n\x01é') == len('a\\"\\n\\u0001é'.encode())


# --- URIs ---------------------------------------------------------------------------------------------------
def test_a_bunker_uri_round_trips_and_keeps_its_secret_out_of_the_repr() -> None:
    text = f"bunker://{PK}?relay=wss%3A%2F%2Frelay.example.com&relay=ws://127.0.0.1:7000&secret=s3cr3t"
    uri = BunkerUri.parse(text)
    assert uri == BunkerUri(PK, ("wss://relay.example.com", "ws://127.0.0.1:7000"), "s3cr3t")
    assert BunkerUri.parse(uri.to_uri()) == uri
    assert "s3cr3t" not in repr(uri) and "s3cr3t" in uri.to_uri()
    assert nip46_uri.parse_uri(text) == uri
    # Tolerated: upper-case hex, a slash before the query, a repeated relay, no secret.
    loose = BunkerUri.parse(f"  bunker://{PK.upper()}/?relay=wss://r.example&relay=wss://r.example  ")
    assert loose == BunkerUri(PK, ("wss://r.example",), None)


def test_a_nostrconnect_uri_round_trips() -> None:
    key, uri = make_invitation(["wss://relay1.example.com", "wss://relay2.example2.com"],
                               perms=["nip44_encrypt", "nip44_decrypt", "sign_event:30078"], name="My Client")
    assert uri.client_pubkey == key.public_key_hex and len(uri.secret) == 32
    text = uri.to_uri()
    assert text.startswith(f"nostrconnect://{key.public_key_hex}?relay=wss%3A%2F%2Frelay1")
    assert NostrConnectUri.parse(text) == uri
    assert uri.secret not in repr(uri)
    assert uri.metadata() == {"name": "My Client"}
    # The NIP's own example.
    example = ("nostrconnect://83f3b2ae6aa368e8275397b9c26cf550101d63ebaab900d19dd4a4429f5ad8f5?relay=wss%3A%2F%2F"
               "relay1.example.com&perms=nip44_encrypt%2Cnip44_decrypt%2Csign_event%3A13%2Csign_event%3A14%2C"
               "sign_event%3A1059&name=My+Client&secret=0s8j2djs&relay=wss%3A%2F%2Frelay2.example2.com")
    parsed = nip46_uri.parse_uri(example)
    assert isinstance(parsed, NostrConnectUri)
    assert parsed.relays == ("wss://relay1.example.com", "wss://relay2.example2.com")
    assert parsed.secret == "0s8j2djs" and parsed.name == "My Client"
    assert parsed.perms == ("nip44_encrypt", "nip44_decrypt", "sign_event:13", "sign_event:14", "sign_event:1059")


@pytest.mark.parametrize(("text", "why"), [
    ("", "bunker:// or nostrconnect://"),
    ("https://example.com", "bunker:// or nostrconnect://"),
    ("bunker://abc?relay=wss://r.example", "64 hex characters"),
    (f"bunker://npub1{'q' * 58}?relay=wss://r.example", "64 hex characters"),
    (f"bunker://{'11' * 32}?relay=wss://r.example", "not a point on secp256k1"),
    (f"bunker://{PK}", "at least one relay"),
    (f"bunker://{PK}?relay=https://r.example", "not a relay URL"),
    (f"bunker://{PK}?relay=wss://", "not a relay URL"),
    (f"bunker://{PK}?relay=wss://r.example&secret=a&secret=b", "more than once"),
    (f"bunker://{PK}?relay=wss://r.example\x1b[2J", "control characters"),
    (f"bunker://{PK}?" + "&".join(f"relay=wss://r{i}.example" for i in range(17)), "at most 16 relays"),
    (f"bunker://{PK}?relay=wss://r.example&secret=" + "s" * 300, "over 256"),
    (f"bunker://{PK}?relay=wss://r.example&x=" + "y" * 9000, "at most 8,192"),
    (f"nostrconnect://{PK}?relay=wss://r.example", "needs a secret"),
    (f"nostrconnect://{PK}?relay=wss://r.example&secret=s&perms=sign_event:1;rm", "not a NIP-46 permission"),
])
def test_bad_uris_get_a_clear_error(text: str, why: str) -> None:
    with pytest.raises(NostrError, match=why) as info:
        nip46_uri.parse_uri(text)
    assert "\x1b" not in str(info.value) and "\n" not in str(info.value)


def test_connect_params_put_the_metadata_fourth() -> None:
    assert nip46_uri.connect_params(PK, "s") == (PK, "s")
    assert nip46_uri.connect_params(PK, None) == (PK, "")
    assert nip46_uri.connect_params(PK, "s", metadata={"name": "didactyl"}) == (PK, "s", "", '{"name":"didactyl"}')
    assert nip46_uri.connect_params(PK, "s", ["sign_event:1", "ping"]) == (PK, "s", "sign_event:1,ping")


# --- the session --------------------------------------------------------------------------------------------
def test_the_session_round_trips_and_never_shows_the_client_key() -> None:
    s = RemoteSignerSession.new(CLIENT, PK, ["wss://r.example"])
    assert s.user_pubkey is None and s.client_pubkey == CLIENT.public_key_hex
    assert s.client_key() == CLIENT
    s2 = RemoteSignerSession.from_json(s.to_json())
    assert s2 == s
    for shown in (repr(s), str(s), f"{s}"):
        assert CLIENT.secret_hex() not in shown and "redacted" in shown
    full = RemoteSignerSession(CLIENT.secret_hex(), PK, ("wss://r.example",), USER.public_key_hex)
    assert RemoteSignerSession.from_dict(full.to_dict()) == full and not full.key_checked
    checked = RemoteSignerSession(CLIENT.secret_hex(), PK, ("wss://r.example",), USER.public_key_hex, True)
    assert RemoteSignerSession.from_json(checked.to_json()) == checked and "key_checked=True" in repr(checked)
    # A session stored before the key check was made reads as not checked (it is checked at its next start).
    older = {k: v for k, v in checked.to_dict().items() if k != "key_checked"}
    assert RemoteSignerSession.from_dict(older) == full


@pytest.mark.parametrize(("data", "why"), [
    ([], "JSON object"),
    ({"version": 9}, "version"),
    ({"client_key": "00", "signer_pubkey": PK, "relays": ["wss://r.example"]}, "not a valid secret key"),
    ({"client_key": "11" * 32, "signer_pubkey": "x", "relays": ["wss://r.example"]}, "64 hex"),
    ({"client_key": "11" * 32, "signer_pubkey": PK, "relays": "wss://r.example"}, "as a list"),
    ({"client_key": "11" * 32, "signer_pubkey": PK, "relays": []}, "at least one relay"),
    ({"client_key": "11" * 32, "signer_pubkey": PK, "relays": ["wss://r.example"], "user_pubkey": 3}, "string"),
    ({"client_key": "11" * 32, "signer_pubkey": PK, "relays": ["wss://r.example"], "user_pubkey": PK,
      "key_checked": "yes"}, "true or false"),
    ({"client_key": "11" * 32, "signer_pubkey": PK, "relays": ["wss://r.example"], "key_checked": True},
     "does not know"),
])
def test_a_bad_session_is_refused_without_showing_the_key(data: object, why: str) -> None:
    with pytest.raises(NostrError, match=why) as info:
        RemoteSignerSession.from_dict(data)
    assert "11" * 32 not in str(info.value)


# --- the QR code --------------------------------------------------------------------------------------------
def _modules(text: str) -> list[list[bool]]:
    """The drawn text back to modules: True where a cell is drawn (upper and lower half of each character)."""
    top = {"█": True, "▀": True, "▄": False, " ": False}
    bottom = {"█": True, "▀": False, "▄": True, " ": False}
    rows: list[list[bool]] = []
    for line in text.split("\n"):
        rows.append([top[c] for c in line])
        rows.append([bottom[c] for c in line])
    return rows


def test_the_qr_code_draws_segnos_matrix_in_half_blocks() -> None:
    import segno

    _, uri = make_invitation(["wss://relay.example.com"], perms=["sign_event:30078"], name="didactyl")
    text = uri.to_uri()
    drawn = render_qr(text)
    assert set(drawn) <= {"█", "▀", "▄", " ", "\n"}
    expected = [[not dark for dark in row] for row in segno.make(text, error="m").matrix_iter(scale=1, border=2)]
    cells = _modules(drawn)
    assert cells[: len(expected)] == expected  # light modules drawn (for a dark terminal), dark ones left blank
    assert all(not any(row) for row in cells[len(expected):])  # an odd row count pads with one blank half-row
    inverted = _modules(render_qr(text, light_background=True))
    assert inverted[: len(expected)] == [[not c for c in row] for row in expected]
    assert len(drawn.split("\n")[0]) == len(expected[0]) <= 80  # fits an 80-column terminal


def test_the_key_check_is_an_ephemeral_event_of_no_nip_with_a_fresh_nonce() -> None:
    from didactyl_tui.nostr.kinds import SIGNER_KEY_CHECK, is_ephemeral

    check = nip46.key_check_event(created_at=7, nonce="n0nce")
    assert check["kind"] == SIGNER_KEY_CHECK and is_ephemeral(SIGNER_KEY_CHECK)
    assert SIGNER_KEY_CHECK not in (22242, 24133, 24242, 27235)  # not an auth token, not NIP-46 itself
    assert "never published" in check["content"] and "n0nce" in check["content"] and check["tags"] == []
    signed = sign_event(USER, **check)
    assert nip46.check_signed_event(signed.to_json(), pubkey=USER.public_key_hex, **check) == signed
