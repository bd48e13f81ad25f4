"""AppTest of section 4 of the "Sampler != trainer" page: the sequence-level masks."""

from __future__ import annotations

import re

from roll_viz.ui import sequence_section as ss
from tests.ui.apptest import open_page, router


def _rules(at):
    return next(d.value for d in at.dataframe if "rows removed" in d.value.columns)


def _row(table, method):
    return table[table["method"] == method].iloc[0]


def test_preset_shows_the_four_rules_and_the_rows_they_remove():
    at = open_page("mismatch", preset="pirate")
    assert not at.exception
    table = _rules(at)
    assert list(table["method"]) == [
        "OPSM",
        "sequence_mask (product)",
        "Geo-RS (geometric mean)",
        "TRM (max token k2)",
        "default loss (DPPO + KL)",
    ]
    assert list(table["framework"]) == ["trl", "trl", "verl", "verl", "prime-rl"]
    # bf16: every response's geometric mean is within [0.8, 1.25], the product is not always
    assert int(_row(table, "Geo-RS (geometric mean)")["rows removed"]) == 0
    assert int(_row(table, "sequence_mask (product)")["rows removed"]) > 0
    assert "off_policy_mask_threshold=0.01" in _row(table, "OPSM")["config"]
    rows = next(d.value for d in at.dataframe if "max token k2" in d.value.columns)
    assert set(rows["trl: OPSM"]) <= {"kept", "removed"}
    removed = (rows["trl: sequence_mask (product)"] == "removed").sum()
    assert removed == int(_row(table, "sequence_mask (product)")["rows removed"])
    keys = {c.key for c in at.get("plotly_chart")}
    assert {"mm_seq_grid", "mm_seq_ratio", "mm_seq_weights", "mm_seq_grad"} <= keys


def test_thresholds_move_the_removed_rows():
    at = open_page("mismatch", preset="pirate")
    before = int(_row(_rules(at), "TRM (max token k2)")["rows removed"])
    at.number_input(key=ss.KEY_TRM).set_value(10.0).run()
    assert int(_row(_rules(at), "TRM (max token k2)")["rows removed"]) == 0
    at.number_input(key=ss.KEY_TRM).set_value(1e-6).run()
    assert int(_row(_rules(at), "TRM (max token k2)")["rows removed"]) >= before
    at.number_input(key=ss.KEY_OPSM).set_value(10.0).run()
    assert int(_row(_rules(at), "OPSM")["rows removed"]) == 0


def test_top_p_adds_the_keep_sampling_mask_with_ratio_one():
    at = open_page("mismatch", preset="pirate", mm_src="top_p", mm_p="0.8")
    table = _rules(at)
    keep = _row(table, "keep sampling mask")
    assert keep["framework"] == "deepseek"
    assert int(keep["masked"]) == 0
    assert abs(float(keep["ESS"]) - 1.0) < 1e-12  # every weight pi_old^S / mu is exactly 1
    assert at.selectbox(key=ss.KEY_RULE + "_t").options[-2] == "deepseek: keep sampling mask"


def test_inverted_bounds_get_a_message_and_the_default():
    at = open_page("mismatch", preset="pirate")
    at.number_input(key=ss.KEY_LOW).set_value(2.0).run()
    errors = [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]
    assert any("low 2 > high 1.25" in e for e in errors), errors
    assert "clip_min=0.8" in _row(_rules(at), "sequence_mask (product)")["config"]


def test_a_link_value_out_of_range_is_named():
    at = router("mismatch", preset="pirate", mm_opsm="-1")
    at.run()
    assert not at.exception
    notices = re.sub(r"\\(.)", r"\1", " ".join(w.value for w in at.warning))
    assert "mm_opsm=-1" in notices
