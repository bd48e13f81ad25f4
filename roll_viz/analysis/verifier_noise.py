"""A noisy 0/1 verifier on a real batch: broken ties, zero advantages, advantages at noise.

A rule verifier says pass (1) or fail (0). A noisy one says fail for a true pass with the
false-negative rate ``fn`` and pass for a true fail with the false-positive rate ``fp``, each
sample on its own (asuzukosi/post-training-experiments #15: "a verifier bug is a corrupted
gradient, not a mis-reported score"). Under GRPO (``reward_stage.group_advantages``) a group whose
labels are all equal is a *tie*: every advantage in it is exactly 0. Noise breaks ties and makes
new ones.

A sample's advantage **points at noise** when it is non-zero and comes from noise: its own label
was flipped (its sign is the wrong way round), or its group was a tie under the true labels (the
group had nothing to teach; every non-zero advantage in it is noise).

``noise_draw`` makes one seeded draw (``torch.Generator``, one uniform per sample: a pass is
flipped when u < fn, a fail when u < fp). ``expected_noise`` gives the same counts' expected
values exactly: in a group of G with k true passes, j of the passes and i of the fails flipped
has probability C(k, j) fn^j (1-fn)^(k-j) C(G-k, i) fp^i (1-fp)^(G-k-i); the group is tied when
its observed passes k - j + i are 0 or G. A tie after the noise has probability
fn^k (1-fp)^(G-k) + (1-fn)^k fp^(G-k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from roll_viz.analysis.reward_stage import group_advantages

#: the largest false-negative or false-positive rate the page accepts
MAX_RATE = 0.5


def _check(labels: Tensor, group_ids: Tensor, fn: float, fp: float) -> None:
    for name, rate in (("false-negative", fn), ("false-positive", fp)):
        if not (math.isfinite(rate) and 0.0 <= rate <= MAX_RATE):
            raise ValueError(f"the {name} rate must be in [0, {MAX_RATE:g}], got {rate}")
    if not bool(((labels == 0) | (labels == 1)).all()):
        raise ValueError("a verifier's scores must all be 0 or 1")
    if bool((torch.bincount(group_ids) == 1).any()):
        raise ValueError("every group needs at least 2 samples (G >= 2)")


def flip_labels(labels: Tensor, fn: float, fp: float, seed: int) -> tuple[Tensor, Tensor]:
    """One seeded draw of the noisy verifier.

    Args:
        labels: (B,) true 0/1 labels.
        fn: false-negative rate (a pass read as a fail).
        fp: false-positive rate (a fail read as a pass).
        seed: the generator's seed (the page shows it).

    Returns:
        (observed (B,) float64 0/1 labels, flipped (B,) bool).
    """
    u = torch.rand(
        labels.shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )
    flipped = torch.where(labels == 1, u < fn, u < fp)
    observed = torch.where(flipped, 1.0 - labels.to(torch.float64), labels.to(torch.float64))
    return observed, flipped


def _tied(labels: Tensor, group_ids: Tensor) -> Tensor:
    """(P,) bool: every label of the group is the same."""
    n = int(group_ids.max()) + 1
    size = torch.bincount(group_ids, minlength=n)
    passes = torch.zeros(n, dtype=torch.float64).index_add(0, group_ids, labels.to(torch.float64))
    return (passes == 0) | (passes == size)


@dataclass(frozen=True)
class NoiseDraw:
    """One seeded draw of the noisy verifier on a batch.

    Attributes:
        labels: (B,) the true labels.
        observed: (B,) what the noisy verifier said.
        flipped: (B,) bool, observed != labels.
        adv_true: (B,) GRPO advantages of the true labels.
        adv_noisy: (B,) GRPO advantages of the observed labels.
        points_at_noise: (B,) bool, non-zero noisy advantage from a flipped label or a true tie.
        tied_before: (P,) bool, groups tied under the true labels.
        tied_after: (P,) bool, groups tied under the observed labels.
        broken_ties: groups tied before and not after.
        zero_before: share of samples with advantage exactly 0 under the true labels.
        zero_after: the same under the observed labels.
    """

    labels: Tensor
    observed: Tensor
    flipped: Tensor
    adv_true: Tensor
    adv_noisy: Tensor
    points_at_noise: Tensor
    tied_before: Tensor
    tied_after: Tensor
    broken_ties: int
    zero_before: float
    zero_after: float


def noise_draw(labels: Tensor, group_ids: Tensor, fn: float, fp: float, seed: int) -> NoiseDraw:
    """The noisy verifier's effect on one seeded draw (see the module docstring).

    Raises:
        ValueError: a rate outside [0, MAX_RATE], labels other than 0/1, a group of one.
    """
    _check(labels, group_ids, fn, fp)
    labels = labels.to(torch.float64)
    observed, flipped = flip_labels(labels, fn, fp, seed)
    adv_true, adv_noisy = group_advantages(labels, group_ids), group_advantages(observed, group_ids)
    tied_before, tied_after = _tied(labels, group_ids), _tied(observed, group_ids)
    noisy = (adv_noisy != 0) & (flipped | tied_before[group_ids])
    return NoiseDraw(
        labels=labels,
        observed=observed,
        flipped=flipped,
        adv_true=adv_true,
        adv_noisy=adv_noisy,
        points_at_noise=noisy,
        tied_before=tied_before,
        tied_after=tied_after,
        broken_ties=int((tied_before & ~tied_after).sum()),
        zero_before=float((adv_true == 0).to(torch.float64).mean()),
        zero_after=float((adv_noisy == 0).to(torch.float64).mean()),
    )


def tie_probability(size: int, passes: int, fn: float, fp: float) -> float:
    """P(a group of ``size`` with ``passes`` true passes is tied after the noise).

    fn^k (1-fp)^(G-k) (every pass read as a fail, no fail as a pass) + (1-fn)^k fp^(G-k).
    """
    fails = size - passes
    return fn**passes * (1 - fp) ** fails + (1 - fn) ** passes * fp**fails


@dataclass(frozen=True)
class NoiseExpectation:
    """Expected values of a ``NoiseDraw``'s counts over the verifier's noise (exact).

    Attributes:
        zero_after: expected share of samples with advantage 0.
        broken_ties: expected number of groups tied before and not after.
        points_at_noise: expected number of samples whose advantage points at noise.
        flipped: expected number of flipped labels.
        tie_after: (P,) each group's probability of being tied after the noise.
    """

    zero_after: float
    broken_ties: float
    points_at_noise: float
    flipped: float
    tie_after: tuple[float, ...]


def _group_points_at_noise(size: int, passes: int, fn: float, fp: float) -> float:
    """E[samples of the group whose advantage points at noise], a sum over (j, i) flips."""
    fails, was_tied = size - passes, passes in (0, size)
    total = 0.0
    for j in range(passes + 1):
        pj = math.comb(passes, j) * fn**j * (1 - fn) ** (passes - j)
        for i in range(fails + 1):
            observed = passes - j + i
            if observed in (0, size):
                continue  # tied after: every advantage is 0
            pi = math.comb(fails, i) * fp**i * (1 - fp) ** (fails - i)
            total += pj * pi * (size if was_tied else i + j)
    return total


def expected_noise(labels: Tensor, group_ids: Tensor, fn: float, fp: float) -> NoiseExpectation:
    """The exact expected values of ``noise_draw``'s counts over every possible draw.

    Raises:
        ValueError: as ``noise_draw``.
    """
    _check(labels, group_ids, fn, fp)
    n = int(group_ids.max()) + 1
    sizes = torch.bincount(group_ids, minlength=n).tolist()
    passes = torch.zeros(n, dtype=torch.float64).index_add(0, group_ids, labels.to(torch.float64))
    ties, zero, broken, noisy, flipped = [], 0.0, 0.0, 0.0, 0.0
    for size, k in zip(sizes, (int(p) for p in passes.tolist()), strict=True):
        tie = tie_probability(size, k, fn, fp)
        ties.append(tie)
        zero += size * tie
        broken += (1.0 - tie) if k in (0, size) else 0.0
        noisy += _group_points_at_noise(size, k, fn, fp)
        flipped += k * fn + (size - k) * fp
    return NoiseExpectation(
        zero_after=zero / sum(sizes),
        broken_ties=broken,
        points_at_noise=noisy,
        flipped=flipped,
        tie_after=tuple(ties),
    )


@dataclass(frozen=True)
class NoiseSweep:
    """Expected counts as one rate moves and the other stays 0.

    Attributes:
        rates: the rates swept.
        fn_only: the expectation at (fn = rate, fp = 0), one per rate.
        fp_only: the expectation at (fn = 0, fp = rate), one per rate.
    """

    rates: tuple[float, ...]
    fn_only: tuple[NoiseExpectation, ...]
    fp_only: tuple[NoiseExpectation, ...]


def noise_sweep(labels: Tensor, group_ids: Tensor, points: int = 11) -> NoiseSweep:
    """``expected_noise`` with only false negatives, then only false positives, 0 to MAX_RATE.

    Which hurts more depends on the batch: a batch of mostly fails has more fails to misread.

    Args:
        labels: (B,) true 0/1 labels.
        group_ids: (B,) long prompt index.
        points: rates from 0 to MAX_RATE, evenly spaced (2 to 51).

    Raises:
        ValueError: as ``noise_draw``, or ``points`` out of range.
    """
    if not 2 <= points <= 51:
        raise ValueError(f"points must be in [2, 51], got {points}")
    rates = tuple(MAX_RATE * i / (points - 1) for i in range(points))
    return NoiseSweep(
        rates=rates,
        fn_only=tuple(expected_noise(labels, group_ids, r, 0.0) for r in rates),
        fp_only=tuple(expected_noise(labels, group_ids, 0.0, r) for r in rates),
    )
