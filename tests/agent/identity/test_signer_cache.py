"""The remote signer's plaintext cache (agent/identity/signer_cache.py): bounded, private, and never an error of
its own: a cache that cannot be used is a miss, and the signer is asked."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from didactyl_tui.agent.identity.signer_cache import SignerCache


def test_the_cache_is_private_bounded_and_a_broken_one_is_a_miss(tmp_path: Path) -> None:
    cache = SignerCache(tmp_path / "signer-cache.sqlite3", max_entries=3, max_chars=100)
    assert stat.S_IMODE(os.stat(tmp_path / "signer-cache.sqlite3").st_mode) == 0o600
    for n in range(5):
        cache.put(f"payload-{n}", f"text {n}")
    assert len(cache) == 3 and cache.get("payload-0") is None and cache.get("payload-4") == "text 4"
    cache.put("big", "x" * 101)  # over the whole bound: not kept
    assert cache.get("big") is None
    cache.close()  # e.g. the file went away under us: every use is a miss, none raises
    assert cache.get("payload-4") is None
    cache.put("payload-5", "text 5")
