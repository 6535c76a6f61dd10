"""Startup events are the intent: published once, never duplicated, never over someone else's newer edit."""

from __future__ import annotations

import json

import pytest
from agent_support import AGENT_KEY, NOW, OTHER_KEY, profile_event
from relay_servers import RelayUnderTest, fast_client_kwargs

from didactyl_tui.agent.identity.startup_events import (
    INTENT_TAG,
    MAX_STARTUP_EVENTS,
    plan_startup_events,
    startup_event,
    startup_filters,
)
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr.event import sign_event
from didactyl_tui.nostr.pool import RelayPool

ME = AGENT_KEY.public_key_hex
PROFILE = startup_event(0, json.dumps({"name": "didactyl"}))
CONTACTS = startup_event(3, "", [["p", OTHER_KEY.public_key_hex]])
HELLO = startup_event(1, "Hello, Nostr! I am an agent.")


def test_everything_is_planned_on_a_first_start_and_nothing_on_the_next() -> None:
    intents = [PROFILE, CONTACTS, HELLO]
    assert plan_startup_events(intents, [], ME) == intents
    published = [i.sign(AGENT_KEY, created_at=NOW) for i in intents]
    assert all(ev.first_tag(INTENT_TAG) == i.digest for ev, i in zip(published, intents, strict=True))
    assert plan_startup_events(intents, published, ME) == []


def test_a_changed_intent_replaces_our_old_version_but_not_someone_elses_edit() -> None:
    ours = PROFILE.sign(AGENT_KEY, created_at=NOW)
    renamed = startup_event(0, json.dumps({"name": "ada"}))
    assert plan_startup_events([renamed], [ours], ME) == [renamed]
    edited_elsewhere = profile_event(AGENT_KEY, NOW + 10, name="set in another client")
    assert plan_startup_events([renamed], [ours, edited_elsewhere], ME) == []
    # a note is never re-posted, whatever else was posted since; a new note text is a new note
    note = HELLO.sign(AGENT_KEY, created_at=NOW)
    later = sign_event(AGENT_KEY, kind=1, content="gm", created_at=NOW + 99)
    other_note = startup_event(1, "Second hello")
    assert plan_startup_events([HELLO, other_note], [note, later], ME) == [other_note]


def test_events_of_other_authors_do_not_count() -> None:
    theirs = PROFILE.sign(OTHER_KEY, created_at=NOW)
    assert plan_startup_events([PROFILE], [theirs], ME) == [PROFILE]


@pytest.mark.parametrize(("args", "reason"), [
    ((True,), "kind must be an integer"),
    ((30078, ""), "ephemeral or addressable"),
    ((20001, ""), "ephemeral or addressable"),
    ((0, "not json"), "must be a JSON object"),
    ((1, "x" * 40_000), "at most 32,000 bytes"),
    ((1, "x", [["p"], []]), "non-empty lists of strings"),
    ((1, "x", "p"), "non-empty lists of strings"),
    ((1, "x", [[INTENT_TAG, "a"]]), "added by didactyl itself"),
])
def test_bad_declarations_are_refused_naming_where(args: tuple, reason: str) -> None:
    with pytest.raises(AgentError, match=reason) as caught:
        startup_event(*args, where="config.toml [[agent.startup_events]] #2")
    assert "[[agent.startup_events]] #2" in str(caught.value)


def test_a_replaceable_kind_declared_twice_and_too_many_events_are_refused() -> None:
    with pytest.raises(AgentError, match="kind 0 is replaceable: declare it once"):
        plan_startup_events([PROFILE, startup_event(0, "{}")], [], ME)
    with pytest.raises(AgentError, match=f"at most {MAX_STARTUP_EVENTS}"):
        plan_startup_events([startup_event(1, f"n{i}") for i in range(MAX_STARTUP_EVENTS + 1)], [], ME)


async def test_two_starts_against_a_real_relay_publish_each_intent_once(any_relay: RelayUnderTest) -> None:
    intents = [PROFILE, CONTACTS, HELLO]
    filters = startup_filters(ME, intents)
    assert filters == [{"authors": [ME], "kinds": [0, 3]}, {"authors": [ME], "kinds": [1], "limit": 200}]
    async with RelayPool([any_relay.url], **fast_client_kwargs()) as pool:
        for start in range(2):
            todo = plan_startup_events(intents, await pool.query(filters, timeout=3), ME)
            assert len(todo) == (3 if start == 0 else 0)
            for n, intent in enumerate(todo):
                assert (await pool.publish(intent.sign(AGENT_KEY, created_at=NOW + n), timeout=3)).any_accepted
        stored = await pool.query(filters, timeout=3)
    assert sorted(ev.kind for ev in stored) == [0, 1, 3]
