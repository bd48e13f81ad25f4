"""OpenRLHF length penalties (DAPO overlong, ProRL stop-properly): hand numbers."""

import pytest
import torch

from core.cases import close
from roll_viz.core.pipeline import run
from roll_viz.core.records import Batch

F = torch.float64
LENGTHS = [4, 3, 2, 4]


def _rewards(scores=(1.0, 0.0, 1.0, 0.5), **cfg):
    T = 4
    batch = Batch(
        scores=torch.tensor(scores, dtype=F),
        response_mask=torch.tensor([[1.0 if t < n else 0.0 for t in range(T)] for n in LENGTHS]),
        group_ids=torch.tensor([0, 0, 1, 1]),
    )
    trace = run(batch, "openrlhf", {"advantage_estimator": "reinforce", "init_coef": 0.0, **cfg})
    return trace


def test_overlong_penalty_by_hand():
    # max_new_tokens = width 4, buffer 2: expected 2, excess min(L - 2, 2) = 2, 1, 0, 2
    trace = _rewards(overlong_buffer_len=2.0)
    close(trace.rewards, [1 - 1.0, 0 - 0.5, 1.0, 0.5 - 1.0], 1e-15)
    assert any("3/4 responses longer than 2 tokens" in n for n in trace.notes)
    # max_new_tokens 6, buffer 3, factor 0.5: expected 3, excess 1, 0, -1, 1
    trace = _rewards(overlong_buffer_len=3.0, overlong_penalty_factor=0.5, max_new_tokens=6)
    close(trace.rewards, [1 - 0.5 / 3, 0.0, 1.0, 0.5 - 0.5 / 3], 1e-15)
    close(trace.scores, [1.0, 0.0, 1.0, 0.5], 0.0)  # the raw scores stay in the trace


def test_stop_properly_penalty_by_hand():
    # truncated: as long as max_new_tokens (rows 0 and 3)
    close(_rewards(stop_properly_penalty_coef=0.5).rewards, [0.5, 0.0, 1.0, 0.25], 1e-15)
    close(_rewards(stop_properly_penalty_coef=-0.5).rewards, [-0.5, 0.0, 1.0, -0.5], 1e-15)
    # both: the overlong penalty first, then the truncated rows scaled
    both = _rewards(overlong_buffer_len=2.0, stop_properly_penalty_coef=0.5)
    close(both.rewards, [0.0, -0.5, 1.0, -0.25], 1e-15)
    # nothing truncated with a larger cap
    close(_rewards(stop_properly_penalty_coef=0.0, max_new_tokens=5).rewards, [1, 0, 1, 0.5], 0)


def test_length_penalties_before_the_group_baseline():
    # rloo shaping runs on the penalised rewards: group 0 (1 - 1, 0 - 0.5) -> 0.5, -0.5
    batch_cfg = {"advantage_estimator": "rloo", "overlong_buffer_len": 2.0}
    trace = run(
        Batch(
            scores=torch.tensor([1.0, 0.0, 1.0, 0.5], dtype=F),
            response_mask=torch.tensor(
                [[1.0 if t < n else 0.0 for t in range(4)] for n in LENGTHS]
            ),
            group_ids=torch.tensor([0, 0, 1, 1]),
        ),
        "openrlhf",
        {**batch_cfg, "init_coef": 0.0},
    )
    close(trace.rewards, [0.5, -0.5, 1.5, -1.5], 1e-15)


def test_bad_length_penalty_settings_raise():
    with pytest.raises(ValueError, match="must be >= overlong_buffer_len"):
        _rewards(overlong_buffer_len=5.0)
    with pytest.raises(ValueError, match=r"in \[0, 1\] or negative"):
        _rewards(stop_properly_penalty_coef=1.5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        _rewards(max_new_tokens=0)
