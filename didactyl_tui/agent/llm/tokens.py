"""Token counts for the prompt inspector and the history budget, fast enough for every keystroke.

Once ``agent.llm.preload()`` has imported litellm, counts come from ``litellm.token_counter`` for the
configured model (the provider's own tokenizer where litellm knows it). Before that — and in the CLI's
``prompt`` dry run, which must not pay litellm's ~8 s import — a fast offline fallback is used: tiktoken's
``cl100k_base`` read from the tokenizer files litellm bundles (found without importing litellm, so no
network), else about one token per four characters.

Counts of identical strings are memoized (prompt sections repeat across turns), so assembling a full
prompt again costs dictionary lookups.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
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
_litellm_counter: Callable[..., int] | None = None


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


def use_litellm_counter(counter: Callable[..., int] | None) -> None:
    """Called by ``agent.llm.preload()`` once litellm is fully imported (None switches back)."""
    global _litellm_counter
    _litellm_counter = counter
    _memo.clear()


def _litellm_from_sys_modules() -> Callable[..., int] | None:
    """litellm's counter when someone already finished importing it (never import it here)."""
    mod = sys.modules.get("litellm")
    if mod is None:
        return None
    spec = getattr(mod, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None  # still being imported in another thread
    counter = getattr(mod, "token_counter", None)
    return counter if callable(counter) else None


def counter_backend() -> str:
    """Which counter is in use: "litellm", "tiktoken" or "approx"."""
    if _litellm_counter is not None or _litellm_from_sys_modules() is not None:
        return "litellm"
    return "tiktoken" if _load_encoder() else "approx"


def approx_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def count_tokens(model: str, text: str) -> int:
    """Tokens in ``text`` for ``model`` (memoized; never raises, never touches the network)."""
    if not text:
        return 0
    counter = _litellm_counter or _litellm_from_sys_modules()
    backend = "litellm" if counter is not None else "local"
    key = (backend, model if counter is not None else "", text)
    cached = _memo.get(key)
    if cached is not None:
        return cached
    value: int | None = None
    if counter is not None:
        try:
            value = int(counter(model=model or "gpt-4o", text=text))
        except Exception as exc:  # an unknown model or tokenizer hiccup: fall back, quietly
            log.debug("litellm token_counter failed for %r: %s", model, exc)
    if value is None:
        encoder = _load_encoder()
        value = len(encoder.encode(text, disallowed_special=())) if encoder else approx_tokens(text)
    _memo.put(key, value)
    return value


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
