"""verl ``loss_mode: bypass_mode`` (old_log_prob = the sampler's mu) against hand-computed values.

Batch: two rows, log pi = [[-1.0, -0.5], [-0.2, pad]], mu = [[-1.2, -0.5], [-1.0, pad]],
A = [1.0, -0.5]. d = log pi - log mu = [[0.2, 0], [0.8, pad]], so pi / mu = e^0.2 = 1.2214,
1 and e^0.8 = 2.2255. The peer vectors (``test_peer_vectors``) check the same mode against
verl's own ``compute_policy_loss_bypass_mode`` on the shared batch.
"""

from __future__ import annotations

import math

import pytest
import torch

from roll_viz.core.pipeline import policy_loss, resolve_config

F64 = torch.float64
LP = torch.tensor([[-1.0, -0.5], [-0.2, 0.0]], dtype=F64)
MU = torch.tensor([[-1.2, -0.5], [-1.0, 0.0]], dtype=F64)
MASK = torch.tensor([[1, 1], [1, 0]], dtype=F64)
ADV = torch.tensor([1.0, -0.5], dtype=F64)
E02, E08 = math.exp(0.2), math.exp(0.8)


def run(cfg: dict, lp: torch.Tensor = LP, **kw):
    """The verl loss with bypass_mode on the batch above (old_logprobs is not read)."""
    return policy_loss(
        "verl",
        {"loss_mode": "bypass_mode", **cfg},
        logprobs=lp,
        old_logprobs=torch.zeros_like(LP),
        advantages=ADV,
        response_mask=MASK,
        rollout_logprobs=MU,
        **kw,
    )


def test_ppo_clip_is_vanilla_ppo_against_mu():
    """Token 1 clipped at 1.2 (A > 0), token 2 ratio 1, token 3 -min(2.2255 * -0.5, 0.8 * -0.5)
    under the dual-clip cap 1.5; token-mean over 3; ppo_kl = mean(mu - pi) = -1/3."""
    r = run({})
    want = (-1.2 - 1.0 + 0.5 * E08) / 3
    assert r.total.item() == pytest.approx(want, abs=1e-12)
    assert r.metrics["actor/pg_loss"] == pytest.approx(want, abs=1e-12)
    assert r.metrics["actor/ppo_kl"] == pytest.approx(-1 / 3, abs=1e-12)
    assert r.metrics["actor/pg_clipfrac"] == pytest.approx(1 / 3, abs=1e-12)
    assert r.metrics["actor/pg_clipfrac_lower"] == 0.0


def test_ppo_clip_ignores_the_is_weights():
    """rollout_is is computed for verl's metrics only: the loss equals plain ppo_clip's."""
    plain = run({}).total.item()
    assert run({"rollout_is": "token", "rollout_is_threshold": 1.1}).total.item() == plain


def test_reinforce_with_token_tis():
    """w = min(pi / mu, 2) = [1.2214, 1, 2]; loss = -sum(A * logp * w) / 3; ppo_kl only."""
    r = run({"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 2.0})
    want = -(1.0 * -1.0 * E02 + 1.0 * -0.5 * 1.0 + -0.5 * -0.2 * 2.0) / 3
    assert r.total.item() == pytest.approx(want, abs=1e-12)
    assert {k for k in r.metrics if "rollout_corr/" not in k} == {"actor/pg_loss", "actor/ppo_kl"}
    assert r.metrics["actor/ppo_kl"] == pytest.approx(-1 / 3, abs=1e-12)
    grad = r.per_token["grad_coef"]
    assert grad[0, 0].item() == pytest.approx(-E02 / 3, abs=1e-12)
    assert grad[1, 0].item() == pytest.approx(0.5 * 2.0 / 3, abs=1e-12)


def test_reinforce_sequence_is_and_no_is():
    """Sequence weight exp(0.2 + 0) = 1.2214 for row 0, min(e^0.8, 2) = 2 for row 1; without
    rollout_is the weight is 1."""
    r = run({"loss_type": "reinforce", "rollout_is": "sequence", "rollout_is_threshold": 2.0})
    want = -(E02 * (-1.0 - 0.5) + 2.0 * (-0.5 * -0.2)) / 3
    assert r.total.item() == pytest.approx(want, abs=1e-12)
    r0 = run({"loss_type": "reinforce"})
    assert r0.total.item() == pytest.approx(-(-1.0 - 0.5 + 0.1) / 3, abs=1e-12)


def test_rejection_leaves_the_mask_but_not_the_token_mean_denominator():
    """token_k1 with threshold 2 keeps log mu - log pi in [-log 2, log 2]: the third token
    (k1 = -0.8) is rejected. verl still divides by all 3 response tokens (batch_num_tokens is
    counted before the loss): (-1.2 - 1) / 3; the note gives the mean over the 2 kept tokens."""
    r = run({"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0})
    assert r.total.item() == pytest.approx(-2.2 / 3, abs=1e-12)
    assert r.metrics["actor/ppo_kl"] == pytest.approx(-0.1, abs=1e-12)  # over the kept tokens
    assert r.metrics["actor/pg_clipfrac"] == pytest.approx(0.5, abs=1e-12)
    note = r.metric_notes["actor/pg_loss"]
    assert "-1.1" in note
    assert "3 response tokens" in note
    assert r.per_token["policy_mask"].tolist() == [[True, True], [False, False]]
    assert r.per_token["grad_coef"][1, 0].item() == 0.0


def test_kl_and_entropy_stay_on_the_whole_response_mask():
    """Rejection narrows the policy term only: the KL loss (k1 here) averages all 3 tokens."""
    ref = LP - 0.3
    r = run(
        {"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0, "use_kl_loss": True,
         "kl_loss_type": "kl", "kl_loss_coef": 0.1},
        ref_logprobs=ref,
    )  # fmt: skip
    assert r.metrics["actor/kl_loss"] == pytest.approx(0.3, abs=1e-12)
    assert r.total.item() == pytest.approx(-2.2 / 3 + 0.1 * 0.3, abs=1e-12)


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": "0.5_2.0"},
        {"loss_type": "reinforce", "rollout_is": "sequence", "rollout_rs": "seq_mean_k3",
         "rollout_rs_threshold": 0.1, "loss_agg_mode": "seq-mean-token-mean"},
        {"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0, "loss_agg_mode": "token-sum"},
    ],
)  # fmt: skip
def test_grad_coef_is_the_autograd_gradient(cfg):
    """The closed-form d loss / d log pi equals autograd's (IS weights are constants)."""
    lp = LP.clone().requires_grad_(True)
    r = run(cfg, lp=lp)
    (grad,) = torch.autograd.grad(r.total, lp)
    assert torch.allclose(grad * MASK, r.per_token["grad_coef"], atol=1e-12)


def test_bypass_mode_refuses_without_mu():
    """No rollout_logprobs: a clear refusal naming the argument."""
    with pytest.raises(ValueError, match="rollout_logprobs: verl loss_mode bypass_mode"):
        policy_loss(
            "verl", {"loss_mode": "bypass_mode"}, logprobs=LP, old_logprobs=LP, advantages=ADV,
            response_mask=MASK,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"rollout_rs": "seq_k9"}, "rollout_rs"),
        ({"rollout_is_threshold": "2_1"}, "lower bound must be <= upper"),
        ({"rollout_is_threshold": -1.0}, "rollout_is_threshold"),
        ({"rollout_is": "segment"}, "rollout_is"),
        ({"loss_type": "vanilla"}, "loss_type"),
        ({"rollout_rs_threshold": 0.0}, "rollout_rs_threshold"),
    ],
)
def test_bad_rollout_correction_values_name_the_key(cfg, match):
    """Each bad value is refused by resolve_config, naming the key."""
    with pytest.raises(ValueError, match=match):
        resolve_config("verl", cfg)


def test_rejection_rule_without_threshold_is_refused():
    """rollout_rs needs rollout_rs_threshold (verl raises the same)."""
    with pytest.raises(ValueError, match="rollout_rs_threshold"):
        run({"rollout_rs": "token_k2"})
    with pytest.raises(ValueError, match="rollout_rs_threshold"):
        run({"rollout_rs": "token_k2", "rollout_rs_threshold": "0.5_2.0"})


def test_off_policy_gap_metrics_under_verl_names():
    """compute_offpolicy_metrics on the current log-prob against mu (whole response mask):
    kl = mean(mu - pi) = -1/3, k3_kl = mean(e^d - d - 1), row means of log pi -0.75 / -0.2 and of
    log mu -0.85 / -1.0, chi2_seq = mean(e^(2 * row sum d)) - 1 (row means divide by count +
    1e-8, as verl's masked_mean)."""
    r = run({"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0})  # the gap ignores rejection
    gap = {k.rsplit("/", 1)[-1]: v for k, v in r.metrics.items() if "rollout_corr/" in k}
    assert gap["kl"] == pytest.approx(-1 / 3, abs=1e-7)
    assert gap["k3_kl"] == pytest.approx((E02 - 1.2 + E08 - 1.8) / 3, abs=1e-7)
    assert gap["training_ppl"] == pytest.approx((math.exp(0.75) + math.exp(0.2)) / 2, abs=1e-7)
    assert gap["rollout_log_ppl"] == pytest.approx((0.85 + 1.0) / 2, abs=1e-7)
    assert gap["log_ppl_diff"] == pytest.approx(-0.45, abs=1e-7)
    assert gap["log_ppl_diff_min"] == pytest.approx(-0.8, abs=1e-7)
    assert gap["ppl_ratio"] == pytest.approx((math.exp(-0.1) + math.exp(-0.8)) / 2, abs=1e-7)
    assert gap["chi2_token"] == pytest.approx((E02**2 + 1 + E08**2) / 3 - 1, abs=1e-7)
    assert gap["chi2_seq"] == pytest.approx((math.exp(0.4) + math.exp(1.6)) / 2 - 1, abs=1e-7)


def test_is_weight_statistics_under_verl_names():
    """Token TIS (threshold 2) on pi / mu = [1.2214, 1, 2.2255]: w = [1.2214, 1, 2]; mean 4.2214/3,
    one token above 2, max 2, min 1; row means of w 1.1107 and 2 (seq_max_deviation 1.0), of the
    raw weights 1.1107 and 2.2255 (one row above 2)."""
    r = run({"loss_type": "reinforce", "rollout_is": "token", "rollout_is_threshold": 2.0})
    got = {k.rsplit("/", 1)[-1]: v for k, v in r.metrics.items() if "rollout_corr/" in k}
    assert got["rollout_is_mean"] == pytest.approx((E02 + 1 + 2) / 3, abs=1e-7)
    assert got["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3, abs=1e-7)
    assert got["rollout_is_ratio_fraction_low"] == 0.0
    assert (got["rollout_is_max"], got["rollout_is_min"]) == (2.0, 1.0)
    assert got["rollout_is_seq_mean"] == pytest.approx(((E02 + 1) / 2 + 2) / 2, abs=1e-7)
    assert got["rollout_is_seq_max_deviation"] == pytest.approx(1.0, abs=1e-7)
    assert got["rollout_is_seq_fraction_high"] == 0.5
    assert "rollout_is_batch_norm_factor" not in got


def test_rejection_statistics_under_verl_names():
    """token_k1 with threshold 2 (log bounds -+0.693): k1 = log mu - log pi = [-0.2, 0, -0.8];
    one token (row 1) rejected; row means of k1 -0.1 and -0.8."""
    r = run({"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0})
    got = {k.rsplit("/", 1)[-1]: v for k, v in r.metrics.items() if "rollout_corr/" in k}
    rule = "rollout_rs_token_k1"
    assert got[f"{rule}_mean"] == pytest.approx(-1 / 3, abs=1e-7)
    assert (got[f"{rule}_max"], got[f"{rule}_min"]) == pytest.approx((0.0, -0.8), abs=1e-12)
    assert got[f"{rule}_fraction_high"] == 0.0
    assert got[f"{rule}_fraction_low"] == pytest.approx(1 / 3, abs=1e-7)
    assert got[f"{rule}_seq_mean"] == pytest.approx(-0.45, abs=1e-7)
    assert got[f"{rule}_seq_max_deviation"] == pytest.approx(0.8, abs=1e-7)
    assert got[f"{rule}_seq_fraction_low"] == 0.5
    assert got[f"{rule}_masked_fraction"] == pytest.approx(1 / 3, abs=1e-7)
    assert got["rollout_rs_masked_fraction"] == pytest.approx(1 / 3, abs=1e-7)
    assert got["rollout_rs_seq_masked_fraction"] == 0.5
