"""The Training page's instant demos beyond reward hacking: adaptive beta, local vs global scale.

Each demo plays its recorded run (``roll_viz.data.recorded_runs``) at once, with no model; its
"Train live" button starts the same settings on the sidebar's prompts in this session's slots
(adaptive beta in slot C, GRPO and REINFORCE++ in slots A and B). Once live runs of a demo exist
the tab shows them with step k / N, seconds per step and the time left, and the recording only as
a faint overlay (off unless asked for). A tab finds its live runs by their labels
(``ADAPTIVE_LIVE``, ``LOCAL_GLOBAL_LIVE``).
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from roll_viz.lm.runfile import TrainRun, TrainSettings
from roll_viz.lm.train import TrainRunner
from roll_viz.ui import training_page as tr
from roll_viz.ui.resources import cached_models
from roll_viz.ui.state import AppState
from roll_viz.ui.widgets import explainer, plot
from roll_viz.views import training_charts

#: step count of the adaptive-beta and local-vs-global demos (as recorded)
DEMO_STEPS = 30
#: labels of the live demo runs (a tab shows the live runs that carry its labels)
ADAPTIVE_LIVE = "adaptive beta, target KL 0.1 (live)"
LOCAL_GLOBAL_LIVE = ("GRPO, group scale (live)", "REINFORCE++, batch scale (live)")
ADAPTIVE_SLOT = "C"
LOCAL_GLOBAL_SLOTS = ("A", "B")


# ---------------------------------------------------------------------------------------------
# Settings of the live demo runs


def _demo_base(base: TrainSettings) -> TrainSettings:
    """The recorded demos' shared settings on the sidebar's prompts (reward, lr, steps)."""
    return tr.vary(base, "", {"reward": tr.HACK_REWARD, "lr": 1e-3,
                              "steps": max(base.steps, DEMO_STEPS)})  # fmt: skip


def adaptive_demo_settings(base: TrainSettings) -> TrainSettings:
    """The adaptive-beta demo's settings (as recorded: ROLL GRPO, beta 0.1, target 0.1, h 10)."""
    return tr.vary(
        _demo_base(base),
        ADAPTIVE_LIVE,
        {
            "framework": "roll",
            "config": {"adv_estimator": "grpo"},
            "beta": 0.1,
            "beta_mode": "adaptive",
            "target_kl": 0.1,
            "horizon": 10.0,
        },
    )


def local_global_demo_settings(base: TrainSettings) -> list[TrainSettings]:
    """The GRPO and REINFORCE++ runs of the local-vs-global demo (verl, beta 0, as recorded)."""
    return [
        tr.vary(
            _demo_base(base),
            label,
            {
                "framework": "verl",
                "config": {"adv_estimator": estimator},
                "beta": 0.0,
                "beta_mode": "fixed",
            },
        )
        for label, estimator in zip(LOCAL_GLOBAL_LIVE, ("grpo", "reinforce_plus_plus"), strict=True)
    ]


def demo_runners(labels: Sequence[str]) -> list[tuple[str, TrainRunner]]:
    """(slot, runner) of this session's runs started by a demo (matched by their labels)."""
    return [(s, r) for s, r in sorted(tr.runners().items()) if r.settings.label in labels]


def start_adaptive(state: AppState) -> None:
    """Button callback: the adaptive-beta demo, live, in slot C."""
    bundle = cached_models(state.model)
    base, _ = tr.base_settings(state, bundle.spec)
    tr.start_run(bundle, ADAPTIVE_SLOT, adaptive_demo_settings(base))


def start_local_global(state: AppState) -> None:
    """Button callback: GRPO in slot A and REINFORCE++ in slot B, live."""
    bundle = cached_models(state.model)
    base, _ = tr.base_settings(state, bundle.spec)
    for slot, settings in zip(LOCAL_GLOBAL_SLOTS, local_global_demo_settings(base), strict=True):
        tr.start_run(bundle, slot, settings)


# ---------------------------------------------------------------------------------------------
# Recordings


def adaptive_recording() -> TrainRun | None:
    """The recorded closed-loop adaptive-beta run, or None when it is not installed."""
    name = tr.recorded.ADAPTIVE
    return tr.recorded_run(name) if name in tr.recorded_names() else None


def local_global_recordings() -> list[TrainRun]:
    """The recorded GRPO and REINFORCE++ runs that are installed (in that order)."""
    installed = tr.recorded_names()
    return [tr.recorded_run(n) for n in tr.recorded.LOCAL_GLOBAL_PAIR if n in installed]


def adaptive_loop_chart(run: TrainRun, key: str, overlay: TrainRun | None = None) -> None:
    """Beta and KL over the steps of an adaptive run (target line), with its numbers below."""
    plot(training_charts.adaptive_beta_loop(run, overlay=overlay), key=key)
    summary = training_charts.adaptive_summary(run)
    if summary:
        st.caption(summary[0].upper() + summary[1:])


def _recording_note(names: Sequence[str]) -> None:
    """The recordings' step counts and the commands that made them, folded."""
    installed = [n for n in names if n in tr.recorded_names()]
    if not installed:
        return
    with st.expander("The recording: what it is and the command that made it"):
        for name in installed:
            run = tr.recorded_run(name)
            meta = tr.RECORDED[name]
            st.markdown(f"**{meta.title}**: {len(run.steps)} steps on {run.model}. "
                        f"{meta.description}")  # fmt: skip
            st.code(meta.command, language="bash")


def _overlay_toggle(live: bool, has_recording: bool, key: str) -> bool:
    """Show the recording: on by default alone, off (and only faint) once live runs exist."""
    return st.toggle(
        "Overlay the recording (faint)" if live else "Show the recorded run (instant)",
        value=has_recording and not live,
        key=f"{key}_live" if live else key,
        disabled=not has_recording,
    )


# ---------------------------------------------------------------------------------------------
# The tabs


def adaptive_tab(state: AppState, refresh: float | None) -> None:
    """Tab: beta adapting to a target KL on the real KL of each step (a closed loop)."""
    live = bool(demo_runners([ADAPTIVE_LIVE]))
    recording = adaptive_recording()
    c1, c2 = st.columns(2)
    with c1:
        show = _overlay_toggle(live, recording is not None, "tr_adaptive_recorded")
    with c2:
        st.button(
            f"Train it live on the sidebar's prompts (slot {ADAPTIVE_SLOT})",
            key="tr_adaptive_start",
            on_click=start_adaptive,
            args=(state,),
            icon=":material/science:",
            help=f"ROLL GRPO, positive-words reward, lr 1e-3, at least {DEMO_STEPS} steps, beta "
            "0.1, adaptive with target KL 0.1 and horizon 10. Each step takes seconds on a GPU, "
            "up to minutes on a busy CPU.",
        )

    @st.fragment(run_every=refresh)
    def adaptive_panel() -> None:
        table = demo_runners([ADAPTIVE_LIVE])
        for slot, runner in table:
            tr.status_line(runner, slot)  # step k / N, s per step, time left
        overlay = recording if show else None
        if table:
            adaptive_loop_chart(table[0][1].run(), "tr_adaptive_curves", overlay=overlay)
        elif overlay is not None:
            adaptive_loop_chart(overlay, "tr_adaptive_curves")
        else:
            st.info("Train it live or show the recorded run.", icon=":material/info:")

    adaptive_panel()
    explainer(
        "The adaptive controller (Ziegler et al. 2019; ROLL, verl, OpenRLHF) moves beta after "
        "every step: beta <- beta x (1 + clip(KL / target - 1, -0.2, 0.2) x n / horizon). Here "
        "the loop is **closed**: each step's KL comes from the policy that the previous betas "
        "shaped. **Left, beta**: it falls while the KL is below the target (the penalty is "
        "loosened) and turns once the KL passes the **dashed target line**; it keeps rising "
        "while the KL is above the target. **Right, the KL** the controller sees: it climbs, "
        "overshoots while beta is still small, and is brought back to the target as beta "
        "grows; beta turns down again when the KL dips below it. Compare the reward-hacking "
        "run with beta = 0, whose KL runs away to 1.7.",
        title="Adaptive beta: what to look for",
    )
    _recording_note([tr.recorded.ADAPTIVE])


def local_global_tab(state: AppState, refresh: float | None) -> None:
    """Tab: GRPO (each group's scale) against REINFORCE++ (the batch's scale) over steps."""
    live = bool(demo_runners(LOCAL_GLOBAL_LIVE))
    recordings = local_global_recordings()
    c1, c2 = st.columns(2)
    with c1:
        show = _overlay_toggle(live, bool(recordings), "tr_lg_recorded")
    with c2:
        st.button(
            "Train both live on the sidebar's prompts (slots A and B)",
            key="tr_lg_start",
            on_click=start_local_global,
            args=(state,),
            icon=":material/science:",
            help=f"verl, beta = 0, positive-words reward, lr 1e-3, at least {DEMO_STEPS} steps: "
            "GRPO in slot A, REINFORCE++ in slot B.",
        )

    @st.fragment(run_every=refresh)
    def local_global_panel() -> None:
        table = demo_runners(LOCAL_GLOBAL_LIVE)
        for slot, runner in table:
            tr.status_line(runner, slot)
        runs = [runner.run() for _, runner in table]
        faint: tuple[int, ...] = ()
        if show and recordings:
            if runs:
                faint = tuple(range(len(runs), len(runs) + len(recordings)))
            runs += recordings
        if not runs:
            st.info("Train them live or show the recorded pair.", icon=":material/info:")
            return
        if not any(r.steps for r in runs):
            st.info("No steps yet: the curves appear after the first step.",
                    icon=":material/hourglass:")  # fmt: skip
            return
        plot(training_charts.local_global_curves(runs, faint=faint), key="tr_lg_curves")
        st.dataframe(training_charts.scale_table(runs), hide_index=True, width="stretch")

    local_global_panel()
    explainer(
        "The same reward, seed and prompts, two ways to scale it. **GRPO (local)** subtracts "
        "each prompt's group mean and divides by the group's std: every group with any spread "
        "gets advantages of size about 1, however small its reward differences. **REINFORCE++ "
        "(global)** whitens the returns over the whole batch: a prompt is compared with every "
        "answer in the batch, so its small differences stay small and a group that scores "
        "above the batch gets only positive advantages. Compare the **advantage std** (GRPO "
        "0.87 with G = 4, REINFORCE++ 1.00, at every step, whatever the reward's scale) and "
        "the **|A| mean** where a group's answers all score the same: GRPO gives that group 0 "
        "(its |A| mean drops), REINFORCE++ still pushes it against the batch.",
        title="GRPO vs REINFORCE++: what to look for",
    )
    _recording_note(tr.recorded.LOCAL_GLOBAL_PAIR)
