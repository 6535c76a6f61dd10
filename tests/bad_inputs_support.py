"""Helpers for the secrets test and the bad-input catalogue: the CLI run in-process, secret scanning,
one-line checks, and the table in ``docs/bad-inputs.md`` that every catalogue row must match.

The catalogue's table is the source of the expected lines: a row's test normalizes what the user saw
(temporary paths, ports and event ids become placeholders) and compares it with the table's cell, so the
document cannot drift from the app.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui_support import LabelledApp

from didactyl_tui.cli import run
from didactyl_tui.config import Config
from didactyl_tui.nostr import nip19
from didactyl_tui.nostr.keys import SecretKey

REPO = Path(__file__).resolve().parents[1]
CATALOGUE = REPO / "docs" / "bad-inputs.md"

# The key these tests run with: derived here, never written down as an nsec (the repo's hook refuses
# nsec strings, and the tests grep for it).
SECRET_HEX = hashlib.sha256(b"didactyl-tui: the secrets test's agent key").hexdigest()
KEY = SecretKey.from_hex(SECRET_HEX)
NSEC = nip19.encode_nsec(SECRET_HEX)


# --- secrets ----------------------------------------------------------------------------------------


class SecretScan:
    """Every written form of some secret keys: nsec (both cases), hex (both cases), the raw 32 bytes.

    Its failures name the form found, never the secret (pytest prints what an assert compares)."""

    def __init__(self, secret_hexes: Iterable[str]) -> None:
        self.hexes = [h.lower() for h in secret_hexes]
        self.texts: list[str] = []
        for h in self.hexes:
            nsec = nip19.encode_nsec(h)
            self.texts += [nsec, nsec.upper(), h, h.upper()]
        self.raw = [bytes.fromhex(h) for h in self.hexes]

    def find_in_text(self, text: str) -> str | None:
        """The first secret form found in ``text`` (a short label, never the secret itself), or None."""
        for n, form in enumerate(self.texts):
            if form in text:
                return f"secret form #{n} (key {n // 4}, {('nsec', 'NSEC', 'hex', 'HEX')[n % 4]})"
        return None

    def find_in_bytes(self, data: bytes) -> str | None:
        for n, form in enumerate(self.texts):
            if form.encode("ascii") in data:
                return f"secret form #{n} (key {n // 4}, {('nsec', 'NSEC', 'hex', 'HEX')[n % 4]})"
        for n, raw in enumerate(self.raw):
            if raw in data:
                return f"raw secret bytes of key {n}"
        return None

    def check_text(self, where: str, text: str) -> None:
        found = self.find_in_text(text)
        assert found is None, f"{found} appears in {where}"

    def check_bytes(self, where: str, data: bytes) -> None:
        found = self.find_in_bytes(data)
        assert found is None, f"{found} appears in {where}"


def secret_windows(secret: str, width: int = 12) -> list[str]:
    """Every ``width``-character slice of ``secret``: a message must not quote a long piece of it either."""
    return [secret[i:i + width] for i in range(len(secret) - width + 1)]


# --- the CLI in-process --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def line(self) -> str:
        """The one line on stderr (asserts there is exactly one)."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{self.stderr}"
        return lines[0]


def cli(argv: list[str], env: Mapping[str, str], stdin: str = "") -> CliResult:
    """``didactyl ARGV`` in this process (it runs its own event loop: call from a thread in async tests)."""
    out, err = io.StringIO(), io.StringIO()
    code = run(argv, env=dict(env), stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return CliResult(code, out.getvalue(), err.getvalue())


def cli_env(tmp_path: Path, config: str | None = None, **extra: str) -> dict[str, str]:
    """An environment of its own: data and config dirs in ``tmp_path``; ``config`` becomes config.toml.

    Nothing from the real environment is inherited (no $DIDACTYL_*, no provider keys)."""
    cfg_dir = tmp_path / "config" / "didactyl"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    body = "[relays]\nembedded_port = 0\ntimeout_s = 2.0\n[memory]\nbackend = \"none\"\n"
    (cfg_dir / "config.toml").write_text(body if config is None else config)
    env = {"DIDACTYL_DATA_DIR": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_DATA_HOME": str(tmp_path / "xdg-data"), "HOME": str(tmp_path / "home")}
    env.update(extra)
    return env


def config_file(env: Mapping[str, str]) -> Path:
    return Path(env["XDG_CONFIG_HOME"]) / "didactyl" / "config.toml"


# --- what a user may be shown ------------------------------------------------------------------------------

_TRACEBACK_MARKS = ("Traceback (most recent call last)", 'File "', "\n  File ", "During handling of")


def check_one_line(text: str, scan: SecretScan | None = None, *, limit: int = 600) -> str:
    """``text`` is one readable line: no newline, no traceback, not huge, no secret. Returns it."""
    if scan is not None:  # first: the messages below quote the text
        scan.check_text("a message shown to the user", text)
    assert text.strip(), "nothing was shown"
    assert "\n" not in text.strip(), f"more than one line: {text!r}"
    for mark in _TRACEBACK_MARKS:
        assert mark not in text, f"a traceback reached the user: {text!r}"
    assert len(text) <= limit, f"{len(text)} characters is not a readable line: {text!r}"
    return text.strip()


_HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
_PORT = re.compile(r"(?<=127\.0\.0\.1:)\d+")


def normalize(text: str, replacements: Mapping[str, str] | None = None) -> str:
    """Placeholders for what changes from run to run: given strings (paths, URLs) first, then ports, ids."""
    for value, placeholder in sorted((replacements or {}).items(), key=lambda kv: -len(kv[0])):
        if value:
            text = text.replace(value, placeholder)
    text = _PORT.sub("<port>", text)
    return _HEX64.sub("<id>", text)


# --- the catalogue table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogueRow:
    id: str
    area: str
    bad_input: str
    outcome: str
    sees: str  # the exact line the user sees, with placeholders


def _cell_text(cell: str) -> str:
    cell = cell.strip().replace("\\|", "|")
    for fence in ("`` ", "``", "`"):
        if cell.startswith(fence) and cell.endswith(fence[::-1]) and len(cell) >= 2 * len(fence):
            return cell[len(fence):len(cell) - len(fence)]
    return cell


def _split_row(line: str) -> list[str]:
    cells, current, i = [], "", 1  # skip the leading pipe
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line) and line[i + 1] == "|":
            current += "\\|"
            i += 2
            continue
        if ch == "|":
            cells.append(current)
            current = ""
        else:
            current += ch
        i += 1
    return cells


def read_catalogue(path: Path = CATALOGUE) -> dict[str, CatalogueRow]:
    """The table rows of docs/bad-inputs.md by id (asserts ids are unique)."""
    rows: dict[str, CatalogueRow] = {}
    for line in path.read_text("utf-8").splitlines():
        if not line.startswith("| `"):
            continue  # header, separator and prose
        cells = _split_row(line.rstrip())
        assert len(cells) == 5, f"a catalogue row needs 5 cells: {line}"
        row = CatalogueRow(*(_cell_text(c) for c in cells))
        assert row.id not in rows, f"row id {row.id} is in the table twice"
        rows[row.id] = row
    return rows


_catalogue: dict[str, CatalogueRow] | None = None


def expected_line(row_id: str) -> str:
    global _catalogue
    if _catalogue is None:
        _catalogue = read_catalogue()
    assert row_id in _catalogue, f"row {row_id} is missing from {CATALOGUE.name}"
    return _catalogue[row_id].sees


RECORD_ENV = "DIDACTYL_CATALOGUE_RECORD"
"""Set to a file path to append each row's actual line there (JSON lines) instead of comparing: a maintenance
aid for writing the table after a deliberate change of wording, never used in CI."""


def matches_catalogue(row_id: str, seen: str, replacements: Mapping[str, str] | None = None) -> None:
    """What the user saw (normalized) is exactly the line the catalogue promises for ``row_id``."""
    actual = normalize(seen, replacements)
    if os.environ.get(RECORD_ENV):
        with open(os.environ[RECORD_ENV], "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"id": row_id, "sees": actual}, ensure_ascii=False) + "\n")
        return
    assert actual == expected_line(row_id), (
        f"{row_id}: the user sees\n  {actual}\nbut {CATALOGUE.name} says\n  {expected_line(row_id)}")


# --- the TUI, with its notifications kept -------------------------------------------------------------------


class RecordingApp(LabelledApp):
    """The real app; every notification is also kept as the line a person reads (``title: message``).

    ``notes`` holds what the code asked to show; :meth:`notified_with` reads what the screen *shows*: the
    text of the toasts on screen (a toast parsed as markup would lose a ``[ui]`` or crash on ``[/]``), kept
    once seen so a toast that has expired since still counts. Run it with ``run_test(notifications=True)``:
    Textual's test harness shows no toasts otherwise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.notes: list[str] = []
        self.toasts: dict[int, str] = {}

    def notify(self, message: Any, *, title: str = "", **kwargs: Any) -> None:
        self.notes.append(f"{title}: {' '.join(str(message).split())}")
        super().notify(message, title=title, **kwargs)

    def shown_toasts(self) -> list[str]:
        """Every toast seen on screen so far, as ``title: message`` (the message's lines joined)."""
        for toast in self.screen.query("Toast"):
            title, _, message = toast.render().plain.partition("\n")  # a toast renders its title, then its text
            self.toasts.setdefault(id(toast), f"{title}: {' '.join(message.split())}")
        return list(self.toasts.values())

    def notified_with(self, title: str) -> list[str]:
        return [note for note in self.shown_toasts() if note.startswith(f"{title}: ")]


def recording_app(data_dir: Path, config: Config, env: dict[str, str]) -> RecordingApp:
    from didactyl_tui.service.app import AppService

    service = AppService(config, data_dir=data_dir, env=env)
    return RecordingApp(config, data_dir=data_dir, env=env, service=service)
