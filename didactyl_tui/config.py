"""The configuration: :class:`Config`, one dataclass per TOML table, each field documented in its ``doc``
(``config.toml.example`` and docs/configuration.md are generated from these).

Where the file is, how it is read and checked (errors naming file, key and line), the environment's overrides
and the rendered example: :mod:`didactyl_tui.config_file`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config_mcp import McpConfig, PermissionsConfig
from .config_remote import AttachConfig, DmConfig, SignerConfig
from .config_setting import setting


@dataclass
class LlmConfig:
    """The language model, called through litellm."""

    model: str = setting(
        "",
        "litellm model name, e.g. \"openai/gpt-4o-mini\", \"anthropic/claude-sonnet-4-5\", \"ollama/llama3\". "
        "Empty: the app opens and explains how to set one (or set $DIDACTYL_MODEL).",
    )
    api_base: str = setting("", "Base URL of an OpenAI-compatible or self-hosted server; empty for the provider "
                                "default.")
    api_key_env: str = setting(
        "",
        "Name of the environment variable holding the API key (the key itself never goes in this file). "
        "Empty: litellm reads the provider's usual variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...).",
    )
    api_key_file: str = setting(
        "",
        "Where a key typed in the app's model dialog is kept: one VARIABLE = \"key\" line per key, written 0600 "
        "(~ expands). Empty: api_keys.toml in the data dir. Read at start into the environment the model call "
        "uses; a variable the environment already sets wins over the file.",
    )
    timeout_s: float = setting(60.0, "Seconds to wait for the model before giving up on a request (and the longest "
                               "pause allowed between two pieces of a streamed reply).", min=1, max=3600)
    max_tool_rounds: int = setting(8, "Most tool-call rounds in one turn before the agent must answer.", min=1, max=100)
    max_retries: int = setting(2, "Retries after a rate limit (429, honouring Retry-After) or a server error.",
                               min=0, max=10)
    context_window: int = setting(0, "Prompt tokens the model accepts, the scale of the status bar's context gauge. 0: "
                                  "litellm's figure for a known model; for an unknown one the tokens show without a "
                                  "gauge.", min=0, max=100_000_000)
    history_tokens: int = setting(8000, "Token budget for past conversation turns carried in each prompt.",
                                  min=0, max=2_000_000)
    saved_assemblies: int = setting(20, "Prompt assemblies kept per chat (compressed, in the conversation database), "
                                    "so a resumed chat's prompt inspector shows its last turns; the inspector holds "
                                    "as many of the chat on screen (at least its last). 0: none kept.",
                                    min=0, max=1000)
    max_tokens: int = setting(0, "Most tokens the model may generate per reply, sent to the provider as max_tokens. "
                              "0: not sent (the provider's default). A value above the model's own ceiling makes "
                              "some providers refuse the request.", min=0, max=1_000_000)
    max_reply_chars: int = setting(1_000_000, "Most characters (text and tool-call arguments) one model reply may "
                                   "send; past it the reply is cut, its text kept and marked, its tool calls not run.",
                                   min=1000, max=100_000_000)
    turn_timeout_s: float = setting(600.0, "Seconds one whole turn may take (every model call and tool round); past "
                                    "it the reply is cut, its text kept and marked.", min=1, max=86_400)
    max_tool_argument_chars: int = setting(300_000, "Most characters in one tool call's arguments; a bigger call is "
                                           "refused (the model is told why) and its arguments are never stored.",
                                           min=100, max=50_000_000)
    max_tool_calls_per_reply: int = setting(16, "Most tool calls one model reply may make; the rest are not run (the "
                                            "model is told).", min=1, max=1000)
    max_tool_calls_per_turn: int = setting(64, "Most tool calls in one turn, all rounds together.", min=1, max=10_000)
    max_calls_per_tool: int = setting(16, "Most calls of any one tool in one turn (unless a key below sets it).",
                                      min=1, max=10_000)
    max_memory_saves_per_turn: int = setting(4, "Most memory_save calls in one turn (each replaces a whole memory).",
                                             min=1, max=1000)
    max_file_writes_per_turn: int = setting(16, "Most write_file calls in one turn.", min=1, max=10_000)
    worker_process: bool = setting(True, "Run the model client (litellm) in a helper process of its own: it spends "
                                   "~0.3 ms of CPU on every streamed piece, which would otherwise be taken from the "
                                   "screen and the keyboard. false: in the app's process (one process, ~200 MiB less "
                                   "while a model is configured).")
    helper_idle_exit_s: float = setting(
        300.0, "Seconds the model helper process (litellm, ~200 MiB) stays after the model was last used; it starts "
        "again when a model is next needed (the first key typed in the message box, a dry run, a direct-message "
        "turn). 0: once started, it stays.", min=0, max=86_400)
    stall_notice_s: float = setting(5.0, "Seconds without a word from the model (no tool running) before the app's "
                                    "status bar and reply frame, and `didactyl chat` on stderr, say it is silent and "
                                    "how to stop it.", min=1, max=3600)


MiB = 1024 * 1024


@dataclass
class EmbeddedRelayConfig:
    """The embedded relay: whether it runs, who may write to it, and every bound it enforces
    (modelled on strfry's and nostr-rs-relay's limits; docs/security.md explains each). Rate limits
    and max_db_bytes set to 0 are switched off. A relay already running takes a change of these (or of
    [admin] and [dm] allow) when the next didactyl starts; `didactyl relay status` shows what it enforces."""

    enabled: bool = setting(True, "Run the embedded SQLite relay on loopback (the zero-setup default). The older "
                            "form [relays] embedded = true/false is still read.")
    allow_list: bool = setting(True, "Only the agent's and the admin's keys may write; other keys get OK false "
                               "\"blocked: ...\", except kind 1059 gift wraps whose p tag names the agent, the admin "
                               "or [dm] allow (NIP-17 signs them with throwaway keys).")
    max_connections: int = setting(512, "Most websocket connections at once (also capped by the process's file "
                                   "descriptor limit). When full, a silent connection without subscriptions is "
                                   "closed to make room; otherwise the newcomer gets HTTP 503.", min=1, max=100_000)
    max_connections_per_ip: int = setting(256, "Most connections from one IP address (every local program shares "
                                          "127.0.0.1).", min=1, max=100_000)
    max_frame_bytes: int = setting(512 * 1024, "Largest message a client may send, in bytes (NIP-11 "
                                   "max_message_length).", min=1024, max=64 * MiB)
    max_subscriptions: int = setting(32, "Most open subscriptions per connection.", min=1, max=10_000)
    max_filters: int = setting(16, "Most filters in one REQ.", min=1, max=1000)
    max_filter_values: int = setting(1000, "Most values in one filter key (ids, authors, kinds, #tag).",
                                     min=1, max=100_000)
    max_values_per_connection: int = setting(4000, "Most filter values (plus one per filter) that one connection's "
                                             "subscriptions may hold together.", min=1, max=1_000_000)
    max_filters_total: int = setting(4096, "Most filters held by all connections together (each published event is "
                                     "matched against all of them).", min=1, max=1_000_000)
    max_limit: int = setting(5000, "Largest REQ limit honoured; a larger or missing limit is cut to this.",
                             min=1, max=1_000_000)
    max_result_bytes: int = setting(32 * MiB, "Most bytes of stored events sent for one REQ; the rest is cut "
                                    "(then EOSE), like max_limit. Results are streamed, never built in memory.",
                                    min=1024, max=4096 * MiB)
    max_output_bytes: int = setting(1 * MiB, "Output buffer per connection, in bytes. A client that does not read: "
                                    "its live events beyond this close it; its stored results wait for room.",
                                    min=1024, max=1024 * MiB)
    max_output_bytes_total: int = setting(64 * MiB, "Output buffered for all connections together, in bytes.",
                                          min=1024, max=8192 * MiB)
    slow_client_timeout_s: float = setting(10.0, "Seconds a client may leave a full output buffer unread before it "
                                           "is closed.", min=0.1, max=3600)
    max_pending_events: int = setting(256, "Events one connection may have waiting to be stored before the relay "
                                      "stops reading from it.", min=1, max=100_000)
    events_per_second: float = setting(200.0, "Events per second one connection may publish (token bucket).",
                                       min=0, max=1_000_000)
    events_burst: int = setting(1000, "Burst allowance of the events-per-second buckets.", min=1, max=10_000_000)
    bytes_per_minute: int = setting(64 * MiB, "Bytes of events per minute one connection may publish.",
                                    min=0, max=2**40)
    author_events_per_second: float = setting(200.0, "Events per second one author (pubkey) may publish.",
                                              min=0, max=1_000_000)
    author_bytes_per_minute: int = setting(64 * MiB, "Bytes of events per minute one author may publish.",
                                           min=0, max=2**40)
    max_db_bytes: int = setting(1024 * MiB, "Size quota of the relay database, in bytes; events beyond it get "
                                "OK false \"error: ...quota...\".", min=0, max=2**50)
    max_wal_bytes: int = setting(64 * MiB, "Size the relay database's write-ahead log may reach under a steady "
                                 "stream of events before the writer folds it back (one short pause); it is "
                                 "folded in the background otherwise.", min=1 * MiB, max=2**40)
    stranger_share: float = setting(0.75, "Share of max_db_bytes that events from keys outside the allow-list "
                                    "(gift wraps) may fill, so strangers never take the owner's last room.",
                                    min=0.0, max=1.0)
    idle_timeout_s: float = setting(600.0, "Seconds after which a connection with no subscription that sent "
                                    "nothing is closed.", min=1, max=86400)

    def __bool__(self) -> bool:  # `if cfg.relays.embedded:` keeps meaning "the embedded relay runs"
        return self.enabled

    def relay_limits(self) -> Any:
        """These limits as the relay's :class:`RelayLimits`."""
        from .nostr.embedded_relay.limits import RelayLimits

        return RelayLimits(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RelayLimits)})

    def relay_options(self, agent_pubkey: str, admin_pubkey: str | None, dm_peers: list[str] | None = None,
                      signer_keys: list[str] | None = None) -> dict[str, Any]:
        """Keyword arguments for ``EmbeddedRelay`` / ``serve_forever`` / ``ensure_shared_relay`` (hex
        pubkeys), JSON-able so they can reach the relay process. Gift wraps (signed by throwaway keys) are
        taken when addressed to the agent, or to the admin and ``dm_peers`` (the agent's replies to them);
        ``signer_keys``: a remote signer's key and this app's NIP-46 client key (their kind 24133 traffic)."""
        writers = [k for k in (agent_pubkey, admin_pubkey, *(signer_keys or ())) if k]
        return {
            "limits": dataclasses.asdict(self.relay_limits()),
            "allowed_writers": writers if self.allow_list else None,
            "gift_wrap_recipients": list(dict.fromkeys([*writers, *(dm_peers or [])])),
        }


@dataclass
class RelaysConfig:
    """Where the agent's memory and identity are published."""

    urls: list[str] = setting([], "Relay URLs (ws:// or wss://) besides the embedded one, e.g. [\"wss://relay.damus.io\"].")
    embedded: EmbeddedRelayConfig = field(default_factory=EmbeddedRelayConfig, metadata={
        "doc": "The embedded relay: the [relays.embedded] table below."})
    embedded_host: str = setting(
        "127.0.0.1",
        "Address the embedded relay listens on: 127.0.0.1 (this machine only), or this machine's LAN address so "
        "another machine can reach it (keep [relays.embedded] allow_list on; docs/attach.md). An IP address. A "
        "change takes effect when the next didactyl starts with no client connected to the relay (`didactyl relay "
        "status` says when it does not).")
    embedded_port: int = setting(7447, "Port of the embedded relay (0: any free port). Taken by another program: the "
                                 "relay listens on a free port and says so; a change takes effect as embedded_host "
                                 "does.", min=0, max=65535)
    embedded_idle_exit_s: float = setting(
        300.0,
        "The embedded relay runs as its own process, shared by every didactyl using this data dir; it exits "
        "after this many seconds with no client connected (0: never).",
        min=0,
        max=86400,
    )
    timeout_s: float = setting(
        5.0, "Seconds to wait for a relay's answer (OK, EOSE) before counting it as timed out.", min=0.1, max=600
    )
    # Defences against a hostile relay (nostr/relay_guard.py; docs/security.md). Per relay unless said.
    verify_rate: float = setting(2000.0, "Signature checks per second per relay; past it the client stops reading that "
                                 "relay until the budget recovers (nothing is dropped).", min=1, max=1_000_000)
    verify_burst: float = setting(2000.0, "Signature checks a quiet relay may spend at once (a query's stored events).",
                                  min=1, max=1_000_000)
    frame_rate: float = setting(5000.0, "Frames of any kind read per second per relay, valid or not (bounds the CPU a "
                                "relay costs).", min=1, max=1_000_000)
    frame_burst: float = setting(5000.0, "Frames a quiet relay may send at once.", min=1, max=1_000_000)
    invalid_window: int = setting(200, "Recent frames judged together to tell whether a relay is mostly sending "
                                  "invalid frames.", min=10, max=100_000)
    max_invalid_share: float = setting(0.5, "Share of the last invalid_window frames that may be invalid (bad JSON, "
                                       "bad signatures, unknown messages) before the client hangs up on the relay.",
                                       min=0.01, max=0.99)
    penalty_base_s: float = setting(5.0, "Seconds to wait before reconnecting to a relay the client hung up on for "
                                    "invalid frames; doubles with every hang-up in a row.", min=0.1, max=86_400)
    penalty_max_s: float = setting(600.0, "Longest wait before reconnecting to such a relay (at least penalty_base_s).",
                                   min=0.1, max=86_400)
    failed_events_max: int = setting(10_000, "Events whose signature failed, remembered (for all relays together) so "
                                     "the same bad event is never verified twice; the oldest is forgotten past it.",
                                     min=100, max=10_000_000)


@dataclass
class StartupEventConfig:
    """One event the agent should have ([[agent.startup_events]]): published once, never duplicated."""

    kind: int = setting(1, "Event kind: 1 (a note), 0 (profile), 3 (contacts), 10002 (relay list) or another regular "
                        "or replaceable kind.", min=0, max=65535)
    content: str = setting("", "The event's content (a kind 0's is a JSON object).")
    tags: list[list[str]] = setting([], "Tags, e.g. [[\"t\", \"nostr\"]].")


@dataclass
class AgentConfig:
    """The agent's public identity (its kind 0 profile, kind 3 contacts)."""

    name: str = setting("didactyl", "Display name in the agent's kind 0 profile.")
    about: str = setting("An AI agent whose memory lives on Nostr.", "About text in the agent's kind 0 profile.")
    picture: str = setting("", "Picture URL in the agent's kind 0 profile.")
    contacts: list[str] = setting([], "Pubkeys (hex or npub) the agent follows, published as its kind 3 contact list.")
    publish_profile: bool = setting(True, "Publish profile, contacts and relay list (kinds 0, 3, 10002) on start, the "
                                    "startup events below, and the configured soul (kind 31120) when the relays have "
                                    "none yet.")
    startup_events: list[StartupEventConfig] = setting(
        [], "[[agent.startup_events]]: the events the agent should have (\"startup events are the intent\"). Each is "
        "published once and never again on later starts; a replaceable one is published again only when its "
        "declaration changes, and one declared here replaces the name/about/contacts-managed event of that kind.")


@dataclass
class AdminConfig:
    """The agent's admin: you."""

    pubkey: str = setting("", "Your public key (hex or npub): the agent reads your profile, contacts, relays and "
                              "notes, and answers your direct messages with every tool. Followed while running: a "
                              "change applies from the next message.")


@dataclass
class ToolsConfig:
    """Which tools the model is offered."""

    offer_aliases: bool = setting(True, "Offer the self-context aliases (my_kind0_profile, my_contacts, my_relays, "
                                  "my_notes) as tools of their own, as the self-context design says; false keeps the "
                                  "tool list short for small-context models.")
    post_notes_without_asking: bool = setting(False, "Let the agent publish a public kind 1 note (post_note) without "
                                              "asking: the same as \"post_note\" in [permissions] allow (in direct "
                                              "messages only with [permissions] admin_dms); false asks the person at "
                                              "the terminal first, and a turn with nobody to ask is refused.")


@dataclass
class MemoryConfig:
    """Short- and long-term memory limits, and the pluggable memory backend."""

    short_term_max_chars: int = setting(8000, "Most characters of short-term memory (injected into every prompt).",
                                        min=1, max=1_000_000)
    long_term_max_chars: int = setting(32000, "Most characters of long-term memory (fetched by a tool call).",
                                       min=1, max=1_000_000)
    backend: str = setting("recall", "Memory backend: \"recall\" (local full-text index), \"honcho\", or \"none\".",
                           choices=("recall", "honcho", "none"))
    sign_ahead_max_s: int = setting(5, "Most seconds a memory version we sign may be dated ahead of this clock (a "
                                    "burst of saves within one second is coalesced instead of dated ahead).",
                                    min=1, max=60)
    backend_context: str = setting("system", "Where the backend's context goes in each prompt: \"system\" (at the end "
                                   "of the system message, after the soul's system sections, as the Skald design has "
                                   "it) or \"after_history\" (its own system message after the history: everything "
                                   "before it stays the same from turn to turn, so providers' prefix caching keeps "
                                   "working).",
                                   choices=("system", "after_history"))
    index_long_term: bool = setting(True, "Let the recall backend index the long-term memory (a plaintext copy in "
                                    "recall.sqlite3, mode 0600, for search); false keeps only the encrypted copy on "
                                    "relays, and chat turns are still indexed.")


@dataclass
class HonchoConfig:
    """The honcho memory backend (used when [memory] backend = \"honcho\")."""

    base_url: str = setting("", "Honcho server URL (self-hosted servers included); empty: the backend is skipped.")
    api_key_env: str = setting("HONCHO_API_KEY", "Environment variable holding the Honcho API key.")
    workspace: str = setting("didactyl", "Honcho workspace id.")


@dataclass
class SoulSection:
    """One section of the soul template."""

    section: str = setting("", "Section name.")
    role: str = setting("system", "Message role: system, user or assistant.", choices=("system", "user", "assistant"))
    tool: str = setting("", "Context tool whose content becomes the text (or use content).")
    content: str = setting("", "Static text (instead of tool).")
    skip_if_empty: bool = setting(True, "Leave the section out when its text is empty.")
    audience: str = setting("", "Who may read it: admin (your own conversations only) or everyone (guests in direct "
                                "messages too). Empty: as its tool is declared (memory, tasks and your sections are "
                                "for the admin; the agent's public identity is for everyone); static text is for "
                                "everyone. docs/soul-event.md")


@dataclass
class SoulConfig:
    """The soul template: the ordered sections of every prompt."""

    file: str = setting("", "A soul file in the original list format (- section: / role: / tool: / skip_if_empty:).")
    sections: list[SoulSection] = setting([], "Ordered [[soul.sections]]; empty: the built-in default.")


@dataclass
class UiConfig:
    """The terminal interface."""

    theme: str = setting("didactyl-dark", "Theme name (themes/*.toml or a Textual built-in). A runtime switch is "
                         "remembered in state.toml, never written here.")
    themes_dir: str = setting("", "Extra folder of theme .toml files.")
    sidebar_below_columns: int = setting(100, "A terminal narrower than this many columns hides the sidebar, leaving "
                                         "the chat the width (F2/F3/F4 or ctrl+b show it). 0: never hide it.",
                                         min=0, max=1000)
    fast_streaming: bool = setting(True, "Paint streaming replies with didactyl's own fast path (needs a Textual "
                                   "version it is tested on; on any other, Textual's public MarkdownStream is used "
                                   "and the log says so). false: always Textual's public path (slower on long "
                                   "replies).")


@dataclass
class Config:
    llm: LlmConfig = field(default_factory=LlmConfig)
    relays: RelaysConfig = field(default_factory=RelaysConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    signer: SignerConfig = field(default_factory=SignerConfig)
    dm: DmConfig = field(default_factory=DmConfig)
    attach: AttachConfig = field(default_factory=AttachConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    permissions: PermissionsConfig = field(default_factory=PermissionsConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    honcho: HonchoConfig = field(default_factory=HonchoConfig)
    soul: SoulConfig = field(default_factory=SoulConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    keys: dict[str, str] = field(default_factory=dict)
    """[keys]: action = "key" remaps, e.g. send = "ctrl+j" (terminals swallow some keys)."""

    path: Path | None = None  # the file it came from (not a config key)
    # Where it is read from, even while no file is there yet (not a config key): the running process follows
    # [admin] and [dm] in it (service/live_policy.py). None: nothing is followed (a config built in code).
    origin: Path | None = None
    relays_override: list[str] | None = None
    """$DIDACTYL_RELAYS: this run's relays instead of ``[relays] urls`` (not a config key). ``relays.urls`` stays
    the file's, the intent published as the agent's relay list; an override is never published (docs/sync.md)."""

    invitation: str = field(default="", repr=False)
    """``didactyl attach --invite``: the invitation this run presents to the agent (not a config key, never
    written anywhere: it is used once)."""

    @property
    def run_relay_urls(self) -> list[str]:
        """The relays this run uses besides the embedded one: ``$DIDACTYL_RELAYS`` when set, else ``[relays] urls``."""
        return self.relays_override if self.relays_override is not None else self.relays.urls


# Every table of the file ([keys] aside), in Config's order: the section classes are the fields' factories.
SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Config)  # type: ignore[misc]
                             if isinstance(f.default_factory, type) and dataclasses.is_dataclass(f.default_factory)}
