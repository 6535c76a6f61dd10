"""The memory gauge: characters against the limit, and the bytes against their own bound when it is below NIP-44's
(40,960 when the agent's key is in a remote signer: NIP-44 inside NIP-44); over either, the error colour. With the
key in a bunker the panes and the editor show it (test_tui_key_place.py starts the app so)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from tui_support import make_config

from didactyl_tui.service.agent_signer import remote_signer_bound
from didactyl_tui.tui.widgets.memory_gauge import NIP44_MAX_BYTES, MemoryGauge


class GaugeApp(App[None]):
    def compose(self) -> ComposeResult:
        yield MemoryGauge(8000)


async def test_bytes_are_shown_against_a_bound_of_their_own_and_fill_the_bar() -> None:
    bound = remote_signer_bound(_remote_config())["memory_max_bytes"]
    assert bound == 40_960 and remote_signer_bound(make_config()) == {}
    app = GaugeApp()
    async with app.run_test(size=(100, 3)) as pilot:
        gauge = app.query_one(MemoryGauge)
        gauge.show(1234, 1290, 8000)
        await pilot.pause()
        label = str(gauge.render())
        assert label.endswith(" 1,234/8,000 chars · 1,290 B") and not gauge.bytes_bounded
        gauge.show(1234, 1290, 8000, bound)
        await pilot.pause()
        label = str(gauge.render())
        assert label.endswith(" 1,234/8,000 chars · 1,290/40,960 B") and not gauge.over_limit
        # Under the character limit, over the byte bound (multi-byte text): over, and the bar full.
        gauge.show(7000, 41_000, 8000, bound)
        await pilot.pause()
        label = str(gauge.render())
        assert gauge.over_limit and gauge.has_class("-over") and "41,000/40,960 B" in label
        assert "─" not in label.split(" ")[0]  # the bar is all filled: the bytes are the nearer bound
        gauge.show(10, 41_000, 8000, NIP44_MAX_BYTES)  # the key in hand: NIP-44's own bound, shown as before
        await pilot.pause()
        assert not gauge.over_limit and str(gauge.render()).endswith("10/8,000 chars · 41,000 B")


def _remote_config():
    config = make_config()
    config.signer.bunker = "bunker://" + "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798" + \
        "?relay=wss://relay.example"
    return config
