"""Shared pytest fixtures (generic; area-specific helpers live in their own modules)."""

from relay_servers import any_relay, embedded_relay, rust_relay  # noqa: F401  (pytest fixtures)
