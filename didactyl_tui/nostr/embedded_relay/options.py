"""The shared relay's options as they travel: on its command line at start, in ``relay.options.json`` for a
reload, and back in ``relay.lock`` as what the running relay enforces.

Options are the :class:`~.server.EmbeddedRelay` keyword arguments a launcher may set: ``limits`` (a mapping of
:class:`~.limits.RelayLimits` fields), ``allowed_writers`` (hex pubkeys, or None: anyone writes) and
``gift_wrap_recipients``. :func:`normalized` gives the one spelling of a set of options (defaults filled in,
key lists lowercased and sorted), so two launchers that want the same relay compute the same
:func:`digest`. A launcher whose options differ from the running relay's writes them to
``relay.options.json`` and sends the relay SIGUSR1 (:mod:`.process` reloads them); who may write changes at
once, other options restart the relay inside its process on the same port.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import RelayError
from .limits import RelayLimits
from .lockfile import open_private

OPTIONS_FILE = "relay.options.json"
MAX_OPTIONS_BYTES = 64 * 1024  # as on the command line: ~2 KB of limits and some hundred keys
ACCESS = frozenset({"allowed_writers", "gift_wrap_recipients"})  # changed in place, no restart


def _keys(value: Any) -> Any:
    if isinstance(value, list | tuple) and all(isinstance(k, str) for k in value):
        return sorted({k.strip().lower() for k in value})
    return value  # not a key list: left for the relay to refuse


def _limits(value: Any) -> Any:
    if isinstance(value, RelayLimits):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping) and set(value) <= {f.name for f in dataclasses.fields(RelayLimits)}:
        try:
            return dataclasses.asdict(RelayLimits(**value))
        except TypeError:
            pass
    return value  # not limits: left for the relay to refuse


def normalized(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` in their one spelling: limits with their defaults filled in, key lists lowercased and sorted.
    What is not understood here is kept as it is (the relay refuses it at start, in one line)."""
    out = dict(options)
    out["limits"] = _limits(options.get("limits") or {})
    out["allowed_writers"] = None if options.get("allowed_writers") is None else _keys(options["allowed_writers"])
    out["gift_wrap_recipients"] = _keys(options.get("gift_wrap_recipients") or [])
    return out


def digest(options: Mapping[str, Any]) -> str:
    """A short fingerprint of ``options`` (normalized): equal for two launchers that want the same relay.
    Raises TypeError/ValueError for options JSON cannot carry."""
    text = json.dumps(normalized(options), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def only_access_differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether going from ``old`` to ``new`` changes nothing but who may write (applied without a restart)."""
    a, b = normalized(old), normalized(new)
    return {k: v for k, v in a.items() if k not in ACCESS} == {k: v for k, v in b.items() if k not in ACCESS}


def write_request(path: Path, options: Mapping[str, Any]) -> None:
    """Write the options a launcher wants (0600, atomically: the relay reads the old file or the new one)."""
    data = json.dumps(normalized(options), separators=(",", ":")).encode()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_request(path: Path) -> dict[str, Any]:
    """The options a launcher asked for (normalized); OSError or RelayError when unreadable or wrong."""
    with path.open("rb") as fh:
        data = fh.read(MAX_OPTIONS_BYTES + 1)
    if len(data) > MAX_OPTIONS_BYTES:
        raise RelayError(f"{path.name} is larger than {MAX_OPTIONS_BYTES} bytes")
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise RelayError(f"{path.name} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RelayError(f"{path.name} must hold a JSON object")
    return normalized(value)
