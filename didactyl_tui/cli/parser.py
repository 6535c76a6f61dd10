"""The command line's parser and its error types (built before the TUI's first frame: imports nothing heavy)."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from ..errors import DidactylError

# Every document of the agent's (agent.documents.keys.DocumentKey: a test keeps the two the same). The memories are
# ``didactyl memory --type T VERB``; every other document is a command of its own (``didactyl soul VERB``).
DOCUMENT_TYPES = ("short_term", "long_term", "soul", "tasks", "profile", "contacts", "relays")
MEMORY_TYPES = DOCUMENT_TYPES[:2]
SELF_CONTEXT_HELP = {"profile": "the agent's public profile (kind 0)", "contacts": "the agent's contact list (kind 3)",
                     "relays": "the agent's relay list (kind 10002)"}


class UsageError(DidactylError):
    """Bad command-line input (exit 2)."""

    title = "Usage"


class CommandFailed(DidactylError):
    """The command ran but did not succeed (exit 1)."""

    title = "Failed"


class CommandParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), not the usage block."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see: {self.prog} --help)", "Usage")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="didactyl", description="A terminal chat client with an AI agent whose memory lives on "
                           "Nostr. With no command, opens the terminal app.")
    # Its own dest: "memory show --version EVENT_ID" fills "version" in the same namespace.
    parser.add_argument("--version", action="store_true", dest="print_version", help="print the version and exit")
    parser.add_argument("--config", metavar="PATH", help="config file (default: $DIDACTYL_CONFIG, then "
                        "$XDG_CONFIG_HOME/didactyl/config.toml)")
    parser.add_argument("--bunker", metavar="URI", help="the agent's key in a NIP-46 remote signer: its bunker:// URI "
                        "(wins over $DIDACTYL_BUNKER and [signer] bunker; a URI with a secret is seen by other users "
                        "of this machine in the process list: prefer those two)")
    opening = parser.add_mutually_exclusive_group()
    opening.add_argument("--continue", action="store_true", dest="open_last",
                         help="open the app on the most recent conversation")
    opening.add_argument("--session", metavar="ID", dest="open_session",
                         help="open the app on this conversation (an ID or a unique prefix: didactyl sessions list)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)

    p = sub.add_parser("keygen", help="create the agent's key file (<data dir>/agent.key, mode 0600)")
    p.add_argument("--force", action="store_true", help="replace an existing key (the old identity is lost)")

    p = sub.add_parser("whoami", help="print the agent's npub and hex public key (never the secret)")
    p.add_argument("--admin", action="store_true", help="your admin key's instead (the key `didactyl attach` talks to "
                   "the agent with; made, 0600, when there is none): what the agent's [admin] pubkey names")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("relay", help="serve this data dir's shared embedded relay in the foreground (exit 3 if one "
                       "already serves it)")
    p.add_argument("--host", help="address to listen on (default [relays] embedded_host: 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default [relays] embedded_port: 7447; 0 picks a free one)")
    p.add_argument("--db", metavar="PATH", help="SQLite file (default <data dir>/relay.sqlite3)")
    rsub = p.add_subparsers(dest="relay_command", metavar="[status]", parser_class=CommandParser)
    rs = rsub.add_parser("status", help="what the running relay enforces (allow-list, limits), and whether that is "
                         "what the config asks for; starts nothing (exit 1 when none runs)")
    rs.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("chat", help="one turn with the agent; prints the reply")
    p.add_argument("--message", "-m", required=True, metavar="TEXT", help="the message ('-' reads stdin)")
    p.add_argument("--session", metavar="ID", help="continue this conversation (default: a new one)")
    p.add_argument("--ephemeral", action="store_true",
                   help="leave no trace: the turn is not saved as a chat (with --session: read, never added to) "
                   "and the memory backend does not learn from it")
    p.add_argument("--json", action="store_true",
                   help='print {"session_id", "ephemeral", "reply", "tool_calls", "prompt", "cut"} '
                   '(session_id is null for a new ephemeral chat)')

    p.add_argument("--allow", action="append", default=[], metavar="NAME",
                   help="let the tool NAME act without asking for this turn (an MCP server's tool, write_file, "
                   "post_note; SERVER__* for a server's tools); repeatable. Without it such a call is denied "
                   "unless [permissions] allow lists it")
    sub.add_parser("acp", help="speak the Agent Client Protocol on stdin/stdout: an editor (Zed, toad) drives the "
                   "agent (docs/acp.md)")
    mcp = sub.add_parser("mcp", help="the configured MCP servers: list what they offer, test one")
    msub = mcp.add_subparsers(dest="mcp_command", required=True, metavar="VERB")
    p = msub.add_parser("list", help="start every configured server, print its state and its tools, stop it")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = msub.add_parser("test", help="start one server, print its state and tools; --call runs one of them")
    p.add_argument("server", metavar="NAME", help="the server's name ([[mcp.servers]] name)")
    p.add_argument("--call", metavar="TOOL", help="call this tool (its name on the server, or SERVER__TOOL)")
    p.add_argument("--arguments", metavar="JSON", help="the call's arguments, a JSON object (default {})")
    p.add_argument("--allow", action="append", default=[], metavar="NAME",
                   help="let the tool NAME act for this test (without it the call is denied, as in any headless "
                   "command, unless [permissions] allow lists it)")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = sub.add_parser("prompt", help="assemble the next prompt without calling the model (a dry run)")
    p.add_argument("--message", "-m", metavar="TEXT", help="the user's message to include ('-' reads stdin)")
    p.add_argument("--session", metavar="ID", help="include this conversation's history")
    p.add_argument("--json", action="store_true", help="print the prompt record as JSON")
    p.add_argument("--as", dest="as_sender", metavar="NPUB",
                   help="as that sender's direct-message turn would have it (the admin: everything; a [dm] allow "
                   "guest: only what is for everyone, and the guest tools)")

    signer = sub.add_parser("signer", help="the agent's key in a remote signer (NIP-46): connect to it again")
    gsub = signer.add_subparsers(dest="signer_command", metavar="ACTION", parser_class=CommandParser, required=True)
    p = gsub.add_parser("connect", help="connect to the signer a bunker:// URI names (with its secret), check that it "
                        "signs with the key it names, and keep the connection: replaces <data dir>/signer.json and "
                        "sets [signer] bunker (without the secret); nothing is replaced when it fails. Restart a "
                        "running app after it")
    p.add_argument("uri", nargs="?", default="-", metavar="URI", help="the bunker:// URI from your signer (default "
                   "'-': one line from stdin; given here, it is seen by other users of this machine in the process "
                   "list)")

    sub.add_parser("serve", help="run the agent headless: answer NIP-17 direct messages from the admin and "
                   "[dm] allow; logs to stderr; SIGTERM stops it after the current turn")
    p = sub.add_parser("attach", help="open the app as a window onto an agent that runs elsewhere (didactyl serve): "
                       "messages go to it as NIP-17 DMs from your admin key (docs/attach.md)")
    p.add_argument("agent", nargs="?", metavar="ADDRESS", help="the agent's address: the nprofile `didactyl serve` "
                   "prints, or its npub (default: [attach] agent)")
    p.add_argument("--relay", action="append", default=[], metavar="URL", help="a relay where the agent reads its "
                   "direct messages (besides those its address names; repeatable)")
    p.add_argument("--invite", metavar="SECRET", help="the one-use invitation `didactyl serve` (or `didactyl invite`) "
                   "printed: presented once, it makes your admin key the agent's admin")
    p = sub.add_parser("invite", help="make a new one-use invitation to pair an admin with the agent of this data dir "
                       "and print the attach line (replaces any open one; its presenter becomes the admin, replacing "
                       "the one set now); `didactyl serve` takes it while it runs")
    p.add_argument("--json", action="store_true", help="print JSON")

    soul = sub.add_parser("soul", help="the agent's soul (kind 31120): show, save, edit, publish, status, history, "
                          "diff, rollback")
    ssub = soul.add_subparsers(dest="document_command", metavar="ACTION", parser_class=CommandParser, required=True)
    _add_document_verbs(ssub, typed=False, plain=True)
    p = ssub.add_parser("publish", help="check the soul, then publish it as a new version (default: the soul "
                        "in the config or soul file)")
    p.add_argument("--file", metavar="PATH", help="a soul document (didactyl-soul/1 JSON) or a soul file in the "
                   "list format ('-' reads stdin)")
    p.add_argument("--plain", action="store_true", help="publish it unencrypted (default: NIP-44 to the agent)")
    p.add_argument("--json", action="store_true", help="print the event id and each relay's verdict as JSON")

    bundle = sub.add_parser("bundle", help="back up or restore the agent (signed events and conversations)")
    bsub = bundle.add_subparsers(dest="bundle_command", metavar="ACTION", parser_class=CommandParser, required=True)
    p = bsub.add_parser("export", help="write memory, soul, tasks, identity and conversations to FILE (0600)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = bsub.add_parser("import", help="verify every signature in FILE, then republish its events through the "
                        "outbox and restore its conversations")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true", help="print JSON")

    tasks = sub.add_parser("tasks", help="list the agent's tasks; or show, save, edit, status, history, diff, "
                           "rollback its task list")
    tasks.add_argument("--json", action="store_true", help="print JSON")
    tsub = tasks.add_subparsers(dest="document_command", metavar="ACTION", parser_class=CommandParser)
    _add_document_verbs(tsub, typed=False)

    mem = sub.add_parser("memory", help="the agent's memories (--type short_term or long_term): show, save, edit, "
                         "status, history, diff, rollback")
    msub = mem.add_subparsers(dest="document_command", metavar="ACTION", parser_class=CommandParser, required=True)
    _add_document_verbs(msub, typed=True)
    for name, what in SELF_CONTEXT_HELP.items():
        doc = sub.add_parser(name, help=f"{what}: show, save, edit, status, history, diff, rollback")
        dsub = doc.add_subparsers(dest="document_command", metavar="ACTION", parser_class=CommandParser,
                                  required=True)
        _add_document_verbs(dsub, typed=False)
    ident = sub.add_parser("identity", help="show, publish or adopt the agent's public profile, contacts and relays")
    isub = ident.add_subparsers(dest="identity_command", metavar="ACTION", parser_class=CommandParser, required=True)
    p = isub.add_parser("show", help="what the relays hold, and any drift from config.toml (publishes nothing)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = isub.add_parser("publish", help="publish config.toml's fields merged into the relays' versions "
                        "(fields it does not set are kept)")
    p.add_argument("--json", action="store_true", help="print each kind's event id and relay verdicts as JSON")
    p = isub.add_parser("adopt", help="take the relays' versions as ours: drift is no longer reported")
    p.add_argument("--json", action="store_true", help="print JSON")
    _add_sessions_parser(sub)
    return parser


def _memory_type(verb: str) -> Any:
    """``--type`` of ``didactyl memory VERB``: a memory; another document's name says which command it has."""

    def memory_type(value: str) -> str:
        if value in MEMORY_TYPES:
            return value
        if value in DOCUMENT_TYPES:
            raise argparse.ArgumentTypeError(f"{value!r} is not a memory: it has a command of its own "
                                             f"(didactyl {value} {verb})")
        raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from "
                                         + ", ".join(repr(t) for t in MEMORY_TYPES) + ")")

    return memory_type


def _add_document_verbs(sub: Any, *, typed: bool, plain: bool = False) -> None:
    """The verbs every document has (cli/documents.py); ``typed``: each takes ``--type``, which memory."""

    def verb(name: str, help_text: str, *, type_required: bool = True) -> Any:
        p = sub.add_parser(name, help=help_text)
        if typed:
            p.add_argument("--type", required=type_required, type=_memory_type(name), dest="memory_type",
                           metavar="{" + ",".join(MEMORY_TYPES) + "}",
                           help="which memory" + ("" if type_required else " (default: both)"))
        return p

    p = verb("show", "print the document's text (decrypted)")
    p.add_argument("--version", metavar="EVENT_ID", help="print a past version from the history instead (an id "
                   "or a prefix of at least 4 characters; e.g. your text that lost to a concurrent edit)")
    p.add_argument("--json", action="store_true",
                   help="print JSON with the event id, the relays and what is still pending in the outbox")
    p = verb("save", "replace the document (checked, then signed and published to every relay)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--content", metavar="TEXT", help="the new text")
    src.add_argument("--file", metavar="PATH", help="read the new text from a file ('-' for stdin)")
    if plain:
        p.add_argument("--plain", action="store_true", help="publish it unencrypted (default: NIP-44 to the agent)")
    p.add_argument("--json", action="store_true", help="print the event id and each relay's verdict as JSON")
    p = verb("edit", "edit the document's text in $VISUAL/$EDITOR; checked and saved when it changed")
    if plain:
        p.add_argument("--plain", action="store_true", help="publish it unencrypted (default: NIP-44 to the agent)")
    p.add_argument("--json", action="store_true", help="print the event id and each relay's verdict as JSON")
    p = verb("status", "which version each relay holds (read back by id); --fix sends the newest to lagging "
             "relays", type_required=False)
    p.add_argument("--fix", action="store_true", help="send the newest version to relays that lag")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = verb("history", "list every version seen here (own saves and other writers')")
    p.add_argument("--json", action="store_true", help="print JSON (ids, times, origins, sizes, notes; no text)")
    p = verb("diff", "a unified diff of two versions (the newer defaults to the one in use)")
    p.add_argument("older", metavar="OLDER", help="an event id or a prefix of at least 4 characters")
    p.add_argument("newer", metavar="NEWER", nargs="?", help="an event id or prefix (default: the one in use)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = verb("rollback", "save an older version's text again, as a new version")
    p.add_argument("version_id", metavar="EVENT_ID", help="an event id or a prefix of at least 4 characters")
    p.add_argument("--json", action="store_true", help="print the event id and each relay's verdict as JSON")


def _add_sessions_parser(sub: Any) -> None:
    """``sessions list|show|export|rename|delete`` (run by cli/sessions.py; defined here: the parser is built
    before the TUI's first frame, which must not import the command modules)."""
    ses = sub.add_parser("sessions", help="list, show, export, rename or delete saved chats")
    ssub = ses.add_subparsers(dest="sessions_command", metavar="ACTION", parser_class=CommandParser, required=True)
    p = ssub.add_parser("list", help="the saved chats, newest first (id, time, messages, title)")
    p.add_argument("--all", action="store_true", help="include chats with no message")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = ssub.add_parser("show", help="print a chat's messages")
    p.add_argument("session", metavar="ID", help="the session id (or a unique prefix)")
    p.add_argument("--json", action="store_true", help="print JSON: the session and its messages (OpenAI format)")
    p = ssub.add_parser("export", help="print a chat as markdown (or JSON)")
    p.add_argument("session", metavar="ID", help="the session id (or a unique prefix)")
    p.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    p.add_argument("--output", "-o", metavar="PATH", help="write to this file (mode 0600) instead of stdout")
    p = ssub.add_parser("rename", help="give a chat a new title")
    p.add_argument("session", metavar="ID", help="the session id (or a unique prefix)")
    p.add_argument("title", help="the new title")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = ssub.add_parser("delete", help="delete a chat with its messages (cannot be undone)")
    p.add_argument("session", metavar="ID", help="the session id (or a unique prefix)")
    p.add_argument("--json", action="store_true", help="print JSON")


# --- helpers ------------------------------------------------------------------------------------
