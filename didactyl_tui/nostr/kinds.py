"""Event kinds used by didactyl and the NIP-01 kind classes."""

from __future__ import annotations

from enum import Enum

METADATA = 0
TEXT_NOTE = 1
CONTACTS = 3
SEAL = 13  # NIP-59: a signed, encrypted rumor
DIRECT_MESSAGE = 14  # NIP-17: a chat message rumor (never signed, never published bare)
GIFT_WRAP = 1059  # NIP-59: a seal encrypted by a one-time key
RELAY_LIST = 10002
DM_RELAY_LIST = 10050  # NIP-17: where a user wants to receive gift wraps
CLIENT_AUTH = 22242
NOSTR_CONNECT = 24133  # NIP-46: requests to and replies from a remote signer (ephemeral)
# Ours, in the ephemeral range with no NIP's meaning: the event a remote signer signs on a first connect (and once for
# a connection kept from before that check) to prove it holds the key it named. Never published (and no relay would
# keep an ephemeral event); not an auth token anywhere (unlike 22242 or 27235).
SIGNER_KEY_CHECK = 21120
APP_DATA = 30078
SOUL = 31120  # the agent's soul template (addressable, NIP-44 to self by default)


class KindClass(str, Enum):
    REGULAR = "regular"
    REPLACEABLE = "replaceable"
    EPHEMERAL = "ephemeral"
    ADDRESSABLE = "addressable"


def kind_class(kind: int) -> KindClass:
    """NIP-01: 0, 3 and 10000..19999 replaceable; 20000..29999 ephemeral; 30000..39999 addressable."""
    if kind in (0, 3) or 10000 <= kind < 20000:
        return KindClass.REPLACEABLE
    if 20000 <= kind < 30000:
        return KindClass.EPHEMERAL
    if 30000 <= kind < 40000:
        return KindClass.ADDRESSABLE
    return KindClass.REGULAR


def is_replaceable(kind: int) -> bool:
    return kind_class(kind) is KindClass.REPLACEABLE


def is_ephemeral(kind: int) -> bool:
    return kind_class(kind) is KindClass.EPHEMERAL


def is_addressable(kind: int) -> bool:
    return kind_class(kind) is KindClass.ADDRESSABLE
