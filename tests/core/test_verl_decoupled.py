"""verl's ``algorithm.rollout_correction`` in the calculator's loss, as each trainer runs it.

The decoupled mode (IS weights of pi_old against mu multiplying every loss mode's per-token loss;
the rejection narrowing ``response_mask`` for every term; the v1 trainer's token-mean still
dividing by every response token, the legacy trainer's by the kept ones) and ``bypass_mode:
true`` under both trainers: hand-computed numbers, a plain-loop oracle that shares no code with
the package, and autograd. verl's own code on the same options: ``test_peer_vectors.py``.
"""

import math

import pytest
import torch

from roll_viz.core.pipeline import policy_loss
from roll_viz.core.pipeline.aggregation import aggregate
from roll_viz.core.pipeline.dialects import get, resolve, verl_rollout

F64 = torch.float64
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]], dtype=F64)
MU = torch.tensor([[-1.2, -1.0, -0.5], [-0.3, -3.0, 0.0]], dtype=F64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
ADV = torch.tensor([1.0, -2.0], dtype=F64)
TIS = {"rollout_is": "token", "rollout_is_threshold": 2.0}
K1 = {"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0"}


def _loss(cfg, logp=OLD, **kw):
    return policy_loss(
        "verl",
        cfg,
        logprobs=logp,
        old_logprobs=OLD,
        advantages=ADV,
        response_mask=MASK,
        rollout_logprobs=MU,
        **kw,
    )


# ------------------------------------------------------------------------- hand-computed values


def test_token_mean_over_another_count_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=F64)
    m = torch.tensor([[1.0, 0.0, 1.0]], dtype=F64)
    assert aggregate(x, m, "token-mean").item() == pytest.approx(2.0)
    assert aggregate(x, m, "token-mean", num_tokens=3.0).item() == pytest.approx(4.0 / 3.0)
    assert aggregate(x, m, "seq-mean-token-mean", num_tokens=3.0).item() == pytest.approx(2.0)


def test_decoupled_weights_and_rejection_by_hand():
    e = math.exp
    # r = 1 (logp = pi_old): per-token loss -A; d = old - mu = [[0.2, -1, 0], [0, 1.8, .]]
    plain = _loss({})
    assert plain.total.item() == pytest.approx((-3.0 + 4.0) / 5)
    tis = _loss(TIS)  # w = [[e^.2, e^-1, 1], [1, min(e^1.8, 2) = 2, .]]
    assert tis.total.item() == pytest.approx((-(e(0.2) + e(-1.0) + 1.0) + 2.0 * 3.0) / 5)
    # token_k1 keeps -0.693 <= -d <= 0.693: (0, 1) and (1, 1) leave response_mask
    both = _loss({**TIS, **K1})
    assert both.total.item() == pytest.approx((-(e(0.2) + 1.0) + 2.0) / 5)  # v1: / 5 tokens
    grad = both.per_token["grad_coef"]
    want = [[-e(0.2) / 5, 0.0, -1 / 5], [2.0 / 5, 0.0, 0.0]]
    assert torch.allclose(grad, torch.tensor(want, dtype=F64))
    legacy = _loss({**TIS, **K1, "use_v1": False})
    assert legacy.total.item() == pytest.approx((-(e(0.2) + 1.0) + 2.0) / 3)  # / 3 kept
    assert any("removed 2 token(s)" in n for n in both.notes)
    assert both.metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 5)
    assert both.metrics["rollout_corr/rollout_is_mean"] == pytest.approx(
        (e(0.2) + e(-1.0) + 1.0 + 1.0 + 2.0) / 5
    )


def test_decoupled_kl_and_entropy_run_on_the_kept_tokens_by_hand():
    ref = OLD + 0.5  # k1 per token = logp - ref = -0.5 everywhere
    ent = torch.full_like(OLD, 0.7)
    cfg = {**K1, "use_kl_loss": True, "kl_loss_type": "k1", "kl_loss_coef": 1.0}
    cfg["entropy_coeff"] = 1.0
    got = _loss(cfg, ref_logprobs=ref, entropy=ent)
    # 3 kept tokens of 5: KL = 3 * -0.5 / 5, entropy = 3 * 0.7 / 5
    assert got.terms["kl"].item() == pytest.approx(-1.5 / 5)
    assert got.terms["entropy"].item() == pytest.approx(2.1 / 5)


def test_bypass_mode_under_each_trainer():
    v1 = _loss({**TIS, **K1, "bypass_mode": True})
    plain_mu = policy_loss(
        "verl", {}, logprobs=OLD, old_logprobs=MU, advantages=ADV, response_mask=MASK
    )
    assert v1.total.item() == pytest.approx(plain_mu.total.item())  # old = mu, nothing else
    assert any("act nowhere" in n for n in v1.notes)
    legacy = _loss({**TIS, **K1, "bypass_mode": True, "use_v1": False})
    loss_mode = _loss({**TIS, **K1, "loss_mode": "bypass_mode"})
    assert legacy.total.item() == pytest.approx(loss_mode.total.item())
    assert legacy.total.item() != pytest.approx(v1.total.item())


def test_modes_and_what_they_read():
    cfg = resolve(get("verl"), {})
    assert verl_rollout.mode(cfg) == "decoupled"
    assert not verl_rollout.reads_rollout_logprobs(cfg)
    assert verl_rollout.reads_rollout_logprobs(resolve(get("verl"), TIS))
    assert verl_rollout.mode(resolve(get("verl"), {"bypass_mode": True})) == "bypass_old"
    legacy = resolve(get("verl"), {"bypass_mode": True, "use_v1": False})
    assert verl_rollout.mode(legacy) == "bypass_loss"


def test_decoupled_errors():
    with pytest.raises(ValueError, match=r"^rollout_logprobs"):
        policy_loss("verl", TIS, logprobs=OLD, old_logprobs=OLD, advantages=ADV, response_mask=MASK)
    with pytest.raises(ValueError, match=r"^rollout_rs_threshold"):
        _loss({"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0,3"})


def test_mismatch_correction_counts_as_each_trainer():
    d = get("verl")
    v1, name, _ = d.mismatch_correction(resolve(d, K1), OLD, MU, MASK > 0)
    assert name == verl_rollout.DECOUPLED_V1
    assert int(v1.counted.sum()) == 5
    legacy, name, _ = d.mismatch_correction(resolve(d, {**K1, "use_v1": False}), OLD, MU, MASK > 0)
    assert name == verl_rollout.DECOUPLED_LEGACY
    assert int(legacy.counted.sum()) == 3
    assert d.mismatch_correction(resolve(d, {**K1, "bypass_mode": True}), OLD, MU, MASK) is None


# ----------------------------------------------------------------------- plain-loop oracle


def _random(seed, rows=5, width=6):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, width, generator=gen, dtype=F64) * 3 - 0.01
    mu = old - 0.6 * torch.randn(rows, width, generator=gen, dtype=F64)
    logp = old + 0.4 * torch.randn(rows, width, generator=gen, dtype=F64)
    ref = old + 0.3 * torch.randn(rows, width, generator=gen, dtype=F64)
    ent = torch.rand(rows, width, generator=gen, dtype=F64)
    adv = torch.randn(rows, generator=gen, dtype=F64)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    lengths[0] = 0  # one empty row
    mask = (torch.arange(width)[None] < lengths[:, None]).to(F64)
    return old, mu, logp, ref, ent, adv, mask


def _loop_loss(old, mu, logp, ref, ent, adv, mask, agg, v1):
    """verl v1 / legacy decoupled: token TIS 2.0, token_k1 0.5_2.0, vanilla PPO (eps 0.2, dual
    clip 3), k3 KL (coef 0.1, clamps 20 / 10), entropy 0.01; written with loops."""
    rows, width = mask.shape
    keep = [[False] * width for _ in range(rows)]
    for b in range(rows):
        for t in range(width):
            if mask[b, t] > 0:
                k1 = float(mu[b, t] - old[b, t])
                keep[b][t] = math.log(0.5) <= k1 <= math.log(2.0)
    n_all = sum(int(mask[b, t] > 0) for b in range(rows) for t in range(width))
    n_kept = sum(keep[b][t] for b in range(rows) for t in range(width))
    pg_sum, kl_sum, ent_sum = [], [], []
    for b in range(rows):
        pg_row, kl_row, ent_row, count = 0.0, 0.0, 0.0, 0
        for t in range(width):
            if not keep[b][t]:
                continue
            count += 1
            w = min(math.exp(max(-20.0, min(20.0, float(old[b, t] - mu[b, t])))), 2.0)
            d = max(-20.0, min(20.0, logp[b, t] - old[b, t]))
            r = torch.exp(d)
            a = float(adv[b])
            loss = torch.maximum(-a * r, -a * r.clamp(0.8, 1.2))
            if a < 0:
                loss = torch.minimum(loss, torch.tensor(-a * 3.0, dtype=F64))
            pg_row = pg_row + w * loss
            x = (ref[b, t] - logp[b, t]).clamp(-20.0, 20.0)  # low_var_kl: k3 of ref / pi
            kl_row = kl_row + (torch.exp(x) - x - 1.0).clamp(-10.0, 10.0)
            ent_row += float(ent[b, t])
        pg_sum.append((pg_row, count))
        kl_sum.append((kl_row, count))
        ent_sum.append((ent_row, count))
    if agg == "token-mean":
        n = n_all if v1 else n_kept

        def total(parts):
            return sum(p for p, _ in parts) / n
    else:  # seq-mean-token-mean over every row of the mini-batch

        def total(parts):
            return sum(p / c for p, c in parts if c) / rows

    return total(pg_sum) + 0.1 * total(kl_sum) - 0.01 * total(ent_sum)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("v1", [True, False])
def test_decoupled_loss_matches_the_loop_and_autograd(seed, agg, v1):
    old, mu, logp0, ref, ent, adv, mask = _random(seed)
    cfg = {**TIS, **K1, "loss_agg_mode": agg, "use_v1": v1, "use_kl_loss": True}
    cfg |= {"kl_loss_coef": 0.1, "kl_loss_type": "low_var_kl", "entropy_coeff": 0.01}
    logp = logp0.clone().requires_grad_(True)
    got = policy_loss(
        "verl",
        cfg,
        logprobs=logp,
        old_logprobs=old,
        advantages=adv,
        response_mask=mask,
        ref_logprobs=ref,
        entropy=ent,
        rollout_logprobs=mu,
    )
    want = _loop_loss(old, mu, logp0, ref, ent, adv, mask, agg, v1)
    assert got.total.item() == pytest.approx(float(want), abs=1e-12)
    (grad,) = torch.autograd.grad(got.total, logp)
    assert torch.allclose(got.per_token["grad_coef"], grad, atol=1e-12)


# ----------------------------------------- geo_mean: the IS weights' per-row geometric mean


def _geo_oracle(lp, cfg_w, low=0.2, high=0.2):
    """compute_policy_loss_geo_mean with rollout_is_weights, one row and one token at a time."""
    total = 0.0
    for i in range(OLD.shape[0]):
        toks = [t for t in range(OLD.shape[1]) if MASK[i, t] > 0]
        n = len(toks)
        a = [float(ADV[i])] * n
        s_dmin, s_logw = 0.0, 0.0
        for t in toks:
            d = float(lp[i, t]) - float(OLD[i, t])
            sgn = (a[0] > 0) - (a[0] < 0)
            dc = min(max(d, -low), high)
            s_dmin += sgn * min(sgn * d, sgn * dc)
            s_logw += math.log(cfg_w(float(OLD[i, t]) - float(MU[i, t])) + 1e-10)
        ratio = math.exp(s_dmin / (n + 1e-8))
        seq_w = math.exp(s_logw / (n + 1e-8))
        total += -(sum(a) / (n + 1e-8)) * ratio * seq_w
    return total / OLD.shape[0]


def _tis(log_w):
    return min(math.exp(log_w), 2.0)


def _icepop(log_w):
    w = math.exp(log_w)
    return w if 0.5 <= w <= 1.5 else 0.0


GEO = {"loss_mode": "geo_mean"}
ICEPOP = {"rollout_is": "token", "rollout_is_threshold": "0.5_1.5"}


def test_geo_mean_takes_the_rows_geometric_mean_of_the_is_weights_hand_numbers():
    # at logp = pi_old every ratio is 1: loss_i = -A_i * seq_w_i, then the mean over rows
    # row 0: log w = (0.2, -1.0, 0.0) (none over 2); row 1: (0.0, 1.8 -> log 2)
    w0, w1 = math.exp((0.2 - 1.0 + 0.0) / 3), math.exp((0.0 + math.log(2.0)) / 2)
    assert _loss({**GEO, **TIS}).total.item() == pytest.approx((-1.0 * w0 + 2.0 * w1) / 2, rel=1e-8)
    # IcePop zeroes w = e^-1 and e^1.8 (outside [0.5, 1.5]): log(0 + 1e-10) enters the means
    # (verl's L + 1e-8 denominators: with log 1e-10 ~ -23 they show at 1e-8)
    w0 = math.exp((0.2 + math.log(1e-10) + 0.0) / (3 + 1e-8))
    w1 = math.exp((0.0 + math.log(1e-10)) / (2 + 1e-8))
    assert _loss({**GEO, **ICEPOP}).total.item() == pytest.approx((-w0 + 2.0 * w1) / 2, rel=1e-8)
    plain = _loss(GEO).total.item()  # no rollout_is: the rows' plain mean, -(1 - 2) / 2
    assert plain == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize(("rule", "weight"), [(TIS, _tis), (ICEPOP, _icepop)])
def test_geo_mean_is_weights_match_the_loop_oracle_and_autograd(rule, weight):
    g = torch.Generator().manual_seed(11)
    lp = (OLD + 0.4 * torch.randn(OLD.shape, generator=g, dtype=F64)).requires_grad_(True)
    res = _loss({**GEO, **rule}, logp=lp)
    assert res.total.item() == pytest.approx(_geo_oracle(lp.detach(), weight), rel=1e-8)
    (grad,) = torch.autograd.grad(res.total, lp)
    assert torch.allclose(res.per_token["grad_coef"], grad * MASK, atol=1e-12)
    assert any("geometric mean of its token weights" in n for n in res.notes)
    unweighted = _loss(GEO, logp=lp.detach())
    assert unweighted.total.item() != pytest.approx(res.total.item())
