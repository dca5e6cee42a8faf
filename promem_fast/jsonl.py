"""Reading JSON lines so that no line, however malformed, can end the run that reads it.

``json.loads`` alone accepts values that fail later (a lone surrogate escape cannot be written as UTF-8, an
integer past ``sys.get_int_max_str_digits()`` raises for the whole line) and raises ``RecursionError`` on
deep nesting. :func:`decode_line` turns every such line into an :class:`~promem_fast.errors.InputError` or a
value, and :func:`unwritable_field` names the field that holds a value no output could carry.
"""

from __future__ import annotations

import json
import re
from typing import Any

from promem_fast.errors import InputError

SURROGATE = re.compile("[\ud800-\udfff]")
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with lone surrogates spelled as ``\\udXXX`` escapes, so an error about it can be written."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _HugeInteger:
    """A JSON integer too long for ``int()`` (over ``sys.get_int_max_str_digits()`` digits), kept as a marker.

    Parsing it would raise ``ValueError`` for the whole line; as a marker, validation can name its field.
    """

    def __init__(self, digits: int) -> None:
        self.digits = digits


MAX_INT_DIGITS = 4300
"""Python's default ``sys.get_int_max_str_digits()``: longer integers are refused (they cannot be read back)."""


def _parse_int(text: str) -> int | _HugeInteger:
    digits = len(text.lstrip("-"))
    return _HugeInteger(digits) if digits > MAX_INT_DIGITS else int(text)


def unwritable_field(record: Any) -> tuple[str, str] | None:
    """The path (``turns[2].text``) and problem of the first value that would crash a later write or read.

    A JSON escape such as ``\\ud800`` decodes to a lone surrogate that no UTF-8 file can hold, and an
    integer of thousands of digits cannot be read back; either would pass a type check and then end the
    run. Writing the record out as UTF-8 (C code) finds that nothing is wrong 1.5 times faster than visiting
    every value in Python (``benchmarks/bench_input.py``), so :func:`find_unwritable` runs only when it fails.
    """
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        return find_unwritable(record)
    return None


def find_unwritable(record: Any) -> tuple[str, str] | None:
    """:func:`unwritable_field` by visiting every key and value. The walk is iterative, so a record nested as
    deep as the parser allows cannot exhaust the stack."""
    stack: list[tuple[Any, str]] = [(record, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str) and SURROGATE.search(value):
            return path, "holds a lone UTF-16 surrogate escape (such as \\ud800), which is not text"
        if isinstance(value, _HugeInteger):
            return path, f"is an integer of {value.digits:,} digits, too long to read back"
        if isinstance(value, dict):
            for key, item in reversed(value.items()):
                sub = f"{path}.{printable(key)}" if path else printable(key)
                if SURROGATE.search(key):
                    return sub, "the key holds a lone UTF-16 surrogate escape, which is not text"
                stack.append((item, sub))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in reversed(list(enumerate(value))))
    return None


BOM = b"\xef\xbb\xbf"


def decode_line(raw: bytes, file: str, line: int) -> Any:
    """The JSON value of one line, or the :class:`InputError` saying why it has none."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return InputError(f"invalid UTF-8 at byte {exc.start}", file=file, line=line)
    try:
        return json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        return InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=file, line=line)
    except RecursionError:
        return InputError("invalid JSON: nested too deeply to read", file=file, line=line)
    except ValueError as exc:  # an integer over a lower sys.set_int_max_str_digits() limit
        return InputError(f"invalid JSON: {exc}", file=file, line=line)
