"""``run``'s input handling: validated once in the input's dtype, one float64 copy, same answers.

The float32 batch a trainer hands over is checked before its one conversion to float64 (the
conversion keeps every float32 value exactly), so a float32 batch and its float64 copy give
bit-identical traces, and a bad value is named the same way in either dtype.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from roll_viz.core.pipeline import FRAMEWORKS, dialects, prepare_batch, run
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


@pytest.mark.parametrize(
    "value",
    [0.5, float("nan"), float("inf"), -1.0, 2.0, 1e-30, 1 - 2**-24],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_kind_of_non_binary_mask_entry_is_refused(dtype, value):
    batch = _batch(dtype)
    batch.response_mask[7, 3] = value
    with pytest.raises(ValueError, match=r"^response_mask must contain only 0 and 1$"):
        prepare_batch(batch)


@pytest.mark.parametrize("value", [1 - 2**-53, 5e-324])
def test_a_float64_mask_entry_a_hair_off_0_or_1_is_refused(value):
    batch = _batch(torch.float64)
    batch.response_mask[2, 1] = value
    with pytest.raises(ValueError, match="only 0 and 1"):
        prepare_batch(batch)


def test_a_large_mask_is_checked_past_its_first_slice():
    mask = torch.ones(3, 70_000)
    mask[2, 69_999] = 0.25  # in the last slice of the fractional-part check
    batch = Batch(scores=torch.zeros(3), response_mask=mask, group_ids=torch.zeros(3).long())
    with pytest.raises(ValueError, match="only 0 and 1"):
        prepare_batch(batch)
    mask[2, 69_999] = -0.0  # a negative zero is a 0
    assert torch.equal(prepare_batch(batch).response_mask, mask.double())


def test_integer_masks_are_checked_too():
    batch = _batch(torch.float64)
    as_int = dataclasses.replace(batch, response_mask=batch.response_mask.long())
    assert torch.equal(prepare_batch(as_int).response_mask, batch.response_mask)
    as_int.response_mask[0, 0] = 2
    with pytest.raises(ValueError, match="only 0 and 1"):
        prepare_batch(as_int)


def test_an_unread_input_is_validated_but_not_copied():
    batch = _batch(torch.float32)
    clean = prepare_batch(batch, ("values",))
    assert clean.values is None
    assert torch.equal(clean.logprobs, batch.logprobs.double())
    batch.values[4, 5] = float("nan")
    with pytest.raises(ValueError, match=r"^values\[4, 5\] is nan \(sample 4\): not finite$"):
        prepare_batch(batch, ("values",))
    with pytest.raises(ValueError, match=r"values must have shape"):
        prepare_batch(dataclasses.replace(batch, values=batch.values[:, :3]), ("values",))
    # a GRPO run never reads the critic values, and still refuses bad ones
    for framework, config in CASES:
        if "gae" not in config.values():
            with pytest.raises(ValueError, match=r"values\[4, 5\] is nan"):
                run(batch, framework, config)


def test_each_dialect_reads_what_it_leaves_out_nowhere():
    """A run without the unread inputs gives the same trace as one with them."""
    batch = _batch(torch.float64)
    for framework, config in CASES:
        dialect = dialects.get(framework)
        cfg = dialects.resolve_config(framework, config)
        unread = dialect.unread_inputs(cfg)
        assert "values" in unread or "gae" in config.values()
        full = dialect.pipeline(prepare_batch(batch), cfg, None)
        lean = dialect.pipeline(prepare_batch(batch, unread), cfg, None)
        for name in ("rewards", "kl", "token_rewards", "advantages", "returns"):
            assert torch.equal(getattr(full, name), getattr(lean, name)), (framework, name)


@pytest.mark.parametrize(("framework", "config"), CASES)
def test_trace_tensors_hold_no_negative_zero(framework, config):
    """Every (B, T) field is a fixed point of the float mask: +0.0 on padding, no -0.0 anywhere.

    The batch is built to produce -0.0 (log-probs -0.0 against a reference of +0.0, scores -0.0,
    critic values -0.0) wherever the stages let it through.
    """
    batch = _batch(torch.float64)
    B, T = batch.response_mask.shape
    batch = dataclasses.replace(
        batch,
        scores=torch.full((B,), -0.0, dtype=torch.float64),
        logprobs=torch.full((B, T), -0.0, dtype=torch.float64),
        ref_logprobs=torch.zeros(B, T, dtype=torch.float64),
        values=torch.full((B, T), -0.0, dtype=torch.float64),
    )
    trace = run(batch, framework, {**config, **_kl_in_reward(framework)})
    for name in ("kl", "token_rewards", "advantages", "returns"):
        x = getattr(trace, name)
        assert not bool((torch.signbit(x) & (x == 0)).any()), name


def _kl_in_reward(framework: str) -> dict:
    return {
        "roll": {"add_token_level_kl": True},
        "verl": {"use_kl_in_reward": True},
        "openrlhf": {},
        "trl": {"beta": 0.04},
    }[framework]


def test_run_masks_its_own_tensors_never_the_batch():
    """The Trace's masking writes only into tensors the run built (never a batch tensor)."""
    batch = _batch(torch.float64)
    batch.values[batch.response_mask == 0] = 7.0  # critic values on padding stay as given
    before = batch.values.clone()
    for framework, config in CASES:
        trace = run(batch, framework, config)
        assert torch.equal(batch.values, before), framework
        pad = batch.response_mask == 0
        for name in ("kl", "token_rewards", "advantages", "returns"):
            assert not bool(getattr(trace, name)[pad].any()), (framework, name)
