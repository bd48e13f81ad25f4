"""The update step's fused LoRA forward and its opt-in bfloat16 base (``UpdateConfig.precision``).

The fused forward (``LoraPolicy.fused``: the adapter added by one in-place addmm) gives the
numbers of peft's own forward; the bf16 path (frozen base matmuls in bfloat16, adapter, head and
everything else in float32) moves the log-probs by a bounded amount, and both are deterministic
per seed and the same under one and two torch threads. No timing is asserted here
(``python -m benchmarks.update`` measures it).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from roll_viz.lm import lora, update
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample

PROMPTS = ("Hello there", "What is 2 + 3?")
CFG = SamplingConfig(
    prompts=PROMPTS, group_size=4, max_new_tokens=12, seed=11, greedy=False, topk=3
)
# |log-prob gap| per token, bf16 base matmuls against float32. Measured on this tiny model: max
# 0.073, mean 0.018 (delta log pi: mean gap 0.014 against a mean |delta| of 0.10); SmolLM2-135M
# on 2 x 8 x 32 (python -m benchmarks.update): max 0.21, mean 0.033
BF16_MAX_GAP = 0.15
BF16_MEAN_GAP = 0.04


@pytest.fixture(scope="module")
def bundle():
    return load_models("tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def rollout(bundle):
    return sample(bundle, CFG)


@pytest.fixture(scope="module")
def advantages(rollout):
    signs = torch.tensor([1.0, -1.0] * (rollout.token_ids.shape[0] // 2))
    return signs[:, None] * rollout.response_mask


@contextlib.contextmanager
def torch_threads(count: int):
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def step(bundle, rollout, advantages, **cfg):
    """One 2-epoch trl step (beta 0.04) on a fresh adapter; (result, its parameters after)."""
    with lora.LoraPolicy(bundle, rank=4, alpha=8.0, seed=2) as policy:
        result = update.update_step(
            policy,
            rollout,
            advantages,
            framework="trl",
            loss_config={"beta": 0.04},
            cfg=update.UpdateConfig(lora_rank=4, lora_alpha=8.0, lr=1e-3, epochs=2, **cfg),
        )
        params = [p.detach().clone() for p in policy.parameters()]
    return result, params


def test_fused_forward_equals_peft_forward(bundle, rollout, advantages, monkeypatch):
    fused, p_fused = step(bundle, rollout, advantages)
    monkeypatch.setattr(
        lora.LoraPolicy, "fused", lambda self, b, d=torch.float32: contextlib.nullcontext()
    )
    plain, p_plain = step(bundle, rollout, advantages)
    for name in ("logprobs_before", "logprobs_after", "delta", "grad_coef"):
        torch.testing.assert_close(
            getattr(fused, name), getattr(plain, name), atol=1e-6, rtol=0, msg=name
        )
    assert fused.grad_norm == pytest.approx(plain.grad_norm, rel=1e-5)
    for a, b in zip(p_fused, p_plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_fused_forward_is_only_inside_its_context(bundle):
    with lora.LoraPolicy(bundle, rank=4, alpha=8.0, seed=2) as policy:
        layers = [layer for _, layer in lora.adapter_layers(bundle)]
        with pytest.raises(RuntimeError, match="lock"), policy.fused(bundle):
            pass
        with bundle.lock, policy.activate(bundle), policy.fused(bundle, torch.bfloat16):
            assert all("forward" in vars(layer) for layer in layers)
        assert not any("forward" in vars(layer) for layer in layers)


def test_bf16_moves_logprobs_by_a_bounded_amount(bundle, rollout, advantages):
    exact, p_exact = step(bundle, rollout, advantages)
    bf16, p_bf16 = step(bundle, rollout, advantages, precision="bf16")
    mask = exact.response_mask.bool()
    gap = (bf16.logprobs_before - exact.logprobs_before)[mask].abs()
    assert 0 < float(gap.max()) <= BF16_MAX_GAP
    assert float(gap.mean()) <= BF16_MEAN_GAP
    # the same step: the adapter moves the same way, by about the same amount
    assert bf16.grad_norm == pytest.approx(exact.grad_norm, rel=0.05)
    delta_gap = (bf16.delta - exact.delta)[mask].abs()
    assert float(delta_gap.mean()) <= BF16_MEAN_GAP
    for a, b in zip(p_bf16, p_exact, strict=True):
        assert torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.95
    # adapter, its gradient and the optimizer state stay float32
    assert all(p.dtype == torch.float32 for p in p_bf16)
    assert bf16.logprobs_before.dtype == torch.float32


def test_bf16_step_is_deterministic_and_the_same_under_one_and_two_threads(
    bundle, rollout, advantages
):
    runs = []
    for count in (1, 2, 1):
        with torch_threads(count):
            runs.append(step(bundle, rollout, advantages, precision="bf16"))
    (a, pa) = runs[0]
    for b, pb in runs[1:]:
        for name in ("logprobs_before", "logprobs_after", "grad_coef"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert a.grad_norm == b.grad_norm
        assert all(torch.equal(x, y) for x, y in zip(pa, pb, strict=True))


def test_precision_is_checked():
    with pytest.raises(ValueError, match="precision"):
        update.UpdateConfig(precision="fp8")
