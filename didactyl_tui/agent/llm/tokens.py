"""Token counts for the prompt inspector and the history budget, fast enough for every keystroke.

Every count is tiktoken's ``cl100k_base`` (what ``litellm.token_counter`` itself uses for most models), read from
the tokenizer files litellm bundles — found without importing litellm, so no network — else about one token per
four characters. One tokenizer, whatever the model and wherever litellm runs, so the same text always counts the
same (``litellm.token_counter`` loads a second, native copy of the tokenizer and more: ~110 MiB, measured).

With the model helper process (``[llm] worker_process``, the default), the counting happens there
(``agent.llm.use_helper`` installs its counter): the app loads no tokenizer at all (~40 MiB), and in the helper
the encoding is the one object litellm's own default encoding would be (tiktoken keeps one per name). While no
helper runs (it starts when a model is needed, and stops when unused) a count is an estimate (~4 characters a token),
never memoized: prompts are counted after their turn has started the helper (:func:`counts_estimated` says which).

A count may be a round trip to the helper (or, here, a long text's tokenization): never on an event loop's thread.
The service counts a prompt's texts in one batch on a worker thread (:func:`count_texts`) and assembles with the
numbers (agent/soul/assembly.py); the helper's client refuses a wait on a loop's thread (the count is then estimated).
Counts of identical strings are memoized (prompt sections repeat across turns), so counting a full prompt again
costs dictionary lookups.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("didactyl.tokens")

# OpenAI's chat format costs a few tokens per message and for priming the reply.
PER_MESSAGE_OVERHEAD = 4
REPLY_PRIMING = 3
_CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
_CL100K_CACHE_KEY = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"  # sha1 of the URL: tiktoken's cache file name

_lock = threading.Lock()
_encoder: Any = None  # tiktoken Encoding, None = not tried yet, False = unavailable
# The model helper's counts of some texts, in one round trip (it raises when it cannot).
_remote_counter: Callable[[list[str]], list[int]] | None = None


class _Memo:
    """A small thread-safe LRU of (backend, model, text) -> count."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> int | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: tuple[str, str, str], value: int) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


_memo = _Memo(2048)


def bundled_tokenizer_dir() -> Path | None:
    """litellm's bundled tiktoken cache folder, located without importing litellm."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / "litellm_core_utils" / "tokenizers"
        if (folder / _CL100K_CACHE_KEY).is_file():
            return folder
    return None


def _load_encoder() -> Any:
    """tiktoken's cl100k_base from the bundled file, or False when that is impossible offline."""
    global _encoder
    with _lock:
        if _encoder is not None:
            return _encoder
        folder = bundled_tokenizer_dir()
        try:
            import tiktoken
        except ImportError:
            tiktoken = None  # type: ignore[assignment]
        if folder is None or tiktoken is None:
            # Without the bundled file tiktoken would try to download it: never from here.
            log.info("token counts: no offline tokenizer, using ~4 characters per token")
            _encoder = False
            return _encoder
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        try:
            _encoder = tiktoken.get_encoding("cl100k_base")
        except Exception as exc:  # a broken cache file must not break prompt assembly
            log.warning("token counts: tiktoken failed (%s), using ~4 characters per token", exc)
            _encoder = False
        finally:
            # litellm sets the same folder itself on import; otherwise leave the environment as we found it.
            if previous is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous
        return _encoder


def use_remote_counter(counter: Callable[[list[str]], list[int]] | None) -> None:
    """Count in another process from now on (``agent.llm.start_worker``: the model helper's, given a list of texts,
    their counts in order); None: here."""
    global _remote_counter
    _remote_counter = counter


def counter_backend() -> str:
    """Which counter is in use: "helper" (the model helper process's tiktoken), "tiktoken" or "approx"."""
    if _remote_counter is not None:
        return "helper"
    return "tiktoken" if _load_encoder() else "approx"


def approx_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def count_tokens(model: str, text: str) -> int:
    """Tokens in ``text`` (memoized; never raises, never touches the network). ``model`` does not change the
    count (one tokenizer for all: see the module's docstring); it is the callers' context. Blocking (a round trip
    to the helper, or a tokenization here): from a worker thread in an app."""
    return count_texts(model, (text,))[text]


def count_texts(model: str, texts: Iterable[str]) -> dict[str, int]:
    """Each text's tokens (as :func:`count_tokens`), those not memoized counted together: one round trip to the
    helper for a whole prompt. Blocking: from a worker thread in an app."""
    counts: dict[str, int] = {}
    missing: list[str] = []
    for text in texts:
        if text in counts:
            continue
        cached = _memo.get(("cl100k", "", text)) if text else 0
        if cached is None:
            missing.append(text)
            counts[text] = 0  # a place kept; filled below
        else:
            counts[text] = cached
    if not missing:
        return counts
    counter = _remote_counter
    if counter is not None:
        try:
            values = [int(v) for v in counter(missing)]
            if len(values) != len(missing):
                raise ValueError(f"{len(values)} counts for {len(missing)} texts")
        except Exception as exc:  # no helper runs now (it starts when a model is needed): estimates, not kept
            log.debug("the model helper did not count: %s", exc)
            counts.update((text, approx_tokens(text)) for text in missing)
            return counts
    else:
        values = [count_here(text) for text in missing]
    for text, value in zip(missing, values, strict=True):
        counts[text] = value
        _memo.put(("cl100k", "", text), value)
    return counts


def counts_estimated() -> bool:
    """Whether :func:`count_tokens` gives estimates now: counts belong to the model helper and none runs."""
    if _remote_counter is None:
        return False
    from .worker_client import worker

    return not worker().running


def count_here(text: str) -> int:
    """The count made in this process (what the helper runs for the app), not memoized."""
    encoder = _load_encoder()
    return len(encoder.encode(text, disallowed_special=())) if encoder else approx_tokens(text)


def message_text(message: Mapping[str, Any]) -> str:
    """The countable text of one OpenAI-format message (content parts and tool calls included)."""
    content = message.get("content")
    parts: list[str] = []
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        parts.append(str(fn.get("name", "")))
        args = fn.get("arguments", "")
        parts.append(args if isinstance(args, str) else json.dumps(args))
    if message.get("name"):
        parts.append(str(message["name"]))
    return "\n".join(p for p in parts if p)


def count_message_tokens(model: str, messages: Iterable[Mapping[str, Any]]) -> int:
    """Tokens for a list of chat messages: each message's text plus the chat format's overhead."""
    total = 0
    n = 0
    for message in messages:
        n += 1
        total += PER_MESSAGE_OVERHEAD + count_tokens(model, message_text(message))
    return total + (REPLY_PRIMING if n else 0)


def count_tokens_any(model: str, text_or_messages: str | Iterable[Mapping[str, Any]]) -> int:
    """``count_tokens`` for a string, ``count_message_tokens`` for a message list."""
    if isinstance(text_or_messages, str):
        return count_tokens(model, text_or_messages)
    return count_message_tokens(model, text_or_messages)


def clear_cache() -> None:
    _memo.clear()
