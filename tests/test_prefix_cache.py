"""Uncached prefill under a vLLM-style prefix cache: the model, and its counts in a run's statistics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conftest import scripted_config, tomas_sessions
from promem_fast.backends.base import Completion, GenerationRequest, Message
from promem_fast.engine import Engine
from promem_fast.prefix_cache import PrefixCacheModel, block_hashes
from promem_fast.testing.llm_scripted import ScriptedLLM
from promem_fast.run_summary import RunSummary


def _admit(cache: PrefixCacheModel, ids: list[int]) -> int:
    return cache.admit(block_hashes(ids), len(ids))


def test_a_shared_40_token_prefix_serves_two_whole_blocks() -> None:
    cache = PrefixCacheModel(capacity_tokens=1024)
    first = list(range(50))                       # 50 tokens: blocks 0-15, 16-31, 32-47 cached, 2 left over
    second = list(range(40)) + list(range(100, 120))  # agrees on tokens 0-39: blocks 0-15 and 16-31 only
    assert _admit(cache, first) == 50
    assert _admit(cache, second) == 60 - 32       # 28: the third block differs from token 40 on


def test_a_block_is_shared_only_from_the_first_token_on() -> None:
    cache = PrefixCacheModel(capacity_tokens=1024)
    head_a, head_b, tail = [7] * 16, [8] * 16, list(range(16))
    assert _admit(cache, head_a + [9] * 16 + [1]) == 33
    assert _admit(cache, head_b + tail + [1]) == 33
    # head A is cached and so is a block equal to the tail, but only after head B: one block reused
    assert _admit(cache, head_a + tail + [1]) == 33 - 16


def test_a_prompt_cached_to_its_end_still_prefills_its_last_block() -> None:
    cache = PrefixCacheModel(capacity_tokens=1024)
    assert _admit(cache, list(range(48))) == 48
    assert _admit(cache, list(range(48))) == 16   # vLLM computes at least the last token: its block
    assert _admit(cache, list(range(49))) == 1    # one token past three cached blocks


def test_capacity_evicts_the_least_recently_used_tail_first() -> None:
    cache = PrefixCacheModel(capacity_tokens=48)  # three blocks
    a = list(range(32))                           # blocks A0, A1
    c = list(range(500, 532))                     # blocks C0, C1: four in all, one must go
    assert _admit(cache, a) == 32
    assert _admit(cache, c) == 32
    assert len(cache) == 3
    # A1 (A's tail, least recently used) went, A0 stayed: 33 tokens of A again reuse one block
    assert _admit(cache, a + [9]) == 33 - 16
    roomy = PrefixCacheModel(capacity_tokens=64)
    for ids in (a, c):
        _admit(roomy, ids)
    assert _admit(roomy, a + [9]) == 1


# ------------------------------------------------------------------------------ in a run's statistics
class WordIds(ScriptedLLM):
    """The scripted model with a word-level tokenizer: the engine gets each prompt's ids (``encode``) and
    the reply reports them as its prompt tokens. Records the ids it was sent, in order."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.vocab: dict[str, int] = {}
        self.sent: list[tuple[int, ...]] = []

    def encode(self, messages: Sequence[Message], date: str | None = None) -> list[int]:
        words = [w for m in messages for w in (f"<{m['role']}>", *m["content"].split())]
        return [self.vocab.setdefault(w, len(self.vocab)) for w in words]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        out = super().generate(requests)
        self.sent.extend(r.prompt_ids or () for r in requests)
        return [Completion(c.text, len(r.prompt_ids or ()), c.completion_tokens, c.finish_reason)
                for r, c in zip(requests, out)]


def _expected_uncached(prompts: list[tuple[int, ...]]) -> int:
    """Written apart from the product's hashing: a prompt reuses the whole 16-token blocks of its longest
    common prefix with any earlier prompt of the session (at most up to its second-last token)."""
    total = 0
    for k, p in enumerate(prompts):
        best = 0
        for q in prompts[:k]:
            common = next((i for i, (x, y) in enumerate(zip(p, q)) if x != y), min(len(p), len(q)))
            best = max(best, common)
        total += len(p) - 16 * min(best // 16, (len(p) - 1) // 16)
    return total


def test_run_stats_count_uncached_prefill_per_stage_and_session() -> None:
    cfg = scripted_config()
    cfg.driver, cfg.max_in_flight = "round", 1  # one session at a time, its requests sent in slot order
    session = tomas_sessions(1)[0]
    llm = WordIds(cfg.llm)
    graph = Engine(cfg, llm=llm).extract([session])[0]
    stages = graph.stats.stages
    total = graph.stats.total()
    assert total.calls == len(llm.sent) > 3
    assert total.prompt_tokens == sum(len(p) for p in llm.sent)
    assert total.uncached_prefill_tokens == _expected_uncached(llm.sent)
    assert total.uncached_prefill_tokens < total.prompt_tokens / 2  # the session block is prefilled once
    assert all(st.uncached_prefill_tokens <= st.prompt_tokens for st in stages.values())
    assert "uncached_prefill_tokens" in graph.to_dict()["stats"]["stages"][next(iter(stages))]
    # the count is the session's own: the same with other sessions in flight and with the other driver
    cfg2 = scripted_config()
    cfg2.max_in_flight = 4
    again = Engine(cfg2, llm=WordIds(cfg2.llm)).extract(tomas_sessions(3))
    assert again[0].stats.to_dict(timings=False) == graph.stats.to_dict(timings=False)


def test_without_token_ids_every_prompt_token_counts_as_uncached() -> None:
    cfg = scripted_config()
    graph = Engine(cfg, llm=ScriptedLLM(cfg.llm)).extract(tomas_sessions(1))[0]
    for st in graph.stats.stages.values():
        assert st.uncached_prefill_tokens == st.prompt_tokens


def test_the_run_summary_shows_uncached_prefill() -> None:
    cfg = scripted_config()
    engine = Engine(cfg, llm=WordIds(cfg.llm))
    summary = RunSummary()
    for graph in engine.extract(tomas_sessions(2)):
        summary.add(graph)
    table = summary.table()
    assert "uncached" in table.splitlines()[1]
    total_row = next(line for line in table.splitlines() if line.startswith("total"))
    assert str(summary.stats.total().uncached_prefill_tokens) in total_row.split()


def test_the_run_summary_says_not_counted_where_the_backend_gave_no_token_ids() -> None:
    """The scripted backend hands the engine no prompt ids: its uncached column must not show a number (it
    would be every prompt token, not a count of prefix reuse)."""
    cfg = scripted_config()
    summary = RunSummary()
    for graph in Engine(cfg, llm=ScriptedLLM(cfg.llm)).extract(tomas_sessions(2)):
        summary.add(graph)
    total = summary.stats.total()
    assert total.prompt_tokens > 0
    rows = {line.split()[0]: line for line in summary.table().splitlines()[2:]
            if line.split()[0] in (*summary.stats.stages, "total")}
    called = [name for name, st in summary.stats.stages.items() if st.calls]
    assert called and all("not counted" in rows[name] for name in [*called, "total"])
    assert str(total.prompt_tokens) in rows["total"].split()  # the prompt column still shows the tokens sent
