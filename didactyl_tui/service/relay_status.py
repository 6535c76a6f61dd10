"""``didactyl relay status``: what the data dir's running embedded relay enforces (read from its lock file,
after its identity is checked), and whether that is what the config asks for. Starts nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.identity.cache import pubkey_hex
from ..agent.identity.keystore import key_file_path
from ..config import Config
from ..errors import AgentError
from ..nostr.nip19 import encode_npub
from .agent_signer import known_agent_pubkey, signer_writers
from .live_policy import admin_pubkey_of
from .relay_address import address_line, where_asked
from .runtime import dm_peers


def embedded_relay_options(config: Config, data_dir: Path, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The options the config asks the embedded relay to enforce; None when the allow-list needs the agent's
    key and there is none yet."""
    embedded = config.relays.embedded
    agent = known_agent_pubkey(config, data_dir, env)
    if agent is not None:
        return embedded.relay_options(agent, admin_pubkey_of(config), dm_peers(config),
                                      signer_writers(config, data_dir) or None)
    if embedded.allow_list:
        return None
    return {"limits": dataclasses.asdict(embedded.relay_limits())}


@dataclass(frozen=True, slots=True)
class RelayStatus:
    data_dir: Path
    running: bool
    url: str = ""
    pid: int = 0
    enforced_digest: str = ""
    enforced: dict[str, Any] = dataclasses.field(default_factory=dict)
    config_digest: str = ""  # "" when the config's options cannot be known (no agent key yet)
    labels: dict[str, str] = dataclasses.field(default_factory=dict)  # hex pubkey -> who it is
    config_address: str = ""  # where the config asks it to listen (host:port)
    address_note: str = ""  # why it does not listen there, and the fix ("" when it does)

    @property
    def matches_config(self) -> bool | None:
        """Whether it enforces the config's options and listens where the config asks (None: cannot be known)."""
        if not self.running or not self.config_digest:
            return None
        return self.enforced_digest == self.config_digest and not self.address_note

    def _who(self, keys: list[str]) -> str:
        return ", ".join(self.labels.get(k, encode_npub(k)[:16] + "…") for k in keys) or "nobody"

    def lines(self) -> list[str]:
        if not self.running:
            return [f"no embedded relay is running for {self.data_dir} (the next didactyl that needs it starts it)"]
        out = [f"embedded relay {self.url} (pid {self.pid}) for {self.data_dir}",
               self.address_note or f"listens where the config asks ([relays] embedded_host and embedded_port: "
                                    f"{self.config_address})"]
        if not self.enforced_digest:
            return [*out, "it does not say what it enforces (an older version): stop it, it starts again as needed"]
        writers = self.enforced.get("allowed_writers")
        out.append("allow-list: off (anyone may write)" if writers is None else f"may write: {self._who(writers)}")
        out.append(f"gift wraps taken for: {self._who(self.enforced.get('gift_wrap_recipients') or [])}")
        limits = self.enforced.get("limits") or {}
        out.append("limits: " + ", ".join(f"{k}={v}" for k, v in sorted(limits.items())))
        match = self.config_digest and self.enforced_digest == self.config_digest
        if not self.config_digest:
            out.append(f"options {self.enforced_digest} (the config's cannot be known: no agent key yet)")
        elif match:
            out.append(f"options {self.enforced_digest}: as the config asks")
        else:
            out.append(f"options {self.enforced_digest}, the config asks for {self.config_digest}: the next "
                       "didactyl that starts (the app, serve, any command) makes the relay take them")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"data_dir": str(self.data_dir), "running": self.running, "url": self.url or None,
                "pid": self.pid or None, "options_digest": self.enforced_digest or None,
                "options": self.enforced or None, "config_options_digest": self.config_digest or None,
                "config_address": self.config_address, "address_note": self.address_note or None,
                "matches_config": self.matches_config}


async def embedded_relay_status(config: Config, data_dir: Path, env: Mapping[str, str]) -> RelayStatus:
    from ..nostr.embedded_relay.options import digest
    from ..nostr.embedded_relay.shared import find_shared_relay

    wanted = embedded_relay_options(config, data_dir, env)
    config_digest = digest(wanted) if wanted is not None else ""
    labels: dict[str, str] = {}
    agent = known_agent_pubkey(config, data_dir, env)
    if agent is not None:
        labels[agent] = "the agent"
    admin = admin_pubkey_of(config)
    for text in config.dm.allow:
        try:
            labels.setdefault(pubkey_hex(text), f"[dm] allow {encode_npub(pubkey_hex(text))[:16]}…")
        except ValueError:
            continue
    if admin is not None:
        labels[admin] = "the admin"
    where = where_asked(config)
    found = await find_shared_relay(data_dir)
    if found is None:
        return RelayStatus(data_dir, False, config_digest=config_digest, labels=labels, config_address=where)
    return RelayStatus(data_dir, True, found.url, found.pid, found.options_digest, found.options, config_digest,
                       labels, where, address_line(found, config) or "")


async def run_relay(config: Config, data_dir: Path, env: Mapping[str, str], *, db_path: Path | None, host: str,
                    port: int) -> int:
    """This data dir's shared relay in the foreground, with the options the config asks for (every didactyl on the
    data dir finds and uses it); 3 when one already serves it. AgentError when its allow-list needs the agent's key
    and there is none yet."""
    from ..nostr.embedded_relay.process import run_relay_process

    options = embedded_relay_options(config, data_dir, env)
    if options is None:
        raise AgentError(f"no agent key yet ({key_file_path(data_dir)} does not exist): the relay's allow-list "
                         "needs it; run `didactyl keygen` (or set [relays.embedded] allow_list = false)", "No key")
    return await run_relay_process(data_dir, db_path=db_path, host=host, port=port, idle_exit_s=0,
                                   relay_options=options, announce=True)
