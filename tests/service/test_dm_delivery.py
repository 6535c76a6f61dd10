"""Delivery is a fact: a message counts as answered only when a relay its sender reads took the sender's wrap
(``OK true``). Real relays — ours, refusing the admin's wraps until its allow-list changes, and rust-nostr's,
named in the admin's kind 10050 and down at first — and rust-nostr as the admin's client. Until a relay takes
it the reply waits in the outbox and is retried; our own copy never counts; the model is asked once; after
the bound the reply is given up, with the reason in the app's warnings and the status."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from dm_support import AGENT_ENV, dm_config, opened, replies_for, sdk_dm, tags_of, until, wraps_for
from llm_stub import LlmStub, Reply
from relay_servers import RustRelayUnderTest, fast_client_kwargs, free_port

from didactyl_tui.nostr.embedded_relay.server import EmbeddedRelay
from didactyl_tui.nostr.nip17 import build_dm_relay_list
from didactyl_tui.nostr.pool import RelayPool
from didactyl_tui.service.app import AppService
from didactyl_tui.service.events import ServiceWarning

nostr_sdk = pytest.importorskip("nostr_sdk")
pytestmark = pytest.mark.usefixtures("warm_litellm")
ADMIN = ADMIN_KEY.public_key_hex
ME = AGENT_KEY.public_key_hex


def _agent(cfg, data: Path) -> AppService:
    return AppService(cfg, data_dir=data, answer_dms=True, relay_client_options=fast_client_kwargs(), env=AGENT_ENV)


async def test_a_reply_the_senders_relay_refuses_waits_and_is_delivered_once_the_relay_takes_it(tmp_path: Path) -> None:
    admin = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    # The relay the admin and the agent share takes wraps addressed to the agent only (at first).
    relay = EmbeddedRelay(tmp_path / "relay.sqlite3", allowed_writers=[ME], gift_wrap_recipients=[ME])
    await relay.start()
    try:
        async with LlmStub() as stub, RelayPool([relay.url], **fast_client_kwargs()) as client:
            stub.script(Reply.text_reply("Groceries, then call Ana."))
            svc = _agent(dm_config(stub.base_url, urls=[relay.url], admin=ADMIN_KEY.npub, retry_max_interval_s=0.3),
                         tmp_path / "data")
            async with svc:
                ledger = svc.parts.dm.ledger
                message = sdk_dm(nostr_sdk, admin, "what's the plan?")
                assert (await client.publish(message, timeout=3)).any_accepted
                rumor_id = opened(nostr_sdk, nostr_sdk.Keys.parse(AGENT_KEY.secret_hex()), message).id().to_hex()

                def wrap_states() -> dict[str, str]:
                    return {pk: state for pk, state, _ in ledger.wraps_of(rumor_id)}

                # Our own copy is taken, the admin's refused (blocked): written, not delivered; retried.
                await until(lambda: wrap_states().get(ME) == "delivered", 60, "our own copy on the relay")
                await until(lambda: "blocked" in str(ledger.wraps_of(rumor_id)), 30, "the refusal recorded")
                await until(lambda: svc.dm.counts.get("own_copy"), 30, "our own copy coming back")
                assert ledger.record(rumor_id).state == "written" and wrap_states()[ADMIN] == "pending"
                assert await wraps_for(client, ADMIN) == []
                status = await svc.dm.status()
                assert status.undelivered == 2 and status.messages == {"written": 1}  # the reply and its report
                # The relay now takes wraps for the admin (what a reload of its allow-list does).
                relay.set_access([ME], [ME, ADMIN])
                await until(lambda: ledger.record(rumor_id).state == "delivered", 30, "the delivery")
                assert ledger.record(rumor_id).detail == relay.url
            [reply] = await replies_for(client, ADMIN_KEY)
        rumor = opened(nostr_sdk, admin, reply)
        assert rumor.content() == "Groceries, then call Ana." and tags_of(rumor, "e") == [rumor_id]
        assert len(stub.requests) == 1  # the model was asked once, however many tries the delivery took
    finally:
        await relay.stop()


async def test_a_reply_to_a_dm_relay_that_is_down_is_sent_once_it_is_up(tmp_path: Path) -> None:
    admin = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    theirs = RustRelayUnderTest()  # the admin's DM relay (kind 10050), not one the agent uses
    theirs.port = free_port()  # nothing listens there yet: down
    ours = EmbeddedRelay(tmp_path / "relay.sqlite3")
    await ours.start()
    try:
        async with LlmStub() as stub, RelayPool([ours.url], **fast_client_kwargs()) as client:
            stub.script(Reply.text_reply("It is done."))
            relay_list = build_dm_relay_list(ADMIN_KEY, [theirs.url], created_at=1_750_000_000)
            assert (await client.publish(relay_list, timeout=3)).any_accepted
            svc = _agent(dm_config(stub.base_url, urls=[ours.url], admin=ADMIN, retry_max_interval_s=0.3),
                         tmp_path / "data")
            async with svc:
                ledger = svc.parts.dm.ledger
                message = sdk_dm(nostr_sdk, admin, "done yet?")
                rumor_id = opened(nostr_sdk, nostr_sdk.Keys.parse(AGENT_KEY.secret_hex()), message).id().to_hex()
                assert (await client.publish(message, timeout=3)).any_accepted
                await until(lambda: "not_connected" in str(ledger.wraps_of(rumor_id)), 60, "a failed try")
                assert ledger.record(rumor_id).state == "written"
                assert await wraps_for(client, ADMIN) == []  # never on our relay: the admin reads elsewhere
                await theirs.start()  # same port
                await until(lambda: ledger.record(rumor_id).state == "delivered", 30, "the delivery")
                assert ledger.record(rumor_id).detail == theirs.url
            async with RelayPool([theirs.url], **fast_client_kwargs()) as on_theirs:
                [reply] = await replies_for(on_theirs, ADMIN_KEY)
        assert opened(nostr_sdk, admin, reply).content() == "It is done."
        assert len(stub.requests) == 1
    finally:
        await theirs.stop()
        await ours.stop()


async def test_a_reply_no_relay_takes_is_given_up_after_the_bound_and_said(tmp_path: Path) -> None:
    admin = nostr_sdk.Keys.parse(ADMIN_KEY.secret_hex())
    relay = EmbeddedRelay(tmp_path / "relay.sqlite3", allowed_writers=[ME], gift_wrap_recipients=[ME])
    await relay.start()
    warnings: list[str] = []
    try:
        async with LlmStub() as stub, RelayPool([relay.url], **fast_client_kwargs()) as client:
            stub.script(Reply.text_reply("You will not see this."))
            svc = _agent(dm_config(stub.base_url, urls=[relay.url], admin=ADMIN, give_up_after_s=2,
                                   retry_max_interval_s=0.3), tmp_path / "data")
            svc.add_listener(lambda e: warnings.append(e.message) if isinstance(e, ServiceWarning) else None)
            async with svc:
                message = sdk_dm(nostr_sdk, admin, "anyone?")
                assert (await client.publish(message, timeout=3)).any_accepted
                status = await until(lambda: _given_up(svc), 60, "the reply given up")
        assert status.messages.get("given_up") == 1 and "blocked" in status.given_up[0]
        assert any(w.startswith("a reply to ") and "given up" in w and "blocked" in w for w in warnings), warnings
        assert len(stub.requests) == 1
    finally:
        await relay.stop()


async def _given_up(svc: AppService):
    status = await svc.dm.status()
    return status if status is not None and status.messages.get("given_up") else None
