"""What stands between any request and a 500 or a leaked secret: input checks that answer 4xx naming the field,
and the redaction of API keys from every log line.

* Names in paths (users, session ids) follow :mod:`promem_fast.names`; memory ids fit SQLite's 64 bits.
* A JSON body may carry a ``\\ud800`` escape, which decodes to a lone surrogate that no UTF-8 response, log
  line or store row can hold: :func:`text_body` refuses it with a 422 naming the field, on every route.
* A key in the URL is refused (URLs end up in access logs, proxies and browser history), and
  :class:`RedactKeys` blanks any key that reaches a log line anyway.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Annotated, Any

from fastapi import HTTPException, Query, Request
from fastapi import Path as PathParam
from pydantic import AfterValidator

from promem_fast.errors import InputError
from promem_fast.jsonl import find_unwritable
from promem_fast.names import MAX_NAME_CHARS, name_problem
from promem_fast.store.filters import SUMMARY, checked

MAX_ID = 2**63 - 1
"""Largest memory id (SQLite's INTEGER is 64-bit signed)."""


def _name(value: str) -> str:
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


User = Annotated[str, PathParam(min_length=1, max_length=MAX_NAME_CHARS, description="the user whose memory is "
                                "meant"), AfterValidator(_name)]
SessionId = Annotated[str, PathParam(min_length=1, max_length=MAX_NAME_CHARS, description="a session's id"),
                      AfterValidator(_name)]
NodeId = Annotated[int, PathParam(ge=1, le=MAX_ID, description="a memory's id")]


def filters_query(filters: Annotated[str | None, Query(max_length=4000, description=SUMMARY)] = None
                  ) -> dict[str, Any] | None:
    """The ``filters`` query parameter read as JSON and checked by the rule searches use
    (:mod:`promem_fast.store.filters`); anything else is a 422 naming it."""
    if filters is None:
        return None
    try:
        value = json.loads(filters)
        if not isinstance(value, dict):
            raise InputError('must be a JSON object such as {"agent_id": "support-bot"}', field="filters")
        checked(value)  # the same refusals as a search's filters, before any work
    except (ValueError, InputError) as exc:
        msg = exc.message if isinstance(exc, InputError) else f"not JSON: {exc}"
        raise HTTPException(422, [{"loc": ["query", "filters"], "field": "query.filters", "msg": msg,
                                   "type": "value_error"}]) from None
    return value


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


async def text_body(request: Request) -> None:
    """415 for a body not sent as JSON (pydantic's reply to a form would not say why); 422 for a JSON body
    holding a lone surrogate anywhere, naming its field. Only a ``\\udXXX`` escape can
    make one (raw UTF-8 cannot), so bodies without that escape are not parsed a second time."""
    body = await request.body()
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if body and kind != "application/json" and not kind.endswith("+json"):
        raise HTTPException(415, f"the body must be JSON, sent with the header 'Content-Type: application/json' "
                                 f"(this request says {kind or 'no Content-Type'!r}; curl -d sends a form unless told)")
    if not _SURROGATE_ESCAPE.search(body):
        return
    try:
        value = json.loads(body)
    except ValueError:  # not JSON: FastAPI's own parsing answers for it
        return
    found = find_unwritable(value)
    if found is not None:
        path, problem = found
        field = f"body.{path}" if path else "body"
        raise HTTPException(422, [{"loc": ["body", *path.split(".")] if path else ["body"], "field": field,
                                   "msg": problem, "type": "value_error"}])


KEY_PARAMS = frozenset({"api_key", "apikey", "api-key", "key", "token", "access_token", "x-api-key",
                        "authorization", "bearer"})
"""Query parameters in which clients commonly put a secret."""

_KEY_TEXT = re.compile(r"pmk_[0-9A-Fa-f]{12}_[A-Za-z0-9_-]+")
_KEY_PARAM = re.compile(r"(?i)(\b(?:" + "|".join(re.escape(p) for p in sorted(KEY_PARAMS)) + r")=)[^&\s\"']*")
_BEARER = re.compile(r"(?i)(\bbearer\s+)\S+")


def key_in_url(request: Request) -> bool:
    """Whether the URL carries something that looks like an API key (by parameter name or by its form)."""
    return (any(name.lower() in KEY_PARAMS for name in request.query_params)
            or _KEY_TEXT.search(request.url.path + "?" + request.url.query) is not None)


URL_KEY_REFUSED = ("API keys are not accepted in the URL (URLs are logged); send the key in the "
                   "'Authorization: Bearer KEY' or 'X-API-Key: KEY' header, and revoke the one sent")


def redact(text: str) -> str:
    """``text`` with API keys, secret query parameters and bearer tokens replaced by ``[redacted]``."""
    text = _KEY_TEXT.sub("pmk_[redacted]", text)
    text = _KEY_PARAM.sub(r"\1[redacted]", text)
    return _BEARER.sub(r"\1[redacted]", text)


class RedactKeys(logging.Filter):
    """Blanks keys in a record's message and arguments (uvicorn's access line is a format string whose
    arguments hold the path and query, so each argument is redacted in place, keeping their types)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True


def redact_logs(*names: str) -> None:
    """Put :class:`RedactKeys` on the handlers of the root logger and of ``names`` (a filter on a handler sees
    records propagated from every logger below it, a filter on a logger only its own)."""
    flt = RedactKeys()
    for name in ("", *names):
        logger = logging.getLogger(name)
        logger.addFilter(flt)
        for handler in logger.handlers:
            handler.addFilter(flt)
