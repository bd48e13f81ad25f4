"""AppTest of Local vs global, Sensitivity, Frameworks and Self-test, each page script alone.

No exception, and the key widgets drive the numbers shown. Opening the script alone (no router)
also checks that every page draws the shared sidebar itself.
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.ui.apptest import page_alone

PAGES = ("local_global", "sensitivity", "frameworks", "self_test")  # keys of roll_viz.nav.PAGES
CHARTS = {
    "local_global": {"lg_hand_scatter", "lg_hand_std", "lg_batch_scatter", "lg_batch_std"},
    "sensitivity": {"sw_lines"},
    "frameworks": {"fw_heatmap", "fw_diff"},
    "self_test": set(),
}


def _app(page: str) -> AppTest:
    return page_alone(page)


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _charts(at: AppTest) -> dict[str, dict]:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def _array(value) -> np.ndarray:
    """A plotly data array from the figure JSON (plain list or base64 'bdata')."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        return arr.reshape(value["shape"]) if "shape" in value else arr
    return np.asarray(value, dtype=float)


def _table(at: AppTest, column: str, index: int = 0):
    """The index-th st.dataframe showing ``column`` (st.dataframe keys are not in AppTest)."""
    tables = [d.value for d in at.dataframe if column in d.value.columns]
    return tables[index]


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Load the committed preset once (cache_data persists across AppTests in one process)."""
    _ok(_app("self_test").run())


@pytest.mark.parametrize("page", list(PAGES))
def test_page_runs_and_draws_its_charts(page):
    at = _ok(_app(page).run())
    assert CHARTS[page] <= set(_charts(at))
    assert any(b.key for b in at.get("download_button"))


def test_editing_the_reward_table_changes_the_scatter():
    before = _charts(_ok(_app("local_global").run()))["lg_hand_scatter"]
    at = _app("local_global")
    at.session_state["lg_table"] = {
        "edited_rows": {4: {"reward": 9.0}},
        "added_rows": [{"prompt": "new prompt", "reward": 3.0}],
        "deleted_rows": [],
    }
    after = _charts(_ok(at.run()))["lg_hand_scatter"]
    names = [d["name"] for d in after["data"]]
    assert names == ["local = global", "quantum", "capital of France", "new prompt"]
    y_before = _array(before["data"][2]["y"])
    y_after = _array(after["data"][2]["y"])
    assert not np.allclose(y_before, y_after)
    # the new prompt has one sample: undefined local advantage plus a per-dialect explanation
    assert np.isnan(_array(after["data"][3]["y"])).all()
    assert any("only one sample" in i.value for i in at.info)


def test_a_bad_cell_gives_a_clear_error_and_no_exception():
    at = _app("local_global")
    at.session_state["lg_table"] = {
        "edited_rows": {1: {"reward": None}},
        "added_rows": [],
        "deleted_rows": [],
    }
    _ok(at.run())
    assert any("row 2: the reward is empty" in re.sub(r"\\(.)", r"\1", e.value) for e in at.error)
    assert "lg_hand_scatter" not in _charts(at)
    assert "lg_batch_scatter" in _charts(at)  # the batch section still works


def test_seed_example_numbers_in_the_hand_table():
    at = _ok(_app("local_global").run())
    df = _table(at, "local advantage")
    assert df["local advantage"].iloc[:3].tolist() == pytest.approx(
        [0.201965964, -1.085567055, 0.883601091], abs=1e-8
    )


def test_sweep_parameter_choice_changes_the_plot():
    at = _ok(_app("sensitivity").run())
    lam = _charts(at)["sw_lines"]
    assert "lambda" in lam["layout"]["title"]["text"]
    at.selectbox(key="sw").select("beta").run()
    beta = _charts(_ok(at))["sw_lines"]
    assert "beta" in beta["layout"]["title"]["text"]
    assert not np.allclose(_array(lam["data"][0]["x"]), _array(beta["data"][0]["x"]))
    table = _table(at, "spread")
    assert "beta" in table.columns
    assert table["spread"].nunique() == 1  # the default preset has policy = reference: KL = 0
    assert any("policy = reference" in i.value for i in at.info)
    at.selectbox(key="sw2").select("G").run()
    charts = _charts(_ok(at))
    assert "sw_heatmap" in charts
    assert charts["sw_heatmap"]["data"][0]["type"] == "heatmap"
    at.radio(key="sw_metric").set_value("agreement").run()
    heat = _charts(_ok(at))["sw_heatmap"]["data"][0]
    assert heat["zmid"] == 0.0


def test_beta_sweep_moves_advantages_on_a_steered_batch():
    at = _ok(_app("sensitivity").run())
    at.selectbox(key="preset").select("pirate").run()
    at.selectbox(key="sw").select("beta").run()
    _ok(at)
    table = _table(at, "spread")
    assert table["spread"].nunique() > 1  # KL forced into the reward for the sweep
    assert any("turns 'add_token_level_kl' on" in i.value for i in at.info)


def test_sweep_over_g_under_grpo_in_verl():
    at = _app("sensitivity")
    at.query_params["fw"] = "verl"
    at.query_params["est"] = "grpo"
    at.query_params["sw"] = "G"
    _ok(at.run())
    table = _table(at, "spread")
    assert table["G"].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    assert table.loc[table["G"] == 8.0, "sign_flips"].item() == 0.0


def test_dialect_selection_changes_the_table():
    at = _ok(_app("frameworks").run())
    grpo = _table(at, "score")
    at.selectbox(key="fw_est").select("rloo").run()
    _ok(at)
    rloo = _table(at, "score")
    assert "advantage roll" in grpo.columns
    assert "advantage roll" not in rloo.columns
    assert {"advantage verl", "advantage openrlhf"} <= set(rloo.columns)
    heat = _charts(at)["fw_heatmap"]["data"][0]
    assert heat["x"] == ["verl", "openrlhf"]
    assert any("roll has no rloo" in i.value for i in at.info)
    at.selectbox(key="fw_ref").select("openrlhf").run()
    summary = _table(_ok(at), "dialect").set_index("dialect")
    assert summary.loc["openrlhf", "max |diff| advantage"] == 0.0


@pytest.mark.parametrize("preset", ["quantum", "arithmetic", "sentiment", "pirate"])
def test_all_self_test_checks_pass_on_the_presets(preset):
    at = _ok(_app("self_test").run())
    at.selectbox(key="preset").select(preset).run()
    _ok(at)
    assert f"preset {preset}" in at.metric[2].value
    passed = at.metric[0].value
    n, total = (int(x) for x in passed.split(" / "))
    assert n == total
    assert not at.error
    table = _table(at, "check")
    assert set(table["result"]) == {"pass"}


def test_reset_button_restores_the_seed_example():
    at = _app("local_global")
    at.session_state["lg_table"] = {
        "edited_rows": {4: {"reward": 9.0}},
        "added_rows": [],
        "deleted_rows": [],
    }
    edited = _array(_charts(_ok(at.run()))["lg_hand_scatter"]["data"][2]["y"])
    at.button(key="lg_reset").click().run()
    reset = _array(_charts(_ok(at))["lg_hand_scatter"]["data"][2]["y"])
    assert not np.allclose(edited, reset)
    assert reset.tolist() == pytest.approx([0.0, 0.1 / (0.1 + 1e-6), -0.1 / (0.1 + 1e-6)])
