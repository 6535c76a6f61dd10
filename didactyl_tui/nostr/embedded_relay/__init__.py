"""The embedded loopback relay: websockets server (``server``) over a SQLite store (``store``)."""

from .server import EmbeddedRelay, serve_forever

__all__ = ["EmbeddedRelay", "serve_forever"]
