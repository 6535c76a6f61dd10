"""The embedded loopback relay: websockets server (``server``) over a SQLite store (``store``).

One relay per data dir, shared by every didactyl process: ``shared.ensure_shared_relay`` finds it or
starts it as its own process (``process``, ``python -m didactyl_tui.nostr.embedded_relay``). Nothing is imported
here: a caller imports the module that owns the name.
"""
