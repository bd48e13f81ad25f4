"""Policy-update losses (roll_viz.core.pipeline.losses): hand numbers, loop oracle, autograd."""

import math

import pytest
import torch

from core.cases import close, seed_batch
from roll_viz.core.pipeline import (
    AGG_MODES,
    CHOICES,
    DEFAULTS,
    FRAMEWORKS,
    LOSS_CHOICES,
    LOSS_DEFAULTS,
    LOSS_HELP,
    LOSS_KEYS,
    agg_weights,
    aggregate,
    importance_ratio,
    loss_agg_modes,
    policy_loss,
    resolve_config,
    run,
    value_loss,
)
from roll_viz.core.records import Batch

F = torch.float64

# ------------------------------------------------------------------ policy-update.md 1.3 table

TABLE_R = [0.5, 1.0, 1.3, 2.0, 0.5, 1.3, 5.0]
TABLE_A = [1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0]
PPO_L = [-0.5, -1.0, -1.2, -1.2, 0.8, 1.3, 3.0]
PPO_G_VERL = [-0.5, -1.0, 0.0, 0.0, 0.0, 1.3, 0.0]
SAPO_L = [-1.510, -2.000, -2.298, -2.924, 1.416, 2.202, 3.753]
SAPO_G = [-0.470, -1.000, -1.271, -1.573, 0.467, 1.268, 0.291]
CISPO_G = {
    ("verl", ()): [-0.8, -1.0, -1.2, -1.2, 0.8, 1.2, 1.2],
    ("roll", (("pg_variant", "cispo"),)): [-0.9, -1.0, -1.1, -1.1, 0.9, 1.1, 1.1],
    ("trl", (("epsilon_high", 5.0),)): [-0.5, -1.0, -1.3, -2.0, 0.5, 1.3, 5.0],
}


def _table_inputs(requires_grad=True):
    """One token per row: (N, 1) tensors with old logp -1 and the table's ratios."""
    r = torch.tensor(TABLE_R, dtype=F)[:, None]
    old = torch.full_like(r, -1.0)
    lp = (old + r.log()).requires_grad_(requires_grad)
    adv = torch.tensor(TABLE_A, dtype=F)[:, None]
    return lp, old, adv, torch.ones_like(r)


def _per_token_derivative(res):
    """grad_coef divided by the aggregation weight = d(per-token loss)/d logp."""
    return (res.per_token["grad_coef"] / res.per_token["loss_weight"]).flatten()


def test_table_ppo_verl_dual_clip_3():
    lp, old, adv, m = _table_inputs()
    res = policy_loss("verl", {}, logprobs=lp, old_logprobs=old, advantages=adv, response_mask=m)
    close(res.per_token["pg_loss"].flatten(), PPO_L, 1e-12)
    close(_per_token_derivative(res), PPO_G_VERL, 1e-12)
    assert res.per_token["dual_clipped"].flatten().tolist() == [False] * 6 + [True]
    assert res.per_token["clipped_high"].flatten().tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert res.per_token["clipped_low"].flatten().tolist() == [0, 0, 0, 0, 1, 0, 0]
    (grad,) = torch.autograd.grad(res.total, lp)
    close(grad, res.per_token["grad_coef"], 1e-15)
    # verl metrics: pg_clipfrac = share where the clipped branch is larger (tokens 3, 4, 5; at
    # r = 5, A < 0 the unclipped -A*r is larger); pg_clipfrac_lower = dual-clipped share
    assert res.metrics["actor/pg_clipfrac"] == pytest.approx(3 / 7)
    assert res.metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 7)
    assert res.metrics["actor/ppo_kl"] == pytest.approx(-sum(math.log(r) for r in TABLE_R) / 7)
    assert res.metrics["actor/pg_loss"] == pytest.approx(sum(PPO_L) / 7)


@pytest.mark.parametrize(("key", "expected"), list(CISPO_G.items()))
def test_table_cispo_three_variants(key, expected):
    framework, extra = key
    lp, old, adv, m = _table_inputs()
    cfg = dict(extra) | ({"loss_mode": "cispo"} if framework == "verl" else {})
    cfg |= {"loss_type": "cispo"} if framework == "trl" else {}
    res = policy_loss(
        framework, cfg, logprobs=lp, old_logprobs=old, advantages=adv, response_mask=m
    )
    close(_per_token_derivative(res), expected, 1e-12)
    (grad,) = torch.autograd.grad(res.total, lp)
    close(grad, res.per_token["grad_coef"], 1e-15)
    # CISPO never zeroes a gradient
    assert bool((res.per_token["grad_coef"] != 0).all())


@pytest.mark.parametrize("framework", ["verl", "trl"])
def test_table_sapo(framework):
    lp, old, adv, m = _table_inputs()
    cfg = {"loss_mode": "sapo"} if framework == "verl" else {"loss_type": "sapo"}
    res = policy_loss(
        framework, cfg, logprobs=lp, old_logprobs=old, advantages=adv, response_mask=m
    )
    close(res.per_token["pg_loss"].flatten(), SAPO_L, 5e-4)
    close(_per_token_derivative(res), SAPO_G, 5e-4)
    # both force the mean of sequence means: one token per row -> weight 1/7
    close(res.per_token["loss_weight"], torch.full((7, 1), 1 / 7, dtype=F), 1e-15)
    # SAPO loss at r = 1 is 2A/tau, not A (policy-update.md 1.3)
    assert res.per_token["pg_loss"][1, 0].item() == pytest.approx(-2.0)


# --------------------------------------------------------------------------- T13 and T12


@pytest.mark.parametrize(
    ("framework", "config", "loss_at_5"),
    [
        ("verl", {}, 3.0),
        ("openrlhf", {"dual_clip": 3.0}, 3.0),
        ("openrlhf", {}, 5.0),
        ("roll", {"dual_clip_loss": True}, 1.4),
        ("roll", {}, 5.0),
        ("trl", {}, 5.0),
    ],
)
def test_t13_clip_and_dual_clip(framework, config, loss_at_5):
    r = torch.tensor([[1.5], [0.5], [0.5], [5.0], [1.3]], dtype=F)
    adv = torch.tensor([[1.0], [1.0], [-1.0], [-1.0], [-1.0]], dtype=F)
    old = torch.zeros_like(r)
    res = policy_loss(
        framework,
        config,
        logprobs=r.log(),
        old_logprobs=old,
        advantages=adv,
        response_mask=torch.ones_like(r),
    )
    close(res.per_token["pg_loss"].flatten(), [-1.2, -0.5, 0.8, loss_at_5, 1.3], 1e-12)


def test_t13_value_clip():
    v, old, ret, m = (torch.tensor([[x]], dtype=F) for x in (1.2, 0.5, 1.0, 1.0))
    loss, clipped = value_loss(v, old, ret, m, clip=0.2, mode="token-mean")
    assert loss.item() == pytest.approx(0.045)
    assert clipped.tolist() == [[True]]
    assert value_loss(v, old, ret, m, clip=0.5, mode="token-mean")[0].item() == pytest.approx(0.02)
    assert value_loss(v, None, ret, m, clip=None, mode="token-mean")[0].item() == pytest.approx(
        0.02
    )
    lp = torch.zeros((1, 1), dtype=F)
    common = {"logprobs": lp, "old_logprobs": lp, "advantages": lp, "response_mask": m}
    values = {"values": v, "old_values": old, "returns": ret}
    # shipped defaults: verl cliprange_value 0.5, OpenRLHF value_clip 0.5, ROLL value_clip None
    verl = policy_loss("verl", {}, **common, **values)
    assert verl.terms["value"].item() == pytest.approx(0.02)
    assert verl.metrics["critic/vf_clipfrac"] == 0.0
    assert policy_loss("openrlhf", {}, **common, **values).terms["value"].item() == pytest.approx(
        0.02
    )
    roll = policy_loss("roll", {"value_clip": 0.2}, **common, **values)
    assert roll.terms["value"].item() == pytest.approx(0.045)
    assert roll.metrics["critic/clipfrac"] == 1.0
    assert policy_loss("roll", {}, **common, **values).terms["value"].item() == pytest.approx(0.02)
    # the critic loss is a separate optimisation: not in the actor total
    assert verl.total.item() == 0.0
    assert policy_loss("trl", {}, **common, **values).terms["value"] is None
    with pytest.raises(ValueError, match="old_values"):
        policy_loss("verl", {}, **common, values=v, returns=ret)


T12_MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=F)
T12_LOSS = torch.tensor([[1, 2, 3, 0], [4, 0, 0, 0]], dtype=F)


@pytest.mark.parametrize(
    ("mode", "factor", "expected"),
    [
        ("token-mean", None, 2.5),
        ("token-sum", None, 10.0),
        ("seq-mean-token-mean", None, 3.0),
        ("seq-mean-token-mean-all-rows", None, 3.0),
        ("seq-mean-token-sum", None, 5.0),
        ("token-sum-norm", None, 2.5),
        ("seq-mean-token-sum-norm", None, 1.25),
        ("token-sum-norm-all-rows", 4, 1.25),
    ],
)
def test_t12_canonical_modes(mode, factor, expected):
    assert aggregate(T12_LOSS, T12_MASK, mode, factor).item() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("framework", "config", "expected"),
    [
        ("roll", {"loss_agg_mode": "token-mean"}, 2.5),
        ("roll", {}, 3.0),  # default seq-mean-token-mean
        ("roll", {"loss_agg_mode": "seq-mean-token-sum"}, 5.0),
        ("roll", {"loss_agg_mode": "seq-mean-token-sum-norm"}, 2.5),  # sum / L, no batch
        ("verl", {}, 2.5),
        ("verl", {"loss_agg_mode": "seq-mean-token-sum-norm"}, 1.25),  # sum / B / L
        ("verl", {"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 2}, 2.5),
        ("verl", {"loss_agg_mode": "token-sum"}, 10.0),
        ("trl", {"loss_type": "grpo"}, 3.0),
        ("trl", {"loss_type": "bnpo"}, 2.5),
        ("trl", {}, 2.5),  # dapo
        ("trl", {"loss_type": "dr_grpo", "max_completion_length": 4}, 1.25),
        ("openrlhf", {}, 2.5),
        ("openrlhf", {"loss_agg_mode": "seq-mean-token-mean"}, 3.0),
    ],
)
def test_t12_through_each_framework(framework, config, expected):
    """At r = 1 the PPO per-token loss is -A: A = -T12 losses gives T12's numbers."""
    lp = torch.full_like(T12_LOSS, -1.0)
    res = policy_loss(
        framework,
        config,
        logprobs=lp,
        old_logprobs=lp,
        advantages=-T12_LOSS,
        response_mask=T12_MASK,
    )
    assert res.terms["policy"].item() == pytest.approx(expected)
    close(res.per_token["grad_coef"], T12_LOSS * res.per_token["loss_weight"], 1e-15)


# ------------------------------------------------------------------------------------ GSPO


def test_gspo_sequence_ratio_example():
    d = torch.tensor([[0.1, 0.1, -0.5]], dtype=F)
    old = torch.full_like(d, -2.0)
    lp = old + d
    m = torch.ones_like(d)
    close(importance_ratio(lp, old, m, "token"), torch.exp(d), 1e-15)
    seq = math.exp(-0.1)
    close(importance_ratio(lp, old, m, "sequence"), torch.full_like(d, seq), 1e-15)
    close(importance_ratio(lp, old, m, "sequence-token", clamp=10.0), torch.full_like(d, seq))
    for framework, cfg in [
        ("roll", {"importance_sampling": "seq"}),
        ("verl", {"loss_mode": "gspo"}),
        ("openrlhf", {"policy_loss_type": "gspo"}),
        ("trl", {"importance_sampling_level": "sequence"}),
    ]:
        res = policy_loss(
            framework, cfg, logprobs=lp, old_logprobs=old, advantages=m, response_mask=m
        )
        close(res.per_token["ratio"], torch.full_like(d, seq), 1e-15)
    # token ratios would be [1.105, 1.105, 0.607]
    close(torch.exp(d), [[1.1051709, 1.1051709, 0.6065307]], 1e-7)


def test_verl_gspo_log_ratio_clamp_10():
    d = torch.tensor([[12.0, 12.0]], dtype=F)
    ratio = importance_ratio(
        d.clone().requires_grad_(),
        torch.zeros_like(d),
        torch.ones_like(d),
        "sequence-token",
        clamp=10.0,
    )
    close(ratio, torch.full_like(d, math.exp(10.0)))


# ----------------------------------------------------------------------- loop oracle (PPO)

ORACLE_CONFIGS = [
    ("roll", {}),
    ("roll", {"loss_agg_mode": "token-mean", "dual_clip_loss": True}),
    ("roll", {"loss_agg_mode": "seq-mean-token-sum"}),
    ("roll", {"loss_agg_mode": "seq-mean-token-sum-norm", "dual_clip_loss": True}),
    (
        "roll",
        {
            "importance_sampling": "seq",
            "use_pg_clip_range": True,
            "pg_clip_low": 0.1,
            "pg_clip_high": 0.3,
        },
    ),
    ("verl", {}),
    ("verl", {"loss_agg_mode": "token-sum", "clip_ratio_high": 0.28}),
    ("verl", {"loss_agg_mode": "seq-mean-token-sum"}),
    ("verl", {"loss_agg_mode": "seq-mean-token-mean", "clip_ratio_c": 2.0}),
    ("verl", {"loss_agg_mode": "seq-mean-token-sum-norm"}),
    ("verl", {"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": 7}),
    ("verl", {"loss_mode": "gspo", "loss_agg_mode": "token-sum"}),
    ("verl", {"clip_ratio_low": None, "clip_ratio_high": None, "clip_ratio": 0.1}),
    ("openrlhf", {}),
    ("openrlhf", {"loss_agg_mode": "seq-mean-token-mean", "dual_clip": 2.5}),
    ("openrlhf", {"policy_loss_type": "gspo"}),
    ("openrlhf", {"eps_clip_low_high": [0.1, 0.3]}),
    ("trl", {}),
    ("trl", {"loss_type": "grpo"}),
    ("trl", {"loss_type": "bnpo", "epsilon_high": 0.28}),
    ("trl", {"loss_type": "dr_grpo", "max_completion_length": 10}),
    ("trl", {"delta": 1.25, "epsilon_high": 0.15}),
    ("trl", {"loss_type": "grpo", "importance_sampling_level": "sequence"}),
]


def _random_batch(seed, B=5, T=6, scale=0.35, empty_row=True):
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


def _oracle_params(framework, cfg):
    """Clip bounds, dual constant, delta, ratio level and clamp, re-read from the spec."""
    if framework == "roll":
        lo, hi = (
            (cfg["pg_clip_low"], cfg["pg_clip_high"])
            if cfg["use_pg_clip_range"]
            else (
                cfg["pg_clip"],
                cfg["pg_clip"],
            )
        )
        dual = 1 + 2 * cfg["pg_clip"] if cfg["dual_clip_loss"] else None
        level = "seq" if cfg["importance_sampling"] == "seq" else "token"
        return lo, hi, dual, None, level, None
    if framework == "verl":
        lo = cfg["clip_ratio_low"] if cfg["clip_ratio_low"] is not None else cfg["clip_ratio"]
        hi = cfg["clip_ratio_high"] if cfg["clip_ratio_high"] is not None else cfg["clip_ratio"]
        if cfg["loss_mode"] == "gspo":
            return lo, hi, None, None, "seq-clamp10", None
        return lo, hi, cfg["clip_ratio_c"], None, "token", 20.0
    if framework == "openrlhf":
        lo, hi = cfg["eps_clip_low_high"] or (cfg["eps_clip"], cfg["eps_clip"])
        if cfg["policy_loss_type"] == "gspo":
            return lo, hi, cfg["dual_clip"], None, "seq", None
        return lo, hi, cfg["dual_clip"], None, "token", 20.0
    hi = cfg["epsilon_high"] if cfg["epsilon_high"] is not None else cfg["epsilon"]
    level = "seq" if cfg["importance_sampling_level"] == "sequence" else "token"
    return cfg["epsilon"], hi, None, cfg["delta"], level, None


def _oracle_agg(framework, cfg, loss, mask):
    """Aggregate a list-of-lists loss with plain loops, by each framework's own mode names."""
    B, T = len(mask), len(mask[0])
    sums = [sum(loss[b][t] for t in range(T) if mask[b][t]) for b in range(B)]
    counts = [sum(mask[b]) for b in range(B)]
    tokens = sum(counts)
    valid = [b for b in range(B) if counts[b] > 0]
    seq_means = [sums[b] / counts[b] if counts[b] else 0.0 for b in range(B)]
    if framework == "roll":
        mode = cfg["loss_agg_mode"]
        if mode == "token-mean":
            return sum(sums) / tokens
        if mode == "seq-mean-token-sum":
            return sum(sums[b] for b in valid) / len(valid)
        if mode == "seq-mean-token-mean":
            return sum(seq_means[b] for b in valid) / len(valid)
        return sum(sums) / T  # seq-mean-token-sum-norm: divide by the width, not by B
    if framework == "verl":  # the trainer's global_batch_size: every row, empty ones too
        mode = cfg["loss_agg_mode"]
        if mode == "token-mean":
            return sum(sums) / tokens
        if mode == "token-sum":
            return sum(sums)
        if mode == "seq-mean-token-mean":
            return sum(seq_means) / B
        seq_sum = sum(sums) / B
        if mode == "seq-mean-token-sum":
            return seq_sum
        return seq_sum / (cfg["loss_scale_factor"] or T)
    if framework == "openrlhf":
        if cfg["loss_agg_mode"] == "token-mean" and cfg["policy_loss_type"] != "gspo":
            return sum(sums) / tokens
        return sum(seq_means[b] for b in valid) / len(valid)
    loss_type = cfg["loss_type"]
    if loss_type == "grpo":
        return sum(seq_means) / B  # every row, empty ones too
    if loss_type == "dr_grpo":
        return sum(sums) / (B * cfg["max_completion_length"])
    return sum(sums) / tokens  # bnpo, dapo (one process)


def _oracle_ppo(framework, cfg, lp, old, adv, mask):
    lo, hi, dual, delta, level, clamp = _oracle_params(framework, cfg)
    B, T = len(mask), len(mask[0])
    loss = [[0.0] * T for _ in range(B)]
    for b in range(B):
        n = sum(mask[b])
        seq_d = sum(lp[b][t] - old[b][t] for t in range(T) if mask[b][t]) / max(n, 1)
        for t in range(T):
            if not mask[b][t]:
                continue
            d = lp[b][t] - old[b][t]
            if level == "token":
                r = math.exp(max(-clamp, min(clamp, d)) if clamp else d)
            elif level == "seq":
                r = math.exp(seq_d)
            else:
                r = math.exp(min(seq_d, 10.0))
            a = adv[b][t]
            r1 = min(r, delta) if delta is not None else r
            rc = min(max(r, 1 - lo), 1 + hi)
            value = -min(r1 * a, rc * a)
            if dual is not None and a < 0:
                value = min(value, -dual * a)
            loss[b][t] = value
    return loss, _oracle_agg(framework, cfg, loss, mask)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("framework", "config"), ORACLE_CONFIGS)
def test_ppo_loss_matches_loop_oracle(framework, config, seed):
    lp, old, adv, mask, _ref, _ent = _random_batch(seed)
    if seed == 2:  # a log-ratio beyond verl/OpenRLHF's +-20 clamp
        lp = lp.clone()
        lp[0, 0] = old[0, 0] + 25.0
    res = policy_loss(
        framework, config, logprobs=lp, old_logprobs=old, advantages=adv, response_mask=mask
    )
    cfg = resolve_config(framework, config)
    expected_tokens, expected = _oracle_ppo(
        framework, cfg, lp.tolist(), old.tolist(), adv.tolist(), mask.tolist()
    )
    # seed 2's token has r = e^25 (loss ~1e9), where one float64 ulp is 2.4e-7: a few ulps of
    # relative slack there, 1e-9 absolute everywhere else
    close(res.per_token["pg_loss"], expected_tokens, 1e-9, rtol=1e-15)
    assert res.terms["policy"].item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


# ----------------------------------------------------------- closed-form g against autograd

GRAD_CONFIGS = [
    *ORACLE_CONFIGS,
    ("roll", {"pg_variant": "vanilla"}),
    ("roll", {"pg_variant": "cispo", "loss_agg_mode": "token-mean"}),
    ("roll", {"pg_variant": "cispo", "cispo_use_unified_mask": True}),
    ("roll", {"use_kl_loss": True, "kl_loss_coef": 0.1, "rl_loss_coef": 0.5}),
    ("roll", {"entropy_loss_coef": 0.01, "importance_sampling": "seq", "dual_clip_loss": True}),
    ("verl", {"loss_mode": "gpg"}),
    ("verl", {"loss_mode": "cispo", "loss_agg_mode": "seq-mean-token-sum"}),
    ("verl", {"loss_mode": "sapo"}),
    ("verl", {"use_kl_loss": True, "kl_loss_coef": 0.2}),
    ("verl", {"use_kl_loss": True, "kl_loss_type": "k2", "loss_agg_mode": "seq-mean-token-sum"}),
    ("verl", {"use_kl_loss": True, "kl_loss_type": "abs", "entropy_coeff": 0.01}),
    ("verl", {"use_kl_loss": True, "kl_loss_type": "kl", "loss_mode": "gspo"}),
    ("openrlhf", {"use_loss": True, "kl_estimator": "k3", "init_coef": 0.05}),
    ("openrlhf", {"use_loss": True, "kl_estimator": "k2", "policy_loss_type": "gspo"}),
    ("openrlhf", {"use_loss": True, "kl_estimator": "k1", "entropy_coef": 0.01}),
    ("trl", {"beta": 0.04}),
    ("trl", {"beta": 0.04, "loss_type": "grpo", "importance_sampling_level": "sequence"}),
    ("trl", {"loss_type": "cispo", "epsilon_high": 1.1}),
    ("trl", {"loss_type": "cispo", "importance_sampling_level": "sequence", "epsilon_high": 1.2}),
    ("trl", {"loss_type": "sapo", "entropy_coef": 0.02}),
    ("trl", {"loss_type": "dr_grpo", "beta": 0.1, "delta": 1.3}),
]


@pytest.mark.parametrize("seed", [3, 4])
@pytest.mark.parametrize(("framework", "config"), GRAD_CONFIGS)
def test_grad_coef_matches_autograd(framework, config, seed):
    lp, old, adv, mask, ref, ent = _random_batch(seed, scale=0.4)
    lp = lp.clone()
    lp[0, 0] = old[0, 0] + (25.0 if seed == 3 else -25.0)  # beyond the +-20 log-ratio clamp
    lp[2, 0] = ref[2, 0] - 12.0  # k3 beyond its +-10 clamp
    pad = mask == 0
    lp = torch.where(pad, -math.inf, lp).requires_grad_()  # padding may hold -inf
    res = policy_loss(
        framework,
        config,
        logprobs=lp,
        old_logprobs=old,
        advantages=adv,
        response_mask=mask,
        ref_logprobs=ref,
        entropy=ent,
    )
    (grad,) = torch.autograd.grad(res.total, lp)
    assert bool(torch.isfinite(grad).all())
    close(res.per_token["grad_coef"], grad, 1e-12, rtol=1e-14)
    assert bool((res.per_token["grad_coef"][pad] == 0).all())
    assert bool((res.per_token["grad_coef"][1] == 0).all())  # the zero-length row
    assert bool(res.per_token["grad_coef"].abs().sum() > 0)


def test_grad_coef_float32_logprobs_and_backward():
    lp, old, adv, mask, _ref, _ent = _random_batch(5)
    lp32 = lp.to(torch.float32).requires_grad_()
    res = policy_loss(
        "verl", {}, logprobs=lp32, old_logprobs=old, advantages=adv, response_mask=mask
    )
    res.total.backward()
    assert lp32.grad.dtype == torch.float32
    close(lp32.grad.to(F), res.per_token["grad_coef"], 1e-6)


# ------------------------------------------------------------------------------- properties


@pytest.mark.parametrize(("framework", "config"), ORACLE_CONFIGS)
def test_ratio_one_ppo_gradient_equals_pg_gradient(framework, config):
    """At r = 1 nothing clips: PPO's g equals vanilla PG's -A * W (per-row A for GSPO)."""
    _lp, old, adv, mask, _ref, _ent = _random_batch(6)
    adv = adv[:, :1].expand_as(adv)  # sequence-level advantage, as GRPO gives
    res = policy_loss(
        framework, config, logprobs=old, old_logprobs=old, advantages=adv, response_mask=mask
    )
    pg = -adv * res.per_token["loss_weight"]
    close(res.per_token["grad_coef"], pg, 1e-14)
    assert not bool(res.per_token["clipped_high"].any() | res.per_token["clipped_low"].any())
    if framework == "roll" and config.get("importance_sampling") != "seq":
        vanilla = policy_loss(
            "roll",
            {**config, "pg_variant": "vanilla", "dual_clip_loss": False},
            logprobs=old,
            old_logprobs=old,
            advantages=adv,
            response_mask=mask,
        )
        close(res.per_token["grad_coef"], vanilla.per_token["grad_coef"], 1e-14)
    if framework == "verl" and config.get("loss_mode") is None:
        gpg = policy_loss(
            "verl",
            {**config, "loss_mode": "gpg"},
            logprobs=old,
            old_logprobs=old,
            advantages=adv,
            response_mask=mask,
        )
        close(res.per_token["grad_coef"], gpg.per_token["grad_coef"], 1e-14)


def test_aggregation_modes_with_equal_lengths():
    """All rows full (length T): the "mean" family agrees; the rest are fixed multiples.

    token-mean == seq-mean-token-mean == seq-mean-token-mean-all-rows (TRL grpo)
    == seq-mean-token-sum-norm (verl, factor T) == token-sum-norm-all-rows (dr_grpo, f = T);
    seq-mean-token-sum = T * that; token-sum-norm (ROLL) = B * that; token-sum = B * T * that.
    """
    gen = torch.Generator().manual_seed(7)
    B, T = 4, 5
    x = torch.randn((B, T), generator=gen, dtype=F)
    mask = torch.ones((B, T), dtype=F)
    mean = aggregate(x, mask, "token-mean").item()
    for mode, factor in [
        ("seq-mean-token-mean", None),
        ("seq-mean-token-mean-all-rows", None),
        ("seq-mean-token-sum-norm", None),
        ("token-sum-norm-all-rows", T),
    ]:
        assert aggregate(x, mask, mode, factor).item() == pytest.approx(mean, rel=1e-13)
    assert aggregate(x, mask, "seq-mean-token-sum").item() == pytest.approx(T * mean)
    assert aggregate(x, mask, "token-sum-norm").item() == pytest.approx(B * mean)
    assert aggregate(x, mask, "token-sum").item() == pytest.approx(B * T * mean)
    # unequal lengths break the agreement (a check that can fail)
    mask[0, 2:] = 0
    assert aggregate(x, mask, "token-mean").item() != pytest.approx(
        aggregate(x, mask, "seq-mean-token-mean").item()
    )


@pytest.mark.parametrize("mode", list(AGG_MODES))
def test_zero_length_rows_contribute_nothing(mode):
    gen = torch.Generator().manual_seed(8)
    x = torch.randn((4, 5), generator=gen, dtype=F)
    mask = torch.ones((4, 5), dtype=F)
    mask[0, 3:] = 0
    mask[2] = 0
    x_pad = x.clone()
    x_pad[2] = math.inf  # whatever an empty row holds
    factor = 9 if mode == "token-sum-norm-all-rows" else None
    full = aggregate(x_pad, mask, mode, factor).item()
    keep = [0, 1, 3]
    dropped = aggregate(x[keep], mask[keep], mode, factor).item()
    weights = agg_weights(mask, mode, factor)
    assert bool((weights[2] == 0).all())
    if mode.endswith("all-rows"):  # TRL grpo / dr_grpo, ROLL critic divide by all B rows
        assert full == pytest.approx(dropped * 3 / 4, rel=1e-13)
    else:
        assert full == pytest.approx(dropped, rel=1e-13)


@pytest.mark.parametrize(("framework", "config"), ORACLE_CONFIGS)
def test_on_policy_loss_zero_but_gradient_not(framework, config):
    """r = 1, group-normalized A, equal lengths: the PG loss value is 0, the gradient is not."""
    scores = torch.tensor([8.2, 6.5, 9.1, 1.0, 2.0, 3.0], dtype=F)
    groups = scores.view(2, 3)
    adv_seq = ((groups - groups.mean(1, keepdim=True)) / groups.std(1, keepdim=True)).flatten()
    T = 4
    mask = torch.ones((6, T), dtype=F)
    adv = adv_seq[:, None].expand(6, T)
    lp = torch.full((6, T), -1.3, dtype=F)
    res = policy_loss(
        framework, config, logprobs=lp, old_logprobs=lp, advantages=adv, response_mask=mask
    )
    assert abs(res.terms["policy"].item()) < 1e-12
    assert res.per_token["grad_coef"].abs().max().item() > 0.01


def test_inputs_not_mutated_and_padding_ignored():
    lp, old, adv, mask, ref, ent = _random_batch(9)
    lp_pad = torch.where(mask == 0, math.inf, lp)
    copies = [t.clone() for t in (lp_pad, old, adv, mask, ref, ent)]
    kwargs = {
        "old_logprobs": old,
        "advantages": adv,
        "response_mask": mask,
        "ref_logprobs": ref,
        "entropy": ent,
    }
    a = policy_loss("trl", {"beta": 0.1, "entropy_coef": 0.1}, logprobs=lp_pad, **kwargs)
    b = policy_loss("trl", {"beta": 0.1, "entropy_coef": 0.1}, logprobs=lp, **kwargs)
    for t, c in zip((lp_pad, old, adv, mask, ref, ent), copies, strict=True):
        assert torch.equal(t, c)
    assert a.total.item() == b.total.item()
    for key, value in a.per_token.items():
        assert torch.equal(value, b.per_token[key]), key
        assert bool((value[mask == 0] == 0).all()), key


# ------------------------------------------------------------ seed example through dialects

SEED_DIALECTS = [
    ("roll", {"adv_estimator": "grpo"}),
    ("verl", {"adv_estimator": "grpo"}),
    ("openrlhf", {"advantage_estimator": "group_norm"}),
    ("trl", {}),
]


@pytest.mark.parametrize(("framework", "config"), SEED_DIALECTS)
def test_seed_grpo_advantages_then_loss_at_ratio_one(framework, config):
    lengths = [3, 2, 4]
    batch = seed_batch(lengths=lengths)
    trace = run(batch, framework, config)
    A = trace.advantages[:, 0]
    mask = batch.response_mask
    lp = torch.full(mask.shape, -0.7, dtype=F)
    res = policy_loss(
        framework,
        config,
        logprobs=lp,
        old_logprobs=lp,
        advantages=trace.advantages,
        response_mask=mask,
    )
    w = res.per_token["loss_weight"]
    close(res.per_token["grad_coef"], -trace.advantages * w, 1e-15)
    L = torch.tensor(lengths, dtype=F)
    if framework == "roll":  # seq-mean-token-mean: 1 / (3 L_i)
        close(w[:, 0], 1 / (3 * L), 1e-15)
        expected = -A.mean().item()  # ~0: every sequence counts once
    else:  # verl token-mean, OpenRLHF token-level, TRL dapo: 1 / 9
        close(w[:, 0], torch.full((3,), 1 / 9, dtype=F), 1e-15)
        expected = -(A * L).sum().item() / 9
    assert res.terms["policy"].item() == pytest.approx(expected, abs=1e-12)
    if framework != "roll":  # long responses dominate: the value is visibly not 0
        assert abs(res.terms["policy"].item()) > 0.05


# ----------------------------------------------------------------- KL loss, entropy, config


def test_kl_term_aggregation_and_trl_kl_before_aggregation():
    lp, old, adv, mask, ref, _ent = _random_batch(10)
    k3 = torch.expm1(ref - lp) - (ref - lp)
    roll = policy_loss(
        "roll",
        {"use_kl_loss": True, "kl_loss_coef": 0.5},
        logprobs=lp,
        old_logprobs=old,
        advantages=adv,
        response_mask=mask,
        ref_logprobs=ref,
    )
    assert roll.terms["kl"].item() == pytest.approx(
        aggregate(k3.clamp(-10, 10), mask, "seq-mean-token-mean").item()
    )
    assert roll.total.item() == pytest.approx(
        roll.terms["policy"].item() + 0.5 * roll.terms["kl"].item()
    )
    trl = policy_loss(
        "trl",
        {"beta": 0.3, "loss_type": "grpo"},
        logprobs=lp,
        old_logprobs=old,
        advantages=adv,
        response_mask=mask,
        ref_logprobs=ref,
    )
    # TRL 1.16: use_bias_correction_kl (default True) multiplies k3 by the ratio pi / pi_old
    k3_is = k3 * torch.exp(lp - old)
    per_token = trl.per_token["pg_loss"] + 0.3 * k3_is
    assert trl.total.item() == pytest.approx(
        aggregate(per_token, mask, "seq-mean-token-mean-all-rows").item()
    )
    assert "policy_loss" not in trl.metrics  # TRL logs it only with an entropy bonus
    assert trl.metrics["kl"] == pytest.approx(aggregate(k3_is, mask, "token-mean").item())
    plain = policy_loss(
        "trl",
        {"beta": 0.3, "loss_type": "grpo", "use_bias_correction_kl": False},
        logprobs=lp,
        old_logprobs=old,
        advantages=adv,
        response_mask=mask,
        ref_logprobs=ref,
    )
    assert plain.total.item() == pytest.approx(
        aggregate(trl.per_token["pg_loss"] + 0.3 * k3, mask, "seq-mean-token-mean-all-rows").item()
    )
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(
            "trl", {"beta": 0.3}, logprobs=lp, old_logprobs=old, advantages=adv, response_mask=mask
        )


def test_openrlhf_kl_loss_with_zero_init_coef():
    lp, old, adv, mask, _ref, _ent = _random_batch(11)
    res = policy_loss(
        "openrlhf",
        {"use_loss": True, "init_coef": 0.0},
        logprobs=lp,
        old_logprobs=old,
        advantages=adv,
        response_mask=mask,
    )
    assert res.terms["kl"].item() == 0.0
    assert res.metrics["kl"] == 0.0
    batch = Batch(
        scores=torch.tensor([1.0, 0.0, 2.0], dtype=F),
        response_mask=torch.ones((3, 2), dtype=F),
        group_ids=torch.zeros(3, dtype=torch.long),
        logprobs=torch.full((3, 2), -1.0, dtype=F),
        ref_logprobs=torch.full((3, 2), -1.5, dtype=F),
    )
    cfg = {"advantage_estimator": "group_norm", "use_loss": True, "kl_estimator": "k2"}
    trace = run(batch, "openrlhf", {**cfg, "init_coef": 0.0})
    assert trace.kl_loss == 0.0
    assert any("no reference model" in note for note in trace.notes)
    trace = run(batch, "openrlhf", cfg)
    assert trace.kl_loss == pytest.approx(0.125)


def test_roll_trace_kl_loss_uses_loss_agg_mode():
    batch = Batch(
        scores=torch.tensor([1.0, 0.0, 2.0], dtype=F),
        response_mask=torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=F),
        group_ids=torch.zeros(3, dtype=torch.long),
        logprobs=torch.tensor([[-1.0] * 4, [-2.0] * 4, [-1.0, -3.0, -1.0, -1.0]], dtype=F),
        ref_logprobs=torch.full((3, 4), -1.0, dtype=F),
    )
    k3 = torch.expm1(batch.ref_logprobs - batch.logprobs) - (batch.ref_logprobs - batch.logprobs)
    m = batch.response_mask
    seq_means = (k3 * m).sum(-1) / m.sum(-1)
    cfg = {"adv_estimator": "grpo", "use_kl_loss": True}
    assert run(batch, "roll", cfg).kl_loss == pytest.approx(seq_means.mean().item())
    token_mean = ((k3 * m).sum() / m.sum()).item()
    assert token_mean != pytest.approx(seq_means.mean().item())
    tm = run(batch, "roll", {**cfg, "loss_agg_mode": "token-mean"}).kl_loss
    assert tm == pytest.approx(token_mean)
    verl = run(batch, "verl", {"adv_estimator": "grpo", "use_kl_loss": True})
    assert verl.kl_loss == pytest.approx(token_mean)  # verl default token-mean


def test_entropy_bonus_per_framework():
    lp, old, adv, mask, _ref, ent = _random_batch(12)
    mean_h = aggregate(ent, mask, "token-mean").item()
    kw = {"logprobs": lp, "old_logprobs": old, "advantages": adv, "response_mask": mask}
    trl = policy_loss("trl", {"loss_type": "grpo", "entropy_coef": 0.1}, entropy=ent, **kw)
    assert trl.terms["entropy"].item() == pytest.approx(mean_h)  # always the token mean
    assert trl.total.item() == pytest.approx(trl.terms["policy"].item() - 0.1 * mean_h)
    assert trl.metrics["entropy"] == pytest.approx(mean_h)
    assert trl.metrics["policy_loss"] == pytest.approx(trl.terms["policy"].item())
    roll = policy_loss("roll", {"entropy_loss_coef": 0.1}, entropy=ent, **kw)
    assert roll.terms["entropy"].item() == pytest.approx(
        aggregate(ent, mask, "seq-mean-token-mean").item()
    )
    assert "entropy_loss" not in policy_loss("openrlhf", {}, entropy=ent, **kw).metrics
    assert policy_loss("openrlhf", {"entropy_coef": 0.0}, entropy=ent, **kw).metrics[
        "entropy_loss"
    ] == pytest.approx(mean_h)
    with pytest.raises(ValueError, match=r"^entropy"):
        policy_loss("verl", {"entropy_coeff": 0.01}, **kw)
    ent_grad = ent.clone().requires_grad_()
    res = policy_loss("verl", {"entropy_coeff": 0.5}, entropy=ent_grad, **kw)
    (g,) = torch.autograd.grad(res.total, ent_grad)
    close(g, -0.5 * agg_weights(mask, "token-mean"), 1e-15)


def test_framework_metrics_by_hand():
    r = torch.tensor([[1.5, 0.5, 1.0], [0.7, 1.3, 1.0]], dtype=F)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 1.0]], dtype=F)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=F)
    old = torch.zeros_like(r)
    kw = {"logprobs": r.log(), "old_logprobs": old, "advantages": adv, "response_mask": mask}
    # raw out-of-range shares (ROLL): high = 1.5, 1.3; low = 0.5, 0.7 of 5 tokens
    roll = policy_loss("roll", {"loss_agg_mode": "token-mean"}, **kw).metrics
    assert roll["actor/ppo_ratio_high_clipfrac"] == pytest.approx(2 / 5)
    assert roll["actor/ppo_ratio_low_clipfrac"] == pytest.approx(2 / 5)
    # surr2 < surr1: (1.5, +) and (0.7, -) only
    assert roll["actor/clipfrac"] == pytest.approx(2 / 5)
    assert roll["actor/policykl"] == pytest.approx(math.log(1.5 * 0.5 * 0.7 * 1.3) / 5)
    assert roll["actor/ratio_max"] == pytest.approx(1.5)
    assert roll["actor/ratio_min"] == pytest.approx(0.5)
    # TRL: only direction-relevant clipping
    trl = policy_loss("trl", {}, **kw).metrics
    assert trl["clip_ratio/high_mean"] == pytest.approx(1 / 5)
    assert trl["clip_ratio/low_mean"] == pytest.approx(1 / 5)
    assert trl["clip_ratio/region_mean"] == pytest.approx(2 / 5)
    assert trl["clip_ratio/high_max"] == pytest.approx(1 / 3)
    assert trl["clip_ratio/low_min"] == pytest.approx(0.0)
    ppo = policy_loss("openrlhf", {}, **kw).metrics
    assert ppo["ppo_clip_ratio"] == pytest.approx(2 / 5)
    assert ppo["ppo_kl"] == pytest.approx(-roll["actor/policykl"])  # opposite sign to ROLL


def test_loss_config_tables_and_validation():
    for fw in FRAMEWORKS:
        assert set(LOSS_HELP[fw]) == set(LOSS_DEFAULTS[fw])
        assert not set(LOSS_DEFAULTS[fw]) & set(DEFAULTS[fw])
        assert all(LOSS_DEFAULTS[fw][k] in LOSS_CHOICES[fw][k] for k in LOSS_CHOICES[fw])
        assert all(h.strip() and "\n" not in h for h in LOSS_HELP[fw].values())
        assert set(LOSS_KEYS[fw]) <= set(LOSS_DEFAULTS[fw]) | set(DEFAULTS[fw])
        assert not set(CHOICES[fw]) & set(LOSS_CHOICES[fw])
        resolved = resolve_config(fw, {})
        assert all(resolved[k] == v for k, v in LOSS_DEFAULTS[fw].items())
        assert loss_agg_modes(fw, resolved)["policy"][0] in AGG_MODES
    assert LOSS_DEFAULTS["roll"]["loss_agg_mode"] == "seq-mean-token-mean"
    assert LOSS_DEFAULTS["verl"]["clip_ratio_c"] == 3.0
    assert LOSS_DEFAULTS["trl"]["loss_type"] == "dapo"
    assert resolve_config("openrlhf", {"eps_clip_low_high": [0.1, 0.3]})["eps_clip_low_high"] == (
        0.1,
        0.3,
    )
    assert resolve_config("trl", {"max_completion_length": 64.0})["max_completion_length"] == 64
    for fw, cfg, key in [
        ("roll", {"bogus_loss_key": 1}, "bogus_loss_key"),
        ("roll", {"loss_agg_mode": "token-sum"}, "loss_agg_mode"),  # verl only
        ("verl", {"clip_ratio_c": 1.0}, "clip_ratio_c"),
        ("verl", {"loss_mode": "ppo"}, "loss_mode"),
        ("openrlhf", {"dual_clip": 0.5}, "dual_clip"),
        ("openrlhf", {"eps_clip_low_high": [0.1]}, "eps_clip_low_high"),
        ("trl", {"max_completion_length": 0}, "max_completion_length"),
        ("trl", {"epsilon": -0.1}, "epsilon"),
        ("trl", {"entropy_coef": None}, "entropy_coef"),
        ("trl", {"clip_ratio": 0.2}, "clip_ratio"),  # another dialect's key
    ]:
        with pytest.raises(ValueError, match=key):
            resolve_config(fw, cfg)


def test_bad_inputs_name_the_argument():
    lp, old, adv, mask, _ref, _ent = _random_batch(13)
    kw = {"logprobs": lp, "old_logprobs": old, "advantages": adv, "response_mask": mask}
    with pytest.raises(ValueError, match=r"^old_logprobs"):
        policy_loss("roll", {}, **{**kw, "old_logprobs": old[:, :2]})
    bad = lp.clone()
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"^logprobs\[0\]\[0\]"):
        policy_loss("roll", {}, **{**kw, "logprobs": bad})
    with pytest.raises(ValueError, match=r"^response_mask"):
        policy_loss("roll", {}, **{**kw, "response_mask": mask * 2})
    res = policy_loss("trl", {}, **{**kw, "logprobs": old, "advantages": adv[:, 0]})  # (B,)
    close(
        res.per_token["grad_coef"] / torch.where(mask > 0, res.per_token["loss_weight"], 1.0),
        -adv[:, :1].expand_as(adv) * mask,
        1e-12,
    )
