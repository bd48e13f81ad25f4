"""AppTest of the Update page (pages/update.py) on the tiny live model (ROLL_VIZ_MODEL=tiny)."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from roll_viz.ui import update_page as upd
from roll_viz.views import update_charts, update_text
from tests.ui import apptest

LIVE = {"preset": "quantum", "live": "true", "G": "2", "T": "8"}


@pytest.fixture(autouse=True)
def _reset_adapter_after():
    """AppTests share one session id: leave the session's adapter at step 0 for the next test."""
    yield
    at = apptest.open_page("update", **LIVE)
    at.button(key=upd.KEY_RESET).click().run()


def open_page(**params: str) -> AppTest:
    at = apptest.open_page("update", **params)
    assert not at.error, [e.value for e in at.error]  # page_guard turns errors into st.error
    return at


def charts(at: AppTest) -> dict[str, dict]:
    """Plotly figure JSON of every chart on the page, by key."""
    out = {}
    for el in at.get("plotly_chart"):
        key = el.proto.id.rsplit("-", 1)[-1]
        out[key] = json.loads(el.proto.spec)
    return out


def click_step(at: AppTest) -> AppTest:
    at.button(key=upd.KEY_STEP).click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def test_preset_batch_of_another_model_asks_for_the_live_model():
    at = open_page(preset="quantum")
    assert any("a step needs the model that wrote the tokens" in i.value for i in at.info)
    assert at.button(key="upd_go_live") is not None
    assert not [b for b in at.button if b.key == upd.KEY_STEP]
    assert not charts(at)


def test_step_draws_every_view_and_accumulates():
    at = open_page(**LIVE)
    assert not charts(at)  # nothing before the button
    assert any("No step taken" in c.value for c in at.caption)
    at.select_slider(key=upd.KEY_LR).set_value(3e-3)
    at.number_input(key=upd.KEY_EPOCHS).set_value(2)
    click_step(at)
    figs = charts(at)
    assert {
        "upd_delta_heatmap",
        "upd_delta_scatter",
        "upd_grad_heatmap",
        "upd_loss_terms",
        "upd_ratio",
        "upd_aggregation",
        "upd_seconds",
    } <= set(figs)
    assert figs["upd_delta_heatmap"]["data"][0]["z"]  # the delta grid (numbers or typed array)
    rows = figs["upd_delta_scatter"]["data"]
    assert 1 <= len(rows) <= 3  # moved with / against its advantage / A = 0
    assert all(r["mode"] == "markers" for r in rows)
    assert all(r["name"].startswith("moved") or r["name"].startswith("A = 0") for r in rows)
    assert len(figs["upd_aggregation"]["data"]) == 3
    names = {t.get("name") for t in figs["upd_loss_terms"]["data"]}
    assert names == {"epoch 1", "epoch 2"}
    ratio = figs["upd_ratio"]["data"]
    # epoch 1: the ratios are all 1, one labelled bar; epoch 2 moved them: a histogram
    assert ratio[0]["type"] == "bar"
    assert ratio[0]["name"].startswith("epoch 1: all ")
    assert [t["type"] for t in ratio[:2]] == ["bar", "histogram"]
    assert figs["upd_ratio"]["layout"]["yaxis2"]["range"] == [0, 1]  # clip fraction: 0-100 %
    assert "title" not in figs["upd_ratio"]["layout"] or not figs["upd_ratio"]["layout"][
        "title"
    ].get("text")  # only the two panel titles: nothing to overlap
    assert any("Step 1 of this session's adapter" in m.value for m in at.markdown)
    assert any("lr 0.003, K = 2" in m.value for m in at.markdown)
    assert len(at.latex) >= 3
    assert any(t.value.startswith("Selected token: ") for t in at.text)
    click_step(at)  # steps accumulate in the session's adapter
    assert any("Step 2 of this session's adapter" in m.value for m in at.markdown)
    at.button(key=upd.KEY_RESET).click().run()
    assert not at.exception
    assert not charts(at)


def test_aggregation_weights_by_hand():
    """L = (3, 1, 0), B = 3, T = 4: the answer weights of the three modes, computed by hand."""
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float32)
    w = update_charts.aggregation_weights(mask)
    np.testing.assert_allclose(w["seq-mean-token-mean"], [0.5, 0.5, 0.0])  # 1/n, n = 2 answers
    np.testing.assert_allclose(w["token-mean"], [0.75, 0.25, 0.0])  # L_i / 4 tokens
    np.testing.assert_allclose(w["Dr.GRPO constant"], [3 / 12, 1 / 12, 0.0])  # L_i / (B * T)


def test_update_figures_escape_model_text():
    """Token text reaches the hovers HTML-escaped; padding is blank in the delta heatmap."""
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    rollout = SimpleNamespace(
        tokens=(("<b>x</b>", "&"), ("<script>",)),
        response_mask=mask,
        group_ids=torch.tensor([0, 0]),
    )
    result = SimpleNamespace(
        response_mask=mask,
        delta=torch.tensor([[0.1, -0.2], [0.3, 0.0]]),
        advantages=torch.tensor([[1.0, 1.0], [-1.0, 0.0]]),
        logprobs_before=torch.zeros(2, 2),
        logprobs_after=torch.zeros(2, 2),
        grad_coef=torch.zeros(2, 2),
    )
    heat_fig = update_charts.delta_heatmap(result, rollout)
    heat = heat_fig.to_plotly_json()
    hover = str(heat["data"][0]["customdata"].tolist())
    assert "&lt;b&gt;x&lt;/b&gt;" in hover
    assert "&lt;script&gt;" in hover
    assert "<script>" not in hover
    z = np.asarray(heat_fig.data[0].z, dtype=float)
    assert np.isnan(z[1][1])
    assert z[0][1] == pytest.approx(-0.2)
    scatter = update_charts.delta_scatter(result, rollout).to_plotly_json()
    # p0/s0: A = 1, delta 0.1 (with) and -0.2 (against); p0/s1: A = -1, delta 0.3 (against)
    assert [t["name"] for t in scatter["data"]] == [
        "moved with its advantage: 33%",
        "moved against its advantage: 67%",
    ]
    assert "&lt;script&gt;" in str(scatter["data"][1]["customdata"])
    assert list(scatter["data"][0]["y"]) == pytest.approx([0.1])
    assert list(scatter["data"][1]["y"]) == pytest.approx([-0.2, 0.3])


def test_the_updated_policy_drives_the_other_pages():
    # After a step, "updated" appears under Policy in the sidebar; choosing it makes Token KL
    # compare the updated policy with the reference: the KL the update produced is not 0.
    at = open_page(**LIVE)
    at.select_slider(key=upd.KEY_LR).set_value(3e-3)
    click_step(at)
    at.button(key="upd_use_policy").click().run()
    assert not at.exception, [e.message for e in at.exception]
    radio = at.sidebar.radio(key="policy_view")
    assert radio.value == "updated"
    assert "updated" in radio.options[1]
    at.switch_page(apptest.page_file("kl")).run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert not any("Policy = reference in this batch" in i.value for i in at.info)
    from roll_viz import ui

    kl_charts = [el for el in at.get("plotly_chart") if "kl" in el.proto.id]
    assert kl_charts
    assert ui.state.KEY_RUN_SOURCE not in at.session_state


def _epoch(epoch: int, policy: float, ratio: torch.Tensor, clip: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(
        epoch=epoch,
        terms={"policy": policy, "kl": 0.0, "total": policy},
        ratio=ratio,
        clip_fractions={"clipfrac": clip},
    )


def test_epoch_one_policy_loss_is_zero_to_rounding_but_not_its_gradient():
    """The issue's numbers: policy loss -3.5e-8 at epoch 1, ratios 0.999996..1.000002."""
    mask = torch.ones(2, 3)
    ratio = torch.tensor([[0.999996, 1.0, 1.000002], [1.0, 1.000001, 0.999999]])
    first = _epoch(1, -3.5e-8, ratio)
    loss = update_charts.loss_terms_bars([first]).to_plotly_json()
    bars = loss["data"][0]
    assert list(bars["y"]) == [0.0, 0.0, 0.0]  # kl, policy, total: noise drawn as 0
    assert "0 (to rounding)" in list(bars["text"])
    assert list(loss["layout"]["yaxis"]["range"]) == [-1, 1]  # not an axis of -35n..0
    fig = update_charts.ratio_figure([first], mask).to_plotly_json()
    one = fig["data"][0]
    assert one["type"] == "bar"
    assert list(one["x"]) == [1.0]
    assert list(one["y"]) == [6]
    assert one["text"] == ["all 6 ratios = 1"]
    assert list(fig["layout"]["yaxis2"]["range"]) == [0, 1]
    result = SimpleNamespace(
        epochs=[first], grad_norm=0.734, config=SimpleNamespace(max_grad_norm=1.0)
    )
    statement = update_text.epoch1_statement(result)
    assert "policy loss = 0 (to rounding: -3.5e-08); the gradient is not" in statement
    assert "gradient norm is **0.734**" in statement
    moved = SimpleNamespace(epochs=[_epoch(1, 0.02, ratio)], grad_norm=0.7, config=result.config)
    assert update_text.epoch1_statement(moved) == ""  # a real loss value: nothing to explain


def test_gradient_formula_uses_the_heatmap_sign():
    """The formula shows -dL/dlog pi, the quantity the gradient heatmap colours."""
    mask = torch.ones(1, 2)
    result = SimpleNamespace(
        response_mask=mask,
        old_logprobs=torch.zeros(1, 2),
        logprobs_before=torch.zeros(1, 2),
        logprobs_after=torch.tensor([[0.1, -0.1]]),
        delta=torch.tensor([[0.1, -0.1]]),
        advantages=torch.tensor([[1.0, 1.0]]),
        per_token={},
        grad_coef=torch.tensor([[-0.25, -0.25]]),
    )
    lines = update_text.token_formula(result, 0, 0)
    assert any(line.startswith(r"-\frac{\partial L}") and "0.25" in line for line in lines)
    assert not any("-0.25" in line for line in lines)
    rollout = SimpleNamespace(tokens=(("a", "b"),), response_mask=mask, group_ids=torch.zeros(1))
    heat = update_charts.grad_coef_heatmap(result, rollout)
    assert np.asarray(heat.data[0].z, dtype=float)[0, 0] == pytest.approx(0.25)
    a_html, delta_html = update_text.answer_chips(result, rollout, 0, 0)
    assert "A = 1.0000" in a_html
    assert "delta log pi = 0.1000" in delta_html


def test_ratio_histogram_keeps_the_clip_band_readable_when_one_ratio_is_huge():
    """One ratio of 26 (a steered batch) stretched the axis to 0..26: the 0.8-1.2 band vanished."""
    mask = torch.ones(2, 3)
    ratio = torch.tensor([[0.9, 1.0, 1.1], [1.05, 0.95, 26.0]])
    fig = update_charts.ratio_figure([_epoch(2, 0.01, ratio)], mask).to_plotly_json()
    hist = fig["data"][0]
    assert max(hist["x"]) == update_charts.RATIO_AXIS_MAX  # drawn in the last bin
    assert "1 above 2, max 26" in hist["name"]
    assert fig["layout"]["xaxis"]["range"][1] < 3
