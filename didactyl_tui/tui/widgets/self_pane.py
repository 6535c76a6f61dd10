"""The self pane: the agent's public identity (profile, relays with live state, contacts, notes) and the
admin's when configured. Public data only: pubkeys and npubs, never a secret."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Button, Static

from ...service.labels import MINUTES, when
from ...terminal_text import clean, one_line
from .relay_list import RelayList

if TYPE_CHECKING:
    from ...service.types import ConnectionState, IdentityView

MAX_CONTACTS_SHOWN = 12
MAX_NOTES_SHOWN = 5


def short_key(value: str, head: int = 10, tail: int = 6) -> str:
    return value if len(value) <= head + tail + 1 else f"{value[:head]}…{value[-tail:]}"


def _npub(pubkey_hex: str) -> str:
    from ...service.types import encode_npub  # pure bech32; imported late to keep the first frame light

    try:
        return encode_npub(pubkey_hex)
    except ValueError:
        return pubkey_hex


def identity_text(view: IdentityView, *, with_relays: bool) -> Content:
    """Profile, contacts and notes of one identity as styled text."""
    profile: Mapping[str, Any] = view.profile or {}
    # A profile, its relays and notes come from relays: outside text, cleaned before it is shown.
    name = one_line(str(profile.get("display_name") or profile.get("name") or "(no profile yet)"))
    parts: list[str | tuple[str, str]] = [(name, "bold"), "\n", (short_key(view.npub, 14, 8), "$text-muted")]
    about = clean(str(profile.get("about") or "")).strip()
    if about:
        parts += ["\n", about]
    if with_relays and view.relays:
        parts += ["\n\n", ("Relays", "$text-accent")]
        for url, marker in view.relays:
            parts += ["\n  ", one_line(url), (f"  {one_line(marker)}" if marker else "", "$text-muted")]
    parts += ["\n\n", (f"Contacts ({len(view.contacts)})", "$text-accent")]
    for pk in view.contacts[:MAX_CONTACTS_SHOWN]:
        parts += ["\n  ", short_key(_npub(pk), 14, 8)]
    if len(view.contacts) > MAX_CONTACTS_SHOWN:
        parts += ["\n  ", (f"… and {len(view.contacts) - MAX_CONTACTS_SHOWN} more", "$text-muted")]
    parts += ["\n\n", (f"Recent notes ({len(view.notes)})", "$text-accent")]
    for note in view.notes[:MAX_NOTES_SHOWN]:
        first = (clean(note.content).strip().splitlines() or [""])[0]
        parts += ["\n  ", (when(note.created_at, MINUTES), "$text-muted"), " ", first[:200]]
    return Content.assemble(*parts)


class SelfPane(VerticalScroll):
    """Attributes down: the screen calls :meth:`show_identity`, :meth:`show_drift` and :meth:`show_relays`;
    the drift choices go up as messages."""

    class AdoptRequested(Message):
        """The user keeps the relays' identity versions as ours."""

    class RepublishRequested(Message):
        """The user publishes the config's fields merged into the relays' versions."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="self-pane")
        self.border_title = "Self"
        self.filled = False  # shown an identity yet

    def compose(self) -> ComposeResult:
        yield Static("Agent", classes="section-title")
        drift = Vertical(id="identity-drift")
        drift.display = False  # hidden from the start (not at mount: an app closed while mounting has no children)
        with drift:
            yield Static(Content(""), id="identity-drift-text", classes="identity")
            with Horizontal(id="identity-drift-buttons"):
                yield Button("Adopt", id="adopt-identity", variant="primary")
                yield Button("Republish merged", id="republish-identity")
        yield Static(Content("starting…"), id="agent-identity", classes="identity")
        yield Static("Relays (live)", classes="section-title")
        yield RelayList(id="agent-relays")
        yield Static(Content(""), id="refused-events", classes="identity")
        dm_status = Static(Content(""), id="dm-status", classes="identity")
        dm_status.display = False
        yield dm_status
        mcp_status = Static(Content(""), id="mcp-status", classes="identity")
        mcp_status.display = False  # shown once an MCP server is configured
        yield mcp_status
        yield Static("Admin", classes="section-title", id="admin-title")
        yield Static(Content("no admin configured ([admin] pubkey)"), id="admin-identity", classes="identity")

    def on_mount(self) -> None:
        follow = getattr(self.app, "follow_service", None)  # the MCP servers' states come as service events
        if follow is not None:
            follow(self, self._on_service_event)

    def _on_service_event(self, event: object) -> None:
        from ...service.events import McpServersChanged

        if isinstance(event, McpServersChanged):
            self.show_mcp(list(event.lines), list(event.failed))

    def show_mcp(self, lines: list[str], failed: list[str]) -> None:
        """The MCP servers, one line each (a failed one with its reason: outside text, cleaned); hidden with none."""
        view = self.query_one("#mcp-status", Static)
        view.display = bool(lines)
        parts: list[str | tuple[str, str]] = [("MCP servers", "$text-accent")]
        for line in lines[:20]:
            parts += ["\n  ", (one_line(line)[:300], "$text-warning" if line in failed else "")]
        view.update(Content.assemble(*parts))

    def show_identity(self, agent: IdentityView | None, admin: IdentityView | None, *,
                      admin_configured: bool, agent_elsewhere: bool = False) -> None:
        """``agent_elsewhere``: attached to an agent that runs elsewhere, whose own relay list (kind 10002) is then
        shown with its profile (the live relays below are this window's)."""
        if agent is not None:
            self.filled = True
            self.query_one("#agent-identity", Static).update(identity_text(agent, with_relays=agent_elsewhere))
        admin_view = self.query_one("#admin-identity", Static)
        if admin is not None:
            admin_view.update(identity_text(admin, with_relays=True))
        elif admin_configured:
            admin_view.update(Content("admin configured; nothing fetched yet"))

    def show_dm_status(self, summary: str | None, given_up: list[str]) -> None:
        """Direct messages: delivered, waiting, given up (with the last reasons) and what was not answered, by
        cause; hidden when this app does not answer them. ``given_up`` lines are outside text (relays' words)."""
        view = self.query_one("#dm-status", Static)
        view.display = summary is not None
        if summary is None:
            return
        parts: list[str | tuple[str, str]] = [("Direct messages: ", "$text-accent"), one_line(summary)]
        for line in given_up[:3]:
            parts += ["\n  ", ("given up: ", "$text-warning"), one_line(line)[:300]]
        view.update(Content.assemble(*parts))

    def show_drift(self, lines: list[str]) -> None:
        """The identity drift notice (``lines`` from the service's ``drift_lines``, already one-line safe);
        hidden when there is none."""
        box = self.query_one("#identity-drift")
        box.display = bool(lines)
        if lines:
            text = Content.assemble(("Identity drift", "bold $text-warning"),
                                    ": the relays hold a version published elsewhere; nothing was overwritten.",
                                    *[part for line in lines for part in ("\n", line)])
            self.query_one("#identity-drift-text", Static).update(text)

    @on(Button.Pressed, "#adopt-identity")
    def _adopt(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.AdoptRequested())

    @on(Button.Pressed, "#republish-identity")
    def _republish(self, event: Button.Pressed) -> None:
        event.stop()
        self.post_message(self.RepublishRequested())

    def show_relays(self, states: Mapping[str, ConnectionState], dropped: Mapping[str, Mapping[str, int]],
                    labels: Mapping[str, str] | None = None) -> None:
        self.query_one(RelayList).show_relays(states, dropped, labels)

    def show_refused(self, counts: Mapping[str, int]) -> None:
        """Events the app itself refused (forged, foreign author, far future, undecryptable), by reason."""
        counts = {k: v for k, v in counts.items() if v}
        view = self.query_one("#refused-events", Static)
        if not counts:
            view.update(Content.styled("no bad events refused", "$text-muted"))
            return
        detail = ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items()))
        total = sum(counts.values())
        label = f"refused {total} bad event{'s' if total != 1 else ''}"
        view.update(Content.assemble((label, "$text-warning"), f" ({detail})"))
