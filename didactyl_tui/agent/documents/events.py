"""A document's versions as Nostr events: which events are versions of the agent's documents (screened: author,
kind and ``d`` tag, date, signature), what one says (decrypted with the agent's key through the
:class:`~didactyl_tui.nostr.signer.Signer`, decoded by the document's codec, or refused saying why), and a new one
built (encoded, encrypted to ourselves, signed). Used by :class:`~.store.DocumentStore` for every version."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...errors import AgentError, ConfigError, NostrError
from ...nostr.event import Event
from ...nostr.signer import Signer
from .codec import DocumentCodec, DocumentError, UndecryptableError
from .keys import DocumentKey

MAX_FUTURE_SECONDS = 15 * 60  # a version dated further ahead is refused (it would win forever)
MAX_REFUSED = 1024  # versions remembered as unusable (only the agent's key can sign one)


class VersionEvents:
    def __init__(self, signer: Signer, codecs: Mapping[DocumentKey, DocumentCodec[Any]],
                 clock: Callable[[], float]) -> None:
        self.signer = signer
        self.pubkey = signer.public_key
        self.codecs = codecs
        self._clock = clock
        self.dropped: Counter[str] = Counter()  # events refused, by reason (hostile or stray relays)
        self.refused: dict[str, DocumentError] = {}  # ids already found unusable (told once), with why

    def filters(self, keys: Iterable[DocumentKey]) -> list[dict[str, Any]]:
        """One filter per kind (the ``d`` tags of that kind together): what to ask the relays for."""
        by_kind: dict[int, list[str]] = {}
        for key in keys:
            by_kind.setdefault(key.kind, [])
            if key.d_tag:
                by_kind[key.kind].append(key.d_tag)
        out: list[dict[str, Any]] = []
        for kind, ds in by_kind.items():
            flt: dict[str, Any] = {"authors": [self.pubkey], "kinds": [kind]}
            if ds:
                flt["#d"] = ds
            out.append(flt)
        return out

    def key_of(self, ev: Event) -> DocumentKey | None:
        """The document ``ev`` is an acceptable version of, or None (counts nothing)."""
        return self.refusal(ev)[1]

    def screen(self, ev: Event) -> DocumentKey | None:
        """:meth:`key_of`, counting a refusal in :attr:`dropped`."""
        reason, key = self.refusal(ev)
        if reason:
            self.dropped[reason] += 1
            return None
        return key

    def refusal(self, ev: Event) -> tuple[str, DocumentKey | None]:
        key = DocumentKey.of_event(ev.kind, ev.d_tag)
        if ev.pubkey != self.pubkey:
            return "foreign_author", None
        if key is None or key not in self.codecs:
            return ("wrong_d" if ev.kind in {k.kind for k in self.codecs} else "wrong_kind"), None
        if ev.created_at > self._clock() + MAX_FUTURE_SECONDS:
            return "future", None
        if not ev.is_valid():
            return "invalid", None
        return "", key

    def remember_refused(self, ev: Event, error: DocumentError) -> bool:
        """Remember that ``ev`` does not read; True the first time."""
        first = ev.id not in self.refused
        self.refused[ev.id] = error
        while len(self.refused) > MAX_REFUSED:
            del self.refused[next(iter(self.refused))]
        return first

    async def read(self, ev: Event) -> tuple[Any, str]:
        """``ev``'s value and text (decrypted with the signer, decoded by the codec; off the loop). Raises
        DocumentError saying why it cannot be used."""
        key = self.key_of(ev)
        if key is None:
            raise DocumentError(f"event {ev.id[:12]} is not a version of one of this agent's documents")
        codec = self.codecs[key]
        plain = ev.content
        if codec.is_encrypted(ev):
            try:
                plain = await self.signer.nip44_decrypt(self.pubkey, ev.content)
            except NostrError as exc:
                raise UndecryptableError(f"{codec.where(ev)} does not decrypt with this key ({exc.message})",
                                         codec.title) from None
        try:
            return await asyncio.to_thread(_decode, codec, plain, ev)
        except DocumentError:
            raise
        except (AgentError, ConfigError) as exc:
            raise DocumentError(f"{codec.where(ev)}: {exc.message}", codec.title) from None

    async def build(self, key: DocumentKey, value: Any, created_at: int, base: str | None,
                    *, encrypt: bool = True) -> Event:
        """Encode, encrypt to ourselves (a private document) and sign — through the signer, off the loop."""
        codec = self.codecs[key]
        encoded = codec.encode(value)
        encrypted = key.private and encrypt and encoded.plaintext != ""
        content = await self.signer.nip44_encrypt(self.pubkey, encoded.plaintext) if encrypted else encoded.plaintext
        tags = codec.tags(encoded.tags, base, encrypted=encrypted)
        return await self.signer.sign_event(kind=key.kind, content=content, created_at=created_at, tags=tags)


def _decode(codec: DocumentCodec[Any], plaintext: str, ev: Event) -> tuple[Any, str]:
    value = codec.decode(plaintext, ev)
    return value, codec.to_text(value)
