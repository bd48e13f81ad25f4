"""The KL view: per-token value and gradient of every estimator, and the expected-gradient table."""

import math

import pytest
import torch

from roll_viz.analysis import group_health
from roll_viz.analysis import kl_placement as kp
from roll_viz.core.pipeline import agg_weights, policy_loss, run
from roll_viz.core.pipeline.kl_gradient import KL_VARIANTS
from roll_viz.core.records import Batch

F = torch.float64


def _batch():
    lp = torch.tensor([[-1.0, -0.5, -2.0], [-0.2, 0.0, 0.0]], dtype=F)
    ref = torch.tensor([[-1.5, -0.5, -1.0], [-0.4, 0.0, 0.0]], dtype=F)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=F)
    return lp, ref, mask


def test_per_token_values_and_gradients_by_hand():
    lp, ref, mask = _batch()
    view = kp.kl_view(lp, ref, mask, beta=0.1, tokens=[("a", "b", "c"), ("d",)])
    assert len(view.tokens) == 4 * len(KL_VARIANTS)  # 4 valid tokens
    k3 = view.tokens[view.tokens["variant"] == "k3"].reset_index(drop=True)
    x = [0.5, 0.0, -1.0, 0.2]
    assert k3["log ratio"].tolist() == pytest.approx(x, abs=1e-15)
    assert k3["token"].tolist() == ["a", "b", "c", "d"]
    v = [math.exp(-y) - 1 + y for y in x]
    assert k3["value"].tolist() == pytest.approx(v, abs=1e-15)
    assert k3["as a loss"].tolist() == pytest.approx([0.1 * (1 - math.exp(-y)) for y in x])
    # in the reward: beta * reward-to-go of k3 within each answer
    to_go = [v[0] + v[1] + v[2], v[1] + v[2], v[2], v[3]]
    assert k3["in the reward"].tolist() == pytest.approx([0.1 * g for g in to_go], abs=1e-15)
    k3p = view.tokens[view.tokens["variant"] == "k3+"].reset_index(drop=True)
    assert k3p["value"].tolist() == k3["value"].tolist()
    assert k3p["in the reward"].tolist() == k3["in the reward"].tolist()  # no gradient there
    assert k3p["as a loss"].tolist() == pytest.approx([0.1 * y for y in x], abs=1e-15)


def test_summary_means_and_sums():
    lp, ref, mask = _batch()
    view = kp.kl_view(lp, ref, mask, beta=1.0, variants=("k1",))
    row = view.summary.iloc[0]
    assert row["mean value"] == pytest.approx((0.5 + 0.0 - 1.0 + 0.2) / 4)
    assert row["sum grad as a loss"] == pytest.approx(4.0)  # k1' = 1 on every token
    assert row["mean |grad| as a loss"] == pytest.approx(1.0)
    assert list(view.tokens["token"].iloc[:2]) == ["t0", "t1"]


def test_expected_table_names_what_each_estimator_follows():
    table = kp.expected_table(*kp.toy_step(seed=2))
    got = {(r.variant, r.placement): r.follows for r in table.itertuples()}
    assert got[("k1", "in the reward")] == "grad KL(pi || ref)"
    assert got[("k1", "as a loss")] == "nothing (0)"
    assert got[("k2", "as a loss")] == "grad KL(pi || ref)"
    assert got[("k3", "as a loss")] == "grad KL(ref || pi)"
    assert got[("k3", "in the reward")] == "neither"
    for name in ("k1+", "abs+", "k3+", "k3*r"):
        assert got[(name, "as a loss")] == "grad KL(pi || ref)"
    assert got[("k3*r", "in the reward")] == "neither"  # a ratio has no place in the reward
    assert len(table) == 2 * len(KL_VARIANTS)


def test_identical_policy_gives_zero_everywhere():
    lp, _, mask = _batch()
    view = kp.kl_view(lp, lp, mask, beta=0.1, variants=("k1", "k3"))
    k3 = view.tokens[view.tokens["variant"] == "k3"]
    assert (k3[["value", "as a loss", "in the reward"]].abs().to_numpy() == 0).all()
    k1 = view.tokens[view.tokens["variant"] == "k1"]
    assert k1["as a loss"].tolist() == [0.1] * 4  # k1's slope is 1 even at x = 0


def _kl_batch():
    return group_health.demo_batch()


def test_in_reward_share_equals_the_reward_to_go_of_k_for_reinforce():
    batch = _kl_batch()
    r = kp.through_the_advantage(batch, "roll", {"adv_estimator": "reinforce"}, 0.1, "k3")
    w = agg_weights(batch.response_mask, "seq-mean-token-mean")
    to_go = kp.kl_gradient(batch.logprobs, batch.ref_logprobs, batch.response_mask, "k3", 0.1)
    torch.testing.assert_close(r.share, w * to_go.in_reward, atol=1e-15, rtol=0)
    assert float(r.share.abs().sum()) > 0


def test_in_reward_share_is_minus_weight_times_the_advantage_change_and_autograd():
    batch = _kl_batch()
    r = kp.through_the_advantage(batch, "verl", {"adv_estimator": "grpo"}, 0.3, "k1")
    n_tokens = float(batch.response_mask.sum())  # verl token-mean
    want = -(r.advantages - r.advantages_without) / n_tokens * batch.response_mask
    torch.testing.assert_close(r.share, want, atol=1e-15, rtol=0)
    # the penalty is a constant w.r.t. the policy: no gradient reaches the advantages
    logp = batch.logprobs.clone().requires_grad_(True)
    live = Batch(**{**batch.__dict__, "logprobs": logp})
    assert not run(live, "verl", r.config).advantages.requires_grad
    res = policy_loss(
        "verl",
        r.config,
        logprobs=logp,
        old_logprobs=batch.logprobs,
        advantages=r.advantages,
        response_mask=batch.response_mask,
        ref_logprobs=batch.ref_logprobs,
    )
    res.total.backward()
    torch.testing.assert_close(r.grad, logp.grad, atol=1e-15, rtol=0)


def test_through_the_advantage_refuses_what_a_dialect_cannot_do():
    batch = _kl_batch()
    with pytest.raises(ValueError, match="no KL in the reward"):
        kp.through_the_advantage(batch, "trl")
    with pytest.raises(ValueError, match="no abs estimator"):
        kp.through_the_advantage(batch, "openrlhf", {"advantage_estimator": "rloo"}, 0.1, "abs")


def test_centred_placement_by_hand():
    lp = torch.tensor([[-1.0, -0.5], [-0.2, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -0.5], [-0.1, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    out = kp.centred_placement(torch.tensor([1.0, -1.0]), lp, ref, mask, beta=0.2)
    # x = 0.5, 0, -0.1 -> mean 0.4 / 3; adjustment 0.2 * (mean - x)
    mean = 0.4 / 3
    assert out.mean_kl == pytest.approx(mean)
    expected = [[0.2 * (mean - 0.5), 0.2 * mean], [0.2 * (mean + 0.1), 0.0]]
    assert out.adjustment.tolist() == [pytest.approx(r, abs=1e-15) for r in expected]
    assert out.samples["adjustment sum"].tolist() == pytest.approx(
        [0.2 * (2 * mean - 0.5), 0.2 * (mean + 0.1)]
    )
    assert out.samples["mean A after"].tolist() == pytest.approx(
        [1.0 + 0.1 * (2 * mean - 0.5), -1.0 + 0.2 * (mean + 0.1)]
    )
