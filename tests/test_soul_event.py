"""The soul as a kind 31120 event (encrypted to self by default), read back by us and made by rust-nostr."""

from __future__ import annotations

import json

import pytest
from agent_support import AGENT_KEY, NOW, OTHER_KEY

from didactyl_tui.agent.soul import SoulTemplate, TemplateSection, default_template
from didactyl_tui.agent.soul_event import (
    MAX_SECTIONS,
    SOUL_FORMAT,
    SoulEventError,
    build_soul_event,
    choose_soul,
    read_soul_event,
    soul_filter,
    soul_from_json,
    soul_from_text,
    soul_to_json,
)
from didactyl_tui.agent.soul_lint import SoulLintError
from didactyl_tui.agent.tools.builtin import build_base_registry
from didactyl_tui.errors import AgentError
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.filters import matches
from didactyl_tui.nostr.kinds import SOUL

CUSTOM = SoulTemplate((
    TemplateSection("soul", "system", content="You are Ada. «Be brief.»\n\nNever guess."),
    TemplateSection("agent_identity", "system", tool="agent_identity", skip_if_empty=False),
    TemplateSection("greeting", "assistant", content="Hello"),
), "config")


def _event(doc: object, *, key=AGENT_KEY, encrypt: bool = True, d: str = "soul", kind: int = SOUL) -> Event:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    tags = [["d", d], ["app", "didactyl"]]
    if encrypt:
        text = nip44.encrypt(text, nip44.get_conversation_key(key.secret_hex(), key.public_key_hex))
        tags.append(["encrypted", "nip44"])
    return sign_event(key, kind=kind, content=text, created_at=NOW, tags=tags)


@pytest.mark.parametrize("template", [CUSTOM, default_template()])
def test_a_soul_round_trips_through_its_event_encrypted_and_in_the_clear(template: SoulTemplate) -> None:
    secret = build_soul_event(AGENT_KEY, template, created_at=NOW)
    assert secret.kind == SOUL and secret.d_tag == "soul" and secret.is_valid()
    assert ("encrypted", "nip44") in secret.tags
    assert "Ada" not in secret.content and "didactyl" not in secret.content
    public = build_soul_event(AGENT_KEY, template, created_at=NOW, encrypt=False)
    assert json.loads(public.content)["format"] == SOUL_FORMAT
    for ev in (secret, public):
        back = read_soul_event(ev, AGENT_KEY)
        assert back.sections == template.sections
        assert back.source == f"soul event {ev.id[:12]}"
        assert matches(soul_filter(AGENT_KEY.public_key_hex), ev)


def test_the_document_is_stable_and_names_exactly_one_source_per_section() -> None:
    doc = json.loads(soul_to_json(CUSTOM))
    assert doc["sections"][1] == {"section": "agent_identity", "role": "system", "tool": "agent_identity",
                                  "skip_if_empty": False}
    assert "tool" not in doc["sections"][0]
    assert soul_to_json(soul_from_json(soul_to_json(CUSTOM), "x")) == soul_to_json(CUSTOM)


def test_rust_nostr_writes_a_soul_we_read() -> None:
    nostr_sdk = pytest.importorskip("nostr_sdk")
    keys = nostr_sdk.Keys.parse(AGENT_KEY.secret_hex())
    doc = soul_to_json(CUSTOM)
    content = keys.nip44_encrypt(keys.public_key(), doc)
    tags = [nostr_sdk.Tag.parse(t) for t in (["d", "soul"], ["app", "didactyl"], ["encrypted", "nip44"])]
    rust_ev = (nostr_sdk.EventBuilder(nostr_sdk.Kind(SOUL), content).tags(tags)
               .custom_created_at(nostr_sdk.Timestamp.from_secs(NOW + 60)).finalize(keys))
    ours = Event.from_json(rust_ev.as_json())
    assert read_soul_event(ours, AGENT_KEY).sections == CUSTOM.sections
    # and rust-nostr decrypts ours
    mine = build_soul_event(AGENT_KEY, CUSTOM, created_at=NOW)
    assert json.loads(keys.nip44_decrypt(keys.public_key(), mine.content)) == json.loads(doc)


SEED_LIST = """\
- section: persona
  role: system
  content: |
    You are Skald.
    Keep it short.
- section: tasks
  role: system
  tool: task_list
  skip_if_empty: true
"""


@pytest.mark.parametrize("encrypt", [True, False])
def test_a_soul_written_as_the_seeds_write_it_is_read_as_our_json_is(encrypt: bool) -> None:
    back = read_soul_event(_event(SEED_LIST, encrypt=encrypt), AGENT_KEY)
    assert back.sections == (TemplateSection("persona", "system", content="You are Skald.\nKeep it short."),
                             TemplateSection("tasks", "system", tool="task_list", skip_if_empty=True))
    # What we publish stays the JSON document (docs/soul-event.md), whatever form we read.
    again = read_soul_event(build_soul_event(AGENT_KEY, back, created_at=NOW), AGENT_KEY)
    assert again.sections == back.sections
    assert json.loads(soul_to_json(again))["format"] == SOUL_FORMAT


@pytest.mark.parametrize(("text", "reason"), [
    ("- section: a\n  colour: red\n", "line 2: unknown key 'colour'"),
    ("- section: a\n  tool: my_npub\n  content: x\n", "needs exactly one of tool or content"),
    ("".join(f"- section: s{i}\n  content: x\n" for i in range(MAX_SECTIONS + 1)), "at most 64 allowed"),
    (f"- section: {'p' * 65}\n  content: x\n", "at most 64 characters"),
])
def test_a_bad_section_list_is_refused_with_the_same_bounds_as_json(text: str, reason: str) -> None:
    with pytest.raises(SoulEventError, match=reason) as caught:
        soul_from_text(text, "soul event abc")
    assert str(caught.value).startswith("soul event abc")


def test_a_soul_event_that_is_not_ours_or_not_a_soul_is_refused_with_the_event_named() -> None:
    good = build_soul_event(AGENT_KEY, CUSTOM, created_at=NOW)
    cases = [
        (_event(json.loads(soul_to_json(CUSTOM)), key=OTHER_KEY), "not by this agent"),
        (_event(json.loads(soul_to_json(CUSTOM)), kind=30078), "not a kind 31120"),
        (_event(json.loads(soul_to_json(CUSTOM)), d="other"), "d tag 'other'"),
        (Event.from_dict({**good.to_dict(), "created_at": NOW + 1}), "id does not match"),
        (Event.from_dict({**good.to_dict(), "sig": "22" * 64}), "bad signature"),
    ]
    for ev, reason in cases:
        with pytest.raises(SoulEventError, match=reason) as caught:
            read_soul_event(ev, AGENT_KEY)
        assert f"soul event {ev.id[:12]}" in str(caught.value)
        assert isinstance(caught.value, AgentError)


def test_an_encrypted_soul_we_cannot_decrypt_is_refused() -> None:
    conv = nip44.get_conversation_key(AGENT_KEY.secret_hex(), OTHER_KEY.public_key_hex)
    ev = sign_event(AGENT_KEY, kind=SOUL, content=nip44.encrypt(soul_to_json(CUSTOM), conv), created_at=NOW,
                    tags=[["d", "soul"], ["encrypted", "nip44"]])
    with pytest.raises(SoulEventError, match="cannot decrypt"):
        read_soul_event(ev, AGENT_KEY)


def _doc(*sections: object, **extra: object) -> dict:
    return {"format": SOUL_FORMAT, "sections": list(sections), **extra}


@pytest.mark.parametrize(("doc", "reason"), [
    ("not json {", "neither a didactyl-soul/1 JSON document nor a section list"),
    ("{ not json", "not valid JSON"),
    ("[" * 5000 + "]" * 5000, "not valid JSON"),
    ({"format": "didactyl-soul/9", "sections": []}, "not a didactyl-soul/1 document"),
    (_doc(), "has no sections"),
    (_doc(*[{"section": f"s{i}", "content": "x"} for i in range(MAX_SECTIONS + 1)]), "at most 64"),
    (_doc("text"), "section #1: a section must be a JSON object"),
    (_doc({"section": "persona", "content": "x", "colour": "red"}), "section 'persona': unknown key"),
    (_doc({"section": "persona", "content": 5}), "section 'persona': content must be a string"),
    (_doc({"section": "persona", "content": "x", "skip_if_empty": "no"}), "section 'persona': skip_if_empty"),
    (_doc({"section": "persona", "role": "narrator", "content": "x"}), "section 'persona': role must be"),
    (_doc({"section": "persona", "tool": "my_npub", "content": "x"}), "'persona' needs exactly one of tool or content"),
    (_doc({"section": "p" * 65, "content": "x"}), "at most 64 characters"),
    (_doc({"section": "", "content": "x"}), "needs a name"),
])
def test_a_bad_soul_document_is_refused_naming_the_section(doc: object, reason: str) -> None:
    with pytest.raises(SoulEventError, match=reason):
        read_soul_event(_event(doc), AGENT_KEY)


def test_a_soul_too_large_for_one_event_is_refused_before_signing() -> None:
    huge = SoulTemplate((TemplateSection("soul", content="x" * 70_000),), "config")
    with pytest.raises(SoulEventError, match="at most 65,535 fit"):
        build_soul_event(AGENT_KEY, huge, created_at=NOW)


def test_choose_soul_prefers_the_newest_good_soul_on_the_relays_and_says_why_it_skipped_one() -> None:
    registry = build_base_registry()
    initial = default_template()
    none_yet = choose_soul(initial, [], AGENT_KEY, registry)
    assert (none_yet.template, none_yet.event, none_yet.publish_initial, none_yet.warnings) == (initial, None, True, ())

    older = build_soul_event(AGENT_KEY, CUSTOM, created_at=NOW)
    bad_tool = SoulTemplate((*CUSTOM.sections, TemplateSection("weather", tool="weather_now")), "x")
    newer_bad = build_soul_event(AGENT_KEY, bad_tool, created_at=NOW + 10)
    stranger = build_soul_event(OTHER_KEY, default_template(), created_at=NOW + 20)
    chosen = choose_soul(initial, [older, newer_bad, stranger], AGENT_KEY, registry)
    assert chosen.event == older and chosen.template.sections == CUSTOM.sections and not chosen.publish_initial
    assert len(chosen.warnings) == 1 and "section 'weather' (#4): unknown tool 'weather_now'" in chosen.warnings[0]

    garbled = _event("not json")
    only_bad = choose_soul(initial, [garbled], AGENT_KEY, registry)
    assert only_bad.template == initial and only_bad.event is None and not only_bad.publish_initial
    assert only_bad.warnings == (f"soul event {garbled.id[:12]}: not a soul: neither a didactyl-soul/1 JSON document "
                                 "nor a section list ('- section: NAME' lines)",)


def test_choose_soul_lints_the_initial_soul_too() -> None:
    bad = SoulTemplate((TemplateSection("soul", content="a"), TemplateSection("soul", content="b")), "config")
    with pytest.raises(SoulLintError, match="section 'soul' \\(#2\\)"):
        choose_soul(bad, [], AGENT_KEY, build_base_registry())
