"""The mismatch lab's analysis: d statistics, the two-factor ratio with the toy staleness, and one
row per correction with the loss and gradient with and without it."""

import math

import pytest
import torch

from roll_viz.analysis import mismatch

OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]], dtype=torch.float64)
MU = torch.tensor([[-1.2, -1.0, -0.5], [-0.3, -3.0, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)


def test_delta_stats_by_hand():
    stats = mismatch.delta_stats(OLD - MU, MASK)
    d = [0.2, -1.0, 0.0, 0.0, 1.8]
    assert stats["tokens"] == 5
    assert stats["mean"] == pytest.approx(sum(d) / 5)
    assert stats["mean_abs"] == pytest.approx(sum(abs(x) for x in d) / 5)
    assert stats["rms"] == pytest.approx(math.sqrt(sum(x * x for x in d) / 5))
    assert stats["max_abs"] == pytest.approx(1.8)
    assert stats["share_above_0.01"] == pytest.approx(3 / 5)
    assert math.isnan(mismatch.delta_stats(OLD, torch.zeros_like(MASK))["mean"])


def test_first_update_is_all_mismatch():
    lab = mismatch.mismatch_lab(OLD, MU, MASK, ADV, mismatch.Settings())
    assert torch.equal(lab.ratio.staleness, MASK.double())
    assert torch.allclose(lab.ratio.total, lab.ratio.mismatch)
    assert len(lab.table) == len(lab.corrections) == 10
    # r = 1: loss = -(1 * 3 - 1 * 2) / 5
    assert lab.plain.loss == pytest.approx(-0.2)
    row = lab.table[lab.table["method"] == "IcePop"].iloc[0]
    assert row["masked"] == 2
    assert row["loss with"] == pytest.approx(-(math.exp(0.2) + 1.0 - 1.0) / 5)


def test_staleness_moves_pi_theta_along_the_advantage():
    lab = mismatch.mismatch_lab(OLD, MU, MASK, ADV, mismatch.Settings(staleness=0.1))
    assert torch.allclose(lab.logp[0], OLD[0] + 0.1)
    assert torch.allclose(lab.ratio.total, lab.ratio.mismatch * lab.ratio.staleness)
    assert float(lab.ratio.staleness[1, 0]) == pytest.approx(math.exp(-0.1))


def test_bad_threshold_raises_the_frameworks_message():
    with pytest.raises(ValueError, match="lower <= upper"):
        mismatch.mismatch_lab(OLD, MU, MASK, ADV, mismatch.Settings(rs_threshold="2_0.5"))
