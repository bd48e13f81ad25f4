"""verl opo / gpg / grpo_passk / gdpo and TRL normalize_then_sum: hand numbers and loops."""

import math

import pytest
import torch

from core import oracles
from core.cases import close
from roll_viz.core.pipeline import resolve_config, run
from roll_viz.core.records import Batch

F = torch.float64


def _batch(scores, lengths, groups, components=None):
    T = max(lengths)
    mask = [[1.0 if t < n else 0.0 for t in range(T)] for n in lengths]
    return Batch(
        scores=torch.tensor(scores, dtype=F),
        response_mask=torch.tensor(mask, dtype=F),
        group_ids=torch.tensor(groups, dtype=torch.long),
        reward_components=components,
    )


def _seq(trace):
    """Each row's advantage (the value on its first token)."""
    return trace.advantages[:, 0]


def test_opo_length_weighted_baseline_by_hand():
    batch = _batch([1.0, 0.0, 1.0], [2, 1, 3], [0, 0, 0])
    trace = run(batch, "verl", {"adv_estimator": "opo"})
    b = (2 * 1 + 1 * 0 + 3 * 1) / 6  # sum L s / sum L
    close(_seq(trace), [1 - b, -b, 1 - b], 1e-15)
    close(trace.baseline, [b] * 3, 1e-15)
    close(trace.advantages[2], [1 - b] * 3, 1e-15)  # broadcast to every token


def test_gpg_batch_factor_by_hand():
    batch = _batch([1.0, 0.0, 0.0, 1.0, 0.0, 0.0], [1] * 6, [0, 0, 1, 1, 2, 2])
    trace = run(batch, "verl", {"adv_estimator": "gpg"})
    alpha = 6 / 2  # B / number of non-zero scores
    close(_seq(trace), [alpha * 0.5, -alpha * 0.5, -alpha * 0.5, alpha * 0.5, 0.0, 0.0], 1e-15)


def test_grpo_passk_only_the_best_learns():
    batch = _batch([0.2, 0.9, 0.5, 1.0, 1.0], [1] * 5, [0, 0, 0, 1, 1])
    trace = run(batch, "verl", {"adv_estimator": "grpo_passk"})
    xs = [0.2, 0.9, 0.5]
    mu = sum(xs) / 3
    sd = math.sqrt(sum((x - mu) ** 2 for x in xs) / 2)
    close(_seq(trace), [0.0, 0.4 / (sd + 1e-6), 0.0, 0.0, 0.0], 1e-14)  # tie at the top: 0
    plain = run(batch, "verl", {"adv_estimator": "grpo_passk", "norm_adv_by_std_in_grpo": False})
    close(_seq(plain), [0.0, 0.4, 0.0, 0.0, 0.0], 1e-15)
    with pytest.raises(ValueError, match="at least 2"):
        run(_batch([1.0, 0.0, 1.0], [1] * 3, [0, 0, 1]), "verl", {"adv_estimator": "grpo_passk"})


def _whiten(xs):
    mu = sum(xs) / len(xs)
    var = sum((x - mu) ** 2 for x in xs) / (len(xs) - 1)
    return [(x - mu) / math.sqrt(var + 1e-8) for x in xs]


def _z(xs, eps):
    mu = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - 1))
    return [(x - mu) / (sd + eps) for x in xs]


def test_gdpo_normalises_each_component():
    fmt, acc = [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]
    comps = {"format": torch.tensor(fmt, dtype=F), "accuracy": torch.tensor(acc, dtype=F)}
    batch = _batch([1.0, 1.0, 0.0, 1.0], [1] * 4, [0] * 4, comps)
    cfg = {"adv_estimator": "gdpo", "gdpo_reward_keys": ["format", "accuracy"]}
    trace = run(batch, "verl", cfg)
    summed = [a + b for a, b in zip(_z(fmt, 1e-6), _z(acc, 1e-6), strict=True)]
    close(_seq(trace), _whiten(summed), 1e-12)
    weighted = run(batch, "verl", {**cfg, "gdpo_reward_weights": [2.0, 0.5]})
    summed = [2 * a + 0.5 * b for a, b in zip(_z(fmt, 1e-6), _z(acc, 1e-6), strict=True)]
    close(_seq(weighted), _whiten(summed), 1e-12)
    # GRPO on the combined score differs: the accuracy signal is drowned by format's
    grpo = run(batch, "verl", {"adv_estimator": "grpo"})
    assert (_seq(grpo) - _seq(trace)).abs().max().item() > 0.1
    with pytest.raises(ValueError, match="not found"):
        run(batch, "verl", {**cfg, "gdpo_reward_keys": ["length"]})
    with pytest.raises(ValueError, match="gdpo_reward_weights"):
        run(batch, "verl", {**cfg, "gdpo_reward_weights": [1.0]})
    with pytest.raises(ValueError, match="gdpo_reward_keys"):
        resolve_config("verl", {"gdpo_reward_keys": "format"})


def test_gdpo_without_keys_uses_the_combined_reward():
    batch = _batch([1.0, 0.0, 0.5, 0.2], [1, 2, 1, 3], [0, 0, 1, 1])
    trace = run(batch, "verl", {"adv_estimator": "gdpo"})
    seq = oracles.verl_outcome_2026("gdpo", [1.0, 0.0, 0.5, 0.2], batch.response_mask.tolist(),
                                    [0, 0, 1, 1])  # fmt: skip
    expected = oracles.whiten(oracles.broadcast(seq, batch.response_mask.tolist()),
                              batch.response_mask.tolist(), 1, 1e-8)  # fmt: skip
    close(trace.advantages, expected, 1e-12)
    assert any("combined reward" in note for note in trace.notes)


def test_trl_normalize_then_sum_by_hand():
    fmt, acc = [1.0, 1.0, 0.0, 0.5], [0.0, 1.0, 0.0, 1.0]
    comps = {"format": torch.tensor(fmt, dtype=F), "accuracy": torch.tensor(acc, dtype=F)}
    batch = _batch([1.0, 2.0, 0.0, 1.5], [1] * 4, [0, 0, 1, 1], comps)
    trace = run(batch, "trl", {"multi_objective_aggregation": "normalize_then_sum"})
    z = {}
    for name, xs in (("f", fmt), ("a", acc)):
        z[name] = _z(xs[:2], 1e-4) + _z(xs[2:], 1e-4)
    total = [z["f"][i] + z["a"][i] for i in range(4)]
    close(_seq(trace), _z(total, 1e-4), 1e-12)
    weighted = run(
        batch,
        "trl",
        {"multi_objective_aggregation": "normalize_then_sum", "reward_weights": [1.0, 3.0]},
    )
    total = [z["f"][i] + 3 * z["a"][i] for i in range(4)]
    close(_seq(weighted), _z(total, 1e-4), 1e-12)
    with pytest.raises(ValueError, match="reward_weights"):
        run(batch, "trl", {"multi_objective_aggregation": "normalize_then_sum",
                           "reward_weights": [1.0]})  # fmt: skip


def test_reward_components_are_validated():
    batch = _batch([1.0, 0.0], [1, 1], [0, 0], {"f": torch.tensor([1.0, float("nan")])})
    with pytest.raises(ValueError, match="reward_components"):
        run(batch, "trl", {})
    batch = _batch([1.0, 0.0], [1, 1], [0, 0], {"f": torch.tensor([1.0])})
    with pytest.raises(ValueError, match="shape"):
        run(batch, "trl", {})


def test_optimal_token_baseline_by_hand():
    """Two answers of one prompt, lengths 2 and 1, pi_t = 0.5, sum pi^2 = 0.5: w_t = 0.5."""
    batch = Batch(
        scores=torch.tensor([1.0, 0.0], dtype=F),
        response_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=F),
        group_ids=torch.zeros(2, dtype=torch.long),
        logprobs=torch.full((2, 2), math.log(0.5), dtype=F),
        ref_logprobs=torch.full((2, 2), math.log(0.5), dtype=F),
        sum_pi_squared=torch.full((2, 2), 0.5, dtype=F),
    )
    trace = run(batch, "verl", {"adv_estimator": "optimal_token_baseline"})
    # G = [[1, 1], [0, 0]], W = [[0.5, 1.0], [0.5, 0]]: B_0 = (1*0.5 + 0*0.5) / (1 + 1e-8);
    # position 1 is past the shorter answer's end: the longest answer's tail has baseline 0
    b0 = 0.5 / (1.0 + 1e-8)
    close(trace.advantages, [[1 - b0, 1.0], [-b0, 0.0]], 1e-15)
    close(trace.returns, [[1.0, 1.0], [0.0, 0.0]], 1e-15)
    no_pi2 = Batch(**{**batch.__dict__, "sum_pi_squared": None})
    with pytest.raises(ValueError, match="sum_pi_squared"):
        run(no_pi2, "verl", {"adv_estimator": "optimal_token_baseline"})


def test_verl_grpo_vectorized_always_divides_by_std_by_hand():
    """grpo_vectorized: grpo's numbers, but the std flag never reaches it (verl's trainer passes
    only rewards, mask, index and config); a group of one: mean 0, std 1."""
    batch = _batch([1.0, 0.0, 0.5, 0.2, 0.9, 0.7], [2, 1, 3, 1, 2, 1], [0, 0, 0, 1, 1, 2])
    sd1 = 0.5  # std([1, 0, 0.5], ddof 1), exact in float32 too
    # group 2 in float32 (verl's group_mean_std): 0.2 and 0.9 rounded, their mean and std too
    f = oracles.f32
    m2 = f(f(f(0.2) + f(0.9)) / 2)
    sd2 = f(math.sqrt(f(f(f(f(0.2) - m2) ** 2) + f(f(f(0.9) - m2) ** 2))))
    want = [0.5 / (sd1 + 1e-6), -0.5 / (sd1 + 1e-6), 0.0]
    want += [(0.2 - m2) / (sd2 + 1e-6), (0.9 - m2) / (sd2 + 1e-6), 0.7 / (1 + 1e-6)]
    for by_std in (True, False):
        cfg = {"adv_estimator": "grpo_vectorized", "norm_adv_by_std_in_grpo": by_std}
        close(_seq(run(batch, "verl", cfg)), want, 1e-14)
    dr = run(batch, "verl", {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False})
    close(_seq(dr), [0.5, -0.5, 0.0, -0.35, 0.35, 0.7], 1e-15)  # plain grpo honours the flag


def test_verl_grpo_vectorized_float32_statistics_by_hand():
    """Scores 2^24 + [0, 1, 3]: float32 holds 2^24, 2^24 and 2^24 + 4, sums them exactly to
    3 * 2^24 + 4 and rounds the mean 2^24 + 4/3 to 2^24 + 2; centred [-2, -2, 2], var 12 / 2 = 6.
    The advantage is (s - mean) / (sqrt 6 + eps) with s in float64; grpo's float64 statistics
    give [-0.87, -0.22, 1.09] instead."""
    base = 2.0**24
    batch = _batch([base, base + 1.0, base + 3.0], [1, 2, 1], [0, 0, 0])
    got = _seq(run(batch, "verl", {"adv_estimator": "grpo_vectorized"}))
    sd = oracles.f32(math.sqrt(6.0))
    close(got, [-2.0 / (sd + 1e-6), -1.0 / (sd + 1e-6), 1.0 / (sd + 1e-6)], 1e-12)
    plain = _seq(run(batch, "verl", {"adv_estimator": "grpo"}))
    sd64 = math.sqrt(42.0 / 18.0)
    close(plain, [(-4 / 3) / (sd64 + 1e-6), (-1 / 3) / (sd64 + 1e-6), (5 / 3) / (sd64 + 1e-6)])
    trace = run(batch, "verl", {"adv_estimator": "grpo_vectorized"})
    assert any("float32" in n for n in trace.notes)


def test_verl_rloo_vectorized_group_of_one_is_zero_by_hand():
    """rloo_vectorized: (c s - sum) / (c - 1) * (c > 1); rloo keeps a singleton's raw score."""
    batch = _batch([1.0, 0.0, 0.5, 0.2, 0.9, 0.7], [2, 1, 3, 1, 2, 1], [0, 0, 0, 1, 1, 2])
    vec = run(batch, "verl", {"adv_estimator": "rloo_vectorized"})
    close(_seq(vec), [0.75, -0.75, 0.0, -0.7, 0.7, 0.0], 1e-15)
    close(vec.advantages[2], [0.0] * 3, 1e-15)
    plain = run(batch, "verl", {"adv_estimator": "rloo"})
    close(_seq(plain), [0.75, -0.75, 0.0, -0.7, 0.7, 0.7], 1e-15)
    assert any("advantage 0" in n for n in vec.notes)
