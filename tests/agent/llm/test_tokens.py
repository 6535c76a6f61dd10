"""Token counting: the offline fallback (no litellm import, no network), memoization, message overheads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

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
