"""Conversations kept on this device (SQLite, 0600): sessions, their messages and tool calls.

- :mod:`.store`: :class:`~.store.ConversationStore`, and the history that fits a prompt's token budget;
- :mod:`.db`: its schema, migration and row form; :mod:`.turns`: a history cut into whole turns, repaired;
- :mod:`.assembly_log`: each turn's prompt assembly, kept beside its messages (a resumed chat's inspector);
- :mod:`.records` and :mod:`.markdown`: a conversation as a backup record and as a markdown export;
- :mod:`.session_kind`: what kind of session a turn belongs to (terminal, a DM, ephemeral)."""
