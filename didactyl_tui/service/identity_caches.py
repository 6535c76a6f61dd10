"""The identity caches in use: the agent's, and the admin's, which changes while the app runs."""

from __future__ import annotations

from collections.abc import Callable

from ..agent.identity.cache import IdentityCache


class IdentityCaches:
    """The agent's identity cache and the admin's (None without an admin). The admin's is replaced when ``[admin]``
    changes while running (:meth:`~.identity.IdentityService.switch_admin`, from service/live_policy.py): parts hold
    this object and read :attr:`admin` when they need it, never a cache kept from the start. ``on_admin`` hears each
    replacement (the model's tools read the admin from their own context)."""

    def __init__(self, agent: IdentityCache, admin: IdentityCache | None,
                 on_admin: Callable[[IdentityCache | None], None] | None = None) -> None:
        self.agent = agent
        self._admin = admin
        self._on_admin = on_admin or (lambda cache: None)

    @property
    def admin(self) -> IdentityCache | None:
        return self._admin

    def replace_admin(self, cache: IdentityCache | None) -> None:
        self._admin = cache
        self._on_admin(cache)

    def all(self) -> list[IdentityCache]:
        return [c for c in (self.agent, self._admin) if c is not None]
