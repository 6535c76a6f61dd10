"""NIP-46 URIs: ``bunker://`` (the signer's invitation) and ``nostrconnect://`` (the client's, shown as a QR code),
parsed and written with every part bounded; the relay URLs and permissions they carry; ``connect``'s params and
``switch_relays``' relay list. Pure, like :mod:`.nip46`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..errors import NostrError
from .keys import is_curve_point

MAX_URI_CHARS = 8192
MAX_RELAYS = 16
MAX_RELAY_URL_CHARS = 512
MAX_SECRET_CHARS = 256
MAX_PARAM_CHARS = 256  # name, url, image, perms in a nostrconnect:// URI

_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_PERM = re.compile(r"^[a-z0-9_]{1,64}(?::[A-Za-z0-9_]{1,32})?$")
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # as the messages are written (nip46.py)


def check_pubkey(text: str, what: str) -> str:
    """A public key in 64 hex characters that is a point on the curve, lowercased; :class:`NostrError` naming
    ``what`` if not."""
    if not _HEX64.match(text):
        raise NostrError(f"{what} must be a public key in 64 hex characters, not {_shown(text)}", "Remote signer")
    if not is_curve_point(text):
        raise NostrError(f"{what} is not a valid public key (not a point on secp256k1)", "Remote signer")
    return text.lower()


def _shown(text: str) -> str:
    if "nsec1" in text.lower():  # a secret key pasted in the wrong place is never repeated back
        return "(a secret key: not shown)"
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return repr(text if len(text) <= 40 else text[:40] + "…")


def check_relay_url(url: str) -> str:
    """A relay URL for NIP-46 (``ws://`` or ``wss://`` with a host), stripped; :class:`NostrError` if not."""
    if not isinstance(url, str):
        raise NostrError("a relay URL must be a string", "Remote signer")
    url = url.strip()
    if len(url) > MAX_RELAY_URL_CHARS:
        raise NostrError(f"a relay URL is at most {MAX_RELAY_URL_CHARS} characters", "Remote signer")
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("ws", "wss") and bool(parts.hostname) and url.isprintable() and " " not in url
    except ValueError:
        ok = False
    if not ok:
        raise NostrError(f"not a relay URL (ws:// or wss://): {_shown(url)}", "Remote signer")
    return url


def check_relays(urls: Iterable[str]) -> tuple[str, ...]:
    """Relay URLs checked, duplicates dropped (order kept), at least one and at most :data:`MAX_RELAYS`."""
    relays = tuple(dict.fromkeys(check_relay_url(u) for u in urls))
    if not relays:
        raise NostrError("a remote signer needs at least one relay", "Remote signer")
    if len(relays) > MAX_RELAYS:
        raise NostrError(f"at most {MAX_RELAYS} relays for a remote signer, not {len(relays)}", "Remote signer")
    return relays


def format_perms(perms: Iterable[str]) -> str:
    """Permissions as NIP-46 writes them: ``method[:param]`` joined by commas (``sign_event:30078``)."""
    items = list(dict.fromkeys(p.strip() for p in perms))
    for p in items:
        if not _PERM.match(p):
            raise NostrError(f"not a NIP-46 permission (method or method:param): {_shown(p)}", "Remote signer")
    return ",".join(items)


def _split_uri(text: str, scheme: str) -> tuple[str, list[tuple[str, str]]]:
    if not isinstance(text, str):
        raise NostrError(f"a {scheme}:// URI must be text", "Remote signer")
    text = text.strip()
    if len(text) > MAX_URI_CHARS:
        raise NostrError(f"a {scheme}:// URI is at most {MAX_URI_CHARS:,} characters, not {len(text):,}",
                         "Remote signer")
    if not text.isprintable():
        raise NostrError(f"this {scheme}:// URI holds control characters", "Remote signer")
    prefix = f"{scheme}://"
    if not text.lower().startswith(prefix):
        # Not echoed: what was pasted here by mistake may be a secret key.
        raise NostrError(f"expected a URI starting with {prefix}", "Remote signer")
    rest = text[len(prefix):]
    head, _, query = rest.partition("?")
    head = head.rstrip("/")  # bunker://<key>/?relay=… is seen in the wild
    try:
        pairs = parse_qsl(query, keep_blank_values=True)
    except ValueError:
        raise NostrError(f"the {scheme}:// URI's query is malformed", "Remote signer") from None
    return head, pairs


def _one(pairs: list[tuple[str, str]], name: str, scheme: str, limit: int = MAX_PARAM_CHARS) -> str | None:
    values = [v for k, v in pairs if k == name]
    if not values:
        return None
    if len(values) > 1 and len(set(values)) > 1:
        raise NostrError(f"the {scheme}:// URI gives '{name}' more than once", "Remote signer")
    if len(values[0]) > limit:
        raise NostrError(f"the {scheme}:// URI's '{name}' is over {limit} characters", "Remote signer")
    return values[0]


@dataclass(frozen=True, slots=True)
class BunkerUri:
    """``bunker://<signer-pubkey>?relay=…&secret=…``: the signer's invitation (the secret is single-use)."""

    signer_pubkey: str
    relays: tuple[str, ...]
    secret: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, text: str) -> BunkerUri:
        head, pairs = _split_uri(text, "bunker")
        pubkey = check_pubkey(head, "the bunker:// URI's signer key")
        relays = check_relays(v for k, v in pairs if k == "relay")
        secret = _one(pairs, "secret", "bunker", MAX_SECRET_CHARS)
        return cls(pubkey, relays, secret or None)

    def to_uri(self) -> str:
        """The URI, secret included (it is a credential: store it like a key)."""
        pairs = [("relay", r) for r in self.relays]
        if self.secret:
            pairs.append(("secret", self.secret))
        return f"bunker://{self.signer_pubkey}?{urlencode(pairs)}"


@dataclass(frozen=True, slots=True)
class NostrConnectUri:
    """``nostrconnect://<client-pubkey>?relay=…&secret=…&perms=…&name=…``: the client's invitation, shown
    to the person (and as a QR code) for a signer to scan; the signer answers with ``secret``."""

    client_pubkey: str
    relays: tuple[str, ...]
    secret: str = field(repr=False)
    perms: tuple[str, ...] = ()
    name: str | None = None
    url: str | None = None
    image: str | None = None

    def __post_init__(self) -> None:
        if not self.secret:
            raise NostrError("a nostrconnect:// URI needs a secret", "Remote signer")

    @classmethod
    def parse(cls, text: str) -> NostrConnectUri:
        head, pairs = _split_uri(text, "nostrconnect")
        pubkey = check_pubkey(head, "the nostrconnect:// URI's client key")
        relays = check_relays(v for k, v in pairs if k == "relay")
        secret = _one(pairs, "secret", "nostrconnect", MAX_SECRET_CHARS)
        if not secret:
            raise NostrError("a nostrconnect:// URI needs a secret (the signer must send it back)", "Remote signer")
        perms_text = _one(pairs, "perms", "nostrconnect") or ""
        perms = tuple(p for p in format_perms(perms_text.split(",")).split(",") if p) if perms_text else ()
        return cls(pubkey, relays, secret, perms, _one(pairs, "name", "nostrconnect"),
                   _one(pairs, "url", "nostrconnect"), _one(pairs, "image", "nostrconnect"))

    def to_uri(self) -> str:
        pairs = [("relay", r) for r in self.relays]
        pairs.append(("secret", self.secret))
        if self.perms:
            pairs.append(("perms", format_perms(self.perms)))
        pairs += [(k, v) for k, v in (("name", self.name), ("url", self.url), ("image", self.image)) if v]
        return f"nostrconnect://{self.client_pubkey}?{urlencode(pairs)}"

    def metadata(self) -> dict[str, str]:
        """The client metadata (name, url, image) that is set."""
        return {k: v for k, v in (("name", self.name), ("url", self.url), ("image", self.image)) if v}


def parse_uri(text: str) -> BunkerUri | NostrConnectUri:
    """A ``bunker://`` or ``nostrconnect://`` URI; :class:`NostrError` for anything else."""
    head = text.strip().lower() if isinstance(text, str) else ""
    if head.startswith("nostrconnect://"):
        return NostrConnectUri.parse(text)
    if head.startswith("bunker://"):
        return BunkerUri.parse(text)
    raise NostrError("expected a bunker:// or nostrconnect:// URI", "Remote signer")


def connect_params(signer_pubkey: str, secret: str | None, perms: Iterable[str] = (),
                   metadata: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``connect``'s params: signer key, secret, perms, then the client metadata as JSON when there is some
    (an empty perms string keeps the metadata in fourth place, as the NIP says)."""
    params = [signer_pubkey, secret or ""]
    perms_text = format_perms(perms)
    if perms_text or metadata:
        params.append(perms_text)
    if metadata:
        params.append(_JSON.encode({k: v for k, v in metadata.items() if v}))
    return tuple(params)


def parse_relay_list(result: str | None) -> tuple[str, ...] | None:
    """``switch_relays``' result: the signer's relays, or None when nothing changes."""
    if result is None or result.strip() in ("", "null"):
        return None
    try:
        data = json.loads(result)
    except (ValueError, RecursionError):
        raise NostrError("the remote signer's relay list is not valid JSON", "Remote signer") from None
    if data is None:
        return None
    if not isinstance(data, list) or not all(isinstance(u, str) for u in data):
        raise NostrError("the remote signer's relay list must be a list of relay URLs", "Remote signer")
    return check_relays(data)
