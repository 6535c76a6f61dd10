"""File memory: plain markdown files in ``<data dir>/memory/``, beside the Nostr memory.

Paths are relative to that folder and can never leave it: absolute paths, ``..``, ``~`` and symlinks
that point outside are refused. Writes go to a new file that is renamed into place, so a symlink at the
target is replaced, never followed.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

from .context import AgentToolContext
from .registry import Tool, ToolError, build_tool

READ_MAX_CHARS = 100_000
WRITE_MAX_CHARS = 256_000
LIST_MAX = 50


def resolve_memory_path(root: Path, path: str) -> Path:
    """``path`` inside ``root`` (real, symlinks resolved) or ToolError saying why not."""
    text = path.strip()
    if not text:
        raise ToolError("give a file name relative to the memory folder, e.g. 'notes.md'")
    if "\x00" in text or "\\" in text:
        raise ToolError(f"{path!r} is not a usable file name")
    pure = PurePosixPath(text)
    if pure.is_absolute() or text.startswith("~"):
        raise ToolError(f"{path!r} is absolute; use a path relative to the memory folder, e.g. 'notes.md'")
    if ".." in pure.parts:
        raise ToolError(f"{path!r} leaves the memory folder ('..' is not allowed)")
    real_root = root.resolve()
    target = (real_root / pure).resolve()
    if target != real_root and not target.is_relative_to(real_root):
        raise ToolError(f"{path!r} leads outside the memory folder (a symlink?); refused")
    return target


def _listing(root: Path) -> str:
    if not root.is_dir():
        return "the memory folder is empty"
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    if not names:
        return "the memory folder is empty"
    more = f" (and {len(names) - LIST_MAX} more)" if len(names) > LIST_MAX else ""
    return "files: " + ", ".join(names[:LIST_MAX]) + more


def read_file(path: str, ctx: AgentToolContext) -> dict[str, Any]:
    """Read a markdown file from your file memory (a folder of notes beside your Nostr memory).

    Args:
        path: File name relative to the memory folder, e.g. "notes.md" or "projects/alpha.md".
    """
    root = ctx.files_root
    target = resolve_memory_path(root, path)
    if not target.exists():
        raise ToolError(f"no file {path!r} in the memory folder; {_listing(root.resolve())}")
    if not target.is_file():
        raise ToolError(f"{path!r} is a folder, not a file; {_listing(root.resolve())}")
    try:
        text = target.read_text("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{path!r} is not UTF-8 text") from None
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror}") from None
    out: dict[str, Any] = {"path": path, "chars": len(text), "content": text[:READ_MAX_CHARS]}
    if len(text) > READ_MAX_CHARS:
        out["truncated"] = f"showing the first {READ_MAX_CHARS:,} of {len(text):,} characters"
    return out


def write_file(path: str, content: str, ctx: AgentToolContext) -> dict[str, Any]:
    """Create or replace a markdown file in your file memory (a folder of notes beside your Nostr memory).

    Args:
        path: File name relative to the memory folder, e.g. "notes.md" or "projects/alpha.md".
        content: The complete new text of the file; it replaces any old text.
    """
    if len(content) > WRITE_MAX_CHARS:
        raise ToolError(f"content is {len(content):,} characters; a memory file holds at most {WRITE_MAX_CHARS:,}")
    root = ctx.files_root
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = resolve_memory_path(root, path)
    if target.is_dir():
        raise ToolError(f"{path!r} is a folder, not a file")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("content holds characters that cannot be encoded as UTF-8") from None
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # The parent may have been swapped for a symlink since resolve(): check the real place again.
        resolve_memory_path(root, str(target.parent.relative_to(root.resolve())) or ".")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        raise ToolError(f"cannot write {path!r}: {exc.strerror}") from None
    return {"path": path, "chars": len(content), "bytes": len(data)}


FILE_TOOLS: tuple[Tool, ...] = (
    build_tool(read_file, family="files"),
    build_tool(write_file, family="files", acts=True),
)
