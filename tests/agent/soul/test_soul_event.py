"""The soul as a kind 31120 event (encrypted to self by default), written and read by the document store (the
soul's codec), and made by rust-nostr."""

from __future__ import annotations

import json

import pytest
from agent_support import AGENT_KEY, NOW, OTHER_KEY, make_store, soul_event

from didactyl_tui.agent.documents.codec import DocumentError
from didactyl_tui.agent.documents.keys import DocumentKey
from didactyl_tui.agent.soul.content import MAX_SECTIONS, SOUL_FORMAT, SoulEventError, read_soul_text, soul_to_json
from didactyl_tui.agent.soul.template import SoulTemplate, TemplateSection, default_template
from didactyl_tui.nostr import nip44
from didactyl_tui.nostr.event import Event, sign_event
from didactyl_tui.nostr.filters import matches
from didactyl_tui.nostr.kinds import SOUL
from didactyl_tui.nostr.pool import RelayPool

SOUL_DOC = DocumentKey.SOUL


def _store():  # type: ignore[no-untyped-def]
    return make_store(AGENT_KEY, RelayPool([]))


async def _read(ev: Event) -> SoulTemplate:
    return (await _store().read(ev))[0]

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
async def test_a_soul_round_trips_through_its_event_encrypted_and_in_the_clear(template: SoulTemplate) -> None:
    store = _store()
    secret = await store.events.build(SOUL_DOC, template, NOW, None)
    assert secret.kind == SOUL and secret.d_tag == "soul" and secret.is_valid()
    assert ("encrypted", "nip44") in secret.tags and ("app", "didactyl") in secret.tags
    # Ciphertext, not the soul: no JSON of it, and it decrypts (to the agent alone) to exactly that soul. (A short
    # word such as "Ada" turns up in random base64 about once in 250 events: never a test.)
    with pytest.raises(ValueError):
        json.loads(secret.content)
    plain = nip44.decrypt(secret.content, nip44.get_conversation_key(AGENT_KEY.secret_hex(), AGENT_KEY.public_key_hex))
    assert plain == soul_to_json(template) and soul_to_json(template) not in secret.content
    public = await store.events.build(SOUL_DOC, template, NOW, "ab" * 32, encrypt=False)
    assert json.loads(public.content)["format"] == SOUL_FORMAT and ("prev", "ab" * 32) in public.tags
    for ev in (secret, public):
        back = await _read(ev)
        assert back.sections == template.sections
        assert back.source == f"soul event {ev.id[:12]}"
        assert matches(SOUL_DOC.filter(AGENT_KEY.public_key_hex), ev)


async def test_rust_nostr_writes_a_soul_we_read() -> None:
    nostr_sdk = pytest.importorskip("nostr_sdk")
    keys = nostr_sdk.Keys.parse(AGENT_KEY.secret_hex())
    doc = soul_to_json(CUSTOM)
    content = keys.nip44_encrypt(keys.public_key(), doc)
    tags = [nostr_sdk.Tag.parse(t) for t in (["d", "soul"], ["app", "didactyl"], ["encrypted", "nip44"])]
    rust_ev = (nostr_sdk.EventBuilder(nostr_sdk.Kind(SOUL), content).tags(tags)
               .custom_created_at(nostr_sdk.Timestamp.from_secs(NOW + 60)).finalize(keys))
    ours = Event.from_json(rust_ev.as_json())
    assert (await _read(ours)).sections == CUSTOM.sections
    # and rust-nostr decrypts ours
    mine = await _store().events.build(SOUL_DOC, CUSTOM, NOW, None)
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
async def test_a_soul_written_as_the_seeds_write_it_is_read_as_our_json_is(encrypt: bool) -> None:
    back = await _read(_event(SEED_LIST, encrypt=encrypt))
    assert back.sections == (TemplateSection("persona", "system", content="You are Skald.\nKeep it short."),
                             TemplateSection("tasks", "system", tool="task_list", skip_if_empty=True))
    # What we publish stays the JSON document (docs/soul-event.md), whatever form we read.
    published = await _store().events.build(SOUL_DOC, back, NOW, None, encrypt=False)
    assert json.loads(published.content)["format"] == SOUL_FORMAT
    assert (await _read(published)).sections == back.sections


@pytest.mark.parametrize(("text", "reason"), [
    ("- section: a\n  colour: red\n", "line 2: unknown key 'colour'"),
    ("- section: a\n  tool: my_npub\n  content: x\n", "needs exactly one of tool or content"),
    ("".join(f"- section: s{i}\n  content: x\n" for i in range(MAX_SECTIONS + 1)), "at most 64 allowed"),
    (f"- section: {'p' * 65}\n  content: x\n", "at most 64 characters"),
])
def test_a_bad_section_list_is_refused_with_the_same_bounds_as_json(text: str, reason: str) -> None:
    with pytest.raises(SoulEventError, match=reason) as caught:
        read_soul_text("soul event abc", text)
    assert str(caught.value).startswith("soul event abc")


async def test_a_soul_event_that_is_not_ours_or_not_a_soul_is_refused_with_the_event_named() -> None:
    good = soul_event(AGENT_KEY, CUSTOM, NOW)
    cases = [
        _event(json.loads(soul_to_json(CUSTOM)), key=OTHER_KEY),
        _event(json.loads(soul_to_json(CUSTOM)), kind=31121),
        _event(json.loads(soul_to_json(CUSTOM)), d="other"),
        Event.from_dict({**good.to_dict(), "created_at": NOW + 1}),
        Event.from_dict({**good.to_dict(), "sig": "22" * 64}),
    ]
    for ev in cases:
        with pytest.raises(DocumentError, match=f"event {ev.id[:12]} is not a version") as caught:
            await _read(ev)
        assert f"event {ev.id[:12]}" in str(caught.value)


async def test_an_encrypted_soul_we_cannot_decrypt_is_refused() -> None:
    conv = nip44.get_conversation_key(AGENT_KEY.secret_hex(), OTHER_KEY.public_key_hex)
    ev = sign_event(AGENT_KEY, kind=SOUL, content=nip44.encrypt(soul_to_json(CUSTOM), conv), created_at=NOW,
                    tags=[["d", "soul"], ["encrypted", "nip44"]])
    with pytest.raises(DocumentError, match=f"soul event {ev.id[:12]} does not decrypt"):
        await _read(ev)


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
async def test_a_bad_soul_document_is_refused_naming_the_section(doc: object, reason: str) -> None:
    ev = _event(doc)
    with pytest.raises(DocumentError, match=reason) as caught:
        await _read(ev)
    assert f"soul event {ev.id[:12]}" in str(caught.value)


async def test_a_soul_that_does_not_lint_is_refused_on_read_and_before_signing() -> None:
    bad_tool = SoulTemplate((*CUSTOM.sections, TemplateSection("weather", tool="weather_now")), "x")
    with pytest.raises(DocumentError, match="section 'weather' \\(#4\\): unknown tool 'weather_now'"):
        await _read(soul_event(AGENT_KEY, bad_tool, NOW))
    twice = SoulTemplate((TemplateSection("soul", content="a"), TemplateSection("soul", content="b")), "config")
    with pytest.raises(DocumentError, match="section 'soul' \\(#2\\)"):
        await _store().events.build(SOUL_DOC, twice, NOW, None)


async def test_a_soul_too_large_for_one_event_is_refused_before_signing() -> None:
    huge = SoulTemplate((TemplateSection("soul", content="x" * 70_000),), "config")
    with pytest.raises(DocumentError, match="at most 65,535 fit"):
        await _store().events.build(SOUL_DOC, huge, NOW, None)
