"""``run``'s input handling: validated once in the input's dtype, one float64 copy, same answers.

The float32 batch a trainer hands over is checked before its one conversion to float64 (the
conversion keeps every float32 value exactly), so a float32 batch and its float64 copy give
bit-identical traces, and a bad value is named the same way in either dtype.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from roll_viz.core.pipeline import FRAMEWORKS, prepare_batch, run
from roll_viz.core.records import Batch

CASES = [
    ("roll", {"adv_estimator": "grpo"}),
    ("roll", {"adv_estimator": "gae"}),
    ("verl", {"adv_estimator": "grpo"}),
    ("verl", {"adv_estimator": "gae"}),
    ("openrlhf", {"advantage_estimator": "group_norm"}),
    ("openrlhf", {"advantage_estimator": "gae"}),
    ("trl", {}),
]


def _batch(dtype: torch.dtype, P: int = 4, G: int = 4, T: int = 24) -> Batch:
    g = torch.Generator().manual_seed(3)
    B = P * G
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    lengths[0] = 0  # a zero-length response
    return Batch(
        scores=(torch.rand(B, generator=g, dtype=torch.float64) * 10).to(dtype),
        response_mask=(torch.arange(T)[None] < lengths[:, None]).to(dtype),
        group_ids=torch.arange(B) // G,
        logprobs=(-torch.rand(B, T, generator=g, dtype=torch.float64) * 3).to(dtype),
        ref_logprobs=(-torch.rand(B, T, generator=g, dtype=torch.float64) * 3).to(dtype),
        values=torch.rand(B, T, generator=g, dtype=torch.float64).to(dtype),
        baseline_scores=torch.rand(B, generator=g, dtype=torch.float64).to(dtype),
    )


def _as(batch: Batch, dtype: torch.dtype) -> Batch:
    fields = {
        name: getattr(batch, name).to(dtype)
        for name in ("scores", "response_mask", "logprobs", "ref_logprobs", "values")
    }
    return Batch(
        group_ids=batch.group_ids, baseline_scores=batch.baseline_scores.to(dtype), **fields
    )


@pytest.mark.parametrize(("framework", "config"), CASES)
def test_a_float32_batch_and_its_float64_copy_give_identical_traces(framework, config):
    f32 = _batch(torch.float32)
    a, b = run(f32, framework, config), run(_as(f32, torch.float64), framework, config)
    for name in ("rewards", "kl", "token_rewards", "advantages", "returns"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == torch.float64
        assert torch.equal(x, y), name
    assert a.notes == b.notes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_input_is_named_in_either_dtype(dtype, bad):
    batch = _batch(dtype)
    batch.logprobs[5, 2] = bad
    with pytest.raises(ValueError, match=r"logprobs\[5, 2\] is .* \(sample 5\): not finite"):
        run(batch, "verl", {})


def test_finite_values_whose_sum_overflows_are_accepted():
    batch = _batch(torch.float64)
    batch.values.fill_(1e307)  # every value finite, their sum is not
    clean = prepare_batch(batch)
    assert torch.equal(clean.values, batch.values)
    f32 = _batch(torch.float32)
    f32.values.fill_(3e38)
    assert torch.isfinite(prepare_batch(f32).values).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_mask_that_is_not_0_or_1_is_refused(dtype):
    batch = _batch(dtype)
    batch.response_mask[1, 0] = 0.5
    with pytest.raises(ValueError, match="only 0 and 1"):
        run(batch, "roll", {})


def test_a_bool_mask_is_the_float_mask():
    f32 = _batch(torch.float32)
    as_bool = dataclasses.replace(f32, response_mask=f32.response_mask.bool())
    for framework in FRAMEWORKS:
        a, b = run(f32, framework), run(as_bool, framework)
        assert torch.equal(a.advantages, b.advantages)


def test_the_input_is_copied_never_shared_nor_modified():
    batch = _batch(torch.float64)
    tensors = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    before = {k: v.clone() for k, v in tensors.items() if isinstance(v, torch.Tensor)}
    clean = prepare_batch(batch)
    for name in ("scores", "response_mask", "logprobs", "ref_logprobs", "values"):
        assert getattr(clean, name).data_ptr() != getattr(batch, name).data_ptr(), name
    trace = run(batch, "roll", {"adv_estimator": "grpo"})
    kept = trace.advantages.clone()
    batch.logprobs.add_(1.0)
    batch.scores.mul_(2.0)
    assert torch.equal(trace.advantages, kept)
    batch.logprobs.sub_(1.0)
    batch.scores.div_(2.0)
    for k, v in before.items():
        assert torch.equal(getattr(batch, k), v), k
