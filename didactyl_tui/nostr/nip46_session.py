"""A NIP-46 client's session: what the app keeps between runs (0600, like a key) to reach the same signer without a
new ``connect``. Pure, like :mod:`.nip46`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import NostrError
from .keys import SecretKey
from .nip46_uri import check_pubkey, check_relays

SESSION_VERSION = 1


@dataclass(frozen=True, slots=True)
class RemoteSignerSession:
    """What the app keeps between runs (0600, like a key): the client's secret key, the signer's transport
    key, the relays, and the user's key once ``get_public_key`` answered; ``key_checked`` once the signer signed with
    that key (a session stored before that check was made is checked at its next start). Never in a repr or a
    log."""

    client_secret_hex: str = field(repr=False)
    signer_pubkey: str
    relays: tuple[str, ...]
    user_pubkey: str | None = None
    key_checked: bool = False

    def __post_init__(self) -> None:
        try:
            SecretKey.from_hex(self.client_secret_hex)
        except NostrError:
            raise NostrError("the remote signer session's client key is not a valid secret key",
                             "Remote signer") from None
        object.__setattr__(self, "client_secret_hex", self.client_secret_hex.lower())
        object.__setattr__(self, "signer_pubkey", check_pubkey(self.signer_pubkey, "the signer key"))
        object.__setattr__(self, "relays", check_relays(self.relays))
        if self.user_pubkey is not None:
            object.__setattr__(self, "user_pubkey", check_pubkey(self.user_pubkey, "the user key"))
        if self.user_pubkey is None and self.key_checked:
            raise NostrError("a remote signer session cannot have checked a key it does not know", "Remote signer")

    @classmethod
    def new(cls, client_key: SecretKey, signer_pubkey: str, relays: Iterable[str]) -> RemoteSignerSession:
        return cls(client_key.secret_hex(), signer_pubkey, tuple(relays))

    def client_key(self) -> SecretKey:
        return SecretKey.from_hex(self.client_secret_hex)

    @property
    def client_pubkey(self) -> str:
        return self.client_key().public_key_hex

    def to_dict(self) -> dict[str, Any]:
        """The session as data to store (it holds the client's secret key: write it 0600)."""
        return {"version": SESSION_VERSION, "client_key": self.client_secret_hex, "signer_pubkey": self.signer_pubkey,
                "relays": list(self.relays), "user_pubkey": self.user_pubkey, "key_checked": self.key_checked}

    @classmethod
    def from_dict(cls, data: Any) -> RemoteSignerSession:
        if not isinstance(data, Mapping):
            raise NostrError("a remote signer session must be a JSON object", "Remote signer")
        if data.get("version", SESSION_VERSION) != SESSION_VERSION:
            raise NostrError(f"unknown remote signer session version {data.get('version')!r}", "Remote signer")
        client, signer, relays, user, checked = (data.get(k) for k in ("client_key", "signer_pubkey", "relays",
                                                                         "user_pubkey", "key_checked"))
        if not isinstance(client, str) or not isinstance(signer, str):
            raise NostrError("a remote signer session needs 'client_key' and 'signer_pubkey'", "Remote signer")
        if not isinstance(relays, list):
            raise NostrError("a remote signer session needs 'relays' as a list", "Remote signer")
        if user is not None and not isinstance(user, str):
            raise NostrError("a remote signer session's 'user_pubkey' must be a string", "Remote signer")
        if checked is not None and not isinstance(checked, bool):
            raise NostrError("a remote signer session's 'key_checked' must be true or false", "Remote signer")
        return cls(client, signer, tuple(relays), user, bool(checked))

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON (it holds the client's secret key: write it 0600)."""
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RemoteSignerSession:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            raise NostrError("the remote signer session is not valid JSON", "Remote signer") from None
        return cls.from_dict(data)

    def __repr__(self) -> str:
        user = f"{self.user_pubkey[:12]}…" if self.user_pubkey else None
        return (f"RemoteSignerSession(signer={self.signer_pubkey[:12]}…, relays={list(self.relays)!r}, "
                f"user={user}, key_checked={self.key_checked}, client_key=<redacted>)")

    __str__ = __repr__
