"""Pairing by invitation and refusals, at the agent's side (service/dm_pairing.py), over a real relay with rust-nostr
as the other people's client: an invitation makes its presenter the admin once (the config file written with the
rest kept, the rights followed at once, the model never asked); it cannot be used twice, guessed or replayed; a key
the agent does not answer gets one readable refusal, bounded in all and per sender, and only on the agent's relays."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY, OTHER_KEY
from dm_support import AGENT_ENV, until, wraps_for
from llm_stub import LlmStub, Reply
from relay_servers import fast_client_kwargs

from didactyl_tui.agent.dm.invitation import INVITATION_TAG, PAIRING_TAG, fingerprint, issue
from didactyl_tui.config_file import load_config
from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip17 import build_dm_relay_list
from didactyl_tui.nostr.nip59 import Rumor, unwrap
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService

nostr_sdk = pytest.importorskip("nostr_sdk")
AGENT, ADMIN, OTHER = AGENT_KEY.public_key_hex, ADMIN_KEY.public_key_hex, OTHER_KEY.public_key_hex


def _config(path: Path, url: str, base_url: str, extra: str = "") -> Path:
    path.write_text(f"""# the agent's config: this comment and every other key stay when pairing writes [admin]
[llm]
model = "openai/stub-model"
api_base = "{base_url}"
api_key_env = "STUB_KEY"
[relays]
embedded = false
urls = ["{url}"]
timeout_s = 3.0
[memory]
backend = "none"
[agent]
publish_profile = false
{extra}""", "utf-8")
    return path


def _agent(config: Path, data: Path) -> AppService:
    return AppService(load_config(config, AGENT_ENV), data_dir=data, env=AGENT_ENV, answer_dms=True,
                      relay_client_options=fast_client_kwargs())


def _dm(sender: SecretKey, text: str, invitation: str | None = None) -> Event:
    extra = [nostr_sdk.Tag.parse([INVITATION_TAG, invitation])] if invitation is not None else []
    wrap = nostr_sdk.nip17_make_private_msg(nostr_sdk.Keys.parse(sender.secret_hex()),
                                            nostr_sdk.PublicKey.parse(AGENT), text, rumor_extra_tags=extra)
    return Event.from_json(wrap.as_json())


async def _answers(pool: RelayPool, key: SecretKey) -> list[Rumor]:
    return [r for r in (unwrap(w, key).rumor for w in await wraps_for(pool, key.public_key_hex))
            if r.pubkey == AGENT]


async def test_an_invitation_makes_its_presenter_the_admin_once_and_the_config_keeps_the_rest(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        stub.script(Reply.text_reply("Hello, admin."))
        config = _config(tmp_path / "config.toml", relay.url, stub.base_url)
        data = tmp_path / "agent"
        secret, _ = issue(data, ttl_s=600, admin_then=None, now=int(time.time()))
        async with RelayPool([relay.url], **fast_client_kwargs()) as pool, _agent(config, data) as agent:
            assert agent.policy.rights.dm.admin is None
            assert (await pool.publish(_dm(ADMIN_KEY, "pairing", secret), 3)).any_accepted
            [paired] = await until(lambda: _answers(pool, ADMIN_KEY), 30, "the agent's answer to the invitation")
            assert paired.first_tag(PAIRING_TAG) == "paired" and fingerprint(AGENT, ADMIN) in paired.content
            assert agent.policy.rights.dm.admin == ADMIN  # followed at once: no restart
            text = config.read_text()
            assert f'pubkey = "{ADMIN_KEY.npub}"' in text and text.startswith("# the agent's config")
            assert load_config(config, AGENT_ENV).relays.urls == [relay.url]

            # The admin presents it again (the same line run twice): "already paired", nothing taken.
            assert (await pool.publish(_dm(ADMIN_KEY, "pairing again", secret), 3)).any_accepted
            await until(lambda: _answered(pool, ADMIN_KEY, 2), 30, "the answer to the second presentation")
            assert [r.first_tag(PAIRING_TAG) for r in await _answers(pool, ADMIN_KEY)].count("already-paired") == 1
            # The same invitation again, from another key: used, refused; the admin stays.
            assert (await pool.publish(_dm(OTHER_KEY, "me too", secret), 3)).any_accepted
            [refused] = await until(lambda: _answers(pool, OTHER_KEY), 30, "the refusal of a used invitation")
            assert refused.first_tag(PAIRING_TAG) == "refused" and "used already" in refused.content
            assert agent.policy.rights.dm.admin == ADMIN
            # The new admin's next message goes to the model, which never saw the invitations.
            assert (await pool.publish(_dm(ADMIN_KEY, "what's new?"), 3)).any_accepted
            await until(lambda: stub.requests, 30, "the admin's message at the model")
            assert secret not in str(stub.requests[0].messages) and "pairing" not in str(stub.requests[0].messages)
        # A restart sees the invitation's wrap again (a replay): answered before, nothing is taken or sent twice.
        async with RelayPool([relay.url], **fast_client_kwargs()) as pool, _agent(config, data) as again:
            await until(lambda: again.dm.counts.get("duplicate", 0) >= 3, 30, "the old messages judged duplicates")
            assert len([r for r in await _answers(pool, ADMIN_KEY) if r.first_tag(PAIRING_TAG)]) == 2
            assert again.policy.rights.dm.admin == ADMIN


async def _answered(pool: RelayPool, key: SecretKey, count: int) -> bool:
    return len(await _answers(pool, key)) >= count


async def test_a_wrong_or_expired_invitation_grants_nothing_and_says_why(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, LlmStub() as stub:
        config = _config(tmp_path / "config.toml", relay.url, stub.base_url, "[dm]\nrefusals_per_hour = 100\n")
        data = tmp_path / "agent"
        secret, _ = issue(data, ttl_s=60, admin_then=None, now=int(time.time()) - 61)  # expired a second ago
        before = config.read_text()
        async with RelayPool([relay.url], **fast_client_kwargs()) as pool, _agent(config, data) as agent:
            for key, presented in ((ADMIN_KEY, secret), (OTHER_KEY, "0" * 32)):
                assert (await pool.publish(_dm(key, "pair me", presented), 3)).any_accepted
            [late] = await until(lambda: _answers(pool, ADMIN_KEY), 30, "the expired invitation's refusal")
            [wrong] = await until(lambda: _answers(pool, OTHER_KEY), 30, "the wrong invitation's refusal")
            assert "expired" in late.content and "not the agent's open one" in wrong.content
            assert {late.first_tag(PAIRING_TAG), wrong.first_tag(PAIRING_TAG)} == {"refused"}
            assert agent.policy.rights.dm.admin is None and config.read_text() == before
            assert stub.requests == []


async def test_strangers_get_one_refusal_each_bounded_in_all_and_only_on_the_agents_relays(tmp_path: Path) -> None:
    async with EmbeddedRelay(tmp_path / "relay.sqlite3") as relay, \
            EmbeddedRelay(tmp_path / "theirs.sqlite3") as theirs, LlmStub() as stub:
        config = _config(tmp_path / "config.toml", relay.url, stub.base_url, "[dm]\nrefusals_per_hour = 3\n")
        strangers = [SecretKey.generate() for _ in range(8)]
        async with RelayPool([relay.url, theirs.url], **fast_client_kwargs()) as pool, \
                _agent(config, tmp_path / "agent") as agent:
            # Each stranger says it reads its messages elsewhere: a refusal never goes there.
            for key in strangers:
                listed = build_dm_relay_list(key, [theirs.url], created_at=int(time.time()))
                assert (await pool.publish(listed, 3)).any_accepted
            first = strangers[0]
            for _ in range(2):  # the first one writes twice: one refusal
                assert (await pool.publish(_dm(first, "hello?"), 3)).any_accepted
            await until(lambda: agent.dm.counts.get("stranger", 0) == 2, 60, "the first stranger's messages judged")
            await until(lambda: _refusals(pool, strangers, total=1), 30, "the first stranger's refusal")
            for key in strangers[1:]:  # seven more: two refusals left in the hour's bound
                assert (await pool.publish(_dm(key, "hello?"), 3)).any_accepted
            await until(lambda: agent.dm.counts.get("stranger", 0) == 9, 60, "every stranger's message judged")
            await until(lambda: _refusals(pool, strangers, total=3), 30, "the refusals the bound lets go")
            answered = {key.public_key_hex: await _answers(pool, key) for key in strangers}
            assert len(answered[first.public_key_hex]) == 1  # once per sender, whatever it sends
            refusal = answered[first.public_key_hex][0]
            assert refusal.first_tag(PAIRING_TAG) == "refused" and "didactyl attach" in refusal.content
            assert sum(map(len, answered.values())) == 3  # [dm] refusals_per_hour: the rest are only counted
            async with RelayPool([theirs.url], **fast_client_kwargs()) as elsewhere:
                for key in strangers:
                    assert await wraps_for(elsewhere, key.public_key_hex) == []
            assert stub.requests == []


async def _refusals(pool: RelayPool, strangers: list[SecretKey], *, total: int) -> bool:
    wraps = [w for key in strangers for w in await wraps_for(pool, key.public_key_hex)]
    return len(wraps) >= total
