"""AppTest of the Training page: start a run, see progress, compare two runs, open a recorded run.

Live runs use the tiny model (ROLL_VIZ_MODEL=tiny from tests/conftest.py) with 2 steps.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from streamlit.testing.v1 import AppTest

from roll_viz.data import recorded_runs as recorded
from roll_viz.ui import training_page as tr
from roll_viz.ui import training_view as tv
from tests.ui import apptest


def open_page(**params: str) -> AppTest:
    return apptest.open_page("training", **params)


def charts(at: AppTest) -> dict[str, dict]:
    out = {}
    for el in at.get("plotly_chart"):
        out[el.proto.id.rsplit("-", 1)[-1]] = json.loads(el.proto.spec)
    return out


def button(at: AppTest, key: str):
    return next(b for b in at.button if b.key == key)


def wait_done(at: AppTest, slots: tuple[str, ...], timeout: float = 90) -> None:
    table = at.session_state[tr.KEY_RUNNERS]
    for slot in slots:
        table[slot].join(timeout=timeout)
        assert table[slot].status == "done", (table[slot].status, table[slot].error)


def test_recorded_run_opens_from_the_url():
    names = recorded.available()
    assert names, "the recorded runs are committed"
    at = open_page(run=names[-1])
    box = next(s for s in at.selectbox if s.key == "tr_run_pick")
    assert box.value == names[-1]
    assert at.query_params[tr.KEY_RUN] == [names[-1]] or at.query_params[tr.KEY_RUN] == names[-1]
    figs = charts(at)
    assert "tr_rec_curves" in figs
    run = recorded.load_recorded(names[-1])
    assert run.recorded
    assert len(run.steps) >= 5
    # the KL panel holds the recorded numbers, labelled as recorded
    name = f"{run.label} (recorded)"
    kl = [
        t for t in figs["tr_rec_curves"]["data"] if t.get("name") == name and t.get("yaxis") == "y2"
    ]
    assert kl, [t.get("name") for t in figs["tr_rec_curves"]["data"]]
    assert kl[0]["y"] == run.series("kl_exact")
    assert any("Recorded run" in c.value for c in at.caption)
    assert "tr_kl_map_rec" in figs
    assert "tr_adv_map_rec" in figs
    # the scrubber's step (the last kept one) titles both maps and leads the samples table
    step = run.sampled_steps()[-1]
    assert figs["tr_kl_map_rec"]["layout"]["title"]["text"].endswith(f"at step {step}")
    table = next(d.value for d in at.dataframe if f"answer at step {step}" in d.value.columns)
    assert list(table.columns)[:4] == [
        "prompt", "reward at step 0", f"reward at step {step}", f"answer at step {step}",
    ]  # fmt: skip


def test_start_run_progress_and_compare_two_runs():
    at = open_page(tr_steps="2", tab="Train live")
    button(at, "tr_start").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    table = at.session_state[tr.KEY_RUNNERS]
    assert "A" in table
    wait_done(at, ("A",))
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    texts = [p.proto.text for p in at.get("progress")]
    assert any("A:" in t and "done, step 2 / 2" in t for t in texts), texts
    assert "tr_live_curves" in charts(at)
    # a second run in slot B with another beta, then overlay both
    at.session_state[tr.KEY_SLOT] = "B"
    at.session_state[tr.KEY_TRAIN_BETA] = 0.3
    at.run()
    button(at, "tr_start").click()
    at.run()
    wait_done(at, ("B",))
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    table = at.session_state[tr.KEY_RUNNERS]
    assert table["B"].settings.beta == 0.3
    assert table["A"].settings.beta == 0.0
    at.query_params["tab"] = "Compare runs"  # only the open tab runs
    at.run()
    assert "tr_live_curves" not in charts(at)
    fig = charts(at)["tr_compare_curves"]
    colors = {t["line"]["color"] for t in fig["data"] if t.get("line", {}).get("color")}
    assert len(colors) >= 2  # two runs overlaid
    betas = [t["y"] for t in fig["data"] if t.get("yaxis") == "y3" and t.get("mode")]
    assert any(all(v == 0.3 for v in ys) for ys in betas), betas
    for runner in table.values():
        runner.close()  # free the adapters in the shared cached model
    table.clear()  # AppTests share one session id: leave no run to the next test


def test_only_the_open_tab_runs():
    """Closed tabs draw nothing (their panels cannot refresh); ?tab= opens one."""
    at = open_page()
    assert "tr_rec_curves" in charts(at)
    assert not [b for b in at.button if b.key in ("tr_start", "tr_hack_start")]
    hacking = open_page(tab="Reward hacking")
    assert "tr_hack_curves" in charts(hacking)  # the recorded pair, instantly
    assert "tr_rec_curves" not in charts(hacking)
    assert tv.REFRESH_SECONDS >= 3  # a watching tab redraws at most every few seconds


def test_progress_says_seconds_per_step_and_time_left():
    records = [SimpleNamespace(metrics={"seconds": {"total": t}}) for t in (30.0, 20.0, 10.0, 12.0)]
    assert tv.seconds_per_step(records) == 14.0  # the last three steps
    assert tv.seconds_per_step([]) == 0.0
    assert tv.eta_text(45) == "45 s"
    assert tv.eta_text(14.0 * 26) == "6 min"
    assert tv.eta_text(3900) == "1 h 05 min"
