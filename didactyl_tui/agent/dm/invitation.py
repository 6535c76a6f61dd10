"""Pairing an admin with the agent by invitation: ``didactyl serve`` (while nobody is paired) and ``didactyl invite``
issue one, ``didactyl attach … --invite`` presents it, and the key that presents it becomes the agent's admin.

- An invitation is 128 random bits, shown once (in the attach line) and never stored: the data dir keeps only its
  SHA-256 in ``invitation.json`` (0600), with when it expires and which admin it was issued under. One is open at a
  time: a new one replaces the last.
- It travels inside a NIP-17 message (a tag of the sealed rumor, which only the agent opens), from the key that is to
  become the admin: the seal's signer, which NIP-59 proves. A stranger who sees the gift wrap learns nothing.
- :func:`redeem` takes it once: the right secret (compared in constant time, after a bound on its length), not
  expired, not used, and the admin still the one it was issued under (an invitation printed while nobody was paired
  never replaces an admin set since). It is marked used before anything else is written: a failure afterwards leaves
  it used (fail closed).
- Both sides show :func:`fingerprint` of the agent's and the admin's keys. It is computed by each side from the keys,
  never taken from a message: the person compares what each machine computed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from ...errors import AgentError
from ...nostr.keys import is_hex_pubkey
from ...nostr.nip59 import Rumor
from ...whole_file import write_whole

INVITATION_TAG = "didactyl-invitation"  # on the presenter's message: ["didactyl-invitation", <secret>]
PAIRING_TAG = "didactyl-pairing"  # on the agent's answer: ["didactyl-pairing", <outcome>]
INVITATION_FILE = "invitation.json"
SECRET_BYTES = 16  # 128 bits: not guessable, whatever the number of tries
SECRET_CHARS = 2 * SECRET_BYTES
MAX_FILE_BYTES = 4096


class Outcome(str, Enum):
    """What the agent answered an invitation (or a message from a key it does not answer)."""

    PAIRED = "paired"
    ALREADY_PAIRED = "already-paired"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Invitation:
    digest: str  # SHA-256 of the secret, hex
    created_at: int
    expires_at: int
    admin_then: str | None  # the admin when it was issued (None: nobody was paired)
    used_at: int | None = None
    used_by: str | None = None


@dataclass(frozen=True, slots=True)
class Redeemed:
    ok: bool
    reason: str = ""  # why not, for the presenter (one sentence)


def fingerprint(agent: str, admin: str) -> str:
    """A short digest of the pairing of ``agent`` and ``admin`` (hex keys), e.g. ``3F2A-91C0-77DE``: the same on
    both sides exactly when the agent paired the key the laptop holds."""
    digest = hashlib.sha256(f"didactyl pairing v1\n{agent.lower()}\n{admin.lower()}".encode()).hexdigest()[:12]
    return "-".join(digest[i:i + 4] for i in range(0, 12, 4)).upper()


def invitation_of(rumor: Rumor) -> str | None:
    """The invitation a message presents (None: none). Any value is returned, bounded: :func:`redeem` judges it."""
    value = rumor.first_tag(INVITATION_TAG)
    return None if value is None else value[:256]


def outcome_of(rumor: Rumor) -> Outcome | None:
    """What an answer from the agent says of a pairing (None: it is not about pairing)."""
    try:
        return Outcome(rumor.first_tag(PAIRING_TAG) or "")
    except ValueError:
        return None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def invitation_path(data_dir: Path) -> Path:
    return Path(data_dir) / INVITATION_FILE


def issue(data_dir: Path, *, ttl_s: float, admin_then: str | None, now: int) -> tuple[str, Invitation]:
    """A new invitation (it replaces any open one): its secret, to show once, and what is kept of it."""
    secret = secrets.token_hex(SECRET_BYTES)
    invitation = Invitation(_digest(secret), now, now + int(ttl_s), admin_then)
    _write(invitation_path(data_dir), invitation)
    return secret, invitation


def read_invitation(data_dir: Path) -> Invitation | None:
    """The invitation kept in the data dir (None when there is none); AgentError when the file is not ours to trust
    (a link, readable by others, too large, not what we write)."""
    path = invitation_path(data_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AgentError(f"{path} cannot be read ({exc.strerror}): no invitation is taken", "Invitation") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) & 0o077 or st.st_uid != os.getuid():
            raise AgentError(f"{path} is not a private file of this user's: no invitation is taken", "Invitation")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        if len(data) > MAX_FILE_BYTES:
            raise ValueError("too large")
        raw = json.loads(data)
        invitation = Invitation(**{k: raw[k] for k in Invitation.__dataclass_fields__ if k in raw})
        if not (isinstance(invitation.digest, str) and isinstance(invitation.expires_at, int)):
            raise ValueError("bad fields")
    except (ValueError, TypeError) as exc:
        raise AgentError(f"{path} is not an invitation ({exc}): no invitation is taken", "Invitation") from None
    return invitation


def redeem(data_dir: Path, presented: str, *, sender: str, admin_now: str | None, now: int) -> Redeemed:
    """Take the open invitation for ``sender`` if ``presented`` is its secret (see the module doc). One call at a
    time (the DM inbox judges one message at a time)."""
    invitation = read_invitation(data_dir)
    well_formed = len(presented) == SECRET_CHARS and all(c in "0123456789abcdef" for c in presented)
    candidate = _digest(presented) if well_formed else "0" * 64
    if invitation is None or not hmac.compare_digest(candidate, invitation.digest):
        return Redeemed(False, "this invitation is not the agent's open one (mistyped, replaced by a newer one, or "
                               "none is open)")
    if invitation.used_at is not None:
        return Redeemed(False, "this invitation was used already")
    if now >= invitation.expires_at:
        return Redeemed(False, "this invitation has expired")
    if admin_now != invitation.admin_then:
        return Redeemed(False, "the agent was paired with another key after this invitation was made")
    if not is_hex_pubkey(sender):
        return Redeemed(False, "the sender's key is not a public key")
    _write(invitation_path(data_dir), Invitation(invitation.digest, invitation.created_at, invitation.expires_at,
                                                 invitation.admin_then, now, sender))
    return Redeemed(True)


def _write(path: Path, invitation: Invitation) -> None:
    """0600, written whole or not at all; AgentError naming the file."""
    try:
        write_whole(path, json.dumps(asdict(invitation)))
    except OSError as exc:
        raise AgentError(f"cannot write {path}: {exc.strerror}", "Invitation") from None
