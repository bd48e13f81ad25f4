"""Unit tests of roll_viz.views.charts: figure types, colour scales, NaN padding, escaping."""

import math

import plotly.graph_objects as go
import pytest
import torch
from plotly.colors import sample_colorscale

from roll_viz.views import charts, chips, heatmaps, scales
from tests.synthetic import synthetic_rollout, synthetic_trace


@pytest.fixture(scope="module")
def rollout():
    return synthetic_rollout(prompts=2, group_size=3, width=5)


@pytest.fixture(scope="module")
def trace(rollout):
    return synthetic_trace(rollout)


def _z_matches(z, values, mask):
    for row, vrow, mrow in zip(z, values.tolist(), mask.tolist(), strict=True):
        for cell, v, m in zip(row, vrow, mrow, strict=True):
            if m:
                assert cell == pytest.approx(v)
            else:
                assert cell is None or (isinstance(cell, float) and math.isnan(cell))


def test_advantage_heatmap_is_signed_rdbu_centred_at_zero(rollout, trace):
    fig = heatmaps.advantage_heatmap(trace, rollout)
    assert isinstance(fig, go.Figure)
    heat = fig.data[0]
    assert heat.type == "heatmap"
    assert heat.zmid == 0
    assert heat.zmin == -heat.zmax
    assert heat.zmax >= scales.ADVANTAGE_RANGE
    assert heat.colorscale == go.Heatmap(colorscale="RdBu").colorscale
    _z_matches(heat.z, trace.advantages, rollout.response_mask)


def test_padding_is_blank_not_zero(rollout, trace):
    heat = heatmaps.advantage_heatmap(trace, rollout).data[0]
    mask = rollout.response_mask
    padded = [(b, t) for b in range(mask.shape[0]) for t in range(mask.shape[1]) if not mask[b, t]]
    assert padded, "the synthetic rollout must have padding"
    for b, t in padded:
        assert math.isnan(heat.z[b][t])
    assert heat.hoverongaps is False


def test_fixed_range_is_respected(rollout, trace):
    heat = heatmaps.advantage_heatmap(trace, rollout, zmax=5.0).data[0]
    assert (heat.zmin, heat.zmax) == (-5.0, 5.0)
    assert "[-5, 5]" in heat.colorbar.title.text


def test_kl_heatmap_signed_vs_sequential(rollout):
    kl = rollout.logprobs - rollout.ref_logprobs
    signed = heatmaps.kl_heatmap(kl, rollout, estimator="k1", signed=True).data[0]
    assert signed.zmid == 0
    assert signed.zmin == -signed.zmax
    sq = kl * kl / 2
    seq = heatmaps.kl_heatmap(sq, rollout, estimator="k2", signed=False, zmax=1.0).data[0]
    assert seq.zmin == 0.0
    assert seq.zmax == 1.0
    assert seq.zmid is None
    assert seq.colorscale == go.Heatmap(colorscale=scales.SEQUENTIAL_SCALE).colorscale
    _z_matches(seq.z, sq, rollout.response_mask)


def test_kl_hover_has_alternatives_under_both_models(rollout):
    heat = heatmaps.kl_heatmap(rollout.exact_kl, rollout, estimator="k3", signed=False).data[0]
    cell = heat.customdata[0][0]
    assert "top alternatives, p policy / p ref" in cell[-1]
    assert "log pi_ref" in heat.hovertemplate
    assert "exact KL" in heat.hovertemplate


def test_estimator_heatmaps_share_one_symmetric_scale(rollout, trace):
    advs = {"gae": trace.advantages, "grpo": -2 * trace.advantages}
    fig = heatmaps.estimator_heatmaps(advs, rollout)
    assert [d.type for d in fig.data] == ["heatmap", "heatmap"]
    assert all(d.coloraxis == "coloraxis" for d in fig.data)
    axis = fig.layout.coloraxis
    assert axis.cmid == 0
    assert axis.cmin == -axis.cmax
    assert axis.cmax >= float((2 * trace.advantages).abs().max())
    _z_matches(fig.data[1].z, -2 * trace.advantages, rollout.response_mask)


def test_group_stats(rollout):
    raw = torch.arange(6, dtype=torch.float64)
    g = charts.group_stats_figure(rollout, raw, [1.0, 4.0], [1.0, float("nan")])
    assert [d.type for d in g.data] == ["bar", "scatter"]
    assert list(g.data[0].error_y.array) == [1.0, 0.0]


def test_beta_schedule_line():
    fig = charts.beta_schedule([0.2, 0.21, 0.22], target=0.1, observed=0.3)
    assert fig.data[0].type == "scatter"
    assert list(fig.data[0].y) == [0.2, 0.21, 0.22]


def test_token_chips_escape_untrusted_text():
    evil = "<script>alert(1)</script>"
    out = chips.token_chips_html([evil, '" onmouseover="x', "a\nb"], [1.0, -1.0, 0.0])
    assert "<script>" not in out
    assert "&lt;script&gt;" in out
    assert '" onmouseover="x' not in out
    assert "\u21b5" in out  # newline shown visibly


def test_heatmap_hover_escapes_tokens():
    ro = synthetic_rollout(prompts=1, group_size=2, width=3, tokens=("<b>x</b>", " y"))
    fig = heatmaps.exact_kl_heatmap(ro)
    texts = [cell[0] for row in fig.data[0].customdata for cell in row]
    assert "&lt;b&gt;x&lt;/b&gt;" in texts
    assert not any("<b>x" in t for t in texts)


def test_chip_colours_match_the_heatmap_colorscale():
    out = chips.token_chips_html(["a", "b", "c"], [-2.0, 0.0, 2.0], "RdBu", vmin=-2, vmax=2)
    expected = sample_colorscale("RdBu", [0.0, 0.5, 1.0])
    for colour in expected:
        assert f"background:{colour}" in out


def test_chip_text_contrast():
    assert scales.text_color("rgb(5, 48, 97)") == "#ffffff"  # dark blue end of RdBu
    assert scales.text_color("rgb(247, 247, 247)") == "#000000"
    out = chips.token_chips_html(["x"], [3.0], "RdBu", vmin=-3, vmax=3)
    assert "color:#ffffff" in out


def test_chip_tooltip_has_the_number():
    out = chips.token_chips_html(["tok"], [0.123456], "RdBu", name="A")
    assert "A = 0.1235" in out


def test_sample_chips_use_surprisal_for_logprobs(rollout):
    out = chips.sample_chips_html(rollout, 0, "logprob")
    assert out.count("<span") == int(rollout.response_mask[0].sum())
    assert "policy log-prob = " in out


def test_ranges():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    v = torch.tensor([[-0.5, 0.25, 100.0]])
    assert scales.symmetric_range(v, mask) == 0.5
    assert scales.symmetric_range(torch.zeros(1, 3), mask) == 1e-6
    assert scales.nice_ceiling(0.37) == 0.5
    assert scales.nice_ceiling(3.0) == 3.0
    assert scales.nice_ceiling(3.2) == 5.0
    assert scales.nice_ceiling(0.0) == 1.0
    assert scales.robust_range(v, mask, q=1.0) == 0.5


def test_beta_schedule_title_follows_the_mode():
    """Fixed beta is not called adaptive; the adaptive replay says it is an open loop."""
    adaptive = charts.beta_schedule([0.2, 0.21], target=0.1, observed=0.3)
    assert adaptive.layout.title.text.startswith("Adaptive beta, open loop")
    fixed = charts.beta_schedule([0.2] * 11, mode="fixed")
    assert fixed.layout.title.text.startswith("Fixed beta")
    assert "daptive" not in fixed.layout.title.text


def test_projector_fonts_let_the_axes_take_the_margin_they_need():
    """At 1.5x fonts a fixed margin no longer fits the labels: every axis gets automargin."""
    rollout = synthetic_rollout(tokens=("a", " b"))
    fig = heatmaps.heatmap(rollout.logprobs, rollout.response_mask, rollout=rollout,
                           title="t", quantity="q", signed=True)  # fmt: skip
    big = scales.projector_fonts(fig)
    assert big.layout.yaxis.automargin is True
    assert big.layout.xaxis.automargin is True
    assert big.layout.yaxis.tickfont.size == 18
    assert fig.layout.yaxis.automargin is None  # the original figure is untouched
