"""Property-based requests from the service's own OpenAPI (schemathesis) against a real ``promem serve`` on
127.0.0.1: every route, valid and invalid inputs, a bounded number of examples each; no answer may be a 5xx.

``make fuzz`` runs the same test with more examples per route (``PROMEM_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import make_session
from promem_fast.testing.service_processes import Server, new_key, wait_job

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis (the dev extra) is not installed")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402

EXAMPLES = int(os.environ.get("PROMEM_FUZZ_EXAMPLES", "12"))
"""Generated requests per route and mode (valid inputs, invalid inputs)."""


def test_no_generated_request_gets_a_server_error(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    key = new_key(path, "acme")
    server = Server(path, "--rate", "0")
    auth = {"Authorization": f"Bearer {key}"}
    try:
        with server.client(key) as http:  # some memory, so reads reach the store and not only 404s
            session = make_session("m1", "Maya", [("I adopted a beagle named Biscuit.", "Congratulations!")])
            wait_job(http, http.post("/v1/users/Maya/sessions", json={"sessions": [session.to_dict()]})
                     .json()["job_id"])
        schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
        sent: Counter[str] = Counter()
        errors: list[tuple[str, str, int, str]] = []
        operations = [result.ok() for result in schema.get_all_operations()]
        for operation in operations:
            for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

                @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
                          suppress_health_check=list(HealthCheck))
                @given(operation.as_strategy(generation_mode=mode))
                def call(case: Any) -> None:
                    response = case.call(base_url=server.url, headers=auth, timeout=60)
                    sent[operation.label] += 1
                    if response.status_code >= 500:
                        errors.append((operation.label, mode.value, response.status_code, response.text[:300]))
                try:
                    call()
                except Unsatisfiable:  # a route with no input has no invalid form to generate
                    assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label
    finally:
        server.stop()
    print(f"schemathesis: {sum(sent.values())} requests over {len(sent)} routes, {len(errors)} server errors")
    assert errors == []
    assert {op.label for op in operations} == set(sent)  # every route was tried
    assert len(sent) >= 13 and sum(sent.values()) >= len(sent) * EXAMPLES
