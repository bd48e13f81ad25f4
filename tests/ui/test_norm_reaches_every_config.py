"""The sidebar's reward normalisation reaches every config built from the sidebar (one chain).

Before, only the sidebar's own config carried it: the Advantages page's other estimators and the
Token KL page's placements were built without it, so Rewards showed batch-normalised rewards
while the Advantages heatmaps used raw ones.
"""

from __future__ import annotations

import dataclasses

import torch

from roll_viz.core import pipeline
from roll_viz.ui.instant import relay
from roll_viz.ui.settings import generic_defaults, native_config
from tests.synthetic import batch_of, synthetic_rollout


def _generic(norm: str) -> dict:
    return {**generic_defaults("roll"), "norm": norm}


def test_every_estimator_and_placement_config_normalises_as_the_sidebar():
    generic = _generic("batch")
    sidebar = native_config("roll", generic)
    assert sidebar["norm_mean_type"] == sidebar["norm_std_type"] == "batch"
    detail = relay.knob_detail("roll", generic, sidebar)
    for est in ("gae", "reinforce"):
        assert detail["configs"][est]["norm_mean_type"] == "batch", est
    for name, cfg in detail["placements"].items():
        assert cfg["norm_std_type"] == "batch", name


def test_the_numbers_follow_the_normalisation():
    # the seed's example as scores of one prompt, plus a second prompt
    batch = batch_of(synthetic_rollout(prompts=2, group_size=3), seed=1)
    batch = dataclasses.replace(
        batch, scores=torch.tensor([8.2, 6.5, 9.1, 1.0, 2.0, 3.0], dtype=torch.float64)
    )
    reinforce = {"adv_estimator": "reinforce"}
    runs = {
        norm: pipeline.run(batch, "roll", native_config("roll", _generic(norm), reinforce))
        for norm in ("none", "batch")
    }
    raw = runs["none"].rewards.tolist()
    assert raw == [8.2, 6.5, 9.1, 1.0, 2.0, 3.0]
    mean = sum(raw) / 6
    std = (sum((r - mean) ** 2 for r in raw) / 5) ** 0.5  # unbiased, as torch.std
    got = runs["batch"].rewards.tolist()
    assert abs(got[0] - (8.2 - mean) / std) < 1e-4  # (r - batch mean) / batch std, ROLL's eps aside
