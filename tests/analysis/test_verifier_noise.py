"""The noisy verifier: a seeded draw checked by a plain loop, expected values by enumeration."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
import torch

from roll_viz.analysis import verifier_noise as vn

EPS = 1e-6


def _t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def _loop_advantages(labels: list[float], groups: list[int]) -> list[float]:
    """GRPO by hand: (r - mean) / (unbiased std + 1e-6) per group."""
    out = []
    for b, g in enumerate(groups):
        xs = [labels[i] for i, h in enumerate(groups) if h == g]
        out.append((labels[b] - statistics.fmean(xs)) / (statistics.stdev(xs) + EPS))
    return out


def _loop_counts(true: list[float], seen: list[float], groups: list[int]) -> dict[str, float]:
    """Everything a NoiseDraw counts, in plain Python."""
    ids = sorted(set(groups))
    tied = {g: len({true[i] for i, h in enumerate(groups) if h == g}) == 1 for g in ids}
    tied_after = {g: len({seen[i] for i, h in enumerate(groups) if h == g}) == 1 for g in ids}
    adv = _loop_advantages(seen, groups)
    noisy = sum(
        1 for b, g in enumerate(groups) if abs(adv[b]) > 0 and (seen[b] != true[b] or tied[g])
    )
    return {
        "zero": sum(1 for a in adv if a == 0) / len(adv),
        "broken": sum(1 for g in ids if tied[g] and not tied_after[g]),
        "noisy": noisy,
        "flipped": sum(1 for t, s in zip(true, seen, strict=True) if t != s),
    }


def test_no_noise_changes_nothing():
    labels, groups = _t([1, 0, 0, 0, 1, 1]), _t([0, 0, 1, 1, 2, 2], torch.long)
    draw = vn.noise_draw(labels, groups, 0.0, 0.0, seed=7)
    assert not draw.flipped.any()
    assert draw.broken_ties == 0
    assert draw.zero_before == draw.zero_after == pytest.approx(4 / 6)  # groups 1 and 2 are ties
    assert not draw.points_at_noise.any()


def test_flips_follow_the_seeded_uniforms():
    labels = _t([1, 1, 0, 0, 1, 0, 1, 0])
    u = torch.rand(8, generator=torch.Generator().manual_seed(11), dtype=torch.float64).tolist()
    fn, fp = 0.4, 0.3
    observed, flipped = vn.flip_labels(labels, fn, fp, seed=11)
    for b, lab in enumerate(labels.tolist()):
        flip = u[b] < (fn if lab == 1 else fp)
        assert bool(flipped[b]) is flip
        assert observed[b].item() == (1 - lab if flip else lab)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_a_draw_matches_a_plain_loop(seed):
    true = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    groups = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    draw = vn.noise_draw(_t(true), _t(groups, torch.long), 0.3, 0.3, seed)
    seen = draw.observed.tolist()
    want = _loop_counts(true, seen, groups)
    assert draw.zero_after == pytest.approx(want["zero"])
    assert draw.broken_ties == want["broken"]
    assert int(draw.points_at_noise.sum()) == want["noisy"]
    assert int(draw.flipped.sum()) == want["flipped"]
    assert draw.adv_noisy.tolist() == pytest.approx(_loop_advantages(seen, groups))


def test_expected_values_by_hand():
    # group 0: two fails, fp .5: tied w.p. .25 + .25 = .5; untied (one flip, p .5) -> both samples
    #   point at noise: 1.0.  group 1: one pass one fail, fn = fp = .5: tied w.p. .5;
    #   (j, i) = (1, 1) (p .25) keeps it untied with both labels flipped: 0.5.
    exp = vn.expected_noise(_t([0, 0, 1, 0]), _t([0, 0, 1, 1], torch.long), 0.5, 0.5)
    assert exp.tie_after == pytest.approx((0.5, 0.5))
    assert exp.zero_after == pytest.approx(0.5)
    assert exp.broken_ties == pytest.approx(0.5)
    assert exp.points_at_noise == pytest.approx(1.5)
    assert exp.flipped == pytest.approx(2.0)


def test_tie_probability_closed_form():
    # G = 4, k = 1, fn .2, fp .1: .2 * .9^3 + .8 * .1^3
    assert vn.tie_probability(4, 1, 0.2, 0.1) == pytest.approx(0.2 * 0.729 + 0.8 * 0.001)
    assert vn.tie_probability(3, 0, 0.3, 0.0) == 1.0  # nothing can flip a fail


@pytest.mark.parametrize(("fn", "fp"), [(0.3, 0.15), (0.0, 0.2), (0.5, 0.5), (0.1, 0.0)])
def test_expected_values_equal_enumerating_every_flip_pattern(fn, fp):
    true = [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    groups = [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]
    want = {"zero": 0.0, "broken": 0.0, "noisy": 0.0, "flipped": 0.0}
    for pattern in itertools.product((False, True), repeat=len(true)):  # 1024 draws
        p = math.prod(
            ((fn if t == 1 else fp) if f else (1 - (fn if t == 1 else fp)))
            for t, f in zip(true, pattern, strict=True)
        )
        if p == 0:
            continue
        seen = [1 - t if f else t for t, f in zip(true, pattern, strict=True)]
        for key, value in _loop_counts(true, seen, groups).items():
            want[key] += p * value
    exp = vn.expected_noise(_t(true), _t(groups, torch.long), fn, fp)
    assert exp.zero_after == pytest.approx(want["zero"], abs=1e-12)
    assert exp.broken_ties == pytest.approx(want["broken"], abs=1e-12)
    assert exp.points_at_noise == pytest.approx(want["noisy"], abs=1e-12)
    assert exp.flipped == pytest.approx(want["flipped"], abs=1e-12)


@pytest.mark.parametrize(
    ("labels", "groups", "fn", "fp", "message"),
    [
        ([1, 0], [0, 0], 0.6, 0.0, "false-negative rate"),  # above 0.5
        ([1, 0], [0, 0], 0.0, -0.1, "false-positive rate"),
        ([1, 0], [0, 0], float("nan"), 0.0, "false-negative rate"),
        ([1, 0.5], [0, 0], 0.1, 0.1, "0 or 1"),  # not a verifier
        ([1, 0, 1], [0, 0, 1], 0.1, 0.1, "at least 2"),  # a group of one
    ],
)
def test_bad_input_is_refused(labels, groups, fn, fp, message):
    with pytest.raises(ValueError, match=message):
        vn.noise_draw(_t(labels), _t(groups, torch.long), fn, fp, 0)
    with pytest.raises(ValueError, match=message):
        vn.expected_noise(_t(labels), _t(groups, torch.long), fn, fp)


def test_sweep_moves_one_rate_at_a_time():
    labels, groups = _t([1, 0, 0, 0, 0, 0]), _t([0, 0, 0, 1, 1, 1], torch.long)
    sweep = vn.noise_sweep(labels, groups, points=3)
    assert sweep.rates == (0.0, 0.25, 0.5)
    assert sweep.fn_only[1] == vn.expected_noise(labels, groups, 0.25, 0.0)
    assert sweep.fp_only[2] == vn.expected_noise(labels, groups, 0.0, 0.5)
    # one pass, five fails: only false negatives touch the pass; at fn .5 group 0 ties w.p. .5
    assert sweep.fn_only[2].tie_after == pytest.approx((0.5, 1.0))
    assert sweep.fn_only[2].points_at_noise < sweep.fp_only[2].points_at_noise
    with pytest.raises(ValueError, match="points"):
        vn.noise_sweep(labels, groups, points=1)
