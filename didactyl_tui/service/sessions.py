"""The saved chats, without the service: listed, shown, renamed, deleted, exported, read tail first, and which
agent each is with.

Light on purpose (SQLite and the conversation store, no relay, key, model or tool): the CLI's ``sessions``
commands and ``--continue`` use it before anything else starts, and the TUI shows a stored chat with it while the
service is still starting (``didactyl --continue``). Every call runs on a worker thread. A conversation with an agent
that runs elsewhere (``didactyl attach``) opens only attached to that agent, and one with this data dir's own agent
only where that agent runs (:func:`opening_refusal`).
"""

from __future__ import annotations

import asyncio
import builtins  # Sessions.list shadows the builtin in the annotations of its class
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agent.conversations.session_info import SessionInfo
from ..agent.conversations.session_kind import SessionKind
from ..agent.conversations.store import ConversationStore
from ..errors import AgentError, DidactylError

if TYPE_CHECKING:
    from ..agent.conversations.assembly_log import AssemblyLog, SavedAssembly

log = logging.getLogger("didactyl.service")

CONVERSATIONS_DB = "conversations.sqlite3"
SEEN_DB = "attach.sqlite3"  # attach's record of the messages it holds (and, before, of its conversations)
MIN_ID_PREFIX = 4  # a session id may be shortened to a unique prefix this long or longer
TAIL_MESSAGES = 200  # read first when a chat opens: more than two screens of it, in a few milliseconds


@dataclass(frozen=True, slots=True)
class StoredTail:
    """A chat's last messages, and how many come before them."""

    session_id: str
    earlier: int  # how many messages come before these
    before: int  # where these start (the store's position)
    messages: list[dict[str, Any]]
    until: int  # the position after the last of them: a message saved later is at or after it


class Sessions:
    """The saved chats: list, show, rename, delete, export. SQLite, so every call runs on a worker thread.
    Needs no relay or key: the CLI's ``sessions`` commands use it without starting the service."""

    def __init__(self, store: ConversationStore, *, keep_assemblies: int = 20) -> None:
        self.store = store
        self._keep_assemblies = keep_assemblies

    @cached_property
    def assembly_log(self) -> AssemblyLog:
        # Made when first used: its module brings the prompt's records (documents, nostr), which a resumed chat's
        # first frame (`didactyl --continue`, a read of the chat's end) does not need (~25 ms of imports).
        from ..agent.conversations.assembly_log import AssemblyLog

        return AssemblyLog(self.store, keep=self._keep_assemblies)

    async def list(self, *, include_empty: bool = False) -> list[SessionInfo]:
        """Newest activity first; chats with no message at all are left out unless asked for."""
        sessions = await asyncio.to_thread(self.store.list_sessions)
        return sessions if include_empty else [s for s in sessions if s.message_count > 0]

    async def new(self) -> str:
        """A new, empty chat with this data dir's own agent: its id."""
        return await asyncio.to_thread(self.store.new_session)

    async def resolve(self, id_or_prefix: str) -> str:
        """A full session id from an id or a unique prefix of one; AgentError when none or several match."""
        wanted = id_or_prefix.strip().lower()
        if await asyncio.to_thread(self.store.has_session, wanted):
            return wanted
        if len(wanted) >= MIN_ID_PREFIX:
            matches = [s.id for s in await self.list(include_empty=True) if s.id.startswith(wanted)]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise AgentError(f"{id_or_prefix!r} matches {len(matches)} conversations: give more of the id",
                                 "Conversations")
        raise AgentError(f"no conversation {id_or_prefix!r} (see: didactyl sessions list)", "Conversations")

    async def has(self, session_id: str) -> bool:
        return await asyncio.to_thread(self.store.has_session, session_id)

    async def info(self, session_id: str) -> SessionInfo:
        return await asyncio.to_thread(self.store.session, session_id)

    async def messages(self, session_id: str) -> builtins.list[dict[str, Any]]:
        return await asyncio.to_thread(self.store.messages, session_id)

    async def rename(self, session_id: str, title: str) -> None:
        if not title.strip():
            raise AgentError("a chat's title cannot be empty", "Rename")
        await asyncio.to_thread(self.store.rename_session, session_id, title)

    async def delete(self, session_id: str) -> bool:
        return await asyncio.to_thread(self.store.delete_session, session_id)

    async def export_markdown(self, session_id: str) -> str:
        return await asyncio.to_thread(self.store.export_markdown, session_id)

    async def refusal_to_open(self, session_id: str, here: str | None) -> str | None:
        """Why the conversation ``session_id`` is not answered in a window where ``here`` answers (an agent
        elsewhere, hex; None: this data dir's own), and how to open it; None when it is that window's to continue."""
        agent = await asyncio.to_thread(self.store.session_agent, session_id)
        return opening_refusal(session_id, agent, here)

    async def tail(self, session_id: str, limit: int = TAIL_MESSAGES) -> StoredTail:
        """The chat's last messages (about ``limit``, from a message of the user's on: a tool call stays with its
        result), and how many come before them: a long chat is on screen before the rest is read."""
        earlier, before, until, messages = await asyncio.to_thread(self.store.messages_tail, session_id, limit)
        return StoredTail(session_id, earlier, before, messages, until)

    async def earlier(self, tail: StoredTail) -> builtins.list[dict[str, Any]]:
        """The messages before ``tail`` (what it left out), oldest first."""
        return await asyncio.to_thread(self.store.messages, tail.session_id, tail.before)

    async def assemblies(self, session_id: str) -> builtins.list[SavedAssembly]:
        """The prompts of the chat's last turns (for a resumed chat's inspector), oldest first."""
        return await asyncio.to_thread(self.assembly_log.load, session_id)

    def keep_assembly_now(self, session_id: str, saved: SavedAssembly) -> None:
        """(A worker thread.) A turn's prompt kept with its chat for the inspector; a failure is logged (the chat
        itself is saved apart)."""
        try:
            self.assembly_log.add(session_id, saved)
        except DidactylError as exc:
            log.warning("a prompt assembly was not kept: %s", exc.message)

    async def keep_assembly(self, session_id: str, kind: SessionKind, saved: SavedAssembly) -> None:
        """A turn's prompt kept with its chat, unless the chat keeps nothing (``kind``: an ephemeral one)."""
        if kind.keeps_conversation:
            await asyncio.to_thread(self.keep_assembly_now, session_id, saved)

    async def pop_last_turn(self, session_id: str) -> str | None:
        """Remove the last turn (to regenerate it, or to edit and resend its message); returns its message."""
        return await asyncio.to_thread(self.store.pop_last_turn, session_id)


def open_sessions(data_dir: Path) -> Sessions:
    """The saved chats of a data dir, without starting the service (the database opens on first use)."""
    from ..agent.private_files import ensure_data_dir

    ensure_data_dir(Path(data_dir))
    return Sessions(open_conversations(Path(data_dir)))


def open_conversations(data_dir: Path) -> ConversationStore:
    """The data dir's conversation database (not opened yet). One made before conversations knew their agent has
    attach's conversations marked from ``attach.sqlite3`` when it is first opened."""
    return ConversationStore(data_dir / CONVERSATIONS_DB, attach_bindings=data_dir / SEEN_DB)


def agent_npub(agent: str | None) -> str | None:
    """The agent elsewhere a conversation is with, as an npub (None: this data dir's own agent)."""
    from ..nostr.nip19 import encode_npub

    return encode_npub(agent) if agent else None


def opening_refusal(session_id: str, agent: str | None, here: str | None) -> str | None:
    """Why the conversation ``session_id`` (with ``agent``: an agent elsewhere, or None for this data dir's own)
    does not open in a window attached to ``here`` (None: this data dir's own agent runs here), and how to open it;
    None when it does. A conversation never gets an answer from another agent than its own."""
    if agent == here:
        return None
    from ..nostr.nip19 import encode_npub

    short = session_id[:8]
    if agent is None:
        return (f"this conversation is with this data dir's own agent, not the one attached to: open it without "
                f"attaching (didactyl --session {short})")
    npub = encode_npub(agent)
    return (f"this conversation is with the agent {npub[:20]}…, which runs elsewhere: open it attached (didactyl "
            f"--session {short}, or didactyl attach {npub})")
