"""Figures of the Eras page: era bars, MaxRL bars, the KL per-token view."""

import pytest
import torch

from roll_viz.analysis import era_diff, group_health, kl_placement
from roll_viz.views import era_charts


def test_era_bars_one_trace_per_era_and_panel_filtered_rows_empty():
    batch = group_health.demo_batch()
    diff = era_diff.diff_eras(batch, "trl")
    fig = era_charts.era_bars(diff)
    assert len(fig.data) == len(era_charts.ERA_PANELS) * 5
    first, second = fig.data[0], fig.data[4]
    assert first.name == "GRPO as published (2024)"
    assert second.name == "ScaleRL / Olmo 3"
    assert list(first.y) == diff.samples["A [2024]"].tolist()
    filtered = diff.samples["filtered [ScaleRL]"].tolist()
    assert [y is None for y in second.y] == filtered
    assert any(filtered)


def test_the_middle_panel_is_each_answers_weight_not_a_copy_of_the_gradient():
    # at ratio 1 an answer's signed part of the loss equals its gradient sum: drawing it too
    # showed one panel twice, with "negative shares"
    batch = group_health.demo_batch()
    diff = era_diff.diff_eras(batch, "roll")
    s = diff.samples
    for tag in ("2024", "ScaleRL", "prime-rl", "V3.2"):
        kept = ~s[f"filtered [{tag}]"]
        weight = s[f"loss weight [{tag}]"][kept]
        assert (weight > 0).all()
        assert abs(weight.sum() - 1.0) < 1e-9  # the mean modes: weights over kept answers add to 1
    assert not s["loss weight [2024]"].equals(s["loss weight [ScaleRL]"])  # sequence vs token mean
    # Tinker's token sum is ROLL's seq-mean-token-sum: every token weighs 1 / answers, so an
    # answer's weight is its length / 12 and the weights add up to tokens / answers, not 1
    lengths = batch.response_mask.sum(-1)
    assert s["loss weight [Tinker]"].tolist() == pytest.approx((lengths / 12).tolist(), abs=1e-12)
    fig = era_charts.era_bars(diff)
    middle = [t for t in fig.data if t.yaxis == "y2"]
    assert list(middle[0].y) == s["loss weight [2024]"].tolist()
    # drawn as shares: Tinker's sum weighs the answers by their lengths, as a token mean would
    tinker = next(t for t in middle if t.name == "Tinker")
    assert list(tinker.y) == pytest.approx((lengths / lengths.sum()).tolist(), abs=1e-12)
    assert list(middle[0].y) != s["gradient [2024]"].tolist()


def test_maxrl_bars():
    cmp = era_diff.maxrl_vs_grpo(torch.tensor([1.0, 0, 0, 0]), torch.tensor([0, 0, 0, 0]))
    fig = era_charts.maxrl_bars(cmp)
    assert [t.name for t in fig.data] == ["GRPO", "MaxRL"]
    assert list(fig.data[1].y) == cmp.samples["A MaxRL"].tolist()
    assert_legend_clear_of_title(fig)


def test_kl_token_figure_and_summary():
    batch = group_health.demo_batch()
    view = kl_placement.kl_view(batch.logprobs, batch.ref_logprobs, batch.response_mask, 0.1)
    fig = era_charts.kl_token_figure(view, "k3+")
    assert [t.name for t in fig.data] == [name for _, name in era_charts.KL_SERIES]
    part = view.tokens[view.tokens["variant"] == "k3+"].sort_values("log ratio")
    assert list(fig.data[1].y) == part["as a loss"].tolist()
    assert list(fig.data[0].x) == list(fig.data[1].x)
    bars = era_charts.kl_summary_bars(view)
    assert list(bars.data[0].x) == view.summary["variant"].tolist()
    assert_legend_clear_of_title(bars)


def test_in_reward_share_bars():
    fig = era_charts.in_reward_share_bars([0.1, -0.2], ["a", "b"], "verl, k1")
    assert list(fig.data[0].y) == [0.1, -0.2]
    assert fig.layout.title.text == "verl, k1"


def assert_legend_clear_of_title(fig) -> None:
    """A legend above the plot sits on its top edge, under a title with room for both."""
    assert fig.layout.legend.yanchor == "bottom"
    assert fig.layout.legend.y <= 1.02
    assert fig.layout.margin.t >= 80
