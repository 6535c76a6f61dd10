"""didactyl-tui: a terminal chat client with an embedded AI agent whose memory lives on Nostr."""

__version__ = "0.1.0"
