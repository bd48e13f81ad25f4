"""AppTest of the Update page: its loss options and the behaviour policy mu select (tiny model)."""

import re

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz.lm import update
from roll_viz.ui import update_page as upd
from tests.ui import apptest

LIVE = {"preset": "quantum", "live": "true", "G": "2", "T": "8"}


@pytest.fixture(autouse=True)
def _reset_adapter_after():
    """AppTests share one session id, so the session-scoped adapter would outlive the test:
    press the page's Reset afterwards, as the next test expects a fresh adapter."""
    yield
    at = apptest.open_page("update", **LIVE)
    at.button(key=upd.KEY_RESET).click().run()


def open_page(**params: str) -> AppTest:
    at = apptest.open_page("update", **{**LIVE, **params})
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def keys(at: AppTest) -> set[str]:
    return {s.key for s in at.selectbox}


def click_step(at: AppTest) -> AppTest:
    at.button(key=upd.KEY_STEP).click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def step_number(at: AppTest) -> int:
    """The adapter's step count the summary states ("Step N of this session's adapter")."""
    found = [re.match(r"Step (\d+) of this session", m.value) for m in at.markdown]
    return int(next(f for f in found if f).group(1))


def markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_mu_select_appears_with_a_correction_and_the_bf16_ratio_is_not_one():
    at = open_page(fw="openrlhf")
    assert upd.KEY_LOSS_OPTION in keys(at)
    assert upd.KEY_MU not in keys(at)  # the shipped defaults read no mu
    at.selectbox(key=upd.KEY_LOSS_OPTION).set_value("is_correction_level: token").run()
    assert upd.KEY_MU in keys(at)
    assert any("mu = pi_old" in c.value for c in at.caption)
    click_step(at)
    assert "The loss read **mu = pi_old**" in markdown(at)
    at.selectbox(key=upd.KEY_MU).set_value("bf16").run()
    click_step(at)
    text = markdown(at)
    assert "Behaviour policy mu: d = log pi_old - log mu" in text
    assert "not 1: the correction acts" in text


def test_a_link_sets_the_mu_source():
    at = open_page(fw="openrlhf", upd_loss="is_correction_level: seq", upd_mu="int8")
    assert at.selectbox(key=upd.KEY_LOSS_OPTION).value == "is_correction_level: seq"
    assert at.selectbox(key=upd.KEY_MU).value == "int8"
    assert not any("mu = pi_old" in c.value for c in at.caption)


def test_roll_topr_and_difficulty_steps_run_on_the_page():
    at = open_page(fw="roll", upd_loss="pg_variant: topr")
    assert at.selectbox(key=upd.KEY_LOSS_OPTION).value == "pg_variant: topr"
    assert upd.KEY_MU not in keys(at)
    click_step(at)
    assert any("pg_variant: topr" in c.value for c in at.caption)
    first = step_number(at)
    at.selectbox(key=upd.KEY_LOSS_OPTION).set_value("difficulty_loss_weight: true").run()
    click_step(at)
    assert step_number(at) == first + 1


def test_link_values_that_do_not_fit_fall_back_with_a_notice():
    at = open_page(
        fw="roll", upd_loss="is_correction_level: token"
    )  # an OpenRLHF option under ROLL
    assert at.selectbox(key=upd.KEY_LOSS_OPTION).value == upd.DEFAULT_OPTION
    at = open_page(fw="openrlhf", upd_loss="is_correction_level: token", upd_mu="fp64")
    notices = " ".join(w.value.replace("\\", "") for w in at.warning)  # markdown-escaped
    assert "The link's value upd_mu=fp64 is not allowed" in notices
    assert at.selectbox(key=upd.KEY_MU).value == "fp32"


def test_verl_offers_bypass_mode_and_its_defaults_read_no_mu():
    at = open_page(fw="verl")
    assert upd.KEY_LOSS_OPTION in keys(at)
    assert upd.KEY_MU not in keys(at)  # verl's shipped loss reads no mu


def test_a_mu_source_that_cannot_run_gives_one_message(monkeypatch):
    def refuse(*args, **kwargs):
        raise ValueError("int8: the quantized decode copy runs on the CPU only")

    monkeypatch.setattr(update, "behaviour_logprobs", refuse)
    at = open_page(fw="openrlhf", upd_loss="is_correction_level: token", upd_mu="int8")
    click_step(at)
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("This option cannot run on this batch: int8") for w in warnings)


def test_verl_bypass_mode_reads_mu_on_the_page():
    at = open_page(fw="verl", upd_loss="loss_mode: bypass_mode (ppo_clip)", upd_mu="int8")
    assert at.selectbox(key=upd.KEY_LOSS_OPTION).value == "loss_mode: bypass_mode (ppo_clip)"
    assert at.selectbox(key=upd.KEY_MU).value == "int8"
    click_step(at)
    assert "Behaviour policy mu: d = log pi_old - log mu" in markdown(at)
