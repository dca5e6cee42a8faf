"""The FP8 measurement's two pieces of arithmetic, checked on values worked out by hand.

FP8 E4M3 (``float8_e4m3fn``): 3 mantissa bits, exponent bias 7, largest finite value 448, smallest normal
2^-6, subnormal steps of 2^-9.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from benchmarks.gpu.kv_fp8 import compare, fp8  # noqa: E402


def test_fp8_rounds_to_three_mantissa_bits_and_clips_at_448() -> None:
    x = torch.tensor([1.0, 0.3, 0.0123, 500.0, -1000.0, 300.0])
    # 0.3 = 1.2 x 2^-2 -> 1.25 x 2^-2; 0.0123 is subnormal: 6.3 steps of 2^-9 -> 6 steps;
    # 300 = 1.17 x 2^8 -> 1.125 x 2^8
    assert fp8(x).tolist() == [1.0, 0.3125, 6 / 512, 448.0, -448.0, 288.0]


def test_fp8_scale_moves_the_range_not_the_precision() -> None:
    # at scale 2: 600 / 2 = 300 -> 288 -> 576; 1000 / 2 = 500 clips to 448 -> 896
    assert fp8(torch.tensor([600.0, 1000.0]), scale=2.0).tolist() == [576.0, 896.0]


def test_compare_counts_unchanged_replies_agreement_and_kl() -> None:
    half = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    skewed = torch.log(torch.tensor([[0.25, 0.75], [0.25, 0.75]]))
    replies = [torch.tensor([0, 1]), torch.tensor([1, 1])]
    variant = [(torch.tensor([0, 1]), half), (torch.tensor([1, 0]), skewed)]
    result = compare(replies, [half, half], variant, ["draft", "event"])
    assert (result["replies_unchanged"], result["replies"]) == (1, 2)
    assert result["token_agreement"] == 0.75  # 3 of 4 positions
    kl = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)  # per position of the second reply, 0 on the first
    assert result["mean_kl_per_token"] == pytest.approx(2 * kl / 4, abs=1e-6)
    assert result["by_role"] == {"draft": {"unchanged": 1, "replies": 1}, "event": {"unchanged": 0, "replies": 1}}
