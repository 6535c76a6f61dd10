"""Who may talk to the agent, as the config file says now: ``[admin] pubkey``, ``[dm] allow`` and ``[dm] guest_tools``
followed while the app or ``serve`` runs.

The config is the intent, and the intent changes while a process runs: an admin replaced, a friend taken off the
allow-list. Before each direct message is judged (at most every :data:`INBOX_RECHECK_S`) and before each turn is
decided (always), the file is looked at — read on a worker thread (a few KiB), parsed and checked only when its
content changed.
A change takes effect from that moment: the revoked admin's next message is judged by the new policy. A file that no
longer reads (bad TOML, a bad key) leaves the rights to nobody — every sender is a stranger until it reads again, the
terminal unaffected — and says so once, naming the file and the problem. Anything else in the file waits for a
restart, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..agent.audience import TurnAudience
from ..agent.dm.inbox import DmPolicy
from ..agent.identity.cache import pubkey_hex
from ..agent.tools.registry import ToolPolicy
from ..config import Config
from ..config_file import apply_env, config_error, parse_config, validate
from ..errors import AgentError, ConfigError
from ..nostr.nip19 import encode_npub
from ..terminal_text import one_line
from .events import Listeners

log = logging.getLogger("didactyl.service")

INBOX_RECHECK_S = 0.5  # a flood of wraps costs one stat per this, not one per wrap
WATCH_S = 2.0  # with no message coming, a change is still seen (and said, and followed) within this
NOBODY = DmPolicy()  # the rights while the config does not read: nobody is answered


def admin_pubkey_of(config: Config) -> str | None:
    """``[admin] pubkey`` as hex (None when unset); ConfigError naming the key when it is not a public key."""
    if not config.admin.pubkey.strip():
        return None
    try:
        return pubkey_hex(config.admin.pubkey)
    except ValueError as exc:
        raise config_error(config.path, "admin", "pubkey", str(exc)) from None


def dm_policy_of(config: Config) -> DmPolicy:
    """Who may write to the agent by the config: the admin and ``[dm] allow`` (ConfigError naming a bad key)."""
    allow = []
    for text in config.dm.allow:
        try:
            allow.append(pubkey_hex(text))
        except ValueError as exc:
            raise config_error(config.path, "dm", "allow", f"{text[:70]!r}: {exc}") from None
    try:
        return DmPolicy.of(admin_pubkey_of(config), allow)
    except AgentError as exc:
        raise config_error(config.path, "dm", "allow", exc.message) from None


@dataclass(frozen=True, slots=True)
class Rights:
    """What the config grants: who may write (``dm``) and which tools a guest's turn may call (names)."""

    dm: DmPolicy
    guest_tools: tuple[str, ...]
    readable: bool = True  # False: the file changed and does not read (the rights are nobody's meanwhile)


def rights_of(config: Config) -> Rights:
    return Rights(dm_policy_of(config), tuple(config.dm.guest_tools))


class GuestTools:
    """``[dm] guest_tools`` as the tool policy of a guest's turn: resolved once per list (``resolve``: names to tool
    names and unknown ones); an unknown name is said once, and left out."""

    def __init__(self, resolve: Callable[[list[str]], tuple[frozenset[str], list[str]]],
                 warn: Callable[[str], None]) -> None:
        self._resolve, self._warn = resolve, warn
        self._last: tuple[tuple[str, ...], ToolPolicy] | None = None  # the list in force, resolved

    def policy(self, names: tuple[str, ...]) -> ToolPolicy:
        if self._last is None or self._last[0] != names:
            allowed, unknown = self._resolve(list(names))
            if unknown:
                self._warn(f"[dm] guest_tools names no tool called {', '.join(map(repr, unknown))}; left out")
            self._last = (names, ToolPolicy(allowed, "a conversation with someone other than the admin"))
        return self._last[1]


def sender_turn(rights: Rights, sender: str, tools: GuestTools) -> tuple[TurnAudience, ToolPolicy | None]:
    """Whom a one-to-one turn with ``sender`` (npub or hex) is for and what its tools may do, as the DM inbox would
    decide it now (``didactyl prompt --as``); AgentError when the sender may not write to the agent at all."""
    try:
        pubkey = pubkey_hex(sender)
    except ValueError as exc:
        raise AgentError(f"--as: {exc}", "Prompt") from None
    if not rights.dm.accepts(pubkey):
        raise AgentError(f"{encode_npub(pubkey)} may not write to the agent (neither [admin] pubkey nor on [dm] allow)",
                         "Prompt")
    audience = rights.dm.audience(pubkey, encode_npub(pubkey)[:20] + "…")
    return audience, None if audience.admin else tools.policy(rights.guest_tools)


@dataclass(frozen=True, slots=True)
class RightsChanged:
    old: Rights
    new: Rights  # ``readable`` False: the file does not read, and nobody has rights meanwhile


MAX_CONFIG_BYTES = 1024 * 1024  # a config file is a few KiB: a larger one is refused, not read whole
_UNSEEN = b"\x00unseen"  # not looked at yet (no file's content can be this and also parse)


def _content(path: Path) -> bytes | None:
    """The file's bytes (at most one past the bound), None when there is none. Compared whole, not by its times:
    two saves within one tick of the file system's clock, of the same size, would look alike."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}", "Bad config") from None


def _parse(path: Path, data: bytes | None, env: Mapping[str, str]) -> Config:
    """The config in ``data`` as :func:`~didactyl_tui.config_file.load_config` reads it; no file is the defaults (no
    admin, no allow-list)."""
    if data is None:
        return Config(path=None)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: over {MAX_CONFIG_BYTES:,} bytes", "Bad config")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text", "Bad config") from None
    return validate(apply_env(parse_config(text, path), dict(env)))


def _look(path: Path, seen: bytes | None, env: Mapping[str, str]) -> tuple[bytes | None, Rights | None]:
    """(the file's content, the rights it grants — None when the content is what was seen already)."""
    data = _content(path)
    if data == seen:
        return data, None
    return data, rights_of(_parse(path, data, env))


class LivePolicy:
    """The rights in force (:attr:`rights`), brought up to date from the file by :meth:`refresh`."""

    def __init__(self, path: Path | None, env: Mapping[str, str], initial: Rights, *,
                 warn: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self._env, self._warn, self._clock = path, dict(env), warn, clock
        self.rights = initial
        self._seen: bytes | None = _UNSEEN  # the content last looked at (read first by the first refresh)
        self._checked_at = clock()
        self._lock = asyncio.Lock()
        self._changes: Listeners[RightsChanged] = Listeners()

    @property
    def dm(self) -> DmPolicy:
        return self.rights.dm

    def add_listener(self, cb: Callable[[RightsChanged], object]) -> Callable[[], None]:
        return self._changes.add(cb)

    async def refresh(self, *, max_age_s: float = 0.0) -> Rights:
        """The rights as the file says now; the file is looked at unless it was within ``max_age_s``."""
        if self.path is None or self._fresh(max_age_s):
            return self.rights
        async with self._lock:
            if self._fresh(max_age_s):
                return self.rights  # another caller looked meanwhile
            try:
                self._seen, new = await asyncio.to_thread(_look, self.path, self._seen, self._env)
            except ConfigError as exc:
                self._seen = _UNSEEN  # looked at again next time
                self._take(Rights(NOBODY, (), readable=False), one_line(exc.message)[:300])
            else:
                if new is not None:
                    self._take(new, None)
            finally:
                self._checked_at = self._clock()
        return self.rights

    async def watch(self) -> None:
        """Look at the file every :data:`WATCH_S` (a task): a change is said and followed with no message coming."""
        while True:
            await asyncio.sleep(WATCH_S)
            await self.refresh(max_age_s=WATCH_S)

    def _fresh(self, max_age_s: float) -> bool:
        return max_age_s > 0 and self._clock() - self._checked_at < max_age_s

    def _take(self, new: Rights, problem: str | None) -> None:
        old = self.rights
        if new == old:
            return
        self.rights = new
        if problem is not None:
            self._warn(f"the config changed and does not read ({problem}): direct messages are answered for nobody "
                       "until it reads again")
        else:
            self._warn(_what_changed(old, new, self.path))
        self._changes.emit(RightsChanged(old, new))


def _who(pubkey: str | None) -> str:
    return encode_npub(pubkey)[:20] + "…" if pubkey else "nobody"


def _what_changed(old: Rights, new: Rights, path: Path | None) -> str:
    """One line for the person: what the config now grants, from now on."""
    parts = []
    if not old.readable:
        parts.append("reads again")
    if new.dm.admin != old.dm.admin:
        parts.append(f"the admin is now {_who(new.dm.admin)} (was {_who(old.dm.admin)})")
    if new.dm.allow != old.dm.allow:
        added, removed = len(new.dm.allow - old.dm.allow), len(old.dm.allow - new.dm.allow)
        parts.append(f"[dm] allow: {added} added, {removed} removed")
    if new.guest_tools != old.guest_tools:
        parts.append("[dm] guest_tools changed")
    what = "; ".join(parts) or "no change of rights"
    return f"{path or 'the config'} changed: {what} — in force from the next message"
