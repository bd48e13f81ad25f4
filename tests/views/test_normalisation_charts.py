"""Figures and banner of the normalisation matrix, phantom advantages and group health."""

import torch

from roll_viz.analysis import group_health as gh
from roll_viz.analysis import normalisation as nm
from roll_viz.views import normalisation_charts as charts
from tests.views.test_era_charts import assert_legend_clear_of_title

F = torch.float64


def test_matrix_figure_has_nine_cells_with_method_titles():
    scores = torch.tensor([8.2, 6.5, 9.1, 1.0, 1.0, 0.0], dtype=F)
    m = nm.normalisation_matrix(scores, torch.tensor([0, 0, 0, 1, 1, 1]), ["q", "r"])
    fig = charts.matrix_figure(m)
    titles = [a.text for a in fig.layout.annotations]
    assert len(titles) == 9
    assert any("GRPO" in t for t in titles)
    assert any("Dr. GRPO" in t for t in titles)
    assert len(fig.data) == 9 * 2  # one trace per prompt per cell
    grpo = [tr for tr in fig.data if tr.xaxis == "x5"]  # row 2, col 2: mean group / std group
    ys = sorted(float(v) for tr in grpo for v in tr.y)
    expected = sorted(m.cells[("group", "group")].tolist())
    assert ys == expected


def test_phantom_figure_bars():
    p = nm.phantom_advantages()
    fig = charts.phantom_figure(p)
    assert [tr.name for tr in fig.data] == ["group std (GRPO)", "no std (Dr. GRPO)",
                                           "batch std (LitePPO)"]  # fmt: skip
    assert list(fig.data[0].y) == p.table["A, group std (GRPO)"].tolist()
    assert_legend_clear_of_title(fig)


def test_health_banner_text():
    scores = torch.tensor([1, 1, 0, 0, 1, 0, 0.0, 1e-6], dtype=F)
    h = gh.group_health(scores, torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    text = charts.health_banner_text(h)
    assert text.startswith("**4 groups**: 1 all-good, 1 all-bad, 2 mixed.")
    assert "2 of 4 (50%) give GRPO no signal" in text
    assert "1 mixed group has a std <= 0.0001" in text
    comps = {"format": torch.tensor([1, 0, 0, 0, 1, 0, 1, 0.0])}
    h = gh.group_health(scores, torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]), components=comps)
    assert list(charts.health_table(h).columns) == ["prompt", "n", "status", "mean", "std",
                                                    "std format"]  # fmt: skip


def test_policies_figure():
    out = gh.zero_variance_policies(gh.demo_batch())
    fig = charts.policies_figure(out)
    assert len(fig.data) == 3
    assert list(fig.data[0].x) == out.table["policy"].tolist()
    kl = list(fig.data[1].y)
    assert kl[0] > 0  # keep: the KL gradient still flows on the zero-variance groups
    assert kl[2] == 0.0
    assert_legend_clear_of_title(fig)
