"""An AppService for tests: zero config but for the LLM stub and a free port for its embedded relay, the agent's
test key (agent_support.AGENT_KEY)."""

from __future__ import annotations

from pathlib import Path

from agent_support import AGENT_KEY
from relay_servers import fast_client_kwargs

from didactyl_tui.config import Config
from didactyl_tui.service.app import AppService


def stub_config(base_url: str, backend: str = "none") -> Config:
    cfg = Config()  # zero config, but for the model and a free port for the embedded relay
    cfg.relays.embedded_port = 0
    cfg.relays.timeout_s = 2.0
    cfg.llm.model, cfg.llm.api_base, cfg.llm.api_key_env = "openai/stub-model", base_url, "STUB_KEY"
    cfg.memory.backend = backend
    return cfg


def stub_service(cfg: Config, tmp_path: Path) -> AppService:
    return AppService(cfg, data_dir=tmp_path / "data", env={"DIDACTYL_NSEC": AGENT_KEY.nsec(), "STUB_KEY": "sk"},
                      relay_client_options=fast_client_kwargs())
