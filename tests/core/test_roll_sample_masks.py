"""ROLL sample-level masks (max_len_mask, difficulty_mask, error_max_len_clip): hand numbers."""

import math

import torch

from core.cases import close
from roll_viz.core.pipeline import resolve_config, run
from roll_viz.core.pipeline.dialects import roll as roll_dialect
from roll_viz.core.records import Batch

F = torch.float64


def _batch(scores, lengths, groups, T=3):
    mask = [[1.0 if t < n else 0.0 for t in range(T)] for n in lengths]
    return Batch(
        scores=torch.tensor(scores, dtype=F),
        response_mask=torch.tensor(mask, dtype=F),
        group_ids=torch.tensor(groups, dtype=torch.long),
    )


def _keep(batch, **cfg):
    keep, metrics = roll_dialect.sample_level_mask(batch, resolve_config("roll", cfg))
    return keep.tolist(), metrics


def test_max_len_mask_drops_responses_as_long_as_the_width():
    batch = _batch([1.0, 0.0, 1.0, 0.0], [3, 1, 2, 3], [0, 0, 1, 1])
    keep, metrics = _keep(batch, max_len_mask=True)
    assert keep == [0.0, 1.0, 1.0, 0.0]
    assert metrics["actor/max_len_mask_ratio"] == 0.5
    assert metrics["actor/difficulty_mask_ratio"] == 1.0  # off: ROLL logs 1.0
    assert metrics["actor/samples_used"] == 2.0
    assert metrics["actor/samples_total"] == 4.0
    trace = run(batch, "roll", {"adv_estimator": "reinforce", "max_len_mask": True})
    # reward-to-go on the kept rows only; the rewards are normalised over all (none here)
    close(trace.advantages, [[0, 0, 0], [0, 0, 0], [1, 1, 0], [0, 0, 0]], 1e-15)
    close(trace.token_rewards, [[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]], 1e-15)
    assert any("actor/max_len_mask_ratio 0.5" in n for n in trace.notes)


def test_whitening_runs_over_the_kept_tokens():
    batch = _batch([1.0, 0.0, 1.0, 0.0], [3, 1, 2, 3], [0, 0, 1, 1])
    cfg = {"adv_estimator": "reinforce", "max_len_mask": True, "whiten_advantages": True}
    trace = run(batch, "roll", cfg)
    mean, var = 2 / 3, ((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2  # kept tokens 0, 1, 1; unbiased
    lo, hi = (0 - mean) / math.sqrt(var + 1e-8), (1 - mean) / math.sqrt(var + 1e-8)
    close(trace.advantages, [[0, 0, 0], [lo, 0, 0], [hi, hi, 0], [0, 0, 0]], 1e-12)


def test_difficulty_mask_keeps_groups_strictly_inside_the_thresholds():
    batch = _batch([1.0, 1.0, 1.0, 0.0], [1, 2, 2, 1], [0, 0, 1, 1])
    keep, metrics = _keep(
        batch, difficulty_mask=True, difficulty_low_threshold=0.1, difficulty_high_threshold=0.95
    )
    assert keep == [0.0, 0.0, 1.0, 1.0]  # group means 1.0 (too easy) and 0.5
    assert metrics["actor/difficulty_mask_ratio"] == 0.5
    # defaults 0.0 and 1.0: an all-correct or all-wrong group is dropped
    assert (
        _keep(_batch([1.0, 1.0, 0.0, 0.0], [1] * 4, [0, 0, 1, 1]), difficulty_mask=True)[0]
        == [0.0] * 4
    )
    # every group of one (ROLL's n_sample <= 1): all kept
    assert _keep(_batch([1.0, 0.0], [1, 1], [0, 1]), difficulty_mask=True)[0] == [1.0, 1.0]


def test_error_max_len_clip_keeps_correct_and_short_wrong_answers():
    batch = _batch([1.0, 0.0, 1.0, 0.0], [3, 1, 2, 3], [0, 0, 1, 1])
    keep, metrics = _keep(batch, error_max_len_clip=True, error_max_len_threshold=2)
    assert keep == [1.0, 1.0, 1.0, 0.0]  # score 1, or score 0 and length < 2
    assert metrics["actor/error_len_mask_ratio"] == 0.75
    # a score that is neither 0 nor 1 is dropped
    assert _keep(_batch([0.5], [1], [0]), error_max_len_clip=True)[0] == [0.0]
    both, m2 = _keep(batch, error_max_len_clip=True, error_max_len_threshold=2, max_len_mask=True)
    assert both == [0.0, 1.0, 1.0, 0.0]
    assert m2["actor/final_mask_ratio"] == 0.5


def test_masks_off_change_nothing():
    batch = _batch([1.0, 0.0, 1.0, 0.0], [3, 1, 2, 3], [0, 0, 1, 1])
    plain = run(batch, "roll", {"adv_estimator": "grpo"})
    off = run(batch, "roll", {"adv_estimator": "grpo", "error_max_len_threshold": 1})
    close(plain.advantages, off.advantages, 0.0)
