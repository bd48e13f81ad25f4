"""TRL use_adaptive_entropy: the bonus gated on the previous step, the coefficient's update."""

import pytest
import torch

from roll_viz.core.pipeline import policy_loss

F = torch.float64
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=F)
ENT = torch.tensor([[0.1, 0.3, 9.0], [0.2, 0.2, 0.2]], dtype=F)  # valid mean 1.0 / 5 = 0.2
LP = torch.tensor([[-1.0, -0.5, 0.0], [-0.2, -0.7, -1.1]], dtype=F)
ADV = torch.tensor([[1.0, 1.0, 0.0], [-0.5, -0.5, -0.5]], dtype=F)


def _loss(**cfg):
    return policy_loss(
        "trl", {"loss_type": "dapo", **cfg}, logprobs=LP, old_logprobs=LP, advantages=ADV,
        response_mask=MASK, entropy=ENT,
    )  # fmt: skip


def test_first_step_applies_no_bonus_and_moves_the_coefficient():
    plain = _loss()
    # dapo at ratio 1: -(1 + 1 - 0.5 * 3) / 5 = -0.1
    assert plain.total.item() == pytest.approx(-0.1, abs=1e-15)
    first = _loss(entropy_coef=0.01, use_adaptive_entropy=True)
    assert first.total.item() == pytest.approx(-0.1, abs=1e-15)  # TRL: last entropy +inf
    # mean entropy 0.2 <= target 0.2: 0.01 + 0.005
    assert first.metrics["entropy_coef"] == pytest.approx(0.015, abs=1e-15)
    assert first.metrics["policy_loss"] == pytest.approx(-0.1, abs=1e-15)
    lower = _loss(entropy_coef=0.01, use_adaptive_entropy=True, entropy_target=0.1)
    assert lower.metrics["entropy_coef"] == pytest.approx(0.005, abs=1e-15)  # 0.2 > 0.1
    floor = _loss(entropy_coef=0.002, use_adaptive_entropy=True, entropy_target=0.1)
    assert floor.metrics["entropy_coef"] == 0.0  # clamped to entropy_coef_min


def test_later_step_applies_the_bonus_only_below_the_target():
    on = _loss(entropy_coef=0.3, use_adaptive_entropy=True, viz_last_world_entropy=0.15)
    assert on.total.item() == pytest.approx(-0.1 - 0.3 * 0.2, abs=1e-15)
    capped = _loss(
        entropy_coef=0.3, use_adaptive_entropy=True, viz_last_world_entropy=0.15,
        entropy_coef_delta=0.1, entropy_coef_max=0.35,
    )  # fmt: skip
    assert capped.metrics["entropy_coef"] == pytest.approx(0.35, abs=1e-15)
    off = _loss(entropy_coef=0.3, use_adaptive_entropy=True, viz_last_world_entropy=0.25)
    assert off.total.item() == pytest.approx(-0.1, abs=1e-15)
    # the entropy is an input here: the bonus moves the loss, not d loss / d logp
    grad_on, grad_off = on.per_token["grad_coef"], off.per_token["grad_coef"]
    assert torch.equal(grad_on, grad_off)


def test_adaptive_entropy_needs_the_entropies():
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(
            "trl", {"use_adaptive_entropy": True}, logprobs=LP, old_logprobs=LP, advantages=ADV,
            response_mask=MASK,
        )  # fmt: skip
