"""The KL heatmap says how its KL was computed: exact in-process, a top-K bound on an engine."""

import dataclasses

from roll_viz.views import heatmaps
from tests.synthetic import synthetic_rollout


def _with_meta(rollout, **meta):
    return dataclasses.replace(rollout, meta=tuple(sorted(meta.items())))


def test_in_process_rollout_is_titled_exact():
    fig = heatmaps.exact_kl_heatmap(_with_meta(synthetic_rollout(), policy_mode="steered"))
    assert fig.layout.title.text.startswith("Exact KL over the full vocabulary")


def test_engine_rollout_is_titled_a_top_k_lower_bound():
    rollout = _with_meta(synthetic_rollout(), engine="vLLM", policy_mode="steered", topk=5)
    fig = heatmaps.exact_kl_heatmap(rollout)
    assert "top-5 tokens" in fig.layout.title.text
    assert "lower bound" in fig.layout.title.text
    # policy = reference on the engine: the KL is exactly 0 there, still exact
    same = _with_meta(synthetic_rollout(), engine="vLLM", policy_mode="identical", topk=5)
    assert heatmaps.exact_kl_title(same)[0] == "Exact KL over the full vocabulary"
