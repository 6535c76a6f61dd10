"""File memory: read_file/write_file stay inside <data dir>/memory, whatever the path says."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from agent_support import offline_context

from didactyl_tui.agent.tools.builtin import build_base_registry


@pytest.fixture
def env(tmp_path: Path):
    ctx = offline_context(tmp_path / "data")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not read")
    return ctx, build_base_registry(), outside


async def test_write_then_read_nested_files(env) -> None:
    ctx, registry, _ = env
    wrote = await registry.call("write_file", {"path": "projects/alpha.md", "content": "# Alpha\n\nnotes ✓"}, ctx)
    assert not wrote.is_error, wrote.content
    assert json.loads(wrote.content) == {"path": "projects/alpha.md", "chars": 16, "bytes": 18}
    assert (ctx.files_root / "projects" / "alpha.md").read_text() == "# Alpha\n\nnotes ✓"
    read = json.loads((await registry.call("read_file", {"path": "projects/alpha.md"}, ctx)).content)
    assert read["content"] == "# Alpha\n\nnotes ✓"
    await registry.call("write_file", {"path": "projects/alpha.md", "content": "replaced"}, ctx)
    assert json.loads((await registry.call("read_file", {"path": "./projects/alpha.md"}, ctx)).content)[
        "content"] == "replaced"
    missing = await registry.call("read_file", {"path": "nope.md"}, ctx)
    assert missing.is_error and "projects/alpha.md" in missing.content  # lists what is there


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../outside/secret.txt", "'..' is not allowed"),
        ("a/../../outside/secret.txt", "'..' is not allowed"),
        ("/etc/passwd", "is absolute"),
        ("~/x.md", "is absolute"),
        ("", "give a file name"),
        ("a\\..\\b", "not a usable file name"),
    ],
)
async def test_path_escapes_are_refused(env, path: str, why: str) -> None:
    ctx, registry, _ = env
    for name, args in (("read_file", {"path": path}), ("write_file", {"path": path, "content": "x"})):
        outcome = await registry.call(name, args, ctx)
        assert outcome.is_error and why in outcome.content, (name, outcome.content)


async def test_symlinks_out_of_the_folder_are_refused(env) -> None:
    ctx, registry, outside = env
    ctx.files_root.mkdir(parents=True)
    os.symlink(outside / "secret.txt", ctx.files_root / "link.md")
    os.symlink(outside, ctx.files_root / "dir")
    for args in ({"path": "link.md"}, {"path": "dir/secret.txt"}):
        outcome = await registry.call("read_file", args, ctx)
        assert outcome.is_error and "outside the memory folder" in outcome.content
        assert "do not read" not in outcome.content
    for path in ("link.md", "dir/new.md"):
        outcome = await registry.call("write_file", {"path": path, "content": "overwritten"}, ctx)
        assert outcome.is_error and "outside the memory folder" in outcome.content
    assert (outside / "secret.txt").read_text() == "do not read"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    # A symlink that stays inside the folder is fine.
    (ctx.files_root / "real.md").write_text("inside")
    os.symlink(ctx.files_root / "real.md", ctx.files_root / "alias.md")
    assert json.loads((await registry.call("read_file", {"path": "alias.md"}, ctx)).content)["content"] == "inside"
