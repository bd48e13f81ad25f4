"""AppTest of the instant demos: adaptive beta (a closed loop) and GRPO vs REINFORCE++ over steps.

Each tab plays its recording at once (no model); "Train it live" starts the same settings on the
tiny model (ROLL_VIZ_MODEL=tiny from tests/conftest.py), and the tab then shows the live run with
step k / N and the recording only as a faint overlay. Token KL's adaptive beta shows the recorded
closed loop, and its chart titles follow the mode.
"""

from __future__ import annotations

import json
import time

from streamlit.testing.v1 import AppTest

from roll_viz import ui
from roll_viz.data import recorded_runs as recorded
from roll_viz.ui import training_demos as demos
from roll_viz.ui import training_page as tr
from roll_viz.views import training_charts
from tests.ui import apptest


def charts(at: AppTest) -> dict[str, dict]:
    return {
        el.proto.id.rsplit("-", 1)[-1]: json.loads(el.proto.spec) for el in at.get("plotly_chart")
    }


def _title(fig: dict) -> str:
    title = fig["layout"]["title"]
    return title["text"] if isinstance(title, dict) else title


def test_adaptive_tab_plays_the_recorded_closed_loop_at_once():
    start = time.perf_counter()
    at = apptest.open_page("training", tab="Adaptive beta")
    assert time.perf_counter() - start < 60  # no model: the recording only
    fig = charts(at)["tr_adaptive_curves"]
    run = recorded.load_recorded(recorded.ADAPTIVE)
    beta = next(t for t in fig["data"] if t["name"] == "beta")
    assert beta["y"] == run.series("beta")
    target = next(t for t in fig["data"] if t["name"].startswith("target KL"))
    assert target["y"] == [0.1, 0.1]
    assert "closed loop" in _title(fig)
    assert any(c.value.startswith("Beta went from 0.100 down to") for c in at.caption)
    assert not [k for k in ("tr_rec_curves", "tr_hack_curves") if k in charts(at)]
    assert tr.KEY_RUNNERS not in at.session_state or not at.session_state[tr.KEY_RUNNERS]


def test_local_global_tab_overlays_grpo_and_reinforce_pp():
    at = apptest.open_page("training", tab="GRPO vs REINFORCE++")
    fig = charts(at)["tr_lg_curves"]
    names = {t.get("name") for t in fig["data"]}
    for name in recorded.LOCAL_GLOBAL_PAIR:
        assert f"{recorded.load_recorded(name).label} (recorded)" in names, names
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert titles[:4] == [
        training_charts.METRICS[k][0] for k in training_charts.LOCAL_GLOBAL_PANELS
    ]
    table = next(d.value for d in at.dataframe if "|A| mean (mean over steps)" in d.value.columns)
    assert len(table) == 2


def test_adaptive_live_run_shows_progress_and_the_recording_faint():
    at = apptest.open_page("training", tab="Adaptive beta", tr_steps="2")
    next(b for b in at.button if b.key == "tr_adaptive_start").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    runner = at.session_state[tr.KEY_RUNNERS][demos.ADAPTIVE_SLOT]
    try:
        assert runner.settings.label == demos.ADAPTIVE_LIVE
        assert runner.settings.beta_mode == "adaptive"
        assert runner.settings.steps == demos.DEMO_STEPS  # where the effect shows, as recorded
        deadline = time.monotonic() + 120
        while runner.steps_done < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert runner.steps_done >= 2, (runner.status, runner.error)
        at.run()
        texts = [p.proto.text for p in at.get("progress")]
        assert any(f"/ {demos.DEMO_STEPS}" in t and "s per step" in t for t in texts), texts
        toggle = next(t for t in at.toggle if t.key == "tr_adaptive_recorded_live")
        assert toggle.value is False  # the recording is off unless asked for, then faint
        toggle.set_value(True)
        at.run()
        fig = charts(at)["tr_adaptive_curves"]
        faint = [t for t in fig["data"] if t.get("opacity") == 0.3]
        assert len(faint) == 2  # beta and KL of the recording
        live_beta = next(t for t in fig["data"] if t["name"] == "beta")
        assert len(live_beta["x"]) >= 2
    finally:
        table = at.session_state[tr.KEY_RUNNERS]
        for r in table.values():
            r.close()
        table.clear()  # AppTests share one session id: leave no run to the next test


def test_token_kl_adaptive_shows_the_recorded_closed_loop_and_titles_follow_the_mode():
    at = apptest.open_page("kl", preset="pirate")
    assert any(t.key == "kl_health_era" for t in at.toggle)  # the group-health banner's row
    figs = charts(at)
    assert _title(figs["beta_plot"]).startswith("Fixed beta")
    assert "kl_closed_loop" not in figs
    at.radio(key=ui.KEY_BETA_MODE).set_value("adaptive")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    figs = charts(at)
    loop = figs["kl_closed_loop"]
    assert _title(loop).startswith("Adaptive beta, closed loop")
    run = recorded.load_recorded(recorded.ADAPTIVE)
    assert next(t for t in loop["data"] if t["name"] == "beta")["y"] == run.series("beta")
    assert any(t["name"] == "target KL 0.1" for t in loop["data"])
    # the open-loop replay of this batch is still there, labelled so
    assert _title(figs["beta_plot"]).startswith("Adaptive beta, open loop")


def test_era_tab_overlays_the_two_recorded_presets():
    at = apptest.open_page("training", tab="2024 vs 2026")
    assert not at.exception, [e.message for e in at.exception]
    fig = charts(at)["tr_era_curves"]
    names = {t.get("name") for t in fig["data"]}
    for name in recorded.ERA_PAIR:
        assert f"{recorded.load_recorded(name).label} (recorded)" in names, names
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert titles == [training_charts.METRICS[k][0] for k in demos.ERA_PANELS]
    texts = [m.value for m in at.markdown]
    assert "**2024 vs 2026: what to look at**" in texts
    assert demos.ERA_CAPTION in texts


def test_the_live_era_runs_are_the_recorded_settings():
    """The tab's live pair trains what was recorded (apart from the prompts and the model)."""
    old, new = (recorded.load_recorded(n).settings for n in recorded.ERA_PAIR)
    live = demos.era_demo_settings(old)
    for run, rec in zip(live, (old, new), strict=True):
        assert run.framework == rec.framework == "roll"
        assert run.config == rec.config
        assert run.filter_zero_variance == rec.filter_zero_variance
        assert (run.beta, run.reward, run.lr) == (rec.beta, rec.reward, rec.lr)
    assert [r.filter_zero_variance for r in live] == [False, True]
