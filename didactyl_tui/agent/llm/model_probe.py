"""The model list of an OpenAI-compatible server (``GET <api_base>/models``), bounded in time, size and count.

The standard library's HTTP client on a worker thread: no new dependency, nothing on the caller's loop.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from ...errors import AgentError

MAX_RESPONSE_BYTES = 1024 * 1024
MAX_MODELS = 500
MAX_NAME_CHARS = 200


def _models_urls(api_base: str) -> list[str]:
    base = api_base.rstrip("/")
    urls = [f"{base}/models"]
    if not base.endswith("/v1"):
        urls.append(f"{base}/v1/models")  # e.g. a local server given without its /v1
    return urls


def _get(url: str, api_key: str | None, timeout_s: float) -> Any:
    if not url.startswith(("http://", "https://")):
        raise AgentError(f"api_base must start with http:// or https:// (not {url.split('/')[0]!r})", "Model")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise AgentError(f"{url} answered {exc.code}", "Model") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AgentError(f"cannot reach {url}: {reason}", "Model") from None
    if len(body) > MAX_RESPONSE_BYTES:
        raise AgentError(f"{url} sent more than {MAX_RESPONSE_BYTES} bytes", "Model")
    try:
        return json.loads(body)
    except ValueError:
        raise AgentError(f"{url} did not answer with JSON", "Model") from None


def model_names(payload: Any) -> list[str]:
    """The ids in an OpenAI-style ``{"data": [{"id": ...}, ...]}`` (also a bare list); printable, bounded."""
    items = payload.get("data") if isinstance(payload, dict) else payload
    names: list[str] = []
    for item in items if isinstance(items, list) else ():
        name = item.get("id") if isinstance(item, dict) else item
        if isinstance(name, str) and name.strip() and len(name) <= MAX_NAME_CHARS and name.isprintable():
            names.append(name.strip())
        if len(names) >= MAX_MODELS:
            break
    return sorted(set(names))


def _list_models(api_base: str, api_key: str | None, timeout_s: float) -> list[str]:
    last: AgentError | None = None
    for url in _models_urls(api_base):
        try:
            return model_names(_get(url, api_key, timeout_s))
        except AgentError as exc:
            last = exc
    assert last is not None
    raise last


async def list_models(api_base: str, api_key: str | None, *, timeout_s: float = 10.0) -> list[str]:
    """The server's model ids, sorted; AgentError (one line) when it has no list or cannot be reached."""
    async with asyncio.timeout(2 * timeout_s + 1.0):  # two URLs at most, each bounded by the socket timeout
        return await asyncio.to_thread(_list_models, api_base, api_key, timeout_s)
