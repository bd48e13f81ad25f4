"""Issue 20's loss options and deviations: hand numbers, loop oracles, autograd for grad_coef."""

import math

import pytest
import torch

from core.cases import close
from roll_viz.core.pipeline import aggregate, policy_loss, resolve_config, run
from roll_viz.core.records import Batch

F = torch.float64


def _batch(seed, B=5, T=6, scale=0.35, empty_row=True):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    if empty_row:
        lengths[1] = 0
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F)
    old = -torch.rand((B, T), generator=gen, dtype=F) * 3 - 0.05
    lp = old + scale * torch.randn((B, T), generator=gen, dtype=F)
    adv = torch.randn((B, T), generator=gen, dtype=F)
    ref = old + 0.3 * torch.randn((B, T), generator=gen, dtype=F)
    ent = torch.rand((B, T), generator=gen, dtype=F) * 2
    return lp, old, adv, mask, ref, ent


def _loss(framework, config, lp, old, adv, mask, **kw):
    return policy_loss(
        framework, config, logprobs=lp, old_logprobs=old, advantages=adv, response_mask=mask, **kw
    )


# ------------------------------------------------------------------ the two verl deviations


def _two_answers():
    """One prompt, scores 1 and 0, responses of 1 and 2 tokens: GRPO A = +-1/sqrt(2)."""
    batch = Batch(
        scores=torch.tensor([1.0, 0.0], dtype=F),
        response_mask=torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=F),
        group_ids=torch.zeros(2, dtype=torch.long),
    )
    return batch, run(batch, "verl", {"adv_estimator": "grpo"})


def test_verl_gspo_follows_loss_agg_mode_issue_example():
    batch, trace = _two_answers()
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # (1 - 0.5) / (unbiased std + eps)
    close(trace.advantages, [[a, 0.0], [-a, -a]], 1e-15)
    lp = torch.full((2, 2), -0.9, dtype=F)
    res = _loss("verl", {"loss_mode": "gspo"}, lp, lp, trace.advantages, batch.response_mask)
    # token-mean (verl's default loss_agg_mode): (-a * 1 + a * 2) / 3 tokens = a / 3
    assert res.terms["policy"].item() == pytest.approx(a / 3, abs=1e-15)
    assert res.terms["policy"].item() == pytest.approx(0.2357, abs=5e-5)
    # forcing seq-mean-token-mean (the old reading) gives the issue's 0.0
    seq = _loss(
        "verl",
        {"loss_mode": "gspo", "loss_agg_mode": "seq-mean-token-mean"},
        lp,
        lp,
        trace.advantages,
        batch.response_mask,
    )
    assert seq.terms["policy"].item() == pytest.approx(0.0, abs=1e-15)
    # SAPO still forces seq-mean-token-mean: -(2a/1 - 2a/1.05) / 2
    sapo = _loss("verl", {"loss_mode": "sapo"}, lp, lp, trace.advantages, batch.response_mask)
    assert sapo.terms["policy"].item() == pytest.approx((-2 * a + 2 * a / 1.05) / 2, abs=1e-14)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"loss_agg_mode": "seq-mean-token-mean"}, -1 / math.sqrt(2) / 2),
        ({"loss_agg_mode": "seq-mean-token-sum"}, -1 / math.sqrt(2) / 2),
        ({"loss_agg_mode": "seq-mean-token-sum-norm"}, -1 / math.sqrt(2) / 2 / 3),
        ({"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 2}, -1 / 8**0.5 / 2),
        ({"loss_mode": "sapo"}, -2 / math.sqrt(2) / 2),  # SAPO at r = 1: -2A/tau, over 2 rows
        ({"loss_agg_mode": "token-mean"}, -1 / math.sqrt(2)),
    ],
)
def test_verl_seq_mean_divides_by_every_row_issue_example(config, expected):
    """Two rows, the second empty: verl -0.354 (the old reading divided by 1 row: -0.707)."""
    mask = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=F)
    adv = torch.tensor([[1 / math.sqrt(2), 0, 0], [0, 0, 0]], dtype=F)
    lp = torch.full((2, 3), -1.0, dtype=F)
    res = _loss("verl", config, lp, lp, adv, mask)
    assert res.terms["policy"].item() == pytest.approx(expected, abs=1e-15)
    if config == {"loss_agg_mode": "seq-mean-token-mean"}:
        assert res.terms["policy"].item() == pytest.approx(-0.354, abs=5e-4)


def test_verl_critic_and_kl_terms_also_divide_by_every_row():
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=F)
    lp = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]], dtype=F)
    ref = torch.tensor([[-1.5, -1.0], [-1.0, -1.0]], dtype=F)
    v = torch.tensor([[0.5, 0.3], [0.0, 0.0]], dtype=F)
    res = _loss(
        "verl",
        {"loss_agg_mode": "seq-mean-token-sum", "use_kl_loss": True, "kl_loss_type": "k1"},
        lp,
        lp,
        torch.zeros_like(lp),
        mask,
        ref_logprobs=ref,
        values=v,
        old_values=v,
        returns=torch.zeros_like(v),
    )
    assert res.terms["kl"].item() == pytest.approx((0.5 - 1.0) / 2)  # k1 sum of row 0, / 2 rows
    assert res.terms["value"].item() == pytest.approx(0.5 * (0.25 + 0.09) / 2)


def test_verl_logs_kl_metrics_under_actor_prefix():
    lp, old, adv, mask, ref, _ent = _batch(1)
    res = _loss(
        "verl", {"use_kl_loss": True, "kl_loss_coef": 0.3}, lp, old, adv, mask, ref_logprobs=ref
    )
    assert res.metrics["actor/kl_loss"] == pytest.approx(res.terms["kl"].item())
    assert res.metrics["actor/kl_coef"] == 0.3
    assert "kl_loss" not in res.metrics
    assert "kl_coef" not in res.metrics


# -------------------------------------------------------------------------- ROLL's quirks


def test_roll_cispo_logs_doubled_prefix_over_all_positions():
    # ratios: row 0 [1.5, 0.5, pad], row 1 [1.0, pad, pad]; ROLL cispo clip [0.9, 1.1]
    r = torch.tensor([[1.5, 0.5, 1.0], [1.0, 1.0, 1.0]], dtype=F)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=F)
    old = torch.zeros_like(r)
    adv = torch.tensor([[1.0, -1.0, 0.0], [1.0, 0.0, 0.0]], dtype=F)
    res = _loss("roll", {"pg_variant": "cispo"}, r.log(), old, adv, mask)
    m = res.metrics
    assert m["actor/cispo_cispo_upper_clipfrac"] == pytest.approx(1 / 6)  # 1 of B x T = 6
    assert m["actor/cispo_cispo_lower_clipfrac"] == pytest.approx(1 / 6)
    assert m["actor/cispo_cispo_total_clipfrac"] == pytest.approx(2 / 6)
    assert m["actor/cispo_cispo_epsilon_low"] == 0.1
    assert m["actor/cispo_cispo_clip_upper"] == pytest.approx(1.1)
    assert "actor/cispo_lower_clipfrac" not in m
    note = res.metric_notes["actor/cispo_cispo_total_clipfrac"]
    assert "doubled prefix" in note
    assert "0.666667" in note
    # clipped-ratio mean: per-row masked mean, mean over every row: ((1.1 + 0.9) / 2 + 1) / 2
    assert m["actor/cispo_clipped_ratio_mean"] == pytest.approx(1.0)


def test_roll_seq_importance_sampling_clipfrac_counts_padding():
    # one valid token of four with d = log 1.5: the sequence ratio 1.5 is broadcast to 4 slots
    mask = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]], dtype=F)
    old = torch.zeros((2, 4), dtype=F)
    lp = torch.tensor([[math.log(1.5), 0, 0, 0], [0.0, 0.0, 0.0, 0.0]], dtype=F)
    adv = torch.ones((2, 4), dtype=F)
    res = _loss("roll", {"importance_sampling": "seq"}, lp, old, adv, mask)
    # ROLL sums the clip indicator over all 8 positions (4 of them high) / 5 valid tokens
    assert res.metrics["actor/ppo_ratio_high_clipfrac"] == pytest.approx(4 / 5)
    assert res.metrics["actor/ppo_ratio_clipfrac"] == pytest.approx(4 / 5)
    assert res.metrics["actor/ppo_ratio_low_clipfrac"] == 0.0
    assert "0.2" in res.metric_notes["actor/ppo_ratio_high_clipfrac"]  # masked: 1 of 5
    # with more padding the logged value exceeds 1
    wide = torch.zeros((1, 8), dtype=F)
    wide[0, 0] = 1.0
    lp1 = torch.zeros((1, 8), dtype=F)
    lp1[0, 0] = math.log(1.5)
    res = _loss("roll", {"importance_sampling": "seq"}, lp1, lp1 * 0, wide, wide)
    assert res.metrics["actor/ppo_ratio_high_clipfrac"] == pytest.approx(8.0)
    token = _loss("roll", {}, lp1, lp1 * 0, wide, wide)
    assert token.metrics["actor/ppo_ratio_high_clipfrac"] == pytest.approx(1.0)
    assert token.metric_notes == {}


# ------------------------------------------------------------------ verl straight-through


@pytest.mark.parametrize("name", ["k3+", "low_var_kl+", "kl+", "abs+"])
def test_verl_straight_through_kl_value_and_gradient(name):
    lp, old, adv, mask, ref, _ent = _batch(2)
    plain = name[:-1]
    lp = lp.clone().requires_grad_()
    st = _loss(
        "verl",
        {"use_kl_loss": True, "kl_loss_type": name, "kl_loss_coef": 1.0, "loss_mode": "gpg"},
        lp,
        old,
        torch.zeros_like(adv),
        mask,
        ref_logprobs=ref,
    )
    base = _loss(
        "verl",
        {"use_kl_loss": True, "kl_loss_type": plain, "kl_loss_coef": 1.0, "loss_mode": "gpg"},
        lp,
        old,
        torch.zeros_like(adv),
        mask,
        ref_logprobs=ref,
    )
    assert st.terms["kl"].item() == pytest.approx(base.terms["kl"].item(), rel=1e-14)
    close(st.per_token["kl"], base.per_token["kl"], 1e-15)
    (grad,) = torch.autograd.grad(st.total, lp)
    w = st.per_token["loss_weight"]
    close(grad, w * (lp.detach() - ref) * mask, 1e-15)  # the k2 gradient, no clamp
    close(st.per_token["grad_coef"], grad, 1e-15)
    assert st.metrics["actor/kl_loss"] == pytest.approx(base.metrics["actor/kl_loss"])


def test_verl_k2_plus_is_plain_k2():
    lp, old, adv, mask, ref, _ent = _batch(3)
    cfg = {"use_kl_loss": True, "kl_loss_coef": 1.0}
    a = _loss("verl", {**cfg, "kl_loss_type": "k2+"}, lp, old, adv, mask, ref_logprobs=ref)
    b = _loss("verl", {**cfg, "kl_loss_type": "k2"}, lp, old, adv, mask, ref_logprobs=ref)
    close(a.per_token["grad_coef"], b.per_token["grad_coef"], 1e-15)
    assert a.total.item() == b.total.item()


# -------------------------------------------------------------- new losses, by hand


def test_verl_dppo_tv_hand_example():
    # p_old = 0.5 everywhere; p = 0.8 (A>0: p - p_old = 0.3 > 0.2, dropped), 0.6 (kept),
    # 0.2 with A<0 (p - p_old = -0.3 < -0.2, dropped), 0.45 with A<0 (kept)
    old = torch.full((1, 4), math.log(0.5), dtype=F)
    lp = torch.log(torch.tensor([[0.8, 0.6, 0.2, 0.45]], dtype=F))
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=F)
    mask = torch.ones_like(lp)
    res = _loss("verl", {"loss_mode": "dppo_tv"}, lp, old, adv, mask)
    r = (lp - old).exp()
    valid = torch.tensor([[0.0, 1.0, 0.0, 1.0]], dtype=F)
    close(res.per_token["pg_loss"], -adv * r * lp * valid, 1e-15)
    close(res.per_token["grad_coef"], -adv * r * valid / 4, 1e-15)
    assert res.metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    assert res.metrics["actor/pg_clipfrac_lower"] == 0.0
    # the truncation c = clip_ratio_c caps the weight
    capped = _loss("verl", {"loss_mode": "dppo_tv", "clip_ratio_c": 1.1}, lp, old, adv, mask)
    close(capped.per_token["grad_coef"][0, 1], -1.1 / 4, 1e-15)
    assert capped.metrics["actor/pg_clipfrac_lower"] == pytest.approx(0.25)


def test_verl_dppo_kl_hand_example():
    old = torch.full((1, 3), math.log(0.5), dtype=F)
    p = torch.tensor([[0.9, 0.55, 0.3]], dtype=F)
    lp = p.log()
    adv = torch.tensor([[1.0, 1.0, 1.0]], dtype=F)
    res = _loss(
        "verl", {"loss_mode": "dppo_kl", "clip_ratio_high": 0.1}, lp, old, adv, torch.ones_like(lp)
    )
    bkl = [0.5 * math.log(0.5 / q) + 0.5 * math.log((0.5 + 1e-8) / (1 - q + 1e-8)) for q in p[0]]
    assert bkl[0] > 0.1
    assert bkl[1] < 0.1
    # p = 0.3 < p_old: always kept for A > 0
    assert res.per_token["valid"].tolist() == [[False, True, True]]


def test_verl_geo_mean_hand_example():
    # one row, d = [0.5, -0.1], A = +1: clip(d) = [0.2, -0.1], min(d, clip d) = [0.2, -0.1]
    old = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]], dtype=F)
    lp = old + torch.tensor([[0.5, -0.1], [-0.5, 0.0]], dtype=F)
    adv = torch.tensor([[1.0, 1.0], [-2.0, -2.0]], dtype=F)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=F)
    lp = lp.requires_grad_()
    res = _loss("verl", {"loss_mode": "geo_mean"}, lp, old, adv, mask)
    # row 0: ratio exp(0.05), loss -exp(0.05); row 1 (A<0): -min(0.5, 0.2) -> -0.2... sign-aware:
    # sgn = -1, min(-d, -clip d) = min(0.5, 0.2) = 0.2 -> d' = -0.2: ratio exp(-0.2), loss 2 e^-0.2
    expected = (-math.exp(0.05) + 2 * math.exp(-0.2)) / 2
    assert res.terms["policy"].item() == pytest.approx(expected, rel=1e-14)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-15)
    close(grad, [[0.0, -math.exp(0.05) / 2 / 2], [0.0, 0.0]], 1e-15)  # token 0 clipped
    assert res.metrics["actor/pg_clipfrac"] == pytest.approx(1 / 3)
    assert res.metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 3)


def test_verl_kl_cov_hand_example():
    lp = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=F)
    old = lp - torch.tensor([[0.1, -0.2, 0.3, 0.0]], dtype=F)
    adv = torch.tensor([[1.0, -1.0, 2.0, 0.0]], dtype=F)
    mask = torch.ones_like(lp)
    lp = lp.requires_grad_()
    res = _loss("verl", {"loss_mode": "kl_cov", "kl_cov_ratio": 0.25}, lp, old, adv, mask)
    # cov = (A - 0.5)(logp + 1.625): [0.3125, 0.5625, 1.6875, 0.6875]: the top 1 is token 2
    assert res.per_token["kl_cov_chosen"].tolist() == [[False, False, True, False]]
    r = torch.exp(lp.detach() - old)
    expected = -adv * r + 0.1 * (lp.detach() - old).abs() * torch.tensor([[0, 0, 1.0, 0]], dtype=F)
    close(res.per_token["pg_loss"], expected, 1e-15)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-15)
    assert res.metrics["actor/ppo_kl"] == pytest.approx(0.15)
    assert "actor/pg_clipfrac" not in res.metrics


@pytest.mark.parametrize(
    ("framework", "config", "tau"),
    [
        ("roll", {"pg_variant": "kimi15"}, 0.1),
        ("roll", {"pg_variant": "kimi15", "kimi15_tau": 0.5}, 0.5),
        ("verl", {"loss_mode": "dro", "dro_beta": 0.2}, 0.2),
    ],
)
def test_squared_log_ratio_penalty(framework, config, tau):
    lp = torch.tensor([[-1.0, -2.0]], dtype=F)
    old = torch.tensor([[-1.5, -1.0]], dtype=F)
    adv = torch.tensor([[2.0, -1.0]], dtype=F)
    mask = torch.ones_like(lp)
    res = _loss(framework, {**config, "loss_agg_mode": "token-mean"}, lp, old, adv, mask)
    d = lp - old
    close(res.per_token["pg_loss"], -adv * lp + tau / 2 * d**2, 1e-15)
    close(res.per_token["grad_coef"], (-adv + tau * d) / 2, 1e-15)


def test_verl_dro_needs_a_beta():
    lp = torch.zeros((1, 1), dtype=F)
    with pytest.raises(ValueError, match="dro_beta"):
        _loss("verl", {"loss_mode": "dro"}, lp, lp, lp, torch.ones_like(lp))


def test_roll_tis_truncates_to_zero_one():
    r = torch.tensor([[0.5, 1.0, 1.7]], dtype=F)
    adv = torch.tensor([[1.0, -1.0, 1.0]], dtype=F)
    mask = torch.ones_like(r)
    res = _loss("roll", {"pg_variant": "tis"}, r.log(), torch.zeros_like(r), adv, mask)
    close(res.per_token["grad_coef"], -torch.tensor([[0.5, -1.0, 1.0]], dtype=F) / 3, 1e-15)
    assert res.metrics["actor/tis_upper_clipfrac"] == pytest.approx(1 / 3)
    assert res.metrics["actor/tis_lower_bound"] == 0.0


def test_trl_vespo_gamma_weight_by_hand():
    d = torch.tensor([[0.1, 0.2], [-0.3, 0.0]], dtype=F)
    old = torch.full_like(d, -1.0)
    lp = old + d
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=F)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=F)
    res = _loss("trl", {"loss_type": "vespo"}, lp, old, adv, mask)

    def phi(s, k, lam):
        return math.exp(lam + k * s - lam * math.exp(s))

    p0, p1 = phi(0.3, 2.0, 3.0), phi(-0.3, 3.0, 2.0)  # sums of log-ratios, not means
    close(res.per_token["phi"], [[p0, p0], [p1, 0.0]], 1e-14)
    close(res.per_token["grad_coef"], [[-p0 / 3, -p0 / 3], [p1 / 3, 0.0]], 1e-14)
    assert res.metrics["vespo/phi_seq_mean"] == pytest.approx((p0 + p1) / 2)
    assert phi(0.0, 2.0, 3.0) == pytest.approx(1.0)


def test_trl_luspo_sums_each_sequence():
    lp, old, adv, mask, _ref, _ent = _batch(4)
    cfg = {"loss_type": "luspo", "importance_sampling_level": "sequence"}
    res = _loss("trl", cfg, lp, old, adv[:, :1].expand_as(adv), mask)
    seq = (((lp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)).exp()
    a = adv[:, 0]
    per_seq = -torch.minimum(seq * a, seq.clamp(0.8, 1.2) * a) * mask.sum(-1)
    assert res.terms["policy"].item() == pytest.approx(per_seq.mean().item(), rel=1e-13)


def test_trl_off_policy_mask_keeps_the_kl_gradient():
    old = torch.zeros((3, 2), dtype=F)
    d = torch.tensor([[-0.5, -0.5], [-0.5, -0.5], [0.0, 0.0]], dtype=F)
    lp = old + d
    adv = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [-1.0, -1.0]], dtype=F)
    mask = torch.ones_like(lp)
    ref = lp - 0.2
    cfg = {"off_policy_mask_threshold": 0.3, "beta": 0.1, "use_bias_correction_kl": False}
    res = _loss("trl", cfg, lp, old, adv, mask, ref_logprobs=ref)
    # row 0: A<0 and mean(old - logp) = 0.5 > 0.3: dropped; row 1: A>0 kept; row 2: KL 0 kept
    assert res.per_token["off_policy_kept"].tolist() == [[0, 0], [1, 1], [1, 1]]
    assert bool((res.per_token["pg_loss"][0] != 0).all())  # computed, then weighted by 0
    kl_slope = 0.1 * -math.expm1(-0.2) / 6
    close(res.per_token["grad_coef"][0], [kl_slope, kl_slope], 1e-15)  # only the KL flows


def test_trl_top_entropy_quantile():
    lp, old, adv, mask, _ref, ent = _batch(5, empty_row=False)
    ent_values = ent[mask > 0]
    threshold = torch.quantile(ent_values, 0.8)
    res = _loss(
        "trl", {"top_entropy_quantile": 0.2, "entropy_coef": 0.1}, lp, old, adv, mask, entropy=ent
    )
    high = (ent >= threshold) & (mask > 0)
    assert torch.equal(res.per_token["entropy_kept"], high)
    full = _loss("trl", {}, lp, old, adv, mask)
    close(res.per_token["grad_coef"], full.per_token["grad_coef"] * high, 1e-15)
    assert res.terms["entropy"].item() == pytest.approx(ent[high].mean().item())
    with pytest.raises(ValueError, match="entropy"):
        _loss("trl", {"top_entropy_quantile": 0.2}, lp, old, adv, mask)


def test_roll_length_weights_by_hand():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=F)
    lp = torch.full((3, 4), -1.0, dtype=F)
    adv = -torch.ones((3, 4), dtype=F)
    res = _loss("roll", {"length_loss_weight": True}, lp, lp, adv, mask)
    raw = torch.tensor([1.5 - 3 / (3 + 1e-8), 1.5 - 1 / (3 + 1e-8), 1.5], dtype=F)
    w = raw * (3 / (raw.sum() + 1e-8))
    # seq-mean-token-mean of a per-token loss of 1 with those row weights: sum(w) / 3 = 1
    assert res.metrics["actor/pg_loss"] == pytest.approx(1.0)
    assert res.metrics["actor/weighted_pg_loss"] == pytest.approx((w.sum() / 3).item())
    assert res.metrics["actor/sample_weights_max"] == pytest.approx(w.max().item())
    close(res.per_token["grad_coef"][:, 0], w / mask.sum(-1) / 3, 1e-15)


def test_openrlhf_loss_agg_mode_name():
    assert resolve_config("openrlhf", {})["loss_agg_mode"] == "token-mean"
    with pytest.raises(ValueError, match="loss_agg_mode"):
        resolve_config("openrlhf", {"loss_agg_mode": "seq-mean-token-sum"})
    with pytest.raises(ValueError, match="token_level_loss"):
        resolve_config("openrlhf", {"token_level_loss": False})


# ------------------------------------------------------ loop oracles and autograd, at random

NEW_CONFIGS = [
    ("verl", {"loss_mode": "dppo_tv"}),
    ("verl", {"loss_mode": "dppo_kl", "loss_agg_mode": "seq-mean-token-mean"}),
    ("verl", {"loss_mode": "geo_mean"}),
    ("verl", {"loss_mode": "kl_cov", "kl_cov_ratio": 0.2}),
    ("verl", {"loss_mode": "clip_cov", "clip_cov_ratio": 0.3, "clip_cov_lb": -1.0}),
    ("roll", {"pg_variant": "topr", "topr_negative_weight": 0.5}),
    ("verl", {"loss_mode": "dro", "dro_beta": 0.3, "loss_agg_mode": "seq-mean-token-sum-norm"}),
    ("verl", {"loss_mode": "gspo", "use_kl_loss": True, "kl_loss_type": "k3+"}),
    ("verl", {"use_kl_loss": True, "kl_loss_type": "low_var_kl+", "loss_agg_mode": "token-sum"}),
    ("roll", {"pg_variant": "tis"}),
    ("roll", {"pg_variant": "kimi15", "loss_agg_mode": "token-mean"}),
    ("roll", {"length_loss_weight": True, "importance_sampling": "seq"}),
    ("roll", {"length_loss_weight": True, "pg_variant": "cispo", "use_kl_loss": True}),
    ("trl", {"loss_type": "vespo"}),
    ("trl", {"loss_type": "luspo", "importance_sampling_level": "sequence", "beta": 0.1}),
    ("trl", {"loss_type": "luspo"}),
    ("trl", {"beta": 0.2, "importance_sampling_level": "sequence"}),  # KL * sequence ratio
    ("trl", {"beta": 0.2, "off_policy_mask_threshold": 0.05, "top_entropy_quantile": 0.5}),
    ("trl", {"loss_type": "grpo", "top_entropy_quantile": 0.3, "entropy_coef": 0.1}),
    ("openrlhf", {"loss_agg_mode": "seq-mean-token-mean", "use_loss": True, "kl_estimator": "k3"}),
]


@pytest.mark.parametrize("seed", [6, 7])
@pytest.mark.parametrize(("framework", "config"), NEW_CONFIGS)
def test_new_options_grad_coef_matches_autograd(framework, config, seed):
    lp, old, adv, mask, ref, ent = _batch(seed, scale=0.4)
    lp = torch.where(mask == 0, -math.inf, lp).requires_grad_()
    scores = torch.tensor([1.0, 0.0, -1.0, 0.5, 0.0], dtype=F)  # ROLL topr's row split
    res = _loss(framework, config, lp, old, adv, mask, ref_logprobs=ref, entropy=ent, scores=scores)
    (grad,) = torch.autograd.grad(res.total, lp)
    assert bool(torch.isfinite(grad).all())
    close(res.per_token["grad_coef"], grad, 1e-12, rtol=1e-13)
    assert bool((res.per_token["grad_coef"][mask == 0] == 0).all())
    assert bool(res.per_token["grad_coef"].abs().sum() > 0)


def _oracle(framework, cfg, lp, old, adv, mask, ent):
    """Per-token losses and the aggregated policy term with plain loops over the framework code."""
    B, T = len(mask), len(mask[0])
    loss = [[0.0] * T for _ in range(B)]
    n = [sum(mask[b]) for b in range(B)]
    if framework == "verl" and cfg["loss_mode"] == "geo_mean":
        total = 0.0
        for b in range(B):
            if not n[b]:
                continue
            s, a = 0.0, 0.0
            for t in range(T):
                if mask[b][t]:
                    d = lp[b][t] - old[b][t]
                    dc = min(max(d, -cfg["clip_ratio_low"]), cfg["clip_ratio_high"])
                    sg = (adv[b][t] > 0) - (adv[b][t] < 0)
                    s += sg * min(sg * d, sg * dc)
                    a += adv[b][t]
            total += -(a / n[b]) * math.exp(s / n[b])
        return None, total / B
    if framework == "trl":  # vespo
        for b in range(B):
            s = sum(max(-20, min(20, lp[b][t] - old[b][t])) for t in range(T) if mask[b][t])
            s = min(max(s, math.log(1e-8)), 20.0)
            for t in range(T):
                if mask[b][t]:
                    k, lam = (2.0, 3.0) if adv[b][t] >= 0 else (3.0, 2.0)
                    phi = math.exp(lam + k * s - lam * math.exp(s))
                    loss[b][t] = -phi * adv[b][t] * lp[b][t]
        return loss, sum(map(sum, loss)) / sum(n)
    for b in range(B):
        for t in range(T):
            if not mask[b][t]:
                continue
            d = lp[b][t] - old[b][t]
            r = math.exp(max(-20.0, min(20.0, d)))
            p, q = math.exp(lp[b][t]), math.exp(old[b][t])
            a = adv[b][t]
            if cfg["loss_mode"] == "dppo_tv":
                valid = (
                    p - q <= cfg["clip_ratio_high"] if a > 0 else p - q >= -cfg["clip_ratio_low"]
                )
            else:
                bkl = q * (old[b][t] - lp[b][t]) + (1 - q) * math.log(
                    (1 - q + 1e-8) / (1 - p + 1e-8)
                )
                if a > 0:
                    valid = bkl <= cfg["clip_ratio_high"] or p <= q
                else:
                    valid = bkl <= cfg["clip_ratio_low"] or p >= q
            loss[b][t] = -a * min(r, cfg["clip_ratio_c"]) * lp[b][t] * valid
    return loss, sum(map(sum, loss)) / sum(n)


@pytest.mark.parametrize("seed", [8, 9, 10])
@pytest.mark.parametrize(
    ("framework", "config"),
    [
        ("verl", {"loss_mode": "dppo_tv"}),
        ("verl", {"loss_mode": "dppo_kl", "clip_ratio_high": 0.05}),
        ("verl", {"loss_mode": "geo_mean", "clip_ratio_high": 0.28}),
        ("trl", {"loss_type": "vespo"}),
    ],
)
def test_new_losses_match_loop_oracle(framework, config, seed):
    lp, old, adv, mask, _ref, ent = _batch(seed, scale=0.6)
    cfg = resolve_config(framework, config)
    res = _loss(framework, config, lp, old, adv, mask)
    tokens, total = _oracle(
        framework, cfg, lp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), ent
    )
    if tokens is not None:
        close(res.per_token["pg_loss"], tokens, 1e-12)
    assert res.terms["policy"].item() == pytest.approx(total, rel=1e-12, abs=1e-14)


def test_trl_bias_corrected_kl_is_k3_times_ratio():
    lp, old, adv, mask, ref, _ent = _batch(11)
    res = _loss("trl", {"beta": 0.5}, lp, old, adv, mask, ref_logprobs=ref)
    k3 = torch.expm1(ref - lp) - (ref - lp)
    close(res.per_token["kl"], k3 * torch.exp(lp - old) * mask, 1e-14)
    assert res.terms["kl"].item() == pytest.approx(
        aggregate(k3 * torch.exp(lp - old), mask, "token-mean").item()
    )


def test_verl_clip_cov_zeroes_the_drawn_tokens():
    lp = torch.tensor([[-1.0, -3.0, -2.0, -2.0]], dtype=F)
    adv = torch.tensor([[2.0, -2.0, 1.0, -1.0]], dtype=F)
    mask = torch.ones_like(lp)
    lp = lp.requires_grad_()
    # cov = (A - 0)(logp + 2) = [2, 2, 0, 0]: tokens 0 and 1 lie in (1, 5); ratio 0.5 takes 2
    res = _loss(
        "verl", {"loss_mode": "clip_cov", "clip_cov_ratio": 0.5}, lp, lp.detach(), adv, mask
    )
    assert res.per_token["clip_cov_zeroed"].tolist() == [[True, True, False, False]]
    close(res.per_token["pg_loss"], [[0.0, 0.0, -1.0, 1.0]], 1e-15)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-15)
    close(grad, [[0.0, 0.0, -0.25, 0.25]], 1e-15)
    assert res.metrics["actor/pg_clipfrac"] == pytest.approx(0.5)
    assert "actor/pg_clipfrac_lower" not in res.metrics
    # the default ratio 2e-4 draws one token of the two (seeded)
    one = _loss("verl", {"loss_mode": "clip_cov"}, lp, lp.detach(), adv, mask)
    assert int(one.per_token["clip_cov_zeroed"].sum()) == 1
    assert bool(one.per_token["clip_cov_zeroed"][0, :2].any())


def test_roll_topr_splits_rows_by_score_sign():
    r = torch.tensor([[1.5, 0.5], [1.5, 0.5]], dtype=F)
    old = torch.full_like(r, -1.0)
    lp = (old + r.log()).requires_grad_()
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=F)
    mask = torch.ones_like(r)
    scores = torch.tensor([1.0, 0.0], dtype=F)
    res = _loss("roll", {"pg_variant": "topr"}, lp, old, adv, mask, scores=scores)
    # seq-mean-token-mean: weight 1/4 per token; row 0 plain PG, row 1 TIS clip(r, 0, 1)
    close(res.per_token["grad_coef"], [[-0.25, -0.25], [0.25, 0.125]], 1e-15)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-15)
    assert res.metrics["actor/topr_positive_samples"] == 1.0
    assert res.metrics["actor/topr_negative_upper_clipfrac"] == pytest.approx(0.25)
    total = res.metrics["actor/topr_weighted_positive_loss"]
    total += res.metrics["actor/topr_weighted_negative_loss"]
    assert total == pytest.approx(res.terms["policy"].item())
    with pytest.raises(ValueError, match=r"^scores"):
        _loss("roll", {"pg_variant": "topr"}, lp, old, adv, mask)


# ------------------------------------------------------------- OpenRLHF is_correction_*

MU = torch.tensor([[-1.0, -1.5, -3.0]], dtype=F)  # the sampler's log-probs
OLD = torch.full((1, 3), -1.0, dtype=F)  # the trainer's recompute: log w = [0, 0.5, 2]


@pytest.mark.parametrize(
    ("config", "coef", "filtered"),
    [
        ({"is_correction_level": "token"}, [1.0, math.exp(0.5), 0.0], 1 / 3),
        (
            {"is_correction_level": "token", "is_correction_mode": "clip"},
            [1.0, math.exp(0.5), 5.0],
            1 / 3,
        ),
        # seq: exp(mean log w) = exp(5/6) = 2.30 is inside [0.5, 5]: every token keeps its w
        ({"is_correction_level": "seq"}, [1.0, math.exp(0.5), math.exp(2.0)], 0.0),
        (
            {"is_correction_level": "seq", "is_correction_threshold": [0.5, 2.0]},
            [0.0, 0.0, 0.0],
            1.0,
        ),
        # tv of the sampled token: |mu_p - p| = [0, 0.145, 0.318], upper bound 0.2
        (
            {
                "is_correction_level": "token",
                "is_correction_gating": "tv",
                "is_correction_threshold": 0.2,
            },
            [1.0, math.exp(0.5), 0.0],
            1 / 3,
        ),
    ],
)
def test_openrlhf_is_correction_by_hand(config, coef, filtered):
    adv = torch.ones((1, 3), dtype=F)
    mask = torch.ones_like(adv)
    lp = OLD.clone().requires_grad_()
    res = _loss("openrlhf", config, lp, OLD, adv, mask, rollout_logprobs=MU)
    c = torch.tensor([coef], dtype=F)
    close(res.per_token["pg_loss"], -torch.ones_like(c), 1e-15)  # r = 1, A = 1
    assert res.terms["policy"].item() == pytest.approx(-c.sum().item() / 3, rel=1e-14)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-15)
    close(grad, -c / 3, 1e-15)
    assert res.metrics["vllm_kl"] == pytest.approx(-2.5 / 3)
    assert res.metrics["is_filter_ratio"] == pytest.approx(filtered)
    close(res.per_token["log_w"], [[0.0, 0.5, 2.0]], 1e-15)


def test_openrlhf_gspo_with_correction_uses_mu_in_the_ratio():
    lp = torch.tensor([[-1.2, -1.4, -2.0]], dtype=F)
    adv = torch.ones_like(lp)
    mask = torch.ones_like(lp)
    cfg = {"policy_loss_type": "gspo", "is_correction_level": "token"}
    res = _loss("openrlhf", cfg, lp, OLD, adv, mask, rollout_logprobs=MU)
    seq = math.exp(((lp - MU).sum() / 3).item())
    close(res.per_token["ratio"], [[seq] * 3], 1e-14)
    assert "vllm_kl" not in res.metrics  # OpenRLHF logs it for ppo only


def test_openrlhf_is_correction_validation():
    lp = torch.zeros((1, 1), dtype=F)
    kw = {"rollout_logprobs": lp}
    with pytest.raises(ValueError, match="clip requires"):
        _loss("openrlhf", {"is_correction_level": "seq", "is_correction_mode": "clip"}, lp, lp,
              lp, torch.ones_like(lp), **kw)  # fmt: skip
    with pytest.raises(ValueError, match="upper bound only"):
        _loss("openrlhf", {"is_correction_level": "token", "is_correction_gating": "binary_kl"},
              lp, lp, lp, torch.ones_like(lp), **kw)  # fmt: skip
    with pytest.raises(ValueError, match="rollout_logprobs"):
        _loss("openrlhf", {"is_correction_level": "token"}, lp, lp, lp, torch.ones_like(lp))
    assert resolve_config("openrlhf", {"is_correction_threshold": 3})[
        "is_correction_threshold"
    ] == (0.0, 3.0)
    with pytest.raises(ValueError, match="is_correction_threshold"):
        resolve_config("openrlhf", {"is_correction_threshold": [5.0, 1.0]})


@pytest.mark.parametrize("seed", [12, 13])
@pytest.mark.parametrize(
    "config",
    [
        {"is_correction_level": "token"},
        {"is_correction_level": "token", "is_correction_mode": "clip", "dual_clip": 3.0},
        {"is_correction_level": "seq", "is_correction_gating": "binary_kl",
         "is_correction_threshold": 0.05, "loss_agg_mode": "seq-mean-token-mean"},
        {"is_correction_level": "token", "policy_loss_type": "gspo"},
    ],
)  # fmt: skip
def test_openrlhf_is_correction_autograd(config, seed):
    lp, old, adv, mask, _ref, _ent = _batch(seed, scale=0.4)
    gen = torch.Generator().manual_seed(seed)
    mu = old + 0.4 * torch.randn(old.shape, generator=gen, dtype=F)
    lp = lp.requires_grad_()
    res = _loss("openrlhf", config, lp, old, adv, mask, rollout_logprobs=mu)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-12, rtol=1e-13)


def test_roll_difficulty_and_length_weights_by_hand():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=F)
    lp = torch.full((3, 4), -1.0, dtype=F)
    adv = -torch.ones((3, 4), dtype=F)
    difficulty = torch.tensor([0.0, 1.0, 2.0], dtype=F)  # clamped to [0, 1]
    cfg = {"difficulty_loss_weight": True, "length_loss_weight": True}
    res = _loss("roll", cfg, lp, lp, adv, mask, difficulty=difficulty)
    raw = torch.tensor([0.5, 2.0, 2.0], dtype=F)
    raw = raw * torch.tensor([1.5 - 3 / (3 + 1e-8), 1.5 - 1 / (3 + 1e-8), 1.5], dtype=F)
    w = raw * (3 / (raw.sum() + 1e-8))
    assert res.metrics["actor/weighted_pg_loss"] == pytest.approx((w.sum() / 3).item())
    close(res.per_token["grad_coef"][:, 0], w / mask.sum(-1) / 3, 1e-15)
    # without the samples' difficulty ROLL skips that weight
    only_length = _loss("roll", cfg, lp, lp, adv, mask)
    plain = _loss("roll", {"length_loss_weight": True}, lp, lp, adv, mask)
    close(only_length.per_token["grad_coef"], plain.per_token["grad_coef"], 1e-15)
    with pytest.raises(ValueError, match="difficulty"):
        _loss("roll", cfg, lp, lp, adv, mask, difficulty=difficulty[:2])


# ---------------------------------------------------------- TRL's vLLM importance sampling


@pytest.mark.parametrize(
    ("mode", "weights"),
    [
        ("token_truncate", [1.0, math.exp(0.5), 3.0]),
        ("token_mask", [1.0, math.exp(0.5), 0.0]),
        ("sequence_truncate", [3.0, 3.0, 3.0]),  # exp(0 + 0.5 + 2) = 12.2, capped at 3
        ("sequence_mask", [0.0, 0.0, 0.0]),  # 12.2 > 3: the whole sequence is dropped
    ],
)
def test_trl_vllm_importance_sampling_by_hand(mode, weights):
    adv = torch.ones((1, 3), dtype=F)
    mask = torch.ones_like(adv)
    lp = OLD.clone().requires_grad_()
    cfg = {"vllm_importance_sampling_mode": mode}
    res = _loss("trl", cfg, lp, OLD, adv, mask, rollout_logprobs=MU)
    w = torch.tensor([weights], dtype=F)
    assert res.terms["policy"].item() == pytest.approx(-w.sum().item() / 3, rel=1e-14, abs=1e-15)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-15)
    close(grad, -w / 3, 1e-15)
    m = res.metrics
    assert m["sampling/sampling_logp_difference/mean"] == pytest.approx(2.5 / 3)
    assert m["sampling/sampling_logp_difference/max"] == pytest.approx(2.0)
    assert m["sampling/importance_sampling_ratio/max"] == pytest.approx(max(weights))
    # no sampler log-probs (no vLLM): no correction
    plain = _loss("trl", cfg, OLD, OLD, adv, mask)
    assert plain.terms["policy"].item() == pytest.approx(-1.0)
    off = _loss("trl", {**cfg, "vllm_importance_sampling_correction": False}, OLD, OLD, adv, mask,
                rollout_logprobs=MU)  # fmt: skip
    assert off.terms["policy"].item() == pytest.approx(-1.0)


def test_trl_vespo_takes_the_sampler_ratio_into_phi():
    adv = torch.ones((1, 3), dtype=F)
    mask = torch.ones_like(adv)
    cfg = {"loss_type": "vespo", "vllm_importance_sampling_mode": "token_truncate"}
    res = _loss("trl", cfg, OLD, OLD, adv, mask, rollout_logprobs=MU)
    log_w = 0.0 + 0.5 + math.log(3.0)  # the truncated token ratios' logs, summed
    phi = math.exp(3.0 + 2.0 * log_w - 3.0 * math.exp(log_w))
    close(res.per_token["phi"], [[phi] * 3], 1e-14)
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        _loss("trl", {"loss_type": "vespo"}, OLD, OLD, adv, mask, rollout_logprobs=MU)


@pytest.mark.parametrize("seed", [14, 15])
@pytest.mark.parametrize(
    "config",
    [
        {},
        {"vllm_importance_sampling_mode": "token_truncate", "beta": 0.1},
        {"vllm_importance_sampling_mode": "sequence_truncate", "importance_sampling_level":
         "sequence", "vllm_importance_sampling_clip_max": 1.5},
        {"off_policy_mask_threshold": 0.0, "vllm_importance_sampling_mode": "token_mask"},
    ],
)  # fmt: skip
def test_trl_vllm_importance_sampling_autograd(config, seed):
    lp, old, adv, mask, ref, _ent = _batch(seed, scale=0.3)
    gen = torch.Generator().manual_seed(seed)
    mu = old + 0.05 * torch.randn(old.shape, generator=gen, dtype=F)
    lp = lp.requires_grad_()
    res = _loss("trl", config, lp, old, adv, mask, ref_logprobs=ref, rollout_logprobs=mu)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(res.per_token["grad_coef"], grad, 1e-12, rtol=1e-13)
