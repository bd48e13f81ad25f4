"""The mismatch lab's core: d, the two-factor ratio, ESS, and every framework's correction.

Each correction is checked three ways: hand-computed numbers on a 2 x 3 batch, a plain-loop
reading of the framework's rule over random batches (which tokens are truncated or masked, and
their weights), and autograd for the loss's gradient. TRL's and OpenRLHF's corrections are also
checked against the calculator's ``policy_loss``, which applies them inside the loss.
"""

import math

import pytest
import torch

from roll_viz.core.pipeline import policy_loss
from roll_viz.core.pipeline import rollout_correction as rc
from roll_viz.core.pipeline.dialects import corrections as fc

OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]], dtype=torch.float64)
MU = torch.tensor([[-1.2, -1.0, -0.5], [-0.3, -3.0, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def _close(t, expected, rel=1e-9, abs=1e-12):
    """Nested lists of floats compared with a tolerance (pytest.approx takes flat ones only)."""
    want = torch.tensor(expected, dtype=torch.float64)
    return torch.allclose(t.to(torch.float64), want, rtol=rel, atol=abs)


def _random(seed, rows=5, width=6, scale=0.6):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(rows, width, generator=gen, dtype=torch.float64) * 3 - 0.01
    mu = old - scale * torch.randn(rows, width, generator=gen, dtype=torch.float64)
    mu = mu.clamp(max=-1e-4)
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    lengths[0] = 0  # one empty row
    mask = (torch.arange(width)[None] < lengths[:, None]).long()
    return old, mu, mask


# ------------------------------------------------------------------------- hand-computed values


def test_delta_and_two_factor_by_hand():
    d = rc.log_mismatch(OLD, MU, MASK)
    assert _close(d, [[0.2, -1.0, 0.0], [0.0, 1.8, 0.0]])
    logp = OLD + 0.1
    tf = rc.two_factor_ratio(logp, OLD, MU, MASK)
    assert float(tf.mismatch[0, 0]) == pytest.approx(math.exp(0.2))
    assert float(tf.staleness[0, 0]) == pytest.approx(math.exp(0.1))
    assert float(tf.total[0, 0]) == pytest.approx(math.exp(0.3))
    assert torch.allclose(tf.total, tf.mismatch * tf.staleness)
    assert float(tf.total[1, 2]) == 0.0  # padding


def test_ess_by_hand_and_as_verl_logs_it():
    mask = torch.ones(1, 4)
    assert rc.effective_sample_size(torch.ones(1, 4), mask) == pytest.approx(1.0)
    assert rc.effective_sample_size(torch.tensor([[4.0, 0, 0, 0]]), mask) == pytest.approx(0.25)
    w = torch.tensor([[1.0, 2.0, 3.0, 0.5]])
    assert rc.effective_sample_size(w, mask) == pytest.approx(6.5**2 / (4 * 14.25))
    # verl: 1 / mean((w / mean w)^2): the same number when no weight exceeds its threshold
    assert fc.verl_ess(w, mask, threshold=5.0) == pytest.approx(
        rc.effective_sample_size(w, mask), rel=1e-6
    )
    assert rc.effective_sample_size(torch.zeros(1, 4), mask) == 0.0
    assert math.isnan(rc.effective_sample_size(torch.ones(1, 2), torch.zeros(1, 2)))


def test_verl_presets_by_hand():
    e = math.exp
    tis = fc.verl_correction(OLD, MU, MASK, **fc.VERL_PRESETS["token-TIS"])
    assert _close(tis.weights, [[e(0.2), e(-1.0), 1.0], [1.0, 2.0, 0.0]])
    assert tis.truncated.tolist() == [[False] * 3, [False, True, False]]
    assert not tis.masked.any()
    seq = fc.verl_correction(OLD, MU, MASK, **fc.VERL_PRESETS["seq-TIS"])
    assert _close(seq.weights[0], [e(-0.8)] * 3)
    assert _close(seq.weights[1], [2.0, 2.0, 0.0])  # e^1.8 = 6.05 -> 2
    ice = fc.verl_correction(OLD, MU, MASK, **fc.VERL_PRESETS["IcePop"])
    assert _close(ice.weights, [[e(0.2), 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert ice.masked.tolist() == [[False, True, False], [False, True, False]]
    assert ice.counted.tolist() == (MASK > 0).tolist()  # IcePop keeps the denominator
    mis = fc.verl_correction(OLD, MU, MASK, **fc.VERL_PRESETS["seq-MIS"])
    # row 0: sum k1 = 0.8, exp = 2.2 > 2 -> rejected; row 1: sum k1 = -1.8 -> rejected
    assert mis.counted.tolist() == (MASK > 0).tolist()  # v1: loss_mask counted before
    assert mis.masked.tolist() == (MASK > 0).tolist()
    assert float(mis.weights.abs().sum()) == 0.0
    legacy = fc.verl_correction(OLD, MU, MASK, **fc.VERL_PRESETS["seq-MIS"], count_rejected=False)
    assert not legacy.counted.any()  # the legacy trainer's loss_mask is the narrowed mask


def test_trl_openrlhf_roll_by_hand():
    e = math.exp
    trl = fc.trl_correction(OLD, MU, MASK)  # sequence_mask, [None, 3.0]
    assert _close(trl.weights[0], [e(-0.8)] * 3)
    assert trl.weights[1].tolist() == [0.0, 0.0, 0.0]  # e^1.8 > 3
    assert trl.masked[1].tolist() == [True, True, False]
    tt = fc.trl_correction(OLD, MU, MASK, mode="token_truncate", clip_min=0.5, clip_max=2.0)
    assert _close(tt.weights, [[e(0.2), 0.5, 1.0], [1.0, 2.0, 0.0]])
    assert tt.truncated.tolist() == [[False, True, False], [False, True, False]]
    orl = fc.openrlhf_correction(OLD, MU, MASK)  # token mask ratio (0.5, 5.0)
    assert _close(orl.weights, [[e(0.2), 0.0, 1.0], [1.0, 0.0, 0.0]])
    roll = fc.roll_correction(OLD, MU, MASK)  # token IS, upper bound 1.2
    assert _close(roll.weights, [[1.2, e(-1.0), 1.0], [1.0, 1.2, 0.0]])
    assert roll.truncated.tolist() == [[True, False, False], [False, True, False]]
    filt = fc.roll_correction(OLD, MU, MASK, is_weight_enabled=False, filters=(fc.RollFilter(),))
    assert filt.weights.tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    assert filt.counted.tolist() == (MASK > 0).tolist()  # ROLL: pre-filter batch_num_tokens


def test_lab_loss_by_hand():
    logp = OLD.clone()
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    plain = rc.lab_loss(logp, OLD, adv, MASK)
    # r = 1 everywhere: loss = (-1 * 3 + 2 * 2) / 5, gradient -A / 5
    assert plain.loss == pytest.approx(0.2)
    assert _close(plain.grad, [[-0.2] * 3, [0.4, 0.4, 0.0]])
    ice = fc.verl_correction(OLD, MU, MASK, **fc.VERL_PRESETS["IcePop"])
    got = rc.lab_loss(logp, OLD, adv, MASK, ice)
    assert got.loss == pytest.approx((-(math.exp(0.2) + 1.0) + 2.0) / 5)
    assert got.denominator == 5


# ----------------------------------------------------------------------- plain-loop oracles


def _loop_verl_is(old, mu, mask, level, threshold):
    upper, lower = fc.parse_verl_is_threshold(threshold)
    rows, width = old.shape
    w = [[0.0] * width for _ in range(rows)]
    trunc = [[False] * width for _ in range(rows)]
    zero = [[False] * width for _ in range(rows)]
    for b in range(rows):
        seq = sum(float(old[b, t] - mu[b, t]) for t in range(width) if mask[b, t])
        seq = min(max(seq, -20.0), 20.0)
        for t in range(width):
            if not mask[b, t]:
                continue
            x = float(old[b, t] - mu[b, t]) if level == "token" else seq
            raw = math.exp(min(max(x, -20.0), 20.0))
            if lower is None:
                w[b][t] = min(raw, upper)
                trunc[b][t] = raw > upper
            elif lower <= raw <= upper:
                w[b][t] = raw
            else:
                zero[b][t] = True
    return w, trunc, zero


def _loop_verl_rs(old, mu, mask, option, lower, upper):
    rows, width = old.shape
    keep = [[False] * width for _ in range(rows)]
    for b in range(rows):
        stats = []
        for t in range(width):
            if mask[b, t]:
                d = min(max(float(old[b, t] - mu[b, t]), -20.0), 20.0)
                stats.append({"k1": -d, "k2": d * d / 2, "k3": math.exp(d) - 1 - d}[option[-2:]])
        for t in range(width):
            if not mask[b, t]:
                continue
            if option.startswith("token"):
                d = min(max(float(old[b, t] - mu[b, t]), -20.0), 20.0)
                s = {"k1": -d, "k2": d * d / 2, "k3": math.exp(d) - 1 - d}[option[-2:]]
            elif option.startswith("seq_sum"):
                s = sum(stats)
            elif option.startswith("seq_mean"):
                s = sum(stats) / len(stats)
            else:
                s = max(stats)
            if option.endswith("k1"):
                keep[b][t] = math.log(lower) <= s <= math.log(upper)
            else:
                keep[b][t] = s <= upper
    return keep


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("threshold", [2.0, 1.1, "0.5_5.0", "0.8_1.25"])
def test_verl_is_matches_the_loop(seed, level, threshold):
    old, mu, mask = _random(seed)
    w, trunc, zero = fc.verl_rollout_is(old, mu, mask, level, threshold)
    lw, lt, lz = _loop_verl_is(old, mu, mask, level, threshold)
    assert _close(w, lw, rel=1e-12)
    assert trunc.tolist() == lt
    assert zero.tolist() == lz


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    ("option", "threshold", "bounds"),
    [
        ("token_k1", "0.5_2.0", (0.5, 2.0)),
        ("token_k1", 1.5, (1 / 1.5, 1.5)),
        ("token_k2", 0.05, (None, 0.05)),
        ("token_k3", 0.02, (None, 0.02)),
        ("seq_sum_k1", "0.5_2.0", (0.5, 2.0)),
        ("seq_sum_k3", 0.2, (None, 0.2)),
        ("seq_mean_k1", "0.9_1.1", (0.9, 1.1)),
        ("seq_mean_k2", 0.1, (None, 0.1)),
        ("seq_mean_k3", 0.01, (None, 0.01)),
        ("seq_max_k2", 0.3, (None, 0.3)),
        ("seq_max_k3", 0.3, (None, 0.3)),
    ],
)
def test_verl_rs_matches_the_loop(seed, option, threshold, bounds):
    old, mu, mask = _random(seed)
    keep = fc.verl_rollout_rs(old, mu, mask, option, threshold)
    assert keep.tolist() == _loop_verl_rs(old, mu, mask, option, *bounds)
    corr = fc.verl_correction(old, mu, mask, rollout_rs=option, rollout_rs_threshold=threshold)
    assert corr.counted.tolist() == (mask > 0).tolist()  # the v1 trainer's denominator
    assert corr.masked.tolist() == ((mask > 0) & ~keep).tolist()
    assert ((corr.weights != 0) == keep).all()
    legacy = fc.verl_correction(
        old, mu, mask, rollout_rs=option, rollout_rs_threshold=threshold, count_rejected=False
    )
    assert legacy.counted.tolist() == keep.tolist()


def test_verl_rs_chains_options_with_and():
    old, mu, mask = _random(1)
    both = fc.verl_rollout_rs(old, mu, mask, "token_k1,seq_max_k2", "0.5_2.0,0.3")
    a = fc.verl_rollout_rs(old, mu, mask, "token_k1", "0.5_2.0")
    b = fc.verl_rollout_rs(old, mu, mask, "seq_max_k2", 0.3)
    assert both.tolist() == (a & b).tolist()


def _loop_trl(old, mu, mask, mode, lo, hi):
    rows, width = old.shape
    w = [[0.0] * width for _ in range(rows)]
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    for b in range(rows):
        seq = sum(float(old[b, t] - mu[b, t]) for t in range(width) if mask[b, t])
        for t in range(width):
            if not mask[b, t]:
                continue
            raw = math.exp(seq if mode.startswith("sequence") else float(old[b, t] - mu[b, t]))
            if mode.endswith("truncate"):
                w[b][t] = min(max(raw, lo), hi)
            else:
                w[b][t] = raw if lo <= raw <= hi else 0.0
    return w


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mode", fc.TRL_MODES)
@pytest.mark.parametrize("bounds", [(None, 3.0), (0.5, 2.0), (0.9, None)])
def test_trl_matches_the_loop(seed, mode, bounds):
    old, mu, mask = _random(seed, scale=0.3)
    corr = fc.trl_correction(old, mu, mask, mode=mode, clip_min=bounds[0], clip_max=bounds[1])
    assert _close(corr.weights, _loop_trl(old, mu, mask, mode, *bounds))


def _loop_openrlhf(old, mu, mask, level, mode, gating, low, high):
    rows, width = old.shape
    w = [[0.0] * width for _ in range(rows)]

    def stat_of(o, u):
        if gating == "ratio":
            return o - u  # log space, exponentiated below
        p = min(max(math.exp(u), 1e-6), 1 - 1e-6)
        q = min(max(math.exp(o), 1e-6), 1 - 1e-6)
        if gating == "binary_kl":
            return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
        return abs(p - q)

    for b in range(rows):
        toks = [t for t in range(width) if mask[b, t]]
        if not toks:
            continue
        stats = [stat_of(float(old[b, t]), float(mu[b, t])) for t in toks]
        for t, s in zip(toks, stats, strict=True):
            x = sum(stats) / len(stats) if level == "seq" else s
            value = math.exp(x) if gating == "ratio" else x
            token_w = math.exp(float(old[b, t] - mu[b, t]))
            if mode == "clip":
                w[b][t] = min(max(value, low), high)
            else:
                w[b][t] = token_w if low <= value <= high else 0.0
    return w


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(
    ("level", "mode", "gating", "bounds"),
    [
        ("token", "mask", "ratio", (0.5, 5.0)),
        ("token", "clip", "ratio", (0.8, 1.2)),
        ("seq", "mask", "ratio", (0.7, 1.4)),
        ("token", "mask", "tv", (0.0, 0.05)),
        ("seq", "mask", "binary_kl", (0.0, 0.01)),
    ],
)
def test_openrlhf_matches_the_loop(seed, level, mode, gating, bounds):
    old, mu, mask = _random(seed, scale=0.3)
    corr = fc.openrlhf_correction(old, mu, mask, level=level, mode=mode, gating=gating,
                                  threshold=bounds)  # fmt: skip
    expected = _loop_openrlhf(old, mu, mask, level, mode, gating, *bounds)
    assert _close(corr.weights, expected, rel=1e-9, abs=1e-12)


def _loop_roll(old, mu, mask, weight_type, ub, filt):
    rows, width = old.shape
    w = [[0.0] * width for _ in range(rows)]
    for b in range(rows):
        toks = [t for t in range(width) if mask[b, t]]
        if not toks:
            continue
        logs = [float(old[b, t] - mu[b, t]) for t in toks]
        diffs = [math.exp(float(old[b, t])) - math.exp(float(mu[b, t])) for t in toks]

        def at(kind, i, values, is_ratio, logs=logs):
            if kind == "token":
                return math.exp(logs[i]) if is_ratio else values[i]
            if kind in ("geometric", "segment"):
                return math.exp(sum(logs) / len(logs)) if is_ratio else sum(values) / len(values)
            return math.exp(sum(logs)) if is_ratio else sum(values)

        for i, t in enumerate(toks):
            weight = min(max(at(weight_type, i, logs, True), 0.0), ub)
            if filt is not None:
                r = at(filt.agg_type, i, logs, True)
                dv = at(filt.agg_type, i, diffs, False)
                ok = filt.ratio_low <= r <= filt.ratio_high
                if filt.diff_enabled:
                    ok = ok and filt.diff_low <= dv <= filt.diff_high
                weight = weight if ok else 0.0
            w[b][t] = weight
    return w


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("weight_type", fc.ROLL_TYPES)
@pytest.mark.parametrize(
    "filt",
    [None, fc.RollFilter(), fc.RollFilter(agg_type="geometric", diff_enabled=True),
     fc.RollFilter(agg_type="sequence", ratio_low=0.5, ratio_high=2.0)],
)  # fmt: skip
def test_roll_matches_the_loop(seed, weight_type, filt):
    old, mu, mask = _random(seed, scale=0.2)
    filters = () if filt is None else (filt,)
    corr = fc.roll_correction(old, mu, mask, weight_type=weight_type, upper_bound=1.2,
                              filters=filters)  # fmt: skip
    assert _close(
        corr.weights, _loop_roll(old, mu, mask, weight_type, 1.2, filt), rel=1e-9, abs=1e-12
    )


# ------------------------------------------------------------------------- gradients, reuse


def _every_correction(old, mu, mask):
    out = [fc.verl_correction(old, mu, mask, **kw) for kw in fc.VERL_PRESETS.values()]
    out += [fc.trl_correction(old, mu, mask, mode=m) for m in fc.TRL_MODES]
    out += [fc.openrlhf_correction(old, mu, mask), fc.roll_correction(old, mu, mask)]
    return [None, *out]


@pytest.mark.parametrize("seed", range(3))
def test_lab_loss_gradient_is_autograd(seed):
    old, mu, mask = _random(seed, scale=0.2)
    gen = torch.Generator().manual_seed(100 + seed)
    adv = torch.randn(old.shape[0], generator=gen, dtype=torch.float64)
    logp0 = old + 1.2 * torch.randn(old.shape, generator=gen, dtype=torch.float64)
    for corr in _every_correction(old, mu, mask):
        logp = logp0.clone().requires_grad_(True)
        res = rc.lab_loss(logp, old, adv, mask, corr)
        m = mask > 0
        r = torch.exp(logp - old)
        per = torch.where(m, -torch.minimum(r * adv[:, None], r.clamp(0.8, 1.2) * adv[:, None]), 0)
        if corr is not None and corr.dual_clip is not None:  # verl: min(loss, -c A) for A < 0
            cap = torch.minimum(per, -corr.dual_clip * adv[:, None])
            per = torch.where(adv[:, None] < 0, cap, per)
        w = m.double() if corr is None else corr.weights
        counted = m if corr is None else corr.counted
        total = (w * per).sum() / max(int(counted.sum()), 1)
        (grad,) = torch.autograd.grad(total, logp)
        assert res.loss == pytest.approx(float(total.detach()), abs=1e-12)
        assert torch.allclose(res.grad, torch.where(m, grad, 0.0), atol=1e-12)


@pytest.mark.parametrize("mode", fc.TRL_MODES)
def test_trl_lab_loss_equals_the_calculator(mode):
    old, mu, mask = _random(2, scale=0.2)
    mask[0, 0] = 1  # TRL: no empty completion in this comparison
    gen = torch.Generator().manual_seed(5)
    adv = torch.randn(old.shape[0], generator=gen, dtype=torch.float64)
    logp = old + 0.25 * torch.randn(old.shape, generator=gen, dtype=torch.float64)
    config = {"loss_type": "dapo", "epsilon": 0.2, "beta": 0.0,
              "vllm_importance_sampling_mode": mode,
              "vllm_importance_sampling_clip_min": 0.5,
              "vllm_importance_sampling_clip_max": 2.0}  # fmt: skip
    res = policy_loss("trl", config, logprobs=logp, old_logprobs=old, advantages=adv,
                      response_mask=mask, rollout_logprobs=mu)  # fmt: skip
    corr = fc.trl_correction(old, mu, mask, mode=mode, clip_min=0.5, clip_max=2.0)
    lab = rc.lab_loss(logp, old, adv, mask, corr)
    assert lab.loss == pytest.approx(float(res.total), abs=1e-12)
    assert torch.allclose(lab.grad, res.per_token["grad_coef"], atol=1e-12)


def test_openrlhf_lab_loss_equals_the_calculator():
    old, mu, mask = _random(3, scale=0.4)
    gen = torch.Generator().manual_seed(6)
    adv = torch.randn(old.shape[0], generator=gen, dtype=torch.float64)
    logp = old + 0.25 * torch.randn(old.shape, generator=gen, dtype=torch.float64)
    config = {"is_correction_level": "token", "is_correction_mode": "mask",
              "is_correction_gating": "ratio", "is_correction_threshold": (0.5, 5.0)}  # fmt: skip
    res = policy_loss("openrlhf", config, logprobs=logp, old_logprobs=old, advantages=adv,
                      response_mask=mask, rollout_logprobs=mu)  # fmt: skip
    lab = rc.lab_loss(logp, old, adv, mask, fc.openrlhf_correction(old, mu, mask))
    assert lab.loss == pytest.approx(float(res.total), abs=1e-10)


def test_identical_policies_change_nothing():
    old, _, mask = _random(0)
    adv = torch.ones(old.shape[0], dtype=torch.float64)
    plain = rc.lab_loss(old, old, adv, mask)
    assert float(rc.log_mismatch(old, old, mask).abs().sum()) == 0.0
    for corr in _every_correction(old, old, mask)[1:]:
        assert not corr.masked.any(), corr.name
        assert not corr.truncated.any(), corr.name
        assert rc.lab_loss(old, old, adv, mask, corr).loss == pytest.approx(plain.loss)


# ----------------------------------------------------------------------------- bad thresholds


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("abc", "Invalid"),
        ("-1", "positive"),
        ("2_1", "lower bound must be <="),
        ("0_2", "lower bound must be positive"),
        (float("nan"), "positive"),
        (True, "float"),
    ],
)
def test_verl_threshold_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        fc.parse_verl_is_threshold(spec)


def test_verl_rs_threshold_errors():
    with pytest.raises(ValueError, match="single upper bound"):
        fc.parse_verl_rs_threshold(["token_k2"], "0.1_0.2")
    with pytest.raises(ValueError, match="lower <= upper"):
        fc.parse_verl_rs_threshold(["seq_sum_k1"], "2_0.5")
    with pytest.raises(ValueError, match="one per option"):
        fc.parse_verl_rs_threshold(["token_k1", "token_k2", "token_k3"], "1,2")
    with pytest.raises(ValueError, match="Invalid rollout_rs option"):
        fc.verl_rollout_rs(OLD, MU, MASK, "token_k9", 1.0)
    assert fc.parse_verl_rs_threshold(["token_k1"], 2.0) == {"token_k1": (0.5, 2.0)}


def test_non_finite_logprob_on_a_token_is_refused():
    bad = MU.clone()
    bad[0, 1] = float("nan")
    with pytest.raises(ValueError, match=r"\[0\]\[1\]"):
        rc.log_mismatch(OLD, bad, MASK)
    bad[1, 2] = float("-inf")  # padding may hold anything
    bad[0, 1] = -1.0
    assert torch.isfinite(rc.log_mismatch(OLD, bad, MASK)).all()


def test_lab_loss_dual_clip_by_hand_and_autograd():
    """verl's corrections carry its dual clip (clip_ratio_c 3): r = 4 with A = -1 costs 3, not
    4, and has no gradient; r = 1 costs 1 with gradient -A r / N."""
    old = torch.zeros(1, 2, dtype=torch.float64)
    mask = torch.ones(1, 2)
    adv = torch.tensor([-1.0], dtype=torch.float64)
    logp0 = torch.tensor([[math.log(4.0), 0.0]], dtype=torch.float64)
    verl = fc.verl_correction(old, old, mask, rollout_is="token")  # mu = pi_old: weights 1
    assert verl.dual_clip == 3.0
    got = rc.lab_loss(logp0, old, adv, mask, verl)
    assert got.loss == pytest.approx((3.0 + 1.0) / 2)
    assert _close(got.grad, [[0.0, 0.5]])
    without = fc.verl_correction(old, old, mask, rollout_is="token", dual_clip=None)
    plain = rc.lab_loss(logp0, old, adv, mask, without)
    assert plain.loss == pytest.approx((4.0 + 1.0) / 2)
    assert _close(plain.grad, [[2.0, 0.5]])
    logp = logp0.clone().requires_grad_(True)
    r = torch.exp(logp - old)
    per = -torch.minimum(r * adv[:, None], r.clamp(0.8, 1.2) * adv[:, None])
    per = torch.minimum(per, -3.0 * adv[:, None])
    (grad,) = torch.autograd.grad(per.sum() / 2, logp)
    assert torch.allclose(got.grad, grad)
