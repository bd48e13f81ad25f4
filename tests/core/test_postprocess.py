import math

import pytest
import torch

from core.cases import SEED_SCORES, close
from roll_viz.core.pipeline.postprocess import (
    clip_rewards,
    leave_one_out_baseline,
    normalize_scores,
    update_running_moments,
)
from roll_viz.core.records import RunningMoments

F = torch.float64


def t(x):
    return torch.tensor(x, dtype=F)


def test_t9_running_moments():
    r0 = RunningMoments()
    r1 = update_running_moments(r0, t(SEED_SCORES))
    assert r0 == RunningMoments()  # pure: the old value is untouched
    assert r1.mean == pytest.approx(7.933333333, abs=1e-9)
    assert r1.var == pytest.approx(1.162222222, abs=1e-9)
    assert r1.std == pytest.approx(1.320353488, abs=1e-9)
    g = torch.zeros(3, dtype=torch.long)
    out = normalize_scores(t(SEED_SCORES), g, "running", "running", r1)
    close(out.rewards, [0.201965964, -1.085567055, 0.883601091], 1e-9)
    r2 = update_running_moments(r1, t([7.0, 5.0]))
    assert r2.mean == pytest.approx(7.16, abs=1e-12)
    assert r2.var == pytest.approx(1.9944, abs=1e-12)
    assert r2.std == pytest.approx(1.578923684, abs=1e-9)
    out = normalize_scores(
        t([7.0, 5.0]), torch.zeros(2, dtype=torch.long), "running", "running", r2
    )
    close(out.rewards, [-0.101334789, -1.368019654], 1e-9)


def test_t14_lite_ppo_group_mean_batch_std():
    scores = t([8.2, 6.5, 9.1, 1, 2, 3])
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    out = normalize_scores(scores, g, "group", "batch")
    close(out.rewards, [0.078098764, -0.419780858, 0.341682094, -0.292870366, 0, 0.292870366], 1e-9)
    close(out.scale, [3.414478974 + 1e-6] * 6, 1e-9)


def test_normalize_combinations_and_errors():
    g = torch.tensor([0, 0, 1])
    scores = t([1.0, 3.0, 10.0])
    none = normalize_scores(scores, g, None, None)
    close(none.rewards, scores)
    batch_mean = normalize_scores(scores, g, "batch", None)
    close(batch_mean.rewards, scores - 14 / 3)
    with pytest.raises(ValueError, match="group 'b' has 1"):
        normalize_scores(scores, g, "group", "group", group_labels=("a", "b"))
    # biased std of a singleton is 0: defined, no error
    biased = normalize_scores(scores, g, "group", "group", ddof=0)
    assert biased.rewards[2].item() == 0.0
    with pytest.raises(ValueError, match="running"):
        normalize_scores(scores, g, "running", None)
    with pytest.raises(ValueError, match="norm_mean_type"):
        normalize_scores(scores, g, "median", None)
    with pytest.raises(ValueError, match="batch std"):
        normalize_scores(t([1.0]), torch.tensor([0]), None, "batch")
    one = update_running_moments(RunningMoments(), t([1.0]))
    with pytest.raises(ValueError, match="running std"):
        normalize_scores(t([1.0]), torch.tensor([0]), None, "running", one)


def test_loo_baseline_and_clip():
    close(
        leave_one_out_baseline(t(SEED_SCORES), torch.zeros(3, dtype=torch.long)), [7.8, 8.65, 7.35]
    )
    close(leave_one_out_baseline(t([5.0]), torch.zeros(1, dtype=torch.long)), [0.0])
    clipped, frac = clip_rewards(t([-3.0, 0.5, 2.0, 1.0]), -1.0, 1.0)
    close(clipped, [-1.0, 0.5, 1.0, 1.0])
    assert frac == 0.5
    x = t([[5.0, 0.0], [0.0, 0.0]])
    _, frac = clip_rewards(x, -1.0, 1.0, mask=t([[1, 1], [0, 0]]))
    assert frac == 0.5
    same, frac = clip_rewards(x, None, None)
    assert frac == 0.0
    assert same is not x


def test_running_moments_many_batches_equal_one_big_batch():
    torch.manual_seed(0)
    chunks = [torch.randn(n, dtype=F) * 3 + 1 for n in (5, 1, 7, 2)]
    running = RunningMoments()
    for c in chunks:
        running = update_running_moments(running, c)
    allx = torch.cat(chunks)
    assert running.mean == pytest.approx(allx.mean().item(), abs=1e-12)
    assert running.std == pytest.approx(allx.std().item(), abs=1e-9)
    assert math.isclose(running.count, 15.0)
