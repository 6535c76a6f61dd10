"""One exception family per layer; the UI and CLI turn any of them into one readable line.

Every error carries a short ``title`` (for a dialog/notification heading) and a ``message`` a person
understands. Nothing here may ever include secret key material.
"""

from __future__ import annotations


class DidactylError(Exception):
    """Base of every error the app raises on purpose."""

    title: str = "Error"

    def __init__(self, message: str, title: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if title is not None:
            self.title = title

    def __str__(self) -> str:
        return self.message

    def one_line(self) -> str:
        """The single line the UI and CLI show."""
        text = " ".join(self.message.split())
        return f"{self.title}: {text}"


class NostrError(DidactylError, ValueError):
    """Protocol-level problem: bad key, bad event, bad bech32, bad filter."""

    title = "Nostr"


class Nip44Error(NostrError):
    """NIP-44 encryption/decryption failed (bad payload, bad MAC, bad length...)."""

    title = "Encryption"


class RelayError(DidactylError):
    """Relay I/O problem: cannot connect, timed out, relay said no."""

    title = "Relay"


class AgentError(DidactylError):
    """The agent could not do what was asked (LLM error, tool error, memory limit...)."""

    title = "Agent"


class ConfigError(DidactylError):
    """Configuration problem; the message names the file, the key and what is wrong."""

    title = "Config"


class SignerRefusedError(NostrError):
    """The remote signer (NIP-46) answered, with an error: refused, unauthorized, not supported..."""

    title = "Remote signer"


class SignerKeyMismatchError(NostrError):
    """The remote signer (NIP-46) does not sign with the key it named, or no longer with the key the stored connection
    was made for. Retrying cannot help: the connection must be made again."""

    title = "Remote signer"


class SignerUnreachableError(RelayError):
    """The remote signer (NIP-46) did not answer in time, or its relays cannot be reached. Worth retrying later."""

    title = "Remote signer"
