"""AppTest of the "Sampler != trainer" page: stored mu of a preset, the live tiny model, links,
and a message under every threshold a framework refuses."""

from __future__ import annotations

import re

import pytest

from roll_viz.ui import mismatch_page as mp
from tests.ui.apptest import open_page, router


def _stats(at) -> dict[str, float]:
    table = next(d.value for d in at.dataframe if list(d.value.columns) == ["quantity", "value"])
    return dict(zip(table["quantity"], table["value"], strict=True))


def _corrections(at):
    return next(d.value for d in at.dataframe if "method" in d.value.columns)


def _errors(at) -> list[str]:
    """The field messages as a reader sees them (the page escapes Markdown)."""
    return [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]


def test_preset_paints_from_stored_logprobs_without_the_model():
    at = open_page("mismatch", preset="pirate")
    assert not at.warning, [w.value for w in at.warning]
    assert (
        len(at.get("plotly_chart")) == 11
    )  # sections 1-3: 6; 4 (sequence masks): 4; 5 (three policies): 1
    stats = _stats(at)
    assert stats["tokens"] > 50
    assert stats["mean_abs"] > 1e-3  # bf16 against the float32 recompute: a real gap
    table = _corrections(at)
    assert len(table) == 10
    assert set(table["framework"]) == {"verl", "trl", "openrlhf", "roll"}
    assert {"token-TIS", "seq-TIS", "IcePop", "seq-MIS", "Geo-RS"} <= set(table["method"])
    # the long config text is shown last, after the numbers (the CSV keeps the analysis order)
    shown = mp.table_columns(table)
    assert shown[-1] == "config"
    assert sorted(shown) == sorted(table.columns)
    # the largest-|d| table names its samples as the heatmaps do, under a caption saying what it is
    top = next(d.value for d in at.dataframe if "log mu" in d.value.columns)
    assert all(re.fullmatch(r"p\d+/s\d+", s) for s in top["sample"]), list(top["sample"])
    assert any(f"The {len(top)} tokens with the largest |d|" in c.value for c in at.caption)


def test_fp32_control_has_no_mismatch_and_the_link_keeps_it():
    at = open_page("mismatch", preset="quantum", mm_src="fp32")
    assert at.selectbox(key=mp.KEY_SOURCE).value == "fp32"
    stats = _stats(at)
    assert stats["max_abs"] == 0.0
    assert stats["ESS of pi_old/mu"] == pytest.approx(1.0)
    table = _corrections(at)
    assert (table[table["method"] == "token-TIS"]["masked"] == 0).all()


def test_top_p_source_gives_log_s_below_zero():
    at = open_page("mismatch", preset="pirate", mm_src="top_p", mm_p="0.8")
    assert at.selectbox(key=mp.KEY_TOP_P).value == 0.8
    stats = _stats(at)
    assert stats["mean"] < 0  # d = log S <= 0 on every token


def test_bad_rs_threshold_gets_a_message_under_its_field():
    at = open_page("mismatch", preset="pirate")
    at.text_input(key=mp.KEY_RS_THR).input("2_0.5").run()
    assert not at.exception
    assert any("lower <= upper" in e and "Using 0.5_2.0" in e for e in _errors(at))
    at.text_input(key=mp.KEY_RS_THR).input("abc").run()
    assert any("Invalid numeric threshold" in e for e in _errors(at))
    at.selectbox(key=mp.KEY_RS).set_value("token_k2").run()
    at.text_input(key=mp.KEY_RS_THR).input("0.1_0.2").run()
    assert any("single upper bound" in e for e in _errors(at))
    assert len(_corrections(at)) == 10  # the lab keeps running on the fallback


def test_inverted_pairs_get_a_message_and_the_default():
    at = open_page("mismatch", preset="pirate")
    at.number_input(key=mp.KEY_ICE_LO).set_value(6.0).run()
    assert any("IcePop 6_5" in e and "Using 0.5_5" in e for e in _errors(at))
    table = _corrections(at)
    assert "rollout_is_threshold=0.5_5" in table[table["method"] == "IcePop"]["config"].iloc[0]
    at.number_input(key=mp.KEY_ROLL_LO).set_value(2.0).run()
    assert any("ratio_low 2 > ratio_high 1.2" in e for e in _errors(at))
    at.number_input(key=mp.KEY_TRL_MIN).set_value(5.0).run()
    assert any("clip_min 5 > clip_max 3" in e for e in _errors(at))
    at.selectbox(key=mp.KEY_ORL_LEVEL).set_value("seq").run()
    at.selectbox(key=mp.KEY_ORL_MODE).set_value("clip").run()
    assert any("clip requires is_correction_level token" in e for e in _errors(at))
    assert "OpenRLHF seq-mask-tis" in set(_corrections(at)["method"])


def test_a_link_value_out_of_range_is_named():
    at = router("mismatch", preset="pirate", mm_tis="1000", mm_src="fp8")
    at.run()
    assert not at.exception
    notices = re.sub(r"\\(.)", r"\1", " ".join(w.value for w in at.warning))
    assert "mm_tis=1000" in notices
    assert "mm_src=fp8" in notices
    assert at.selectbox(key=mp.KEY_SOURCE).value == "bf16"


def test_thresholds_change_what_is_masked():
    at = open_page("mismatch", preset="pirate", mm_src="int8")
    before = _corrections(at)
    ice = before[before["method"] == "IcePop"]
    at.number_input(key=mp.KEY_ICE_LO).set_value(0.99).run()
    at.number_input(key=mp.KEY_ICE_HI).set_value(1.01).run()
    after = _corrections(at)
    assert int(after[after["method"] == "IcePop"]["masked"].iloc[0]) > int(ice["masked"].iloc[0])


def test_presentation_mode_draws_the_page():
    at = open_page("mismatch", preset="sentiment", present="true")
    assert (
        len(at.get("plotly_chart")) == 11
    )  # sections 1-3: 6; 4 (sequence masks): 4; 5 (three policies): 1


@pytest.mark.parametrize(
    ("source", "zero"), [("fp32", True), ("int8", False), ("bf16", False), ("top_p", False)]
)
def test_live_tiny_model(source, zero):
    at = open_page("mismatch", preset="pirate", live="true", mm_src=source)
    stats = _stats(at)
    assert stats["tokens"] > 0
    assert (stats["max_abs"] == 0.0) is zero


def test_engine_source_without_an_engine_batch_says_why():
    """A preset, and a live batch of the in-process model, have no engine mu: one info line."""
    for at in (
        open_page("mismatch", preset="pirate", mm_src="engine"),
        open_page("mismatch", preset="pirate", live="true", mm_src="engine"),
    ):
        assert not at.exception, [e.message for e in at.exception]
        assert any("rollout engine" in i.value for i in at.info)


def test_engine_mu_against_the_float32_trainer(stub_engine):
    """The engine's own log-probs of its samples are mu; an fp32 engine agrees with the fp32
    trainer to the conformance bound (1e-4), so delta is ~0 and every weight ~1."""
    at = open_page("mismatch", live="true", G="2", T="6", prompts="Hi", policy="steered",
                   mm_src="engine")  # fmt: skip
    assert not at.exception, [e.message for e in at.exception]
    assert [r for r in stub_engine.requests if r.get("n") == 2]  # the batch came from the engine
    stats = _stats(at)
    assert stats["tokens"] > 0
    assert stats["max_abs"] < 1e-4
    assert stats["ESS of pi_old/mu"] == pytest.approx(1.0, abs=1e-6)
