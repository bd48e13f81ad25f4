"""TRL's ``mask_truncated_completions`` (a completion without EOS leaves every loss term and the
token count; here one of ``max_completion_length`` tokens) and ``top_entropy_quantile`` offered
on the pages (the Update step computes the entropy it reads): hand numbers and autograd."""

import pytest
import torch

from roll_viz.core.pipeline import policy_loss
from roll_viz.lm import loss_options, update

F64 = torch.float64
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
OLD = torch.zeros(2, 3, dtype=F64)
ADV = torch.tensor([1.0, -2.0], dtype=F64)


def _loss(cfg, lp=OLD):
    return policy_loss(
        "trl", cfg, logprobs=lp, old_logprobs=OLD, advantages=ADV, response_mask=MASK
    )


def test_mask_truncated_completions_by_hand():
    # r = 1: per-token loss -A; dapo divides by the kept tokens
    assert _loss({}).total.item() == pytest.approx((-3.0 + 4.0) / 5)
    cut = _loss({"mask_truncated_completions": True, "max_completion_length": 3})
    assert cut.total.item() == pytest.approx(4.0 / 2)  # row 0 (3 tokens, no EOS) dropped
    assert any("1 completion(s)" in n for n in cut.notes)
    grpo = _loss(
        {"mask_truncated_completions": True, "max_completion_length": 3, "loss_type": "grpo"}
    )
    assert grpo.total.item() == pytest.approx((0.0 + 2.0) / 2)  # mean over both rows
    untouched = _loss({"mask_truncated_completions": True})  # nothing reaches 512 tokens
    assert untouched.total.item() == pytest.approx(_loss({}).total.item())


def test_mask_truncated_completions_gradient_is_autograd():
    gen = torch.Generator().manual_seed(3)
    lp = (OLD + 0.3 * torch.randn(2, 3, generator=gen, dtype=F64)).requires_grad_(True)
    got = _loss({"mask_truncated_completions": True, "max_completion_length": 3}, lp)
    (grad,) = torch.autograd.grad(got.total, lp)
    assert torch.allclose(got.per_token["grad_coef"], grad * MASK, atol=1e-12)
    assert float(grad[0].abs().sum()) == 0.0


def test_top_entropy_quantile_is_offered_and_reads_the_entropy():
    keys = loss_options.option_keys("trl", "top_entropy_quantile: 0.2")
    assert keys == {"top_entropy_quantile": 0.2}
    assert "entropy" in update._loss_reads("trl", keys)
    ent = torch.tensor([[0.1, 0.9, 0.5], [0.8, 0.2, 0.0]], dtype=F64)
    got = policy_loss(
        "trl",
        keys,
        logprobs=OLD,
        old_logprobs=OLD,
        advantages=ADV,
        response_mask=MASK,
        entropy=ent,
    )
    # the 0.8 quantile of [0.1, 0.2, 0.5, 0.8, 0.9] is 0.8 + 0.2 * 0.1 = 0.82: only the 0.9
    # token keeps its policy loss (-A = -1); dapo still divides by all 5 tokens
    kept = got.per_token["entropy_kept"]
    assert kept.tolist() == [[False, True, False], [False, False, False]]
    assert got.total.item() == pytest.approx(-1.0 / 5)
