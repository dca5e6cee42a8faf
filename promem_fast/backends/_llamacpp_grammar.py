"""JSON schemas as llama.cpp grammars (GBNF), for the llama.cpp backend's constrained decoding.

A request's JSON schema becomes a GBNF grammar through llama-cpp-python's schema-to-grammar converter (the one
``response_format={"type": "json_object", "schema": ...}`` uses) and constrains decoding. The converter is
called directly instead of through ``response_format`` for two reasons: ``response_format`` silently falls
back to "any JSON" when a schema does not convert, and decoding the prompt's own token list is what keeps the
backend's token counts exact. A schema that does not convert raises :class:`BackendError` for that request.
What the converter enforces, checked with the schemas of ``tests/test_llamacpp.py``: ``type`` (also lists such
as ``["string", "null"]``), ``properties`` / ``required`` (nested objects, property order kept), ``items`` /
``prefixItems`` with ``minItems`` / ``maxItems``, ``enum``, ``const``, ``anyOf`` / ``oneOf``, ``$ref`` to
local definitions, string ``minLength`` / ``maxLength`` / ``pattern`` and the ``date``, ``time``,
``date-time`` and ``uuid`` formats. It does not enforce integer or number ``minimum`` / ``maximum`` /
``exclusiveMinimum`` / ``exclusiveMaximum``, ``multipleOf``, ``uniqueItems``, ``not`` or ``if`` / ``then``.
Integer bounds are therefore rewritten here: an integer bounded on both sides by at most
:data:`MAX_ENUM_RANGE` values becomes the ``enum`` of those values, which the grammar enforces exactly; an
integer bounded on one side only, or by a wider range, is constrained to being an integer and its bounds are
left to the engine's validation of the parsed reply. The other unenforced keywords are likewise only checked
after parsing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from promem_fast.deps import require
from promem_fast.errors import BackendError

logger = logging.getLogger(__name__)

MAX_ENUM_RANGE = 1024
"""Largest integer range (``maximum - minimum + 1``) rewritten into an ``enum`` so the grammar enforces it."""


def grammar_schema(schema: Any) -> Any:
    """A copy of ``schema`` with what the grammar converter would ignore rewritten into what it enforces.

    * a ``type`` list (``["integer", "null"]``) becomes ``anyOf`` one branch per type, each keeping the
      other keywords, because the converter drops every other keyword of a schema with a ``type`` list;
    * ``enum`` / ``const`` drop ``type`` (the converter would otherwise take the type list first);
    * an integer with both bounds spanning at most :data:`MAX_ENUM_RANGE` values becomes their ``enum``.

    Only keywords that hold subschemas are walked, so property names and ``enum`` values are left alone.
    """
    if isinstance(schema, list):
        return [grammar_schema(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    node = dict(schema)
    if "enum" in node or "const" in node:
        node.pop("type", None)
        return node
    kind = node.get("type")
    if isinstance(kind, list):
        rest = {key: value for key, value in node.items() if key != "type"}
        return grammar_schema({"anyOf": [{**rest, "type": t} for t in kind]})
    if kind == "integer":
        return _integer_schema(node)
    for key in ("properties", "patternProperties", "$defs", "definitions"):
        if isinstance(node.get(key), Mapping):
            node[key] = {name: grammar_schema(sub) for name, sub in node[key].items()}
    for key in ("items", "prefixItems", "anyOf", "oneOf", "allOf", "additionalProperties", "not"):
        if key in node and isinstance(node[key], (Mapping, list)):
            node[key] = grammar_schema(node[key])
    return node


def _integer_schema(node: dict[str, Any]) -> dict[str, Any]:
    """An integer schema whose bounds the grammar can enforce (an ``enum``) when the range is small."""
    low = node.get("minimum")
    if "exclusiveMinimum" in node and not isinstance(node["exclusiveMinimum"], bool):
        low = max(low, node["exclusiveMinimum"] + 1) if low is not None else node["exclusiveMinimum"] + 1
    high = node.get("maximum")
    if "exclusiveMaximum" in node and not isinstance(node["exclusiveMaximum"], bool):
        high = min(high, node["exclusiveMaximum"] - 1) if high is not None else node["exclusiveMaximum"] - 1
    if low is None and high is None:
        return node
    if low is not None and high is not None and 0 < int(high) - int(low) + 1 <= MAX_ENUM_RANGE:
        return {"enum": list(range(int(low), int(high) + 1))}
    logger.debug("integer bounds %s..%s are not enforced by the grammar (only checked after parsing)", low, high)
    return node


def gbnf_for(schema: Mapping[str, Any]) -> str:
    """The llama.cpp grammar (GBNF) that constrains decoding to JSON satisfying ``schema``.

    Raises :class:`BackendError` naming the schema when the converter cannot handle it, instead of the
    silent fall-back to "any JSON" of llama-cpp-python's ``response_format``.
    """
    converter = require("llama_cpp.llama_grammar", "cpu", "llama-cpp-python")
    text = json.dumps(grammar_schema(schema))
    try:
        return str(converter.json_schema_to_gbnf(text))
    except Exception as exc:  # the converter raises bare assertions on schemas it cannot handle
        raise BackendError(f"JSON schema cannot be turned into a llama.cpp grammar ({exc!r}): {text}") from exc
