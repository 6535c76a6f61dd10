"""The shared relay's options as they travel: on its command line at start, in ``relay.options.json`` for a
reload, and back in ``relay.lock`` as what the running relay enforces.

Options are the :class:`~.server.EmbeddedRelay` keyword arguments a launcher may set: ``limits`` (a mapping of
:class:`~.limits.RelayLimits` fields), ``allowed_writers`` (hex pubkeys, or None: anyone writes) and
``gift_wrap_recipients``. :func:`normalized` gives the one spelling of a set of options (defaults filled in,
key lists lowercased and sorted), so two launchers that want the same relay compute the same
:func:`digest`. A launcher whose options differ from the running relay's writes them to
``relay.options.json`` and sends the relay SIGUSR1 (:mod:`.process` reloads them); who may write changes at
once, other options restart the relay inside its process on the same port.

Beside them travels the address a launcher wants the relay on (``relay.address.json``: host, port and the
request's id, which the relay names in ``relay.lock`` once it has answered). The relay moves there only when no
client is connected (:mod:`.process`); either way ``relay.lock`` says where it listens and, when that is not where
it was asked, why (:class:`~.lockfile.AskedAddress`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import RelayError
from .limits import RelayLimits
from .lockfile import open_private

OPTIONS_FILE = "relay.options.json"
ADDRESS_FILE = "relay.address.json"
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
    _write_private(path, json.dumps(normalized(options), separators=(",", ":")).encode())


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


def same_host(a: str, b: str) -> bool:
    """Whether two listening addresses are the same (``::1`` and ``0:0::1`` are)."""
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a.strip().lower() == b.strip().lower()


def listens_as_asked(host: str, port: int, wanted_host: str, wanted_port: int) -> bool:
    """Whether a relay listening on ``host:port`` is where ``wanted_host:wanted_port`` asks (port 0: any port)."""
    return same_host(host, wanted_host) and wanted_port in (0, port)


def _write_private(path: Path, data: bytes) -> None:
    """Atomically, 0600: the relay reads the old file or the new one."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_address_request(path: Path, host: str, port: int, request: str) -> None:
    """The address a launcher wants the relay on, and the id its answer in ``relay.lock`` will carry. An empty
    ``host`` asks for no move: the relay only answers (a reload of options while this launcher is connected)."""
    _write_private(path, json.dumps({"host": host, "port": port, "request": request}).encode())


def read_address_request(path: Path) -> tuple[str, int, str] | None:
    """(host, port, request id) a launcher asked for; None when there is no such file. RelayError when it is
    not one."""
    try:
        with path.open("rb") as fh:
            data = fh.read(1025)
    except FileNotFoundError:
        return None
    try:
        value = json.loads(data) if len(data) <= 1024 else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise RelayError(f"{path.name} is not an address request")
    host, port, request = value.get("host"), value.get("port"), value.get("request")
    if not isinstance(host, str) or not isinstance(request, str) or isinstance(port, bool) or \
            not isinstance(port, int) or not 0 <= port <= 65535:
        raise RelayError(f"{path.name} is not an address request")
    return host, port, request
