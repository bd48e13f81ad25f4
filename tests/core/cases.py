"""Random and hand-made batches shared by the core tests (lists for oracles, Batch for roll_viz)."""

from __future__ import annotations

import math
import random

import torch

from roll_viz.core.records import Batch

SEED_SCORES = [8.2, 6.5, 9.1]


def random_case(P, G, T, seed, zero_rows=True, mid_mask=True, singleton=False):
    """A dict of plain lists: scores, mask, gids, lp, ref, values, baseline, sum_pi_squared."""
    rng = random.Random(seed)
    B = P * G
    gids = [p for p in range(P) for _ in range(G)]
    if singleton:
        gids.append(P)
        B += 1
    scores = [rng.choice([0.0, 1.0, rng.uniform(-3, 3)]) for _ in range(B)]
    mask = []
    for _b in range(B):
        length = rng.randint(1, T)
        row = [1 if t < length else 0 for t in range(T)]
        if mid_mask and length > 2 and rng.random() < 0.3:
            row[rng.randrange(1, length - 1)] = 0
        mask.append(row)
    if zero_rows and B > 2:
        mask[rng.randrange(B)] = [0] * T
    lp = [[-rng.uniform(0.01, 4.0) for _ in range(T)] for _ in range(B)]
    ref = [[-rng.uniform(0.01, 4.0) for _ in range(T)] for _ in range(B)]
    values = [[rng.uniform(-1, 1) for _ in range(T)] for _ in range(B)]
    baseline = [rng.uniform(-1, 1) for _ in range(B)]
    # sum over the vocabulary of pi^2 >= pi_t^2 (drawn last: the earlier draws are unchanged)
    pi2 = [[rng.uniform(math.exp(v) ** 2, 1.0) for v in row] for row in lp]
    return {
        "scores": scores,
        "mask": mask,
        "gids": gids,
        "lp": lp,
        "ref": ref,
        "values": values,
        "baseline": baseline,
        "sum_pi_squared": pi2,
    }


def to_batch(case, with_logprobs=True, with_values=True):
    f = torch.float64
    return Batch(
        scores=torch.tensor(case["scores"], dtype=f),
        response_mask=torch.tensor(case["mask"], dtype=f),
        group_ids=torch.tensor(case["gids"], dtype=torch.long),
        group_labels=tuple(f"p{g}" for g in range(max(case["gids"]) + 1)),
        logprobs=torch.tensor(case["lp"], dtype=f) if with_logprobs else None,
        ref_logprobs=torch.tensor(case["ref"], dtype=f) if with_logprobs else None,
        values=torch.tensor(case["values"], dtype=f) if with_values else None,
        baseline_scores=torch.tensor(case["baseline"], dtype=f),
        sum_pi_squared=torch.tensor(case["sum_pi_squared"], dtype=f) if with_logprobs else None,
    )


def seed_batch(T=1, lengths=None):
    """The seed article's one prompt with three answers scored 8.2 / 6.5 / 9.1."""
    lengths = lengths or [T] * 3
    T = max(lengths)
    mask = [[1.0 if t < n else 0.0 for t in range(T)] for n in lengths]
    return Batch(
        scores=torch.tensor(SEED_SCORES, dtype=torch.float64),
        response_mask=torch.tensor(mask, dtype=torch.float64),
        group_ids=torch.zeros(3, dtype=torch.long),
        group_labels=("q",),
    )


def close(actual, expected, tol=1e-8, rtol=0.0):
    actual = torch.as_tensor(actual, dtype=torch.float64)
    expected = torch.as_tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=tol)
