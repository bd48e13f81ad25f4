"""The normalisation matrix and the phantom-advantage demo: hand numbers and ROLL's reward_norm."""

import math

import pytest
import torch

from roll_viz.analysis import normalisation as nm
from roll_viz.core.pipeline import run
from roll_viz.core.records import Batch

F = torch.float64
SCORES = torch.tensor([8.2, 6.5, 9.1, 5.0, 5.1, 4.9, 1.0, 1.0], dtype=F)
GIDS = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])


def test_grpo_cell_by_hand():
    a = nm.normalise(SCORES, GIDS, "group", "group")
    mu = (8.2 + 6.5 + 9.1) / 3
    sd = math.sqrt(((8.2 - mu) ** 2 + (6.5 - mu) ** 2 + (9.1 - mu) ** 2) / 2)
    assert a[2].item() == pytest.approx((9.1 - mu) / (sd + 1e-6), rel=1e-14)
    assert a[2].item() == pytest.approx(0.8836, abs=1e-4)
    assert a[6].item() == 0.0  # a flat group: exactly 0
    assert nm.normalise(SCORES, GIDS, "none", "none").tolist() == SCORES.tolist()


@pytest.mark.parametrize("mean", nm.LEVELS)
@pytest.mark.parametrize("std", nm.LEVELS)
def test_every_cell_is_rolls_reward_norm(mean, std):
    batch = Batch(scores=SCORES, response_mask=torch.ones(8, 1, dtype=F), group_ids=GIDS)
    config = {
        "adv_estimator": "reinforce",
        "norm_mean_type": None if mean == "none" else mean,
        "norm_std_type": None if std == "none" else std,
    }
    if std == "group" and mean != "group":  # ROLL's reward_norm cannot store this broadcast
        with pytest.raises(ValueError, match="needs norm_mean_type: group"):
            run(batch, "roll", config)
        return
    expected = run(batch, "roll", config).rewards
    torch.testing.assert_close(nm.normalise(SCORES, GIDS, mean, std), expected, rtol=0, atol=1e-12)


def test_matrix_tables_name_the_methods():
    m = nm.normalisation_matrix(SCORES, GIDS, ["quantum", "capital", "flat"])
    assert len(m.cells) == 9
    assert len(m.samples) == 9 * 8
    grpo = m.summary.set_index(["mean", "std"]).loc[("group", "group")]
    assert "GRPO" in grpo["methods"]
    assert grpo["mean |A|, flat groups"] == 0.0
    assert "Dr. GRPO" in m.summary.set_index(["mean", "std"]).loc[("group", "none"), "methods"]
    lite = m.summary.set_index(["mean", "std"]).loc[("group", "batch"), "methods"]
    assert "LitePPO" in lite
    assert "ScaleRL" in lite
    assert "REINFORCE++" in m.summary.set_index(["mean", "std"]).loc[("batch", "batch"), "methods"]
    assert set(m.samples["prompt"]) == {"quantum", "capital", "flat"}
    assert nm.cell_name("group", "group") == "GRPO"
    assert nm.cell_name("none", "group") == "mean none / std group"


def test_singleton_group_std_cells_are_nan():
    a = nm.normalise(torch.tensor([1.0, 0.0, 3.0], dtype=F), torch.tensor([0, 0, 1]), "group",
                     "group")  # fmt: skip
    assert math.isnan(a[2].item())
    with pytest.raises(ValueError, match="levels"):
        nm.normalise(SCORES, GIDS, "global", "group")


def test_phantom_advantages_by_hand():
    p = nm.phantom_advantages()
    hard = p.table[p.table["prompt"] == "hard"]
    # rewards -0.18, -0.22, -0.16, -0.24: mean -0.2, unbiased std sqrt(0.004 / 3)
    sd = math.sqrt(0.004 / 3)
    assert p.fail_group_std == pytest.approx(sd, rel=1e-12)
    assert hard["A, group std (GRPO)"].tolist() == pytest.approx(
        [0.02 / (sd + 1e-6), -0.02 / (sd + 1e-6), 0.04 / (sd + 1e-6), -0.04 / (sd + 1e-6)]
    )
    assert hard["A, no std (Dr. GRPO)"].tolist() == pytest.approx([0.02, -0.02, 0.04, -0.04])
    # full size under group std (as large as a right/wrong gap), small under the batch std
    assert p.fail_max_abs_group > 1.0
    assert p.fail_max_abs_batch < 0.1
    easy = p.table[p.table["prompt"] == "easy"]
    assert easy["A, group std (GRPO)"].abs().max() < 1.5 * p.fail_max_abs_group
    none = nm.phantom_advantages(length_coef=0.0)
    assert none.fail_max_abs_group == 0.0  # without the length term the failures are flat
    no_fail = nm.phantom_advantages(batch={"easy": ((1, 0), (10, 20))})
    assert no_fail.fail_group_std == 0.0
