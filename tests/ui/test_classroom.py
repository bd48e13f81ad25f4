"""Classroom-proofing: nothing a student types or links can stall the server or show a traceback.

AppTest on the committed presets (no model) and, for custom prompts, the tiny live model.
"""

from __future__ import annotations

import re
import time

import pandas as pd
import pytest

from roll_viz import ui
from roll_viz.analysis import reward_table
from roll_viz.ui import guard, sidebar
from tests.ui.apptest import open_page, router
from tests.ui.test_chain_pages import rerun

CHARTS = "plotly_chart"


def shown(markdown: str) -> str:
    """What a reader sees of escaped Markdown."""
    return re.sub(r"\\(.)", r"\1", markdown)


def sidebar_errors(at) -> list[str]:
    return [shown(e.value) for e in at.sidebar.error]


def notices(at) -> str:
    return " ".join(shown(w.value) for w in at.warning)


# --- no input can block the process -------------------------------------------------------------
def test_the_url_that_froze_the_server_now_finishes():
    start = time.perf_counter()
    at = open_page(
        "rewards", preset="quantum", reward="keyword", rp_regex="true", rp_pattern=".*.*.*.*.*#"
    )
    assert time.perf_counter() - start < 60  # it used to never return
    assert not at.exception
    assert len(at.get(CHARTS)) >= 1


@pytest.mark.parametrize(
    ("params", "field_message"),
    [
        ({"reward": "keyword", "rp_regex": "true", "rp_pattern": "(pirate"}, "missing )"),
        ({"reward": "keyword", "rp_regex": "true", "rp_pattern": r"(a)\1"}, "invalid escape"),
        ({"reward": "target_length", "rp_tolerance": "0"}, "tolerance must be in (0, 1000]"),
        ({"reward": "target_length", "rp_tolerance": "-5"}, "tolerance must be in (0, 1000]"),
        ({"reward": "target_length", "rp_target": "5000"}, "target must be in [0, 1000]"),
    ],
)
@pytest.mark.parametrize("page", ["rewards", "advantages"])
def test_bad_reward_settings_give_one_message_at_the_field(page, params, field_message):
    at = open_page(page, preset="quantum", **params)
    assert not at.exception
    errors = sidebar_errors(at)
    assert len(errors) == 1, errors
    assert field_message in errors[0]
    # the page and the lower sidebar sections still render
    assert len(at.get(CHARTS)) + len(at.dataframe) >= 1
    assert at.selectbox(key=ui.KEY_FRAMEWORK).value == "roll"


def test_a_fixed_field_clears_its_message_and_uses_the_value():
    at = open_page("rewards", preset="quantum", reward="target_length", rp_tolerance="0")
    assert sidebar_errors(at)
    at.number_input(key="rp_tolerance").set_value(7)
    rerun(at)
    assert not sidebar_errors(at)
    assert not at.exception


def test_catastrophic_regex_is_valid_and_fast():
    at = open_page("rewards", preset="quantum", reward="keyword", rp_regex="true")
    at.text_area(key="rp_pattern").input("(a+)+$")
    rerun(at)
    assert not sidebar_errors(at)  # RE2 accepts it and matches in linear time


# --- out-of-range URL values get a notice -------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [("G", "1000000", "1 to 16"), ("beta", "nan", "0 to 1"), ("gamma", "2", "0 to 1")],
)
def test_out_of_range_url_values_are_named(key, value, allowed):
    at = open_page("advantages", preset="quantum", **{key: value})
    text = notices(at)
    assert f"{key}={value}" in text
    assert allowed in text


def test_an_unknown_option_in_the_url_is_named():
    at = open_page("advantages", preset="quantum", fw="deepspeed")
    assert "fw=deepspeed" in notices(at)
    assert "one of roll, verl" in notices(at)


def test_a_valid_default_in_the_url_gives_no_notice():
    at = open_page("advantages", preset="quantum", G="4", beta="0.2")
    assert "is not allowed" not in notices(at)


# --- prompts as typed ---------------------------------------------------------------------------
def test_prompts_split_on_line_feeds_only_and_bad_ones_are_reported():
    long = "x" * (ui.state.MAX_PROMPT_CHARS + 1)
    prompts, notes = sidebar.read_prompts(f"a\u2028b\nc\u0085d\n{long}\n\ne", ("fallback",))
    assert prompts == ("a\u2028b", "c\u0085d", "e")
    assert len(notes) == 1
    assert "Line 3" in notes[0]
    assert "other prompts are kept" in notes[0]
    assert sidebar.read_prompts("  \n ", ("fb",)) == (
        ("fb",),
        ["No prompt to sample: keeping the preset's prompts."],
    )


def test_markdown_and_image_prompts_render_literally():
    evil = "**bold** $x^2$ :red[red] ![](http://127.0.0.1:9/x.png)"
    at = open_page("samples", preset="quantum", live="true", G="2", T="4", prompts=evil)
    assert not at.exception
    labels = [e.label for e in at.expander]
    heading = next(label for label in labels if label.startswith("Prompt p0"))
    assert "\\*\\*bold\\*\\*" in heading
    assert "\\!\\[\\]\\(http" in heading
    assert "\\:red\\[red\\]" in heading
    assert "\\$x^2\\$" in heading.replace("\\^", "^")
    # the prompt box under the heading is escaped HTML, no <img>
    html_bodies = " ".join(h.proto.body for h in at.get("html"))
    assert "<img" not in html_bodies


# --- the reward table takes numbers as typed ----------------------------------------------------
@pytest.mark.parametrize(
    ("typed", "value"),
    [("1e308", 1e308), ("1e-3", 1e-3), ("2.5e1", 25.0), ("-3", -3.0), (" 8.2 ", 8.2), (4, 4.0)],
)
def test_reward_cells_read_as_python_reads_them(typed, value):
    assert reward_table.read_number(typed) == (value, "")


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("1,5", "comma"),
        ("abc", "not a number"),
        ("NaN", "not a finite"),
        ("inf", "not a finite"),
        ("", "empty"),
        (None, "empty"),
    ],
)
def test_unreadable_reward_cells_are_refused_with_a_reason(typed, why):
    _value, problem = reward_table.read_number(typed)
    assert why in problem


def test_the_table_names_every_cell_it_could_not_read():
    df = pd.DataFrame({"prompt": ["q", "q", "q", "r"], "reward": ["1", "1,5", "abc", "2"]})
    with pytest.raises(reward_table.RewardTableError) as err:
        reward_table.parse_reward_table(df)
    assert "row 2" in str(err.value)
    assert "row 3" in str(err.value)


def test_the_table_travels_in_a_link_and_garbage_is_refused():
    df = pd.DataFrame({"prompt": ["q", "q", "<b>x</b>"], "reward": ["1e-3", "1,5", "2"]})
    encoded = reward_table.encode_table(df)
    assert len(encoded) < 200
    assert re.fullmatch(r"[A-Za-z0-9_-]+", encoded)
    pd.testing.assert_frame_equal(reward_table.decode_table(encoded), df)
    for bad in ("!!!", "eJzLSM3JyVcozy_KSQEAGgQEXQ", "x" * 7000):
        with pytest.raises(reward_table.RewardTableError):
            reward_table.decode_table(bad)


def test_a_shared_link_restores_the_edited_table():
    df = pd.DataFrame({"prompt": ["q", "q", "p", "p"], "reward": ["1", "2", "3", "7"]})
    at = router("local_global", rt=reward_table.encode_table(df))
    at.run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "local advantage" in d.value.columns)
    assert table["reward"].tolist() == [1.0, 2.0, 3.0, 7.0]


# --- the catch-all ------------------------------------------------------------------------------
def test_an_unforeseen_error_shows_a_friendly_message_not_a_traceback(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("/srv/secret/path.py exploded")

    monkeypatch.setattr(ui, "cached_trace", broken)
    at = router("advantages")
    at.run()
    assert not at.exception
    message = " ".join(e.value for e in at.error)
    assert "could not be drawn" in message
    assert "/srv/secret" not in message
    assert "Traceback" not in message


def test_failure_hints_show_user_messages_only():
    assert "group of one" in guard.failure_hint(ValueError("a group of one has no std"))
    assert "logged on the server" in guard.failure_hint(KeyError("x"))


# --- self-describing exports --------------------------------------------------------------------
def test_trace_json_carries_its_inputs_and_recomputes_with_the_calculator():
    import json
    import subprocess
    import sys

    import numpy as np

    from roll_viz.data.presets import PRESETS
    from roll_viz.ui import settings, state

    _desc, sampling, reward = PRESETS["quantum"]
    config = settings.native_config("roll", {"estimator": "grpo"})
    app_state = ui.AppState(
        source="preset:quantum",
        preset="quantum",
        sampling=sampling,
        reward=reward,
        framework="roll",
        config_items=state.freeze(config),
    )
    rollout = ui.cached_rollout(app_state)
    trace = ui.cached_trace(app_state)
    body = json.loads(ui.trace_json(trace, app_state, rollout))
    inputs = body["inputs"]
    assert inputs["prompts"] == list(rollout.prompts)
    assert inputs["sampling"]["seed"] == sampling.seed
    assert inputs["samples"][0]["response"] == rollout.responses[0]
    assert inputs["config"]["adv_estimator"] == "grpo"
    out = subprocess.run(
        [sys.executable, "-m", "roll_viz", "compute", "-"],
        input=json.dumps(inputs["compute_case"]),
        capture_output=True,
        text=True,
        check=True,
    )
    recomputed = json.loads(out.stdout)
    np.testing.assert_allclose(recomputed["advantages"], body["trace"]["advantages"], atol=1e-9)


# --- a projector at 1280 x 720 ------------------------------------------------------------------
def test_presentation_mode_scales_chart_fonts_and_folds_the_explainer():
    import json

    # Token KL: its heatmaps are Plotly figures (Advantages draws its own in the browser)
    at = open_page("kl", preset="quantum", present="true")
    css = " ".join(h.proto.body for h in at.get("html"))
    assert "flex-direction: column" in css  # an explainer's row stacks when the column is narrow
    assert "zoom" not in css  # a zoomed table canvas was laid out wider than shown: cut
    assert "What am I looking at?" in [e.label for e in at.expander]  # folded on a projector
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert fig["layout"]["font"]["size"] == 18
    assert fig["layout"]["xaxis"]["tickfont"]["size"] == 18
    plain = json.loads(open_page("kl", preset="quantum").get("plotly_chart")[0].proto.spec)
    assert "size" not in plain["layout"].get("font", {})


def test_presentation_mode_fits_a_wide_table_to_the_screen():
    import json

    def columns(at, column):  # the column settings of the first table holding ``column``
        return json.loads(next(d.proto.columns for d in at.dataframe if column in d.value))

    shown = open_page("local_global", present="true", hide="sidebar")
    config = columns(shown, "global advantage")
    assert config["global advantage"]["pinned"] is True  # the page's point stays in view
    plain = columns(open_page("local_global"), "global advantage")
    assert "global advantage" not in plain  # outside the projector: Streamlit's own widths
    # the Eras page's summary: a row per recipe, its settings in words (wider than the screen)
    wide = columns(open_page("eras", preset="quantum", present="true", hide="sidebar"), "estimator")
    widths = [c["width"] for c in wide.values() if "width" in c]
    assert len(widths) == len(wide) - 1  # every column but the hidden index
    assert sum(widths) <= ui.table_fit.MAIN_PX[True]


def test_a_hidden_sidebar_leaves_a_way_back():
    at = open_page("advantages", preset="quantum", hide="sidebar,beta", G="3")
    assert at.text_input(key=ui.state.KEY_HIDE).value == "sidebar,beta"
    at.button(key="show_sidebar").click()
    rerun(at)
    assert at.text_input(key=ui.state.KEY_HIDE).value == "beta"
    css = " ".join(h.proto.body for h in at.get("html"))
    # the rule that hid the sidebar is gone (other rules may still name its links)
    assert '[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"]' not in css
    assert ".st-key-beta" in css
