"""An outside NIP-46 bunker for tests: applesauce-signers' NostrConnectProvider (npm), run by node.

``outside_bunker_dir`` (session fixture) installs tests/nip46_outside/ with ``npm ci`` (pinned versions, the lock
file committed) the first time, and skips with the reason when node or npm is missing or the install fails (no
registry reachable, say). :class:`OutsideBunker` runs ``bunker.mjs`` and reads the bunker:// URI it prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from didactyl_tui.nostr.keys import SecretKey

HERE = Path(__file__).parent / "nip46_outside"
INSTALL_TIMEOUT_S = 300
START_TIMEOUT_S = 30.0


def _installed(folder: Path) -> bool:
    return (folder / "node_modules" / "applesauce-signers" / "package.json").exists() and (
        folder / "node_modules" / ".package-lock.json").exists()


@pytest.fixture(scope="session")
def outside_bunker_dir() -> Iterator[Path]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run an outside NIP-46 bunker (applesauce-signers); not installed")
    if not _installed(HERE):
        try:
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"], cwd=HERE,
                                  capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm ci for the outside bunker took over {INSTALL_TIMEOUT_S}s (no registry reachable?)")
        if done.returncode != 0 or not _installed(HERE):
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"could not install the outside bunker with npm ci: {last}")
    yield HERE


class OutsideBunker:
    """``node bunker.mjs <relays>``: a bunker that holds ``user_key`` (and ``signer_key`` as its transport key)."""

    def __init__(self, folder: Path, relays: list[str], user_key: SecretKey, *, signer_key: SecretKey | None = None,
                 secret: str | None = None, names_key: str | None = None) -> None:
        self.folder = folder
        self.relays = relays
        self.user_key = user_key
        self.signer_key = signer_key
        self.secret = secret
        self.names_key = names_key  # what get_public_key answers, if not the key it signs with
        self.uri = ""
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {**os.environ, "BUNKER_USER_KEY": self.user_key.secret_hex()}
        if self.signer_key is not None:
            env["BUNKER_SIGNER_KEY"] = self.signer_key.secret_hex()
        if self.secret:
            env["BUNKER_SECRET"] = self.secret
        if self.names_key:
            env["BUNKER_NAMES_KEY"] = self.names_key
        node = shutil.which("node") or "node"
        self._proc = await asyncio.create_subprocess_exec(
            node, "bunker.mjs", *self.relays, cwd=self.folder, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert self._proc.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                line = await self._proc.stdout.readline()
        except TimeoutError:
            await self.stop()
            raise AssertionError(f"the outside bunker printed nothing within {START_TIMEOUT_S:g}s") from None
        if not line:
            err = await self._proc.stderr.read() if self._proc.stderr else b""
            await self.stop()
            raise AssertionError(f"the outside bunker did not start: {err.decode(errors='replace')[-2000:]}")
        self.uri = json.loads(line)["bunker"]

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                async with asyncio.timeout(10):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()

    async def __aenter__(self) -> OutsideBunker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
