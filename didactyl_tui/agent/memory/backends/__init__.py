"""The memory backends: ``recall`` (SQLite FTS5 over past turns and the long-term memory, the default) and
``honcho`` (a Honcho server). One is used at a time (``[memory] backend``)."""
