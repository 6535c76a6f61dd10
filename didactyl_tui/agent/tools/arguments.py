"""A tool call's arguments in the model's own terms: what a schema asks for and what was sent, in words, for the
error the model reads when a call does not fit (registry.py checks a call against its tool's schema with these)."""

from __future__ import annotations

import json
from typing import Any


def quoted(text: str, limit: int = 80) -> str:
    """A name or value as JSON text (double quotes, escapes), cut to ``limit`` characters."""
    out = json.dumps(text, ensure_ascii=False)
    return out if len(out) <= limit else out[:limit - 2] + '…"'


def words_for(schema: dict[str, Any]) -> str:
    """What a parameter's schema asks for, in words: ``one of "short_term" or "long_term"``, ``a whole number``."""
    if "enum" in schema:
        values = [json.dumps(v, ensure_ascii=False) for v in schema["enum"]]
        return values[0] if len(values) == 1 else f"one of {', '.join(values[:-1])} or {values[-1]}"
    kind = schema.get("type")
    if kind == "array":
        item = schema.get("items") or {}
        return f"a list of {_plural(item)}" if item.get("type") or "enum" in item else "a list"
    return _KIND_WORDS.get(kind or "", "a value")


_KIND_WORDS = {"string": "text", "integer": "a whole number", "number": "a number",
               "boolean": "true or false", "object": "a JSON object"}


def _plural(item: dict[str, Any]) -> str:
    if "enum" in item:
        return f"values from {', '.join(json.dumps(v, ensure_ascii=False) for v in item['enum'])}"
    return {"string": "texts", "integer": "whole numbers", "number": "numbers", "boolean": "true/false values",
            "object": "JSON objects", "array": "lists"}.get(item.get("type", ""), "values")


def value_words(value: Any) -> str:
    """What the model sent, in words: ``the text "3"``, ``the number 3.5``, ``null``, ``a list of 2 items``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        number = json.dumps(value)
        return f"the number {number if len(number) <= 40 else number[:39] + '…'}"
    if isinstance(value, str):
        return f"the text {quoted(value)}"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "a JSON object"
    return type(value).__name__


def check_type(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list) and all(check_type(v, schema.get("items", {})) for v in value)
    if kind == "object":
        return isinstance(value, dict)
    return True
