"""PODS max-variance down-sampling against brute force and the official scan."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
import torch

from roll_viz.analysis import downsampling as pods


def brute_force_best_variance(rewards: list[float], m: int) -> float:
    """Largest sample variance over every size-m subset (itertools.combinations)."""
    return max(statistics.variance(c) for c in itertools.combinations(rewards, m))


def official_scan(rewards: list[float], m: int) -> list[float]:
    """MaxVarGRPOTrainer._prepare_inputs as plain Python: sorted kept rewards."""
    s = sorted(rewards, reverse=True)
    best, best_var = s[:m], statistics.variance(s[:m]) if m > 1 else 0.0
    for i in range(m):
        cand = s[:i] + s[len(s) - (m - i) :]
        v = statistics.variance(cand) if m > 1 else 0.0
        if v > best_var:
            best, best_var = cand, v
    return sorted(best)


def test_doc_example_keeps_two_ones_and_two_zeros():
    rewards = torch.tensor([1.0, 1, 1, 0, 0, 1, 1, 1])
    kept = pods.max_variance_subset(rewards, 4)
    assert kept.tolist() == [[3, 4, 6, 7]]
    res = pods.compare(rewards, 4)
    assert sorted(res["max_variance"].kept_rewards[0].tolist()) == [0.0, 0.0, 1.0, 1.0]
    std = math.sqrt(1 / 3)  # unbiased std of [0, 0, 1, 1]
    a = 0.5 / (std + 1e-4)
    assert res["max_variance"].advantages_after[0].tolist() == pytest.approx([-a, -a, a, a])
    top = res["top"]
    assert top.kept_rewards[0].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert top.advantages_after.abs().max().item() == 0.0
    assert top.zero_signal.tolist() == [True]
    assert res["max_variance"].zero_signal.tolist() == [False]
    # before: GRPO over all 8 (mean 0.75, unbiased std sqrt(2/7))
    before = res["max_variance"].advantages_before[0]
    assert before[3].item() == pytest.approx(-0.75 / (math.sqrt(0.75 * 0.25 * 8 / 7) + 1e-4))


def test_matches_brute_force_on_random_small_groups():
    gen = torch.Generator().manual_seed(0)
    for trial in range(300):
        n = int(torch.randint(2, 9, (1,), generator=gen))
        m = int(torch.randint(2, n + 1, (1,), generator=gen))
        if trial % 3 == 0:  # many ties: binary / few distinct values
            r = torch.randint(0, 3, (n,), generator=gen).to(torch.float64) / 2
        else:
            r = torch.randn(n, generator=gen, dtype=torch.float64)
        kept = pods.max_variance_subset(r, m)[0]
        assert kept.unique().numel() == m
        got = statistics.variance(r[kept].tolist())
        assert got == pytest.approx(brute_force_best_variance(r.tolist(), m), rel=1e-9, abs=1e-12)
        assert sorted(r[kept].tolist()) == pytest.approx(official_scan(r.tolist(), m))


def test_vectorised_over_groups_equals_one_group_at_a_time():
    gen = torch.Generator().manual_seed(1)
    r = torch.randint(0, 4, (50, 12), generator=gen).to(torch.float64)
    together = pods.max_variance_subset(r, 5)
    for p in range(r.shape[0]):
        assert torch.equal(together[p], pods.max_variance_subset(r[p], 5)[0])


def test_top_and_random_comparisons():
    r = torch.tensor([[0.1, 0.9, 0.5, 0.9, 0.0]])
    assert pods.top_subset(r, 2).tolist() == [[1, 3]]
    state = torch.random.get_rng_state()
    a = pods.random_subset(r, 3, torch.Generator().manual_seed(5))
    b = pods.random_subset(r, 3, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    assert torch.equal(torch.random.get_rng_state(), state)  # no global RNG
    seen = {
        tuple(pods.random_subset(r, 3, torch.Generator().manual_seed(s))[0].tolist())
        for s in range(20)
    }
    assert len(seen) > 1
    with pytest.raises(ValueError, match="Generator"):
        pods.down_sample(r, 3, "random")


def test_sweep_over_m():
    r = torch.tensor([[1.0, 1, 1, 0, 0, 1, 1, 1], [0.0, 0, 0, 0, 0, 0, 1, 0]])
    table = pods.sweep(r, [2, 4, 8])
    assert len(table) == 9
    at = table.set_index(["m", "method"])
    assert at.loc[(4, "max_variance"), "zero_signal_share"] == 0.0
    assert at.loc[(4, "top"), "zero_signal_share"] == 0.5  # row 0 top-4 is all ones
    for m in (2, 4, 8):
        assert at.loc[(m, "max_variance"), "mean_std_after"] >= at.loc[(m, "top"), "mean_std_after"]
        assert (
            at.loc[(m, "max_variance"), "mean_std_after"] >= at.loc[(m, "random"), "mean_std_after"]
        )
    full = table[table["m"] == 8]
    assert full["mean_std_after"].nunique() == 1  # m = n keeps everything whatever the method


def test_groups_matrix_and_input_errors():
    scores = torch.tensor([1.0, 2.0, 3.0, 4.0])
    matrix, rows = pods.groups_matrix(scores, torch.tensor([1, 0, 1, 0]))
    assert matrix.tolist() == [[2.0, 4.0], [1.0, 3.0]]
    assert rows.tolist() == [[1, 3], [0, 2]]
    with pytest.raises(ValueError, match="equal size"):
        pods.groups_matrix(scores, torch.tensor([0, 0, 0, 1]))
    with pytest.raises(ValueError, match="m must be"):
        pods.max_variance_subset(scores, 5)
    with pytest.raises(ValueError, match="at least 2"):
        pods.down_sample(scores, 1)
    with pytest.raises(ValueError, match="finite"):
        pods.max_variance_subset(torch.tensor([1.0, math.nan]), 1)


def test_compare_step_uses_the_common_group_size_and_maps_rows_back():
    scores = torch.tensor([1.0, 0.0, 5.0, 1.0, 1.0, 0.0, 2.0, 3.0, 2.0])
    group_ids = torch.tensor([0, 0, 1, 0, 0, 2, 2, 2, 2])  # group 1 has one sample
    out = pods.compare_step(scores, group_ids, ("a", "b", "c"), m=2)
    assert out.skipped == ("b",)
    assert out.group_labels == ("a", "c")
    assert out.rows.tolist() == [[0, 1, 3, 4], [5, 6, 7, 8]]
    res = out.results["max_variance"]
    kept_rows = torch.gather(out.rows, 1, res.kept)
    assert torch.equal(scores[kept_rows], res.kept_rewards)
    assert sorted(res.kept_rewards[0].tolist()) == [0.0, 1.0]
