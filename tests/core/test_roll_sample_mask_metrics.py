"""ROLL with a sample-level mask: what it logs over the unmasked mask, against hand numbers.

Batch: two rows of two tokens, the second row dropped by the sample-level mask. d = log pi -
log pi_old = [[0.1, 0], [0.3, 0.3]], A = [1, 2] (0 on the dropped row), token-mean, pg_clip 0.2.
ROLL (``rlvr/actor_worker.py``) runs the loss on ``final_response_mask`` (2 tokens) but logs
approxkl, policykl and ratio_* over the unmasked ``response_mask`` (4 tokens), and its token-mean
``ppo_ratio_*clipfrac`` sum the indicator over every position divided by the final mask's 2.
The peer vectors check the same against ROLL's own ``loss_func``.
"""

from __future__ import annotations

import math

import pytest
import torch

from roll_viz.core.pipeline import policy_loss

F64 = torch.float64
LP = torch.tensor([[-1.0, -0.5], [-0.2, -0.3]], dtype=F64)
OLD = torch.tensor([[-1.1, -0.5], [-0.5, -0.6]], dtype=F64)
MASK = torch.ones(2, 2, dtype=F64)
ADV = torch.tensor([1.0, 2.0], dtype=F64)
KEEP = torch.tensor([1.0, 0.0], dtype=F64)
E01, E03 = math.exp(0.1), math.exp(0.3)


def run(keep=KEEP, **cfg):
    """ROLL's ActorWorker loss (pg_variant ppo) on the batch above."""
    return policy_loss(
        "roll",
        {"loss_agg_mode": "token-mean", **cfg},
        logprobs=LP,
        old_logprobs=OLD,
        advantages=ADV,
        response_mask=MASK,
        sample_mask=keep,
    )


def test_the_loss_runs_on_the_final_mask():
    """Row 0 only: -(e^0.1 * 1 + 1 * 1) / 2; the dropped row's advantage is 0."""
    r = run()
    assert r.total.item() == pytest.approx(-(E01 + 1.0) / 2, abs=1e-12)
    assert r.metrics["actor/pg_loss"] == pytest.approx(-(E01 + 1.0) / 2, abs=1e-12)


def test_kl_metrics_are_logged_over_the_unmasked_mask_with_the_final_value_beside():
    """approxkl = 0.5 * (0.01 + 0 + 0.09 + 0.09) / 4, policykl = (0.1 + 0.3 + 0.3) / 4; over
    the final mask 0.0025 and 0.05 (in the notes)."""
    r = run()
    assert r.metrics["actor/approxkl"] == pytest.approx(0.5 * 0.19 / 4, abs=1e-12)
    assert r.metrics["actor/policykl"] == pytest.approx(0.7 / 4, abs=1e-12)
    assert "0.0025" in r.metric_notes["actor/approxkl"]
    assert "it is 0.05" in r.metric_notes["actor/policykl"]


def test_ratio_metrics_include_the_dropped_row():
    """ratio_mean = mean of the row means (e^0.1 + 1) / 2 and e^0.3; ratio_max = e^0.3."""
    r = run()
    want = ((E01 + 1.0) / 2 + E03) / 2
    assert r.metrics["actor/ratio_mean"] == pytest.approx(want, abs=1e-12)
    assert r.metrics["actor/ratio_max"] == pytest.approx(E03, abs=1e-12)
    assert f"{(E01 + 1.0) / 2:.6g}" in r.metric_notes["actor/ratio_mean"]


def test_token_mean_clip_fractions_count_the_dropped_row_over_the_final_count():
    """Both tokens of the dropped row have ratio e^0.3 > 1.2: 2 clipped / 2 final tokens = 1.0
    as ROLL logs it; 0 over the final mask. clipfrac (A-weighted) stays 0."""
    r = run()
    assert r.metrics["actor/ppo_ratio_high_clipfrac"] == pytest.approx(1.0, abs=1e-12)
    assert r.metrics["actor/ppo_ratio_clipfrac"] == pytest.approx(1.0, abs=1e-12)
    assert r.metrics["actor/ppo_ratio_low_clipfrac"] == 0.0
    assert "final_response_mask it is 0" in r.metric_notes["actor/ppo_ratio_high_clipfrac"]
    assert r.metrics["actor/clipfrac"] == 0.0


def test_keeping_every_sample_changes_nothing():
    """A keep mask of ones: the same numbers as no sample mask, and no notes."""
    kept = run(keep=torch.ones(2, dtype=F64))
    plain = policy_loss(
        "roll", {"loss_agg_mode": "token-mean"}, logprobs=LP, old_logprobs=OLD, advantages=ADV,
        response_mask=MASK,
    )  # fmt: skip
    assert kept.metrics == pytest.approx(plain.metrics, abs=1e-12)
    assert not any("response_mask before" in n for n in kept.metric_notes.values())


@pytest.mark.parametrize(
    ("framework", "keep", "match"),
    [
        ("verl", KEEP, "only ROLL"),
        ("roll", torch.tensor([1.0]), r"expected \(2,\)"),
        ("roll", torch.tensor([1.0, 0.5]), "only 0 and 1"),
    ],
)
def test_bad_sample_mask_is_refused(framework, keep, match):
    """sample_mask is ROLL's, (B,), 0/1."""
    with pytest.raises(ValueError, match=match):
        policy_loss(
            framework, {}, logprobs=LP, old_logprobs=OLD, advantages=ADV, response_mask=MASK,
            sample_mask=keep,
        )  # fmt: skip


def test_kimi15_token_mean_counts_the_dropped_samples_regulariser():
    """pg_variant kimi15 (tau 0.1), token-mean: ROLL's agg_loss sums loss_mat over every position,
    so tau/2 d^2 of the dropped row (0.05 * (0.09 + 0.09)) joins row 0's -A logp + tau/2 d^2
    (1.0 + 0.5 + 0.05 * 0.01), all over the final mask's 2 tokens; autograd agrees."""
    lp = LP.clone().requires_grad_(True)
    r = policy_loss(
        "roll", {"pg_variant": "kimi15", "kimi15_tau": 0.1, "loss_agg_mode": "token-mean"},
        logprobs=lp, old_logprobs=OLD, advantages=ADV, response_mask=MASK, sample_mask=KEEP,
    )  # fmt: skip
    want = (1.5 + 0.05 * 0.01 + 0.05 * 0.18) / 2
    assert r.total.item() == pytest.approx(want, abs=1e-12)
    assert r.metrics["actor/pg_loss"] == pytest.approx(want, abs=1e-12)
    (grad,) = torch.autograd.grad(r.total, lp)
    assert grad[1].tolist() == pytest.approx([0.1 * 0.3 / 2, 0.1 * 0.3 / 2], abs=1e-12)
    assert torch.allclose(grad, r.per_token["grad_coef"], atol=1e-12)
