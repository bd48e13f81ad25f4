"""The loss options that read more than log-probs, in the real LoRA step and in training.

ROLL ``pg_variant: topr`` (per-sample scores), ROLL ``difficulty_loss_weight`` (per-sample
difficulty) and the train/rollout corrections (the sampler's log-probs mu) on the tiny model:
the step's epoch-1 loss and gradient equal ``policy_loss`` on the same tensors, a bf16 mu
changes the corrected loss against mu = pi_old, and a training step with each option runs.
"""

import pytest
import torch

from roll_viz.core import pipeline
from roll_viz.lm import lora, update
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import RewardChoice, TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.train import Trainer

PROMPTS = ("Hello there", "What is 2 + 3?")
CFG = SamplingConfig(prompts=PROMPTS, group_size=4, max_new_tokens=10, seed=5, temperature=1.0)
OPENRLHF_IS = {"is_correction_level": "token", "is_correction_threshold": (0.999, 1.001)}


@pytest.fixture(scope="module")
def bundle():
    return load_models("tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def rollout(bundle):
    return sample(bundle, CFG)


@pytest.fixture(scope="module")
def scores(rollout):
    """(B,) 1 / 0 / 0.5 / 0 ... : mixed signs for topr, unequal group failure rates."""
    return torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 1.0])[: rollout.token_ids.shape[0]]


@pytest.fixture(scope="module")
def advantages(rollout):
    signs = torch.tensor([1.0, -1.0, 0.5, -0.5] * (rollout.token_ids.shape[0] // 4))
    return signs[:, None] * rollout.response_mask


def _step(bundle, rollout, advantages, framework, loss_config, **inputs):
    with lora.LoraPolicy(bundle, seed=0) as policy:
        return update.update_step(
            policy, rollout, advantages, framework=framework, loss_config=loss_config,
            cfg=update.UpdateConfig(rescore=False), **inputs,
        )  # fmt: skip


def _calculator(result, framework, loss_config, **inputs):
    lp = result.logprobs_before.clone().requires_grad_(True)
    res = pipeline.policy_loss(
        framework, loss_config, logprobs=lp, old_logprobs=result.old_logprobs,
        advantages=result.advantages, response_mask=result.response_mask,
        ref_logprobs=torch.zeros_like(lp), **inputs,
    )  # fmt: skip
    grad = torch.autograd.grad(res.total, lp)[0]
    return float(res.total.detach()), grad


def test_loss_inputs_name_what_each_option_reads():
    assert update.loss_inputs("roll", None) == frozenset()
    assert update.loss_inputs("roll", {"pg_variant": "topr"}) == {"scores"}
    assert update.loss_inputs("roll", {"difficulty_loss_weight": True}) == {"difficulty"}
    assert update.loss_inputs("openrlhf", OPENRLHF_IS) == {"rollout_logprobs"}
    assert "rollout_logprobs" in update.loss_inputs("trl", None)  # vLLM IS correction on
    assert update.loss_inputs("verl", None) == frozenset()
    assert update.loss_inputs("verl", {"loss_mode": "bypass_mode"}) == {"rollout_logprobs"}


def test_group_difficulty_is_the_groups_failure_rate():
    got = update.group_difficulty(torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 1.0]),
                                  torch.tensor([0, 0, 0, 1, 1, 1]))  # fmt: skip
    torch.testing.assert_close(got, torch.tensor([2 / 3, 2 / 3, 2 / 3, 1 / 3, 1 / 3, 1 / 3],
                                                 dtype=torch.float64))  # fmt: skip


def test_topr_step_equals_the_calculator(bundle, rollout, advantages, scores):
    cfg = {"pg_variant": "topr"}
    result = _step(bundle, rollout, advantages, "roll", cfg, scores=scores)
    total, grad = _calculator(result, "roll", cfg, scores=scores)
    assert result.epochs[0].terms["total"] == pytest.approx(total, abs=1e-6)
    torch.testing.assert_close(result.grad_coef, grad.float(), atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="scores"):
        _step(bundle, rollout, advantages, "roll", cfg)


def test_difficulty_weight_step_equals_the_calculator(bundle, rollout, advantages, scores):
    cfg = {"difficulty_loss_weight": True}
    difficulty = update.group_difficulty(scores, rollout.group_ids)
    result = _step(bundle, rollout, advantages, "roll", cfg, difficulty=difficulty)
    total, grad = _calculator(result, "roll", cfg, difficulty=difficulty)
    assert result.epochs[0].terms["total"] == pytest.approx(total, abs=1e-6)
    torch.testing.assert_close(result.grad_coef, grad.float(), atol=1e-6, rtol=1e-5)
    plain = _step(bundle, rollout, advantages, "roll", cfg)  # no difficulty: ROLL skips it
    assert not torch.allclose(plain.grad_coef, result.grad_coef, atol=1e-6)


def test_bf16_mu_changes_the_corrected_loss(bundle, rollout, advantages):
    same = _step(bundle, rollout, advantages, "openrlhf", OPENRLHF_IS)
    assert same.mu_is_old
    torch.testing.assert_close(same.rollout_logprobs, same.old_logprobs)
    mu, beh = update.behaviour_mu(bundle, rollout, "bf16")
    assert float((beh.old - beh.mu).abs().max()) > 0
    bf16 = _step(bundle, rollout, advantages, "openrlhf", OPENRLHF_IS, rollout_logprobs=mu)
    assert not bf16.mu_is_old
    total, grad = _calculator(bf16, "openrlhf", OPENRLHF_IS, rollout_logprobs=mu)
    assert bf16.epochs[0].terms["total"] == pytest.approx(total, abs=1e-6)
    torch.testing.assert_close(bf16.grad_coef, grad.float(), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(bf16.grad_coef, same.grad_coef, atol=1e-7)
    fp32, _ = update.behaviour_mu(bundle, rollout, "fp32")
    torch.testing.assert_close(fp32, rollout.logprobs * rollout.response_mask)


@pytest.mark.parametrize(
    ("framework", "config"),
    [("roll", (("pg_variant", "topr"),)), ("roll", (("difficulty_loss_weight", True),)),
     ("openrlhf", (("is_correction_level", "token"),))],
)  # fmt: skip
def test_a_training_step_runs_with_the_option(bundle, framework, config):
    s = TrainSettings.flat(
        prompts=PROMPTS, group_size=4, max_new_tokens=8, steps=2, model="tiny", seed=1,
        reward=RewardChoice.single("letter_share"), framework=framework, config=config,
    )  # fmt: skip
    trainer = Trainer(bundle, s)
    try:
        records = [trainer.run_step(keep_samples=False) for _ in range(2)]
    finally:
        trainer.close()
    for record in records:
        assert torch.isfinite(torch.tensor(record.metrics["update"]["loss"]))
