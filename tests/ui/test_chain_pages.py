"""AppTest of Home and the first four chain pages: no exception, and the widgets drive the numbers.

Everything runs on the committed presets (no model) except the live-sampling tests, which use the
tiny random model (ROLL_VIZ_MODEL=tiny, set in tests/conftest.py).
"""

import base64
import json
import math
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from roll_viz import ui
from tests.ui.apptest import (
    estimator_grids,
    open_page,
    page_alone,
    page_file,
    reward_bars,
    token_reward_grids,
)

PAGES = ("samples", "rewards", "kl", "advantages")  # keys of roll_viz.nav.PAGES


def shown(markdown: str) -> str:
    """What a reader sees of escaped Markdown (user text is backslash-escaped before display)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def chart(at: AppTest, key: str) -> dict:
    """The plotly figure JSON of the chart with ``key``."""
    for el in at.get("plotly_chart"):
        if el.proto.id.endswith(f"-{key}"):
            return json.loads(el.proto.spec)
    raise AssertionError(f"no chart with key {key!r}")


# AppTest leaves st.dataframe's element id empty: find tables by their columns instead.
TABLE_COLUMNS = {
    "samples_table": {"response", "finish_reason", "reward"},
    "rewards_table": {"raw_reward", "processed_reward"},
    "kl_tokens": {"token", "token_reward", "kl"},
}


def zgrid(trace: dict) -> list[list[float | None]]:
    """A heatmap's z from the figure JSON (plain lists or plotly's base64 typed array)."""
    z = trace["z"]
    if isinstance(z, dict):
        arr = np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"])
        arr = arr.reshape(
            z.get("shape", (len(arr),))
            if isinstance(z.get("shape"), list)
            else [int(n) for n in str(z["shape"]).split(",")]
        )
        return [[None if math.isnan(v) else float(v) for v in row] for row in arr.tolist()]
    return z


def frame(at: AppTest, key: str):
    """The first pandas DataFrame on the page with the columns of table ``key``."""
    for el in at.dataframe:
        if TABLE_COLUMNS[key] <= set(el.value.columns):
            return el.value
    raise AssertionError(f"no dataframe like {key!r}")


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


@pytest.mark.parametrize("page", [None, *PAGES])
@pytest.mark.parametrize("preset", ["quantum", "pirate"])
def test_page_runs_without_exception(page, preset):
    at = open_page(page, preset=preset)
    assert at.title, "every page has a title"
    assert not at.error


def page_links(at: AppTest) -> dict[str, str]:
    """URL path -> label of every ``st.page_link`` on the page."""
    return {link.proto.page: link.proto.label for link in at.get("page_link")}


def test_home_has_chain_presets_and_next_link():
    at = open_page()
    labels = [b.label for b in at.button]
    assert {"quantum", "arithmetic", "sentiment", "pirate", "Use the live model"} <= set(labels)
    links = page_links(at)
    assert any(label.startswith("Next: 1. Samples") for label in links.values())
    for target in ("Samples", "Rewards", "Token_KL", "Advantages", "Local_vs_Global"):
        assert target in links


def test_next_link_keeps_the_state():
    at = open_page("kl", preset="pirate", beta="0.3", G="2")
    assert list(page_links(at)) == ["Rewards", "Advantages"]  # Back and Next
    at.switch_page(page_file("advantages"))  # what the link does
    rerun(at)
    assert at.title[0].value.startswith("4. Advantages")
    assert at.selectbox(key=ui.KEY_PRESET).value == "pirate"
    assert at.slider(key=ui.KEY_BETA).value == pytest.approx(0.3)
    assert at.slider(key=ui.KEY_G).value == 2


def test_a_page_alone_links_with_the_state_in_the_url():
    at = page_alone("kl")
    at.query_params.update({"preset": "pirate", "beta": "0.3", "G": "2"})
    rerun(at)
    links = [h.proto.body for h in at.get("html") if h.proto.body.startswith("<a ")]
    assert len(links) == 2  # Back and Next
    assert 'href="Rewards?' in links[0]
    assert 'href="Advantages?' in links[1]
    for part in ("preset=pirate", "beta=0.3", "G=2"):
        assert all(part in link for link in links)


def test_home_preset_button_loads_the_preset_instantly():
    at = open_page()
    at.button(key="preset_btn_pirate").click()
    rerun(at)
    assert at.selectbox(key=ui.KEY_PRESET).value == "pirate"
    assert at.toggle(key=ui.KEY_LIVE).value is False
    assert at.metric[0].value == "2"  # pirate: 2 prompts


def test_preset_from_url_loads(tmp_path):
    at = open_page("samples", preset="sentiment")
    table = frame(at, "samples_table")
    assert len(table) == 8
    assert table["prompt_id"].nunique() == 2


def test_group_size_changes_the_shape():
    at = open_page("samples", preset="quantum")
    assert len(frame(at, "samples_table")) == 8
    at.slider(key=ui.KEY_G).set_value(2)
    rerun(at)
    assert len(frame(at, "samples_table")) == 2
    at.switch_page(page_file("advantages"))  # the shared controls keep G on the next page
    grids = estimator_grids(rerun(at))  # drawn in the browser: its inputs and configs
    assert len(next(iter(grids.values()))) == 2


def test_group_size_above_the_preset_is_capped_with_one_message():
    at = open_page("samples", preset="pirate", G="9")
    assert len(frame(at, "samples_table")) == 8  # pirate has G = 4: 2 prompts x 4
    messages = [shown(w.value) for w in at.warning]
    assert len(messages) == 1
    assert "G = 4" in messages[0]


def test_group_size_one_explains_the_dialect():
    at = open_page("advantages", preset="quantum", G="1")
    text = " ".join(shown(w.value) for w in at.warning)
    assert "G = 1" in text
    assert "NaN" in text  # ROLL: group std of one sample
    # grpo is undefined here: its heatmap (drawn in the browser) says so in its place
    grids = estimator_grids(at)
    assert "gae (sidebar)" in grids
    assert "grpo" not in grids


def test_beta_changes_the_token_rewards():
    at = open_page("kl", preset="pirate", klr="true")
    before = frame(at, "kl_tokens")["token_reward"].tolist()
    at.slider(key=ui.KEY_BETA).set_value(0.6)
    rerun(at)
    after = frame(at, "kl_tokens")["token_reward"].tolist()
    assert before != after
    # drawn in the browser from the placement configs: the server's numbers (the sidebar puts
    # the KL in the reward, so its token table is the "in the reward" placement)
    z = token_reward_grids(at)["in the reward"]
    assert any(v not in (None, 0) for row in z for v in row)
    drawn = [v for row in z for v in row if v is not None]
    assert len(drawn) == len(after)
    assert all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(drawn, after, strict=True))


def test_kl_estimator_switch_changes_the_heatmap():
    at = open_page("kl", preset="pirate")
    k1 = chart(at, "kl_heatmap")["data"][0]
    assert k1["zmid"] == 0
    assert any(v is not None and v < 0 for row in zgrid(k1) for v in row)
    at.segmented_control(key=ui.KEY_KL_VIEW).set_value("k3")
    rerun(at)
    k3 = chart(at, "kl_heatmap")["data"][0]
    assert zgrid(k3) != zgrid(k1)
    assert all(v is None or v >= 0 for row in zgrid(k3) for v in row)
    assert k3["zmin"] == 0


def test_adaptive_beta_plot():
    at = open_page("kl", preset="pirate")
    at.radio(key=ui.KEY_BETA_MODE).set_value("adaptive")
    rerun(at)
    ys = chart(at, "beta_plot")["data"][0]["y"]
    assert len(ys) == 301
    assert ys[-1] > ys[0]  # the pirate's KL is far above the 0.1 target


def test_estimator_switch_changes_the_advantages():
    at = open_page("advantages", preset="sentiment")
    grids = estimator_grids(at)
    assert next(iter(grids)) == "gae (sidebar)"
    at.selectbox(key=ui.KEY_ESTIMATOR).select("grpo")
    rerun(at)
    grids2 = estimator_grids(at)
    assert next(iter(grids2)) == "grpo (sidebar)"
    assert grids2["grpo (sidebar)"] != grids["gae (sidebar)"]


def test_gamma_and_critic_change_gae():
    at = open_page("advantages", preset="sentiment")
    z0 = next(iter(estimator_grids(at).values()))
    at.slider(key=ui.KEY_GAMMA).set_value(0.5)
    rerun(at)
    z1 = next(iter(estimator_grids(at).values()))
    assert z1 != z0
    at.radio(key=ui.KEY_CRITIC).set_value("probe")
    rerun(at)
    z2 = next(iter(estimator_grids(at).values()))
    assert z2 != z1
    assert any("cross-fitted ridge probe" in c.value for c in at.caption)


def test_selected_token_formula_has_its_numbers():
    at = open_page("advantages", preset="quantum", est="grpo")
    latex = [item.value for item in at.latex]
    assert any(r"\tilde r = \dfrac{" in v for v in latex)
    at.selectbox(key=ui.KEY_SAMPLE).set_value(3)
    at.slider(key=ui.KEY_POSITION).set_value(2)
    rerun(at)
    assert any("t = 2" in m.value for m in at.markdown)
    assert latex != [item.value for item in at.latex]


def test_reward_normalization_modes():
    at = open_page("rewards", preset="sentiment")
    group = frame(at, "rewards_table")["processed_reward"].tolist()
    at.segmented_control(key=ui.KEY_NORM).set_value("none")
    rerun(at)
    raw = frame(at, "rewards_table")
    assert raw["processed_reward"].tolist() == raw["raw_reward"].tolist()
    at.segmented_control(key=ui.KEY_NORM).set_value("batch")
    rerun(at)
    table = frame(at, "rewards_table")
    batch = table["processed_reward"].tolist()
    assert batch != group
    raw, processed, _frac = reward_bars(at)  # drawn in the browser from the sidebar's config
    assert processed == pytest.approx(batch, abs=1e-12)
    assert raw == pytest.approx(table["raw_reward"].tolist(), abs=1e-12)


def test_reward_clip_changes_the_clip_fraction():
    at = open_page("rewards", preset="sentiment")
    assert reward_bars(at)[2] == 0.0
    at.number_input(key=ui.KEY_CLIP).set_value(0.5)
    rerun(at)
    raw, processed, frac = reward_bars(at)
    table = frame(at, "rewards_table")["processed_reward"].tolist()
    assert processed == pytest.approx(table, abs=1e-12)
    assert frac > 0  # no normalisation (ROLL's default): the clip changes the raw beyond 0.5
    assert frac == pytest.approx(sum(abs(r) > 0.5 for r in raw) / len(raw))
    assert max(abs(v) for v in table) <= 0.5 + 1e-9


def test_reward_running_mode_drawn_in_the_browser():
    """ROLL's running normalisation: the bars get the session's moments, not the server's."""
    at = open_page("rewards", preset="sentiment")
    at.selectbox(key=ui.KEY_ESTIMATOR).set_value("reinforce")
    at.segmented_control(key=ui.KEY_NORM).set_value("running")
    rerun(at)
    data = next(
        json.loads(el.proto.json)
        for el in at.get("bidi_component")
        if el.proto.component_name == "roll_viz.instant_reward_bars"
    )
    assert data["server"] is None
    assert data["detail"]["config_covered"]
    _raw, processed, _frac = reward_bars(at)
    table = frame(at, "rewards_table")["processed_reward"].tolist()
    assert processed == pytest.approx(table, abs=1e-12)


def test_framework_switch_loads_its_defaults():
    at = open_page("advantages", preset="quantum")
    at.selectbox(key=ui.KEY_FRAMEWORK).select("verl")
    rerun(at)
    assert at.slider(key=ui.KEY_BETA).value == pytest.approx(0.001)
    assert at.slider(key=ui.KEY_LAM).value == pytest.approx(1.0)
    assert "reinforce_plus_plus" in estimator_grids(at)


def test_downloads_on_every_stage_page():
    for page in PAGES:
        at = open_page(page, preset="quantum")
        if page == "advantages":  # the every-token table (and its CSV) is built on request
            at.toggle(key="show_token_table").set_value(True).run()
        labels = [b.proto.label for b in at.get("download_button")]
        assert any(label.endswith(".csv") for label in labels), page
        assert "Download the whole trace (trace.json)" in labels, page


def test_presentation_mode_hides_controls():
    at = open_page("samples", preset="quantum", present="true", hide="beta,G")
    css = " ".join(h.proto.body for h in at.get("html"))
    assert ".st-key-beta" in css
    assert ".st-key-G" in css
    assert "font-size: 21px" in css  # presentation CSS


def test_live_model_samples_with_progress():
    at = open_page("samples", preset="quantum", live="true", G="2", T="8")
    table = frame(at, "samples_table")
    assert len(table) == 2
    assert (table["tokens"] <= 8).all()


def sample_button(at: AppTest):
    """The live form's "Sample" button (applies the edited prompts, T, seed ... at once)."""
    return next(b for b in at.sidebar.button if b.label == "Sample")


def test_live_empty_prompts_keep_the_preset():
    at = open_page("samples", preset="quantum", live="true", G="2", T="8")
    at.text_area(key=ui.KEY_PROMPTS).input("   \n  ")
    sample_button(at).click()  # live edits apply together with "Sample"
    rerun(at)
    assert any("No prompt to sample" in shown(w.value) for w in at.warning)
    assert len(frame(at, "samples_table")) == 2


def test_running_statistics_accumulate_over_batches():
    at = open_page("rewards", preset="quantum", G="2", norm="running")
    assert any(m.label == "batches in the running stats" and m.value == "1" for m in at.metric)
    first = frame(at, "rewards_table")["processed_reward"].tolist()
    at.button(key="running_add").click()
    rerun(at)  # samples the next seed with the (tiny) live model
    assert any(m.label == "batches in the running stats" and m.value == "2" for m in at.metric)
    assert frame(at, "rewards_table")["processed_reward"].tolist() != first
    at.button(key="running_reset").click()
    rerun(at)
    assert any(m.label == "batches in the running stats" and m.value == "1" for m in at.metric)


def test_home_live_button_switches_the_source():
    at = open_page(None, preset="quantum", G="2", T="8")
    at.button(key="go_live").click()
    rerun(at)
    assert at.toggle(key=ui.KEY_LIVE).value is True
    assert any("Live model on" in s.value for s in at.success)
    assert at.metric[1].value == "2"


def test_hide_list_cannot_inject_css():
    at = open_page("samples", preset="quantum", hide="beta,x{}body{display:none}")
    css = " ".join(h.proto.body for h in at.get("html"))
    assert ".st-key-beta" in css
    assert "body{display:none}" not in css


def test_identical_policy_says_kl_is_zero_and_offers_the_pirate_preset():
    at = open_page("kl", preset="quantum")
    assert any("exactly 0" in box.value for box in at.info)
    at.button(key="kl_pirate").click()
    rerun(at)
    assert at.selectbox(key=ui.KEY_PRESET).value == "pirate"
    assert not any("exactly 0" in box.value for box in at.info)
    k1 = chart(at, "kl_heatmap")["data"][0]
    assert any(v not in (None, 0.0) for row in zgrid(k1) for v in row)


def test_preset_reward_is_the_presets_weighted_sum():
    from roll_viz.data.presets import load_preset
    from roll_viz.rewards import score_rollout

    _sampling, spec, rollout = load_preset("quantum")
    assert len(spec.terms) == 2  # one_sentence + target_length
    at = open_page("samples", preset="quantum")
    assert at.selectbox(key=ui.KEY_REWARD).value == ui.PRESET_REWARD
    shown = frame(at, "samples_table")["reward"].tolist()
    assert shown == pytest.approx(score_rollout(rollout, spec).tolist())
    at.selectbox(key=ui.KEY_REWARD).select("one_sentence")
    rerun(at)
    single = frame(at, "samples_table")["reward"].tolist()
    assert set(single) <= {0.0, 1.0}
    assert single != shown


def test_live_mode_offers_an_allow_list_of_models():
    at = open_page("samples", preset="quantum")
    assert not [s for s in at.selectbox if s.key == ui.KEY_MODEL]  # presets need no model
    at = open_page("samples", preset="quantum", live="true", G="2", T="8")
    picker = at.selectbox(key=ui.KEY_MODEL)
    assert picker.value == "tiny"  # the server's ROLL_VIZ_MODEL comes first
    assert set(picker.options) == {"tiny", "smollm2"}
    # A spec that is not on the list, even in a shared URL, is dropped and never loaded.
    at = open_page("samples", preset="quantum", live="true", G="2", T="8", model="/etc/passwd")
    assert at.selectbox(key=ui.KEY_MODEL).value == "tiny"


def test_critic_values_are_drawn_only_on_request():
    at = open_page("advantages", preset="quantum", critic="probe")
    keys = [
        json.loads(c.proto.spec)["layout"].get("title", {}).get("text")
        for c in at.get("plotly_chart")
    ]
    assert not any(k and "Critic values" in k for k in keys)
    at.toggle(key="show_values").set_value(True)
    rerun(at)
    values = chart(at, "values_heatmap")["data"][0]
    assert values["zmid"] == 0
    assert any(v not in (None, 0.0) for row in zgrid(values) for v in row)  # the probe is not 0


def test_fast_sampling_toggle_draws_int8_answers_and_says_so():
    at = open_page("samples", preset="quantum", live="true", G="2", T="8", fast="true")
    assert at.toggle(key=ui.KEY_FAST).value is True
    assert any("int8 copy" in i.value for i in at.info)
    assert len(frame(at, "samples_table")) == 2
    at.toggle(key=ui.KEY_FAST).set_value(False)
    rerun(at)
    assert not any("int8 copy" in i.value for i in at.info)
    assert len(frame(at, "samples_table")) == 2


def test_reward_bars_a_config_the_browser_lacks_come_from_the_server():
    """verl's optimal_token_baseline (live: the sampler's sum pi^2): not in pipeline.js, so the
    bars are the server's trace and a knob move reruns the page (config_covered false)."""
    at = open_page("rewards", live="true", G="2", T="8", fw="verl", est="optimal_token_baseline")
    data = next(
        json.loads(el.proto.json)
        for el in at.get("bidi_component")
        if el.proto.component_name == "roll_viz.instant_reward_bars"
    )
    assert data["detail"]["config"]["adv_estimator"] == "optimal_token_baseline"
    assert not data["detail"]["config_covered"]
    raw, processed, frac = reward_bars(at)
    table = frame(at, "rewards_table")
    assert processed == pytest.approx(table["processed_reward"].tolist(), abs=1e-12)
    assert raw == pytest.approx(table["raw_reward"].tolist(), abs=1e-12)
    assert frac == 0.0  # verl has no reward clip
