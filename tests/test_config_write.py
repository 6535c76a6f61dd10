"""One key written into the person's config file (config_write.py): the rest kept, comments too where the file
allows it; a new file 0600, an existing one keeps its mode; a file that is not TOML is never changed."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from didactyl_tui.config_write import set_config_value
from didactyl_tui.errors import ConfigError

URI = "bunker://79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798?relay=wss%3A%2F%2Fr.example"


def written(path: Path, text: str | None) -> str:
    if text is not None:
        path.write_text(text, "utf-8")
        path.chmod(0o644)
    set_config_value(path, "signer", "bunker", URI)
    return path.read_text("utf-8")


def test_a_new_file_is_private_and_holds_the_one_key(tmp_path: Path) -> None:
    path = tmp_path / "didactyl" / "config.toml"
    assert tomllib.loads(written(path, None)) == {"signer": {"bunker": URI}}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize(("before", "kept"), [
    ("# mine\n[llm]\nmodel = \"x\"  # the model\n", "# mine\n[llm]\nmodel = \"x\"  # the model\n\n[signer]\n"),
    ("[llm]\nmodel = \"x\"", "[llm]\nmodel = \"x\"\n\n[signer]\n"),  # no newline at the end
    ("[signer]\n# why\nrequest_timeout_s = 5.0\n[llm]\n", "[signer]\nbunker = "),
    ("[signer]\nbunker = \"\"\n[llm]\nmodel = \"y\"\n", "[signer]\nbunker = \"bunker://"),
])
def test_the_rest_of_the_file_is_kept_as_it_was_written(tmp_path: Path, before: str, kept: str) -> None:
    path = tmp_path / "config.toml"
    after = written(path, before)
    old = tomllib.loads(before)
    assert tomllib.loads(after) == {**old, "signer": {**old.get("signer", {}), "bunker": URI}}
    assert kept in after and after.count("bunker =") == 1
    for line in before.splitlines():
        assert line in after or line.startswith("bunker")  # every other line as it was, comments too
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_a_table_written_inline_keeps_its_values(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    after = written(path, "signer = { request_timeout_s = 5.0 }\nllm.model = \"z\"\n")
    assert tomllib.loads(after) == {"signer": {"request_timeout_s": 5.0, "bunker": URI}, "llm": {"model": "z"}}


def test_a_file_that_is_not_toml_is_not_changed(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[signer\nbunker = ", "utf-8")
    with pytest.raises(ConfigError) as refused:
        set_config_value(path, "signer", "bunker", URI)
    assert str(path) in refused.value.message and "not valid TOML" in refused.value.message
    assert path.read_text("utf-8") == "[signer\nbunker = "
