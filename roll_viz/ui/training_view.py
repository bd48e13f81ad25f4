"""How a training run is shown: a runner's status line and buttons, the curves, recorded runs.

The Training page's display half (``training_page`` holds the runners and the controls): the
page, its demos and Your run's run files draw runs with these.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import streamlit as st

from roll_viz.data import recorded_runs as recorded
from roll_viz.lm.runfile import TrainRun
from roll_viz.lm.train import TrainRunner
from roll_viz.ui import reconnect, training_mu
from roll_viz.ui.training_page import KEY_LIVE_MARK, KEY_RUN, drop_run
from roll_viz.ui.widgets import explainer, plot
from roll_viz.views import entropy_charts, training_charts

#: how often a panel that watches a running training redraws (seconds): often enough to follow
#: the steps (each takes seconds to minutes), rarely enough to keep the server idle
REFRESH_SECONDS = 5.0


def seconds_per_step(records: Sequence[Any], last: int = 3) -> float:
    """Mean wall time of the last ``last`` steps (0.0 before the first step)."""
    times = [float((r.metrics.get("seconds") or {}).get("total") or 0.0) for r in records[-last:]]
    times = [t for t in times if t > 0]
    return sum(times) / len(times) if times else 0.0


def eta_text(seconds: float) -> str:
    """'40 s', '3 min', '1 h 05 min': a time left, rounded for reading."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def status_line(runner: TrainRunner, slot: str) -> None:
    """Progress bar and status text of one runner."""
    total = runner.settings.steps
    done = runner.steps_done
    label = runner.settings.label or f"run {slot}"
    text = f"**{slot}: {html.escape(label)}**: {runner.status}, step {done} / {total}"
    st.query_params[KEY_LIVE_MARK] = reconnect.work_mark(done)  # a restart can say what was lost
    place = runner.queue_position
    if runner.status == "running" and place:
        text += f", waiting for the model: number {place} in line (runs take turns, one step each)"
    per_step = seconds_per_step(runner.records())
    if per_step:
        text += f", {per_step:.1f} s per step"
        if runner.status == "running" and done < total:
            text += f", about {eta_text(per_step * (total - done))} left"
    st.progress(min(done / max(total, 1), 1.0), text=text)
    if runner.status == "error":
        st.error(
            f"Run {slot} stopped with an error after {done} step(s); the steps done are kept. "
            f"{runner.error}",
            icon=":material/error:",
        )


def run_buttons(runner: TrainRunner, slot: str) -> None:
    """Pause / resume / stop / reset buttons of one runner."""
    cols = st.columns(4)
    running = runner.status == "running"
    cols[0].button(
        "Pause",
        key=f"tr_pause_{slot}",
        on_click=runner.pause,
        disabled=not running,
        icon=":material/pause:",
    )
    cols[1].button(
        "Resume",
        key=f"tr_resume_{slot}",
        on_click=runner.resume,
        disabled=runner.status not in ("paused", "stopped"),
        icon=":material/play_arrow:",
    )
    cols[2].button(
        "Stop",
        key=f"tr_stop_{slot}",
        on_click=runner.stop,
        disabled=runner.status not in ("running", "paused"),
        icon=":material/stop:",
    )
    cols[3].button(
        "Reset",
        key=f"tr_reset_{slot}",
        on_click=drop_run,
        args=(slot,),
        icon=":material/restart_alt:",
    )


def curves(
    runs: Sequence[TrainRun], key: str, current_step: int | None = None, faint: Sequence[int] = ()
) -> None:
    """The metric small multiples of 1-3 runs (``faint``: indices drawn faint), with help."""
    if not runs or not any(r.steps for r in runs):
        st.info(
            "No steps yet: the curves appear after the first step.", icon=":material/hourglass:"
        )
        return
    panels = training_charts.DEFAULT_PANELS
    if any(r.metrics.get("sampler", "fp32") != "fp32" for run in runs for r in run.steps[:1]):
        panels = (*panels, *training_mu.MISMATCH_PANELS)  # the sampler's gap to the trainer
    fig = training_charts.training_curves(runs, panels, current_step=current_step, faint=faint)
    plot(fig, key=key)
    if entropy_charts.has_entropy_target(runs):
        plot(entropy_charts.entropy_target_figure(runs), key=f"{key}_entropy")
    with st.expander("What each curve means"):
        shown = [training_charts.METRICS[p] for p in panels if p in training_charts.METRICS]
        st.markdown("\n".join(f"- **{title}**: {text}" for title, text in shown))


RECORDED = recorded.RECORDED
HACKING_PAIR = recorded.HACKING_PAIR


def recorded_names() -> list[str]:
    """Names of the recorded runs shipped with the app."""
    return recorded.available()


def recorded_run(name: str) -> TrainRun:
    """The recorded run ``name`` (marked recorded)."""
    return recorded.load_recorded(name)


def recorded_choice() -> str | None:
    """The recorded run named in the URL (``?run=name``), if it exists."""
    name = st.query_params.get(KEY_RUN)
    return name if name in recorded.available() else None


def hacking_explainer() -> None:
    """What to look for in the reward-hacking pair."""
    explainer(
        "The reward counts **positive words** (0.25 each, capped at 10, a cap it never reaches), "
        "so repeating *amazing* scores higher than a good answer. "
        "**Blue, beta = 0**: nothing holds the policy near the reference model. Watch the "
        "**KL climb** step after step while the **reward keeps rising** and the **entropy "
        "falls**; scrub to the last steps and read the answers: in the recorded run they "
        "collapse into *amazing amazing amazing ...* (reward 0.06 at step 0, 7.4 at step 29; "
        "exact KL 1.7 nats per token). "
        "**Orange, beta = 1**: the same reward and seed, but every token pays beta x KL in its "
        "reward; the KL stays near 0.03 and the answers stay ordinary sentences about octopuses "
        "and days. This is why RLHF keeps a KL penalty: a reward is only a proxy.",
        title="Reward hacking: what to look for",
    )
