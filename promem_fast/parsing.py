"""Turning a model's reply into a value that matches the role's JSON schema.

Small local models wrap JSON in prose or code fences, stop in the middle of a list, quote numbers or
return a bare list where an object was asked for. Each of these is repaired here when the repair invents
nothing (a truncated list loses its unfinished last element, it never gains one); anything else raises
:class:`ReplyError` so the engine retries the request, and after the last attempt records the failure
with the raw reply. Every repair is named, and the names end up in the session's statistics.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from promem_fast.requests import ReplyError

_ASCII_LETTERS = string.ascii_letters.encode("ascii")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_LITERAL = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", re.S)


def parse_reply(text: str, schema: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """Parse ``text`` against ``schema``; returns ``(value, repairs)`` or raises :class:`ReplyError`."""
    repairs: list[str] = []
    raw = text.strip()
    if not raw:
        raise ReplyError("empty reply")
    value = _loads_lenient(raw, schema, repairs)
    value = validate(value, schema, repairs)
    return value, repairs


def _loads_lenient(raw: str, schema: Mapping[str, Any], repairs: list[str]) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    fenced = _FENCE.search(raw)
    if fenced and fenced.group(1).strip():
        inner = fenced.group(1).strip()
        try:
            value = json.loads(inner)
            repairs.append("code fence removed")
            return value
        except json.JSONDecodeError:
            raw = inner
    opener = _first_opener(raw, schema)
    if opener < 0:
        raise ReplyError("no JSON value in reply")
    end, last_cut = _scan(raw, opener)
    if end is not None:
        try:
            value = json.loads(raw[opener:end])
        except json.JSONDecodeError as exc:
            raise ReplyError(f"malformed JSON: {exc.msg}") from exc
        if opener > 0 or end < len(raw.rstrip()):
            repairs.append("surrounding prose removed")
        return value
    if last_cut is None:
        raise ReplyError("truncated JSON with no complete element")
    cut, open_brackets = last_cut
    closing = "".join("}" if b == "{" else "]" for b in reversed(open_brackets))
    try:
        value = json.loads(raw[opener:cut] + closing)
    except json.JSONDecodeError as exc:
        raise ReplyError(f"truncated JSON could not be closed: {exc.msg}") from exc
    repairs.append("truncated reply closed after its last complete element")
    return value


def _first_opener(raw: str, schema: Mapping[str, Any]) -> int:
    """Index of the first ``{`` or ``[`` that can start the expected value (objects preferred for objects)."""
    wanted = "{" if _types(schema) == ("object",) else None
    positions = [i for i in (raw.find("{"), raw.find("[")) if i >= 0]
    if not positions:
        return -1
    if wanted and raw.find(wanted) >= 0:
        return raw.find(wanted)
    return min(positions)


def _scan(text: str, start: int) -> tuple[int | None, tuple[int, tuple[str, ...]] | None]:
    """Walk the JSON value that opens at ``start`` once.

    Returns the index just past its matching close bracket (None when the text ends first) and, for a
    value cut short, where its last complete element ends (a value inside an array, or a ``key: value``
    pair inside an object) with the brackets still open there, so the caller can close it.
    """
    stack: list[str] = []
    in_string = False
    escape = False
    expect_key = False  # inside an object, the next string is a key
    last_cut: tuple[int, tuple[str, ...]] | None = None
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
                if stack[-1] == "{" and expect_key:
                    expect_key = False
                else:
                    last_cut = (i + 1, tuple(stack))
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append(ch)
            expect_key = ch == "{"
        elif ch in "]}":
            stack.pop()
            if not stack:
                return i + 1, None
            last_cut = (i + 1, tuple(stack))
            expect_key = False
        elif ch == ",":
            expect_key = stack[-1] == "{"
        elif ch in "-0123456789tfn":
            literal = _LITERAL.match(text, i)
            if literal and literal.end() < n:  # a literal that reached the end of the text may be cut short
                i = literal.end()
                last_cut = (i, tuple(stack))
                continue
        i += 1
    return None, last_cut


# --------------------------------------------------------------------------------------- schema
def _types(schema: Mapping[str, Any]) -> tuple[str, ...]:
    t = schema.get("type")
    if t is None:
        return ()
    return (t,) if isinstance(t, str) else tuple(t)


def validate(value: Any, schema: Mapping[str, Any], repairs: list[str], path: str = "$") -> Any:
    """Check ``value`` against the subset of JSON Schema our prompts use, applying lossless repairs.

    Supported: type (incl. lists of types), properties, required, items, prefixItems, enum, minItems, maxItems,
    minimum, maximum, minLength. Repairs: a bare list wrapped into the single array property of an
    object schema; integers written as strings; numbers where strings are wanted; an over-long list cut
    to ``maxItems``; list items of the wrong type dropped (each named).
    """
    types = _types(schema)
    if value is None:
        if "null" in types or not types:
            return None
        raise ReplyError(f"{path}: null where {sorted(types)} expected")
    if "object" in types and not isinstance(value, dict):
        value = _bare_list(value, schema, types, repairs, path)
    if isinstance(value, dict) and "object" in types:
        return _object(value, schema, repairs, path)
    if "array" in types:
        return _array(value, schema, repairs, path)
    if "enum" in schema:
        return _enum(value, schema["enum"], repairs, path)
    for name, check in _SCALARS:  # in this order: "true" may be a boolean, "3" an integer, before a string
        if name in types:
            found = check(value, schema, types, repairs, path)
            if found is not _OTHER:
                return found
    if not types:
        return value
    raise ReplyError(f"{path}: expected {sorted(types)}, got {type(value).__name__}")


_OTHER: Any = object()
"""A scalar check's answer when the value is not of its type but the schema allows a later one."""


def _bare_list(value: Any, schema: Mapping[str, Any], types: tuple[str, ...], repairs: list[str], path: str) -> Any:
    """A bare list where an object with one array property was asked, wrapped as that property."""
    arrays = [k for k, s in schema.get("properties", {}).items() if "array" in _types(s)]
    if isinstance(value, list) and len(arrays) == 1 and set(schema.get("required", [])) <= {arrays[0]}:
        repairs.append(f"{path}: bare list wrapped as {arrays[0]!r}")
        return {arrays[0]: value}
    if not any(t in types for t in ("array", "string", "integer", "number", "boolean")):
        raise ReplyError(f"{path}: expected an object, got {type(value).__name__}")
    return value


def _object(value: dict[str, Any], schema: Mapping[str, Any], repairs: list[str], path: str) -> dict[str, Any]:
    """The schema's properties of ``value``: an optional property whose value is invalid is dropped, as an
    invalid list item is (one turn's unreadable list does not cost the other turns' details), while an
    invalid or missing required one is an error. A key of a closed object (``additionalProperties: false``)
    that the schema does not name is dropped and named (a turn that was not asked about)."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    for key in required:
        if key not in value:
            raise ReplyError(f"{path}: missing required field {key!r}")
    if schema.get("additionalProperties") is False:
        repairs.extend(f"{path}: dropped key {key!r}, which the schema does not name"
                       for key in value if key not in properties)
    out: dict[str, Any] = {}
    for key, sub in properties.items():
        if key not in value:
            continue
        try:
            out[key] = validate(value[key], sub, repairs, f"{path}.{key}")
        except ReplyError as exc:
            if key in required:
                raise
            repairs.append(f"dropped field: {exc}")
    return out


def _array(value: Any, schema: Mapping[str, Any], repairs: list[str], path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ReplyError(f"{path}: expected a list, got {type(value).__name__}")
    item_schema = schema.get("items", {})
    prefix = schema.get("prefixItems", [])  # a tuple's positions, each with its own schema
    items: list[Any] = []
    for idx, item in enumerate(value):
        try:
            items.append(validate(item, prefix[idx] if idx < len(prefix) else item_schema, repairs,
                                  f"{path}[{idx}]"))
        except ReplyError as exc:
            repairs.append(f"dropped item: {exc}")
    if value and not items:
        raise ReplyError(f"{path}: no item of the list is valid")
    max_items = schema.get("maxItems")
    if max_items is not None and len(items) > max_items:
        repairs.append(f"{path}: {len(items)} items cut to maxItems={max_items}")
        items = items[:max_items]
    if len(items) < schema.get("minItems", 0):
        raise ReplyError(f"{path}: fewer than {schema['minItems']} items")
    return items


def _enum(value: Any, allowed: list[Any], repairs: list[str], path: str) -> Any:
    if value in allowed:
        return value
    if isinstance(value, str):
        folded = {str(a).lower(): a for a in allowed}
        if value.strip().lower() in folded:
            repairs.append(f"{path}: enum value case-folded")
            return folded[value.strip().lower()]
    raise ReplyError(f"{path}: {value!r} is not one of {allowed}")


def _boolean(value: Any, schema: Mapping[str, Any], types: tuple[str, ...], repairs: list[str], path: str) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        repairs.append(f"{path}: boolean written as string")
        return value.strip().lower() == "true"
    if "string" not in types:
        raise ReplyError(f"{path}: expected true/false, got {value!r}")
    return _OTHER


def _integer(value: Any, schema: Mapping[str, Any], types: tuple[str, ...], repairs: list[str], path: str) -> Any:
    number = value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        repairs.append(f"{path}: integer written as string")
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int):
        if isinstance(number, float) and number.is_integer():
            number = int(number)
        elif "string" not in types:
            raise ReplyError(f"{path}: expected an integer, got {value!r}")
        else:
            return _OTHER
    _check_range(number, schema, path)
    return number


def _number(value: Any, schema: Mapping[str, Any], types: tuple[str, ...], repairs: list[str], path: str) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_range(value, schema, path)
        return value
    return _OTHER


def _string(value: Any, schema: Mapping[str, Any], types: tuple[str, ...], repairs: list[str], path: str) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        repairs.append(f"{path}: number written where a string was asked")
        value = str(value)
    if not isinstance(value, str):
        raise ReplyError(f"{path}: expected a string, got {type(value).__name__}")
    if len(value.strip()) < schema.get("minLength", 0):
        raise ReplyError(f"{path}: string shorter than {schema['minLength']}")
    return value


_SCALARS: tuple[tuple[str, Callable[[Any, Mapping[str, Any], tuple[str, ...], list[str], str], Any]], ...] = (
    ("boolean", _boolean), ("integer", _integer), ("number", _number), ("string", _string),
)


def _check_range(number: float, schema: Mapping[str, Any], path: str) -> None:
    if "minimum" in schema and number < schema["minimum"]:
        raise ReplyError(f"{path}: {number} is below the minimum {schema['minimum']}")
    if "maximum" in schema and number > schema["maximum"]:
        raise ReplyError(f"{path}: {number} is above the maximum {schema['maximum']}")


# --------------------------------------------------------------------------------------- language
def dominant_script(text: str) -> str | None:
    """The writing system most letters of ``text`` belong to (LATIN, CJK, CYRILLIC, ...), or None.

    Plain ASCII text is decided at its first letter. Otherwise ASCII letters are counted on the text's
    ASCII bytes in C, and only the non-ASCII characters (in English text a few quotes and dashes) get a
    Unicode name lookup each.
    """
    if text.isascii():  # the common case
        return "LATIN" if any(ch.isalpha() for ch in text) else None
    ascii_part = text.encode("ascii", "ignore")
    latin = len(ascii_part) - len(ascii_part.translate(None, _ASCII_LETTERS))
    counts: dict[str, int] = {"LATIN": latin} if latin else {}
    for ch in _NON_ASCII.findall(text):
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            script = name.split(" ", 1)[0] if name else "UNKNOWN"
            if script in ("HIRAGANA", "KATAKANA", "HANGUL"):
                script = "CJK"
            counts[script] = counts.get(script, 0) + 1
    if not counts:
        return None
    return max(sorted(counts), key=counts.__getitem__)
