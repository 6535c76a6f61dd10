"""The config tables about keys and agents elsewhere and the people who write to the agent: ``[signer]`` (the agent's
key in a NIP-46 remote signer), ``[dm]`` (direct messages to the agent) and ``[attach]`` (this app as a window onto an
agent that runs elsewhere). Fields of :class:`~didactyl_tui.config.Config`, documented like every other table."""

from __future__ import annotations

from dataclasses import dataclass

from .config_setting import setting


@dataclass
class SignerConfig:
    """Where the agent's key is: in this machine's key file (the default) or in a NIP-46 remote signer."""

    bunker: str = setting("", "A bunker:// URI from your remote signer (nsec.app, Amber, your own bunker): the agent's "
                              "key stays there; no key file is read or created. $DIDACTYL_BUNKER or --bunker wins. "
                              "Empty: the key file (or $DIDACTYL_NSEC). docs/remote-signer.md")
    request_timeout_s: float = setting(30.0, "Seconds to wait for the remote signer to answer one request (a signer on "
                                             "a phone may wait for a tap).", min=1, max=3600)
    auth_timeout_s: float = setting(300.0, "The most seconds one request waits in all, from when it was sent, once the "
                                           "signer asked for approval at a web address (auth_url, shown in the app); "
                                           "at least request_timeout_s. A new challenge never extends it: the save "
                                           "then ends with the reason, and what was saved waits on this device for "
                                           "the signer. In the app, \"Wait longer for the signer's approval\" gives "
                                           "it this long again.", min=1, max=86_400)
    ping_interval_s: float = setting(10.0, "Seconds between pings of a remote signer that stopped answering (the "
                                            "status bar says \"signer away\" until it answers).", min=0.1, max=3600)


# The agent's public identity: what a guest's prompt may show too (agent/audience.py), nothing of the admin's.
GUEST_TOOLS = ["agent_identity", "nostr_agent_profile", "nostr_agent_contacts", "nostr_agent_relays",
               "nostr_agent_notes", "my_npub", "my_pubkey"]


@dataclass
class DmConfig:
    """Direct messages to the agent (NIP-17): who may talk to it besides the admin, how many conversations are
    answered at once, what others may make it do, and how long a reply is retried."""

    allow: list[str] = setting([], "Pubkeys (hex or npub) whose NIP-17 direct messages the agent answers, besides "
                               "[admin] pubkey, as guests: their turns see only what is for everyone "
                               "(docs/direct-messages.md). Everyone else's are counted and dropped, never shown to the "
                               "model. Followed while running: a change applies from the next message.")
    max_queued: int = setting(64, "Most incoming gift wraps waiting to be opened, and most messages waiting for their "
                              "conversation's turn; past it new wraps are set aside (counted) and fetched again from "
                              "the relays once there is room.", min=1, max=10_000)
    max_parallel: int = setting(4, "Most conversations answered at once (one model turn each); messages of one "
                                "conversation are always answered one at a time, in order.", min=1, max=64)
    guest_tools: list[str] = setting(GUEST_TOOLS, "Tools the model may call in a conversation that is not the admin's "
                                     "own (an allow-listed sender, or a group, even one with the admin in it): by "
                                     "default only reading the agent's public identity, so nothing is written or "
                                     "published (no memory, soul, task or profile change, no note) and nothing of "
                                     "the admin's is read. The admin's own conversation has every tool. A call to any "
                                     "other tool is refused; the model is told why. Followed while running.")
    give_up_after_s: float = setting(86_400.0, "Seconds a written reply is retried (with backoff) before the message "
                                     "is given up as undelivered (said in the app and in serve's log).",
                                     min=1, max=30 * 86_400)
    retry_max_interval_s: float = setting(300.0, "Longest pause between two tries of a reply no relay of its "
                                          "recipient has taken yet (the pause doubles from 1 s up to this).",
                                          min=0.1, max=86_400)
    invitation_ttl_s: float = setting(3600.0, "Seconds an invitation stays valid: the one-use attach line `didactyl "
                                      "serve` prints while nobody is paired with the agent (and `didactyl invite` "
                                      "prints). Whoever presents it first becomes the admin. docs/attach.md",
                                      min=60, max=7 * 86_400)
    refusals_per_hour: int = setting(30, "Most refusals sent in an hour, in all: a one-line answer to a key the agent "
                                         "does not answer (not the admin, not on [dm] allow), at most one per key in "
                                         "six hours, sent once to the agent's own relays. 0: none (such messages are "
                                         "only counted).", min=0, max=10_000)
    prompt_report: bool = setting(True, "After each reply in the admin's own conversation, send the admin that "
                                        "turn's prompt assembly (sections, tools, tokens, sources; each section's "
                                        "text cut to a bound), in a gift wrap only the admin can open, of a kind chat "
                                        "clients do not show: what `didactyl attach` shows in its inspector. "
                                        "docs/attach.md")


@dataclass
class AttachConfig:
    """This app as a window onto an agent that runs elsewhere (``didactyl serve`` on another machine): no model runs
    here; what you type goes to the agent as NIP-17 direct messages from the admin's key. docs/attach.md"""

    agent: str = setting("", "The agent to attach to: its address (nprofile, as `didactyl serve` prints it), npub or "
                              "hex; `didactyl attach <address>` sets it for one run. Empty: the agent runs in this app "
                              "(the default).")
    relays: list[str] = setting([], "Relays where the agent reads its direct messages, besides those its address "
                                    "names (`--relay` adds one for a run): its relay list (kind 10050, else 10002) is "
                                    "looked up there, and without one the messages go there. Messages go only to the "
                                    "relays the agent reads, never elsewhere.")
    admin_key_file: str = setting("", "The admin's key file (your key, the one the agent's [admin] pubkey names) "
                                      "for attach; relative to the data dir. Empty: admin.key in the data dir, "
                                      "created on the first attach (its npub is shown to put in the agent's "
                                      "config). $DIDACTYL_ADMIN_NSEC wins.")
    admin_bunker: str = setting("", "Your admin key in a NIP-46 remote signer instead: its bunker:// URI (the "
                                    "connection is kept in admin-signer.json, 0600). Wins over the admin key file.")
    send_timeout_s: float = setting(10.0, "Seconds a message may take to reach a relay the agent reads (connecting "
                                          "included); past it the message is marked not delivered, with the "
                                          "relays' reasons, kept here, and sent (once) when one of them takes it.",
                                    min=1, max=600)
    max_undelivered: int = setting(64, "Most messages kept here waiting for a relay of the agent's to take them; "
                                       "past it a new message is refused until they are delivered.",
                                   min=1, max=10_000)
    reply_timeout_s: float = setting(900.0, "Seconds to wait for the agent's reply to a message before the turn is "
                                            "shown as unanswered (a later reply still shows when it comes).",
                                     min=1, max=86_400)
    report_wait_s: float = setting(30.0, "Seconds after a reply to wait for its prompt assembly from the agent before "
                                         "the inspector says \"not available\".", min=0.1, max=3600)
    report_before_reply_s: float = setting(
        2.0, "Seconds a reply waits to be shown for its prompt report, whose tool calls then show above it as in "
             "local mode (the agent sends both at once). Past it the reply shows, and calls that come later show "
             "below it; an agent that sent no report for its last reply is not waited for. 0: never wait.",
        min=0, max=60)
    history: int = setting(200, "Most past messages of the conversation with the agent fetched from the relays "
                                "when attaching. The relays are read back page by page (500 gift wraps per relay "
                                "a page) until these are certain, so wraps from strangers cannot crowd them out; "
                                "the three bounds below end the read sooner.", min=0, max=10_000)
    history_max_pages: int = setting(40, "Most pages read back for the history (and for a catch-up after a flood): "
                                         "each page is up to 500 gift wraps for you from each relay.",
                                     min=1, max=1_000)
    history_max_bytes: int = setting(64 * 1024 * 1024, "Most bytes of gift wraps read for the history (all relays "
                                                       "together), and for each catch-up after a flood.",
                                     min=64 * 1024, max=1024 * 1024 * 1024)
    history_timeout_s: float = setting(30.0, "Most seconds the history read (or a catch-up) may take; what was read "
                                             "by then is shown.", min=1, max=3600)
    max_waiting: int = setting(4096, "Gift wraps for you that may wait to be judged (by who sealed them) as they "
                                     "arrive; past it a new one is refused and read again from the relays once the "
                                     "wait has drained.", min=16, max=1_000_000)
    max_waiting_bytes: int = setting(32 * 1024 * 1024, "Bytes of gift wraps that may wait to be judged, as "
                                                       "max_waiting.", min=1024 * 1024, max=1024 * 1024 * 1024)
