"""A reply schema in the form OpenAI's strict structured outputs accept, where one exists.

OpenAI's ``"strict": true`` compiles the schema into a decoding constraint, but only for a subset of JSON
Schema, and rejects the whole request (HTTP 400, "Invalid schema") otherwise: every object must list all of
its properties as required and set ``additionalProperties: false``, and some keywords are refused (string
``minLength`` / ``maxLength``, tuples by ``prefixItems``). vLLM's and llama.cpp's servers take any schema and
ignore the flag.

:func:`strict_form` adds ``additionalProperties: false`` where a schema leaves it out and drops the length
bounds, which the engine checks again on the parsed reply anyway; a schema that only strict mode would
change the meaning of (an optional property, a tuple) has no strict form, and goes with ``"strict": false``
as written: the server then treats it as guidance, and the engine's own validation holds the reply to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNCHECKED = frozenset({"minLength", "maxLength"})
"""Keywords strict mode refuses that only narrow a value: dropped, the engine checks them after parsing."""
NO_STRICT_FORM = frozenset({"prefixItems", "oneOf", "allOf", "not", "patternProperties", "if", "then", "else"})
"""Keywords strict mode refuses whose meaning cannot be kept without them."""
SUBSCHEMA_LISTS = ("anyOf",)


class _NotStrict(Exception):
    """The schema has no strict form."""


def strict_form(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` as OpenAI's strict mode accepts it, or None when that would change what it accepts."""
    try:
        return _node(schema)
    except _NotStrict:
        return None


def _node(schema: Mapping[str, Any]) -> dict[str, Any]:
    if NO_STRICT_FORM & schema.keys():
        raise _NotStrict
    node = {k: v for k, v in schema.items() if k not in UNCHECKED}
    if "properties" in node:
        if set(node["properties"]) - set(node.get("required", ())):
            raise _NotStrict  # an optional property: strict mode would make the model always write it
        if node.get("additionalProperties", False) is not False:
            raise _NotStrict
        node["properties"] = {name: _node(sub) for name, sub in node["properties"].items()}
        node["additionalProperties"] = False
    if isinstance(node.get("items"), Mapping):
        node["items"] = _node(node["items"])
    for key in SUBSCHEMA_LISTS:
        if key in node:
            node[key] = [_node(sub) for sub in node[key]]
    return node
