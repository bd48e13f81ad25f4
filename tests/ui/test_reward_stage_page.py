"""AppTest of the Rewards page's reward-stage sections: parts, noise, truncation, the hack."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz import nav

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / nav.page("rewards").file
TIMEOUT = 240

SECTIONS = (
    "The reward's parts",
    "A noisy verifier",
    "Truncated answers: four policies",
    "Exercise: write the reward that gets hacked",
)


def _open(**params: str) -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]  # the page guard's message
    return at


#: a column only that table has
COLUMNS = {
    "rs_noise_sum": "expected (exact)",
    "rs_trunc_table": "mean |A| (trained)",
    "rs_hack_steps": "top word",
    "rs_options": "option",
}


def _frame(at: AppTest, key: str):
    return next(d.value for d in at.dataframe if COLUMNS[key] in d.value.columns)


def test_sections_draw_and_react_to_their_controls():
    at = _open(preset="arithmetic")
    subheaders = [s.value for s in at.subheader]
    assert all(s in subheaders for s in SECTIONS), subheaders
    # the page's own group statistics (its reward bars are drawn in the browser); parts,
    # noise (2), truncation, hack
    assert len(at.get("plotly_chart")) == 6

    summary = _frame(at, "rs_noise_sum")
    assert list(summary["measure"])[2] == "zero-advantage fraction"
    assert summary["before (true labels)"].iloc[2] == "0.250"  # group 2 of 4 is all-fail
    # seed 0 at rates 0.2 / 0.2 flips 2 labels and breaks the one tie (its expected break: 0.59)
    assert list(summary["this draw"].iloc[:2]) == ["2 / 16", "1 / 1 tied"]

    at.slider(key="rs_fn").set_value(0.0).run()
    at.slider(key="rs_fp").set_value(0.0).run()
    assert not at.exception
    summary = _frame(at, "rs_noise_sum")
    assert summary["this draw"].iloc[0] == "0 / 16"  # no noise, no flip
    assert summary["expected (exact)"].iloc[2] == "0.250"

    trunc = _frame(at, "rs_trunc_table")
    assert list(trunc["policy"]) == [
        "zero reward",
        "keep the score",
        "soft overlong penalty",
        "masked from the loss",
    ]
    # arithmetic: 5 passes of 16; 11 cut (two of them passes); 12 rows at 32 tokens (one ends
    # with EOS there: not cut, yet it pays the whole soft penalty), one at 29 pays 3/6
    assert list(trunc["reward_mean"]) == pytest.approx([3 / 16, 5 / 16, (5 - 12.5) / 16, 5 / 16])
    options = _frame(at, "rs_options")
    assert "mask_truncated_completions=True" in set(options["option"])

    steps = _frame(at, "rs_hack_steps")
    assert list(steps["step"]) == [0, 5, 10, 15, 20, 25, 29]
    assert steps["top word"].iloc[-1] == "amazing"


def test_hack_exercise_follows_the_sidebar_reward():
    at = _open()
    at.selectbox(key="reward").set_value("keyword").run()
    at.text_area(key="rp_pattern").set_value("amazing").run()
    assert not at.exception, [e.message for e in at.exception]
    steps = _frame(at, "rs_hack_steps")
    # every sample of the last recorded step says "amazing": the keyword reward is maxed out
    assert steps["your reward"].iloc[-1] == 1.0
    assert steps["your reward"].iloc[0] < 1.0
