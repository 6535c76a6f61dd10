"""What the main screen shows of the conversation with an agent elsewhere outside a turn: a late reply or the admin
writing from another device (:class:`AttachedMessage`); the late reply's tool calls, after it, when the agent's report
tells them (:class:`AttachedToolCalls`: where a resumed chat shows them too); a message marked "not delivered" that
reached the agent's relays later (:class:`AttachedDelivered`): its mark and its Retry go, and it says it was delivered
late."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...service.events import AttachedDelivered, AttachedMessage, AttachedToolCalls

if TYPE_CHECKING:
    from ..widgets.conversation import Conversation
    from ..widgets.error_entry import ErrorEntry
    from ..widgets.message_entry import MessageEntry


async def show_attached(conversation: Conversation, failed: dict[ErrorEntry, MessageEntry],
                        event: AttachedMessage | AttachedToolCalls | AttachedDelivered) -> None:
    """``failed``: the screen's failed turns (error entry -> the user's message), one of which may be this message's."""
    if isinstance(event, AttachedMessage):
        await (conversation.add_reply(event.text) if event.role == "assistant" else conversation.add_user(event.text))
        return
    if isinstance(event, AttachedToolCalls):
        for call in event.calls:
            await conversation.tool_finished(call.call_id, call.name, call.arguments, call.result, call.ending,
                                             call.round, call.permission)
        return
    for error, user_entry in list(failed.items()):
        if error.retry_text == event.text:
            del failed[error]
            await error.remove()
            user_entry.remove_class("-failed")
            user_entry.border_subtitle = "delivered late"
            return
    entry = await conversation.add_user(event.text)  # not on screen (sent by an earlier run): shown now
    entry.border_subtitle = "delivered late"
