"""Token counting: the offline fallback (no litellm import, no network), memoization, message overheads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from didactyl_tui.agent.llm import tokens


def run_fresh(code: str) -> dict:
    """Run ``code`` in a clean interpreter (nothing imported yet) and return the JSON it prints."""
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    # A proxy that goes nowhere: any attempt to download a tokenizer would fail loudly, not silently succeed.
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9", NO_PROXY="")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                         timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_offline_fallback_is_tiktoken_from_litellms_bundle_without_importing_litellm() -> None:
    result = run_fresh("""
        import json, os, sys
        from didactyl_tui.agent.llm import tokens
        n = tokens.count_tokens("anthropic/claude-sonnet-4-5", "hello world")
        print(json.dumps({
            "n": n,
            "backend": tokens.counter_backend(),
            "litellm_imported": "litellm" in sys.modules,
            "folder": str(tokens.bundled_tokenizer_dir()),
            "env_left": os.environ.get("TIKTOKEN_CACHE_DIR"),
        }))
    """)
    assert result == {
        "n": 2,  # cl100k_base: "hello", " world"
        "backend": "tiktoken",
        "litellm_imported": False,
        "folder": result["folder"],
        "env_left": None,  # the environment is left as it was
    }
    assert result["folder"].endswith(os.path.join("litellm", "litellm_core_utils", "tokenizers"))


def test_counts_are_memoized_and_plausible() -> None:
    text = "The agent remembers what matters. " * 200
    first = tokens.count_tokens("m", text)
    assert 1000 < first < 2000
    assert tokens.count_tokens("m", text) == first
    assert tokens.count_tokens("m", "") == 0


def test_approximation_when_no_tokenizer() -> None:
    assert tokens.approx_tokens("abcd" * 10) == 10
    assert tokens.approx_tokens("abc") == 1


def test_message_text_covers_content_parts_and_tool_calls() -> None:
    msg = {"role": "assistant", "content": [{"type": "text", "text": "part one"}, {"type": "image_url"}],
           "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]}
    assert tokens.message_text(msg) == 'part one\nadd\n{"a": 1}'
    assert tokens.message_text({"role": "assistant", "content": None}) == ""


def test_message_tokens_add_the_chat_overhead() -> None:
    msgs = [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "hi"}]
    expected = sum(tokens.count_tokens("m", m["content"]) + tokens.PER_MESSAGE_OVERHEAD for m in msgs)
    assert tokens.count_message_tokens("m", msgs) == expected + tokens.REPLY_PRIMING
    assert tokens.count_message_tokens("m", []) == 0
    assert tokens.count_tokens_any("m", msgs) == tokens.count_message_tokens("m", msgs)
    assert tokens.count_tokens_any("m", "hello world") == tokens.count_tokens("m", "hello world")


def test_memo_is_bounded() -> None:
    memo = tokens._Memo(3)
    for i in range(5):
        memo.put(("b", "m", str(i)), i)
    assert len(memo) == 3 and memo.get(("b", "m", "0")) is None and memo.get(("b", "m", "4")) == 4


def test_a_prompts_texts_are_counted_in_one_round_trip_and_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """count_texts (what the service calls on a worker thread for a whole prompt): the texts not memoized go to the
    counter together, once each; its counts are kept; when it cannot count (no helper runs) each is estimated,
    and nothing is kept, so the next prompt asks again."""
    asked: list[list[str]] = []
    works = True

    def helper(texts: list[str]) -> list[int]:
        asked.append(list(texts))
        if not works:
            raise RuntimeError("no helper runs")
        return [1000 + len(t) for t in texts]

    monkeypatch.setattr(tokens, "_remote_counter", tokens._remote_counter)  # as it was, after the test
    tokens.use_remote_counter(helper)
    salt = os.urandom(8).hex()
    a, b = f"first {salt}", f"second {salt}"
    assert tokens.count_texts("m", [a, b, a, ""]) == {a: 1000 + len(a), b: 1000 + len(b), "": 0}
    assert asked == [[a, b]]
    assert tokens.count_texts("m", [b, a]) == {a: 1000 + len(a), b: 1000 + len(b)} and len(asked) == 1  # memoized
    c = f"third {salt}"
    works = False
    assert tokens.count_texts("m", [a, c]) == {a: 1000 + len(a), c: tokens.approx_tokens(c)}
    works = True
    assert tokens.count_tokens("m", c) == 1000 + len(c)  # the estimate was not kept: asked again
    assert asked[1:] == [[c], [c]]
