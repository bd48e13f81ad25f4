"""``update.rescore``: the step's delta log pi as its own pass after a step taken without it."""

from __future__ import annotations

import pytest
import torch

from roll_viz.lm import lora, update
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample

CFG = SamplingConfig(
    prompts=("Hello there", "What is 2 + 3?"), group_size=4, max_new_tokens=10, seed=5,
    greedy=False, topk=3,
)  # fmt: skip


@pytest.fixture(scope="module")
def bundle():
    return load_models("tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def rollout(bundle):
    return sample(bundle, CFG)


def _step(bundle, rollout, precision: str, split: bool):
    advantages = torch.tensor([1.0, -1.0] * 4)[:, None] * rollout.response_mask
    cfg = update.UpdateConfig(
        lora_rank=4, lora_alpha=8.0, lr=1e-3, epochs=2, rescore=not split, precision=precision
    )
    with lora.LoraPolicy(bundle, rank=4, alpha=8.0, seed=2) as policy:
        result = update.update_step(policy, rollout, advantages, framework="verl", cfg=cfg)
        if not split:
            return result, result
        filled = update.rescore(policy, rollout, result)
        assert update.rescore(policy, rollout, filled) is filled  # already filled: as is
    return result, filled


@pytest.mark.parametrize("precision", ["float32", "bf16"])
def test_rescore_after_the_step_equals_the_steps_own(bundle, rollout, precision):
    whole, _ = _step(bundle, rollout, precision, split=False)
    bare, filled = _step(bundle, rollout, precision, split=True)
    assert bare.delta is None
    assert bare.logprobs_after is None
    torch.testing.assert_close(filled.logprobs_after, whole.logprobs_after, atol=1e-6, rtol=0)
    torch.testing.assert_close(filled.delta, whole.delta, atol=1e-6, rtol=0)
    torch.testing.assert_close(filled.grad_coef, whole.grad_coef, atol=1e-6, rtol=0)
    assert filled.seconds["rescore"] > 0
    assert filled.seconds["total"] == pytest.approx(
        bare.seconds["total"] + filled.seconds["rescore"]
    )
    assert float(filled.delta.abs().sum()) > 0


def test_rescore_refuses_a_moved_adapter(bundle, rollout):
    advantages = torch.tensor([1.0, -1.0] * 4)[:, None] * rollout.response_mask
    cfg = update.UpdateConfig(lora_rank=4, lora_alpha=8.0, lr=1e-3, rescore=False)
    with lora.LoraPolicy(bundle, rank=4, alpha=8.0, seed=2) as policy:
        first = update.update_step(policy, rollout, advantages, cfg=cfg)
        update.update_step(policy, rollout, advantages, cfg=cfg)
        with pytest.raises(ValueError, match="step 2"):
            update.rescore(policy, rollout, first)
