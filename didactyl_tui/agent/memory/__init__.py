"""Memory beyond the documents: the pluggable memory backends (:mod:`.backend`: the protocol and the manager that
guards a turn from them; ``backends/``: ``recall``, the local full-text index, and ``honcho``). The short- and
long-term memories themselves are documents (agent/documents), like the soul and the task list."""
