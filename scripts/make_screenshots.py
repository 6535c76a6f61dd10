"""Regenerate the README's pictures with the app's own screenshot (Textual's ``export_screenshot``).

    pip install -e '.[test]'            # the LLM stub needs aiohttp
    python scripts/make_screenshots.py  # writes docs/images/main-screen.svg and docs/images/prompt-inspector.svg

The real app and service run under Textual's Pilot in a throwaway home folder (config and data in a temporary
XDG_CONFIG_HOME / XDG_DATA_HOME), with the embedded relay on a free loopback port and the model answering from
the scripted OpenAI-compatible stub in tests/llm_stub.py (the conversation in the pictures is scripted). Clock,
time zone, terminal size and the embedded relay's label are fixed, so a regeneration changes a picture only when
the app's look changed
(and for the memory event's id, new on every run: NIP-44 encrypts with a random nonce).

The agent's key is derived from ``$DIDACTYL_SCREENSHOT_SEED`` (any text; a fixed default): no nsec is stored in
the repository, and a picture that contains the secret key (nsec or hex) or a temporary path is not written.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

SEED_ENV = "DIDACTYL_SCREENSHOT_SEED"
DEFAULT_SEED = "didactyl README screenshots"
LLM_KEY_VAR = "DIDACTYL_SCREENSHOT_LLM_KEY"
SIZE = (140, 42)
OUT = ROOT / "docs" / "images"
TURN_TIMEOUT_S = 120.0  # the first turn pays litellm's import (~8 s here, more under load)

FIRST = "Hello! Who are you?"
FIRST_REPLY = (
    "I'm **didactyl**, an agent with my own Nostr key. My memory lives on Nostr relays as events encrypted "
    "to myself, so it follows my key rather than this machine.\n\n"
    "- **short-term memory** is in every prompt\n"
    "- **long-term memory** I read when I need it"
)
SECOND = "I drink green tea and I'm learning Rust. Please remember that."
MEMORY = "## About the user\n\n- drinks green tea\n- is learning Rust\n"
THIRD = "What do you remember about me?"
SECOND_REPLY = "Saved to my short-term memory and published to my relays: green tea, and Rust."


def derived_key(seed: str) -> Any:
    from didactyl_tui.nostr.keys import SecretKey

    return SecretKey.from_hex(hashlib.sha256(seed.encode("utf-8")).hexdigest())


def write_config(config_home: Path, base_url: str) -> None:
    folder = config_home / "didactyl"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(
        "[llm]\n"
        'model = "openai/gpt-4o-mini"\n'
        f'api_base = "{base_url}"\n'
        f'api_key_env = "{LLM_KEY_VAR}"\n'
        "max_retries = 0\n"
        "[relays]\n"
        "embedded_port = 0\n"
        "[agent]\n"
        "publish_profile = false\n",
        "utf-8",
    )


def check_picture(svg: str, key: Any, home: Path, name: str) -> None:
    for secret in (key.nsec(), key.secret_hex()):
        if secret in svg:
            raise SystemExit(f"{name}: the picture shows the secret key; not written")
    if str(home) in svg:
        raise SystemExit(f"{name}: the picture shows a temporary path ({home}); not written")


async def steady(pilot: Any) -> None:
    """No blinking cursor in the picture (drawn or not depending on the exact moment)."""
    for widget in pilot.app.screen.query("TextArea, Input"):
        widget.cursor_blink = False
    await pilot.pause(0.3)


async def take(app: Any, pilot: Any, name: str, title: str, key: Any, home: Path, out: Path) -> Path:
    await steady(pilot)
    svg = app.export_screenshot(title=title)
    check_picture(svg, key, home, name)
    path = out / name
    path.write_text(svg, "utf-8")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


async def make(out: Path) -> list[Path]:
    from llm_stub import LlmStub, Reply, ToolCall
    from tui_support import Clock, make_app, started, wait_for

    from didactyl_tui.agent.llm import client as llm
    from didactyl_tui.config_file import data_dir, load_config

    key = derived_key(os.environ.get(SEED_ENV) or DEFAULT_SEED)
    llm.preload()
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="didactyl-shots-") as tmp:
        home = Path(tmp)
        env = {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "DIDACTYL_NSEC": key.nsec(),
            LLM_KEY_VAR: "not-a-real-key",
        }
        async with LlmStub() as stub:
            write_config(home / ".config", stub.base_url)
            stub.script(
                Reply.text_reply(FIRST_REPLY, usage=(1480, 62)),
                Reply.tools(ToolCall("memory_save", json.dumps({"type": "short_term", "content": MEMORY})),
                            usage=(1571, 48)),
                Reply.text_reply(SECOND_REPLY, usage=(1702, 21)),
            )
            config = load_config(None, env)
            app = make_app(data_dir(env), config, env=env, clock=Clock())
            async with app.run_test(size=SIZE) as pilot:
                await started(pilot)
                main = app.main_screen
                for text, reply in ((FIRST, FIRST_REPLY), (SECOND, SECOND_REPLY)):
                    main.chat_input.focus()
                    await pilot.press(*text)
                    await pilot.press("enter")
                    await wait_for(pilot, lambda r=reply: not main.streaming
                                   and (main.conversation.last_reply() or "").startswith(r[:20]),
                                   TURN_TIMEOUT_S, "the reply")
                await pilot.pause(0.5)  # the sidebar opens on the memory pane: what the agent just saved, and where
                written.append(await take(app, pilot, "main-screen.svg", "didactyl", key, home, out))
                # A dry run of a third message (no model call): its prompt carries the memory just saved.
                main.chat_input.focus()
                await pilot.press(*THIRD)
                await pilot.press("f5")
                await wait_for(pilot, lambda: len(main.inspector.entries) == 3, 30, "the dry run")
                await pilot.pause(0.3)
                main.inspector.assembly_tree.focus()
                await pilot.press("o")
                await wait_for(pilot, lambda: type(app.screen).__name__ == "InspectorDetailScreen", 10,
                               "the inspector detail")
                await pilot.pause(0.5)
                written.append(await take(app, pilot, "prompt-inspector.svg", "didactyl: prompt inspector", key,
                                          home, out))
        await _stop_relay(data_dir(env))
    return written


async def _stop_relay(data: Path) -> None:
    """The shared relay process outlives the app (its job); this temporary data dir's is ended here."""
    from didactyl_tui.nostr.embedded_relay.shared import find_shared_relay, stop_shared_relay

    relay = await find_shared_relay(data)
    if relay is not None:
        await stop_shared_relay(relay)


def main(argv: list[str]) -> int:
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else OUT
    os.environ["TZ"] = "UTC"  # times on screen are local
    time.tzset()
    asyncio.run(make(out.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
