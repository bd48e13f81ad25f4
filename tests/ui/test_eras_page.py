"""AppTest of the Eras page: the recipes of record, MaxRL and the KL view on the current batch."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from roll_viz.analysis import era_diff
from roll_viz.core.pipeline.eras import ERAS
from tests.ui.apptest import page_alone


def _open() -> AppTest:
    at = page_alone("eras")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _charts(at: AppTest) -> dict[str, dict]:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def test_page_draws_eras_maxrl_and_kl_view():
    at = _open()
    charts = _charts(at)
    assert {"eras_bars", "eras_maxrl", "eras_kl_tokens", "eras_kl_summary"} <= set(charts)
    names = [d["name"] for d in charts["eras_bars"]["data"][:5]]
    assert names == [e.label for e in ERAS.values()]
    assert names[-1] == "ScaleRL / Olmo 3"  # what "defaults of 2026" names now
    assert any("roll-viz estimator" in i.value for i in at.info)
    eras = next(d.value for d in at.dataframe if "era" in d.value.columns)
    assert eras["era"].tolist() == names
    assert any("minority choice" in c.value for c in at.caption)
    assert any(b.key == "eras_csv" for b in at.get("download_button"))


def test_framework_and_estimator_controls_drive_the_figures():
    at = _open()
    at.session_state["eras_framework"] = "verl"
    at.session_state["eras_kl_variant"] = "k3+"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    summary = next(d.value for d in at.dataframe if "estimator" in d.value.columns)
    estimators = dict(zip(summary["era"], summary["estimator"], strict=True))
    assert estimators["ScaleRL / Olmo 3"] == "adv_estimator: reinforce_plus_plus_baseline"
    assert estimators["Tinker"] == "adv_estimator: grpo"
    assert any("cannot divide" in c.value for c in at.caption)
    title = _charts(at)["eras_kl_tokens"]["layout"]["title"]["text"]
    assert title.startswith("k3+")


def test_in_reward_section_follows_the_sidebar_framework():
    at = _open()
    charts = _charts(at)
    assert "eras_kl_through" in charts
    assert charts["eras_kl_through"]["layout"]["title"]["text"].startswith("ROLL")


def test_pirate_preset_gives_a_kl_term_in_2024():
    at = _open()
    assert any("exactly 0" in i.value for i in at.info)
    at.button(key="eras_pirate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    summary = next(d.value for d in at.dataframe if "KL term" in d.value.columns)
    assert summary["KL term"].tolist()[0] > 0
    assert summary["KL term"].tolist()[1] == 0
    kl = next(d.value for d in at.dataframe if "mean value" in d.value.columns)
    assert (kl["mean |grad| as a loss"] > 0).all()


def test_an_empty_a_right_is_explained():
    at = _open()  # the default batch's reward is not 0/1: no answer scores exactly 1
    groups = next(d.value for d in at.dataframe if "A right, MaxRL" in d.value.columns)
    assert groups["A right, MaxRL"].isna().all()
    assert era_diff.NO_RIGHT_ANSWER in [c.value for c in at.caption]


def test_the_picker_narrows_the_recipes_and_an_empty_pick_keeps_the_page():
    at = _open()
    at.session_state["eras_pick"] = ["tinker", "scalerl_olmo3"]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    eras = next(d.value for d in at.dataframe if "era" in d.value.columns)
    assert eras["era"].tolist() == ["Tinker", "ScaleRL / Olmo 3"]
    assert any(c.value.startswith("Of these 2 recipes") for c in at.caption)
    at.session_state["eras_pick"] = []
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Pick at least one recipe" in i.value for i in at.info)
    assert "eras_bars" not in _charts(at)
    assert "eras_maxrl" in _charts(at)  # the later sections still draw
