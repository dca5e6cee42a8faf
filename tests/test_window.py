"""The auto window (``max_in_flight: 0``): sized from the KV cache over the working set measured on the run."""

from __future__ import annotations

from conftest import scripted_config, tomas_sessions
from test_prefix_cache import WordIds

from promem_fast.driver.window import MEASURED_SESSIONS, WORKING_SET_TOKENS, WindowSizer, step_working_set
from promem_fast.engine import Engine
from promem_fast.prefix_cache import block_hashes


def test_a_step_holds_shared_prefix_blocks_once() -> None:
    # two 70-token prompts agreeing on their first 64 tokens (4 whole blocks), replies of 10 and 20 tokens:
    # vLLM holds the 4 shared blocks once, each prompt's own 6 tokens in a block of its own, and the replies
    a = list(range(64)) + [100, 101, 102, 103, 104, 105]
    b = list(range(64)) + [200, 201, 202, 203, 204, 205]
    assert step_working_set([(block_hashes(a), 70, 10), (block_hashes(b), 70, 20)]) == 64 + 6 + 6 + 10 + 20
    # a prompt without ids counts whole
    assert step_working_set([(None, 70, 10), (block_hashes(b), 70, 20)]) == 80 + 64 + 6 + 20


def test_the_window_follows_the_measured_working_set_once_enough_sessions_are_seen() -> None:
    sizer = WindowSizer(100_000)
    assert sizer.window() == 100_000 // WORKING_SET_TOKENS  # nothing measured: the estimate
    for session in range(MEASURED_SESSIONS - 1):
        sizer.observe(session, 1_000)
        sizer.observe(session, 2_000)  # a session's peak step counts
    assert sizer.window() == 20  # still fewer sessions than needed
    sizer.observe("last", 2_000)
    assert sizer.window() == 50  # 100,000 tokens / 2,000 per session
    for session in range(MEASURED_SESSIONS, 3 * MEASURED_SESSIONS):
        sizer.observe(session, 100_000)
    assert sizer.window() == 8  # large sessions: clamped to the smallest window


class KVWordIds(WordIds):
    """The word-id scripted model stating a KV cache size, as the vLLM backend does once started."""

    kv_cache_tokens = 740_000


def test_a_run_resizes_its_auto_window_to_the_sessions_it_sees() -> None:
    cfg = scripted_config()
    cfg.max_in_flight = 0
    llm = KVWordIds(cfg.llm)
    engine = Engine(cfg, llm=llm)
    assert engine.window() == 740_000 // WORKING_SET_TOKENS  # 148 before a session is measured
    graphs = engine.extract(tomas_sessions(MEASURED_SESSIONS + 2))
    assert len(graphs) == MEASURED_SESSIONS + 2
    # these sessions are small: a step holds far less than 5,000 tokens, so more of them fit
    window = engine.window()
    assert window > 148
    # but a session's step holds at least its longest prompt: the window never exceeds the cache over that
    assert window <= 740_000 // max(len(p) for p in llm.sent)
