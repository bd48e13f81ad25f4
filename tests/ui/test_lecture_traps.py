"""Small traps of a lecture, each with the numbers that showed it (issue: lecture-ready, item 5).

The Advantages worked example starts on a token that moves (non-zero advantage) and accepts a
row number in the link; Local vs global names a zero-variance group "no signal (std 0)"; the
training curves say which share they plot.
"""

from __future__ import annotations

import tomllib
import weakref

import torch
from streamlit import config as st_config

from roll_viz import rewards, ui
from roll_viz.lm import warm
from roll_viz.ui import resources
from tests.ui.apptest import ROOT, open_page


def _selected(at) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("Selected: sample"))


def test_worked_example_defaults_to_a_token_that_moves():
    """arithmetic + GAE: p0/s0 and p0/s1 scored 0 (A = 0 on every token); p0/s2 is the first."""
    at = open_page("advantages", preset="arithmetic", est="gae")
    assert at.selectbox(key=ui.KEY_SAMPLE).value == 2
    assert "sample **p0/s2**, position **t = 0**" in _selected(at)


def test_first_moving_token_by_hand():
    adv = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.5, 0.2], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 1, 1]])
    assert ui.first_moving_token(adv, mask) == (1, 1)
    assert ui.first_moving_token(adv, mask, 2) == (2, 0)  # t = 0 is padding there: none moves
    assert ui.first_moving_token(None, mask) == (0, 0)


def test_index_url_selects_the_row_or_says_why_not():
    at = open_page("advantages", preset="quantum", sample="2")
    assert at.selectbox(key=ui.KEY_SAMPLE).value == 2
    assert "sample **p0/s2**" in _selected(at)
    assert not any("is not a sample" in i.value for i in at.info)
    bad = open_page("advantages", preset="quantum", sample="zz")
    assert any("sample=zz is not a sample of this batch" in i.value for i in bad.info)
    assert bad.selectbox(key=ui.KEY_SAMPLE).value == 0


def test_live_arithmetic_prompt_gets_the_arithmetic_reward_suggested():
    """'17 + 25 = 32' must not score 1.25 while the right answer scores 0 (the preset's reward)."""
    assert rewards.arithmetic("What is 17 + 25?", "17 + 25 = 32") == 0.0
    assert rewards.arithmetic("What is 17 + 25?", "17 + 25 = 42.") == 1.0
    at = open_page(
        "samples", preset="quantum", live="true", G="2", T="8", prompts="What is 17 + 25?"
    )
    info = [i.value for i in at.sidebar.info]
    assert any("1 arithmetic question" in v and "does not check the answer" in v for v in info)
    shown = [c.value.replace("\\", "") for c in at.caption if c.value.startswith("Reward:")]
    assert any("1 x one_sentence" in c for c in shown)
    at.sidebar.button(key="use_arithmetic_reward").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.sidebar.selectbox(key=ui.KEY_REWARD).value == "arithmetic"
    assert not any("arithmetic question" in i.value for i in at.sidebar.info)
    assert any(c.value.startswith("Reward: 1 x arithmetic") for c in at.caption)


def test_preset_click_leaves_the_server_log_quiet():
    """Loading a preset sets the bound widgets through session state on purpose: the server is
    configured not to log Streamlit's 30-line duplication warning (with its stack) per click."""
    settings = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert settings["global"]["disableWidgetStateDuplicationWarning"] is True
    assert "global.disableWidgetStateDuplicationWarning" in st_config._config_options_template


def test_warm_up_button_and_a_note_on_the_first_model_use(monkeypatch):
    """A teacher loads the model before class; the first page that needs it says why it waits."""
    resources._LOADED.clear()  # as in a fresh server process
    monkeypatch.setattr(warm, "_WARMED", weakref.WeakSet())
    home = open_page()
    assert not ui.model_loaded(ui.model_spec())
    home.button(key="warm_up").click().run()
    assert not home.exception, [e.message for e in home.exception]
    assert any("is ready" in s.value for s in home.success)
    assert ui.model_loaded(ui.model_spec())
    home.run()
    assert not [b for b in home.button if b.key == "warm_up"]  # loaded: a line says so instead
    assert any("loaded and warm: live pages and the Update step" in c.value for c in home.caption)
    resources._LOADED.clear()
    update = open_page("update", live="true", G="2", T="8")
    assert any(i.value.startswith("First use of the model") for i in update.info) or any(
        "loaded in" in t.value and "the next uses are instant" in t.value for t in update.toast
    )


def _samples_table(at):
    """The Samples page's answer table (the group-health popover holds another dataframe)."""
    return next(d.value for d in at.dataframe if "response" in d.value.columns)


def test_live_edits_sample_once_on_sample():
    """Prompts and T are edited in a form: a rerun before "Sample" keeps the batch (no sampling);
    "Sample" applies both edits with one sampling (issue: three edits took 17 + 26 + 19 s)."""
    at = open_page("samples", preset="quantum", live="true", G="2", T="8")
    store = resources.live_store()
    quantum = _samples_table(at)["prompt"].tolist()
    at.text_area(key=ui.KEY_PROMPTS).input("What is 2 + 3?")
    at.run()  # any other rerun: the pending edit does not sample
    assert _samples_table(at)["prompt"].tolist() == quantum
    before = set(store.items)
    at.text_area(key=ui.KEY_PROMPTS).input("What is 2 + 3?")
    at.sidebar.slider(key="T").set_value(12)
    next(b for b in at.sidebar.button if b.label == "Sample").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    added = set(store.items) - before
    assert len(added) == 1  # one request, one sampling
    ((_model, sampling, _decode, _engine),) = added
    assert sampling.prompts == ("What is 2 + 3?",)
    assert sampling.max_new_tokens == 12
    assert _samples_table(at)["prompt"].tolist() == ["What is 2 + 3?"] * 2
    # the group-health table shows the prompt literally (no markdown escape backslash)
    health = next(d.value for d in at.dataframe if "status" in d.value.columns)
    assert health["prompt"].tolist() == ["What is 2 + 3?"]
