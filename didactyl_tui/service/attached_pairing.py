"""``didactyl attach … --invite SECRET``: the invitation presented to the agent once, at start, in a NIP-17 message of
its own (the secret in a tag of the sealed rumor, which only the agent and the admin's own copy open), and the
agent's answer shown in the conversation. The request shows the fingerprint this side computes of the agent's key
and the admin's; the agent's answer, and its ``serve`` log, show the one it computes (agent/dm/invitation.py).

Not presented when the conversation already holds the agent's "paired" answer to this key (the same line run again).
The first message typed waits for the answer (bounded), so it is judged as the admin's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..agent.dm.invitation import INVITATION_TAG, fingerprint
from ..errors import DidactylError
from .attach import AttachTarget
from .attach_link import AttachLink, LinkMessage
from .attach_send import AgentPost


async def present_invitation(post: AgentPost, link: AttachLink, target: AttachTarget, *, wait_s: float,
                             add: Callable[[LinkMessage], Awaitable[None]], warn: Callable[[str], None]) -> None:
    """``wait_s``: how long the agent's answer is waited for (it answers without its model: at once, when it runs)."""
    mark = fingerprint(target.agent, target.admin_pubkey)
    text = f"Pairing request from didactyl attach: this key is to be the agent's admin (fingerprint {mark})"
    try:
        message = await post.prepare(text, tags=[(INVITATION_TAG, target.invitation)])
    except DidactylError as exc:
        warn(f"the invitation was not presented: {exc.message}")
        return
    link.expect_reply(message.rumor_id)
    if message.own_copy is not None:
        link.already_shown(message.own_copy)
    sent = await post.deliver(message)
    if not sent.ok:
        link.forget_reply(message.rumor_id)
        warn(f"the invitation did not reach the agent ({sent.detail}): run the attach line again once a relay of "
             "the agent's answers")
        return
    await add(LinkMessage(message.rumor_id, False, text, message.created_at, None))
    answer = await link.reply_to(message.rumor_id, wait_s)
    if answer is None and sent.own_copy_refused:  # its relays carry nothing to this key unless it pairs
        warn(f"the agent has not answered the invitation within {wait_s:g} s. Its relays take nothing for "
             f"your key until it is paired ({sent.own_copy_refused}), so a refusal (the invitation used, expired or "
             "replaced) cannot reach you: see `didactyl serve`'s log where it runs; `didactyl invite` there prints a "
             "new line")
        return
    if answer is None:
        warn(f"the agent has not answered the invitation within {wait_s:g} s (does `didactyl serve` run "
             "where it lives?); its answer shows here when it comes")
        return
    await add(answer)
