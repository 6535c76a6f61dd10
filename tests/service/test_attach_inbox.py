"""The attach inbox (service/attach_inbox.py): wraps judged by their seals' authors (the agent's first, a stranger's
never opened past its outer layer), the bounded intake, and the order a conversation is shown in."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from agent_support import ADMIN_KEY, AGENT_KEY
from wrap_flood_support import spam_wraps

from didactyl_tui.nostr.event import Event
from didactyl_tui.nostr.keys import SecretKey
from didactyl_tui.nostr.nip17 import make_message, wrap_message
from didactyl_tui.nostr.signer import LocalSigner
from didactyl_tui.service.attach_inbox import LocalWrapOpener, SignerWrapOpener, WrapIntake, WrapOpener
from didactyl_tui.service.attach_link import LinkMessage, in_order

ADMIN, AGENT = ADMIN_KEY.public_key_hex, AGENT_KEY.public_key_hex
NOW = int(time.time())


def _from(author: SecretKey, to: str, text: str) -> Event:
    rumor = make_message(author.public_key_hex, [to], text, created_at=NOW)
    return wrap_message(rumor, author, now=NOW, copy_to_self=False)[to]


class CountingSigner(LocalSigner):
    """The admin's key as a Signer, counting decrypts per peer key (a remote signer would count round trips)."""

    def __init__(self, key: SecretKey) -> None:
        super().__init__(key)
        self.decrypts: Counter[str] = Counter()

    async def nip44_decrypt(self, peer: str, payload: str) -> str:
        self.decrypts[peer] += 1
        return await super().nip44_decrypt(peer, payload)


def _batch() -> list[Event]:
    """Five wraps from strangers, with the admin's own copy of a message and the agent's reply among them."""
    spam = spam_wraps(ADMIN, 5, created_at=NOW)
    admin_copy = wrap_message(make_message(ADMIN, [AGENT], "my question", created_at=NOW), ADMIN_KEY, now=NOW)[ADMIN]
    reply = _from(AGENT_KEY, ADMIN, "the agent's answer")
    return [spam[0], admin_copy, *spam[1:3], reply, *spam[3:]]


@pytest.mark.parametrize("opener", ["local", "signer"])
async def test_a_batch_is_judged_by_seal_and_the_agents_wraps_come_first(opener: str) -> None:
    wraps = _batch()
    judge: WrapOpener = (LocalWrapOpener(ADMIN_KEY, AGENT) if opener == "local"
                         else SignerWrapOpener(LocalSigner(ADMIN_KEY), AGENT))
    judged = await judge.judge(wraps)
    assert [r.content for r in judged.rumors] == ["the agent's answer", "my question"]
    assert judged.strangers == 5 and judged.unreadable == [] and judged.not_judged == []


async def test_a_strangers_wrap_costs_one_decrypt_and_the_agents_two() -> None:
    wraps = _batch()
    signer = CountingSigner(ADMIN_KEY)
    await SignerWrapOpener(signer, AGENT).judge(wraps)
    # One decrypt with each wrap's one-time key (its outer layer); the seal's layer only for the agent and the admin.
    assert all(signer.decrypts[w.pubkey] == 1 for w in wraps)
    assert signer.decrypts[AGENT] == 1 and signer.decrypts[ADMIN] == 1
    assert sum(signer.decrypts.values()) == len(wraps) + 2


async def test_a_wrap_that_is_not_for_the_admin_is_unreadable_not_a_stranger() -> None:
    other = SecretKey.generate()
    judged = await LocalWrapOpener(ADMIN_KEY, AGENT).judge([_from(AGENT_KEY, other.public_key_hex, "not yours")])
    assert judged.rumors == [] and judged.strangers == 0 and len(judged.unreadable) == 1


async def test_the_intake_refuses_past_its_count_and_its_bytes_and_says_when_it_has_drained() -> None:
    wraps = spam_wraps(ADMIN, 6, created_at=NOW)
    by_count = WrapIntake(max_wraps=4, max_bytes=10**9)
    assert [by_count.offer(w) for w in wraps] == [True] * 4 + [False] * 2 and by_count.refused == 2
    by_bytes = WrapIntake(max_wraps=100, max_bytes=3 * wraps[0].approx_bytes() + 10)
    assert [by_bytes.offer(w) for w in wraps[:4]] == [True, True, True, False] and by_bytes.refused == 1
    drained = asyncio.create_task(by_count.drained())
    assert await by_count.take(3) == wraps[:3] and not drained.done()
    by_count.handled()
    assert await by_count.take(3) == wraps[3:4]
    by_count.handled()
    await asyncio.wait_for(drained, 5)
    assert by_count.offer(wraps[5])  # room again


def test_a_conversation_within_one_second_shows_each_question_before_its_answer() -> None:
    def msg(id_: str, from_agent: bool, at: int, reply_to: str | None = None) -> LinkMessage:
        return LinkMessage(id_ * 64, from_agent, id_, at, reply_to and reply_to * 64)

    earlier = msg("q", False, 99)
    answer_to_earlier, next_question, its_answer = msg("a", True, 100, "q"), msg("z", False, 100), msg("b", True, 100,
                                                                                                       "z")
    shown = in_order([its_answer, next_question, answer_to_earlier, earlier])
    assert [m.text for m in shown] == ["q", "a", "z", "b"]
