"""AppTest of the mismatch lab's section 4: mu, pi_old and pi_theta, the trainer k steps ahead."""

from __future__ import annotations

import json

from roll_viz.ui import mismatch_stale as ms
from tests.ui.apptest import open_page


def _anchors(at):
    frame = next(d.value for d in at.dataframe if "clip fraction" in d.value.columns)
    return frame.set_index("what")


def _row(frame, needle: str):
    return frame[frame.index.str.contains(needle, regex=False)].iloc[0]


def test_k0_is_the_first_update_pi_theta_is_pi_old():
    at = open_page("mismatch", preset="pirate")
    assert at.selectbox(key=ms.KEY_LAG).value == 0
    frame = _anchors(at)
    assert len(frame) == 3
    for needle in ("recomputed", "SkyRL"):  # pi_theta = pi_old: both ratios are exactly 1
        row = _row(frame, needle)
        assert (row["ratio min"], row["ratio max"], row["clip fraction"]) == (1.0, 1.0, 0.0)
    assert _row(frame, "μ")["ratio max"] != 1.0  # the bf16 sampler's gap alone
    fig = next(el for el in at.get("plotly_chart") if el.proto.id.endswith("mm_lag_cols"))
    names = [t.get("name", "") for t in json.loads(fig.proto.spec)["data"]]
    assert sum(n.startswith("log ") for n in names) == 3


def test_k1_on_a_preset_asks_for_a_live_batch_of_the_base_policy():
    at = open_page("mismatch", preset="pirate", mm_lag="1")
    assert not at.exception
    assert any("Sample live" in i.value for i in at.info)
    steered = open_page("mismatch", preset="pirate", live="true", mm_src="fp32", mm_lag="1")
    assert any("steered" in i.value for i in steered.info)


def test_bad_lag_in_a_link_falls_back_with_a_notice():
    at = open_page("mismatch", preset="pirate", mm_lag="5")
    assert not at.exception
    notices = " ".join(w.value.replace("\\", "") for w in at.warning)
    assert "mm_lag=5 is not allowed" in notices
    assert at.selectbox(key=ms.KEY_LAG).value == 0


def test_k1_live_the_trainer_has_moved_and_pi_old_as_pi_theta_hides_it():
    at = open_page("mismatch", preset="sentiment", live="true", mm_src="fp32", mm_lag="1")
    assert not at.exception, [e.message for e in at.exception]
    frame = _anchors(at)
    recomputed = _row(frame, "recomputed")
    assert (recomputed["ratio min"], recomputed["ratio max"]) != (1.0, 1.0)  # a real drift
    current = _row(frame, "SkyRL")
    assert (current["ratio min"], current["ratio max"], current["clip fraction"]) == (1, 1, 0)
    tokens = next(d.value for d in at.dataframe if "log π_θ" in d.value.columns)
    assert (tokens["δ = log π_old − log μ"] == 0.0).all()  # fp32: mu = pi_old
    assert (tokens["drift = log π_θ − log π_old"] != 0.0).any()
