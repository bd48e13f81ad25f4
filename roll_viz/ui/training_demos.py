"""The Training page's instant demos beyond reward hacking: adaptive beta, local vs global, eras.

Each demo plays its recorded run (``roll_viz.data.recorded_runs``) at once, with no model; its
"Train live" button starts the same settings on the sidebar's prompts in this session's slots
(adaptive beta in slot C, GRPO and REINFORCE++ in slots A and B, GRPO as published and the
'defaults of 2026', the ScaleRL / Olmo 3 recipe of record, in slots A and B). Once live runs of
a demo exist the tab shows them with step k / N, seconds per step and the time left, and the
recording only as a faint overlay (off unless asked for). A tab finds its live runs by their labels
(``ADAPTIVE_LIVE``, ``LOCAL_GLOBAL_LIVE``, ``ERA_LIVE``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import streamlit as st

from roll_viz.core.pipeline.eras import DEFAULTS_2026, GRPO_2024
from roll_viz.data import recorded_runs as recorded
from roll_viz.lm.runfile import DEFAULT_OPTION, TrainRun, TrainSettings
from roll_viz.lm.train import TrainRunner
from roll_viz.ui import training_page as tr
from roll_viz.ui import training_view as tv
from roll_viz.ui.resources import cached_models
from roll_viz.ui.state import AppState
from roll_viz.ui.widgets import explainer, plot
from roll_viz.views import training_charts

#: step count of the adaptive-beta and local-vs-global demos (as recorded)
DEMO_STEPS = 30
#: labels of the live demo runs (a tab shows the live runs that carry its labels)
ADAPTIVE_LIVE = "adaptive beta, target KL 0.1 (live)"
LOCAL_GLOBAL_LIVE = ("GRPO, group scale (live)", "REINFORCE++, batch scale (live)")
ERA_LIVE = ("GRPO as published (2024) (live)", "defaults of 2026 (live)")
ADAPTIVE_SLOT = "C"
LOCAL_GLOBAL_SLOTS = ("A", "B")
ERA_SLOTS = ("A", "B")
#: what to look at in the era tab (the recorded pair's numbers)
ERA_CAPTION = (
    "Two of the Eras page's recipes, GRPO as published and ScaleRL / Olmo 3 (the 'defaults of "
    "2026'), trained in ROLL on the same prompts, reward (positive words, "
    "one the policy can game) and seed: step 0 draws the same answers. **Zero-variance "
    "filter** (share of groups, all rewards equal; advantage |A| mean): at step 0 one prompt's "
    "four answers score the same; GRPO 2024 keeps them at advantage 0 (|A| mean 0.375), the "
    "2026 run drops them and trains on the other group (0.75). Late in the 2026 run the answers "
    "converge: at step 26 every group is flat and the step makes no update, at 27 and 28 half "
    "the groups are dropped. **Batch std**: with the group's std GRPO's advantages have std "
    "0.87 whenever both groups have spread (G = 4); divided by the batch's std they move (0.31 "
    "to 0.97). **No KL**: the 2024 run pays a k3 KL loss at beta 0.04, small beside the "
    "advantages (its KL still reaches 1.97 at step 16); without it the 2026 run games the "
    "reward three steps sooner (3.8 at step 21 and 6.2 at 22, where 2024 is at 1.06) and ends "
    "with less entropy (0.06 against 0.37). **Clip-higher** cannot show here: one update per "
    "batch, so the ratio is exactly 1 and nothing clips; it acts from a second minibatch or "
    "epoch. Token mean against seq-mean-token-mean weigh tokens alike while every answer has "
    "32 tokens; they part where lengths differ (steps 11 to 19 of the 2024 run)."
)
#: the era tab's panels: reward, KL, the share of flat groups (the 2026 run drops them), the
#: push per token, entropy and length (one update per batch: the ratio is 1, nothing clips)
ERA_PANELS = (
    "reward_mean",
    "kl",
    "zero_spread_share",
    "adv_abs_mean",
    "entropy",
    "response_length",
)


# ---------------------------------------------------------------------------------------------
# Settings of the live demo runs


def _demo_base(base: TrainSettings) -> TrainSettings:
    """The recorded demos' shared settings on the sidebar's prompts (reward, lr, steps)."""
    return tr.vary(
        base, "", {"reward": tr.HACK_REWARD, "lr": 1e-3, "steps": max(base.steps, DEMO_STEPS)}
    )


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


def era_demo_settings(base: TrainSettings) -> list[TrainSettings]:
    """The two era presets as recorded (ROLL, beta 0 in the reward, the trainer as sampler).

    Each era's whole native config: the sidebar's keys do not mix in.
    """
    return [
        replace(
            _demo_base(base),
            label=label,
            framework="roll",
            config=era.config("roll"),
            filter_zero_variance=era.filter_zero_variance,
            beta=0.0,
            beta_mode="fixed",
            loss_option=DEFAULT_OPTION,
            sampler="fp32",
        )
        for label, era in zip(ERA_LIVE, (GRPO_2024, DEFAULTS_2026), strict=True)
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


def start_eras(state: AppState) -> None:
    """Button callback: GRPO 2024 in slot A and the 2026 defaults in slot B, live."""
    bundle = cached_models(state.model)
    base, _ = tr.base_settings(state, bundle.spec)
    for slot, settings in zip(ERA_SLOTS, era_demo_settings(base), strict=True):
        tr.start_run(bundle, slot, settings)


# ---------------------------------------------------------------------------------------------
# Recordings


def adaptive_recording() -> TrainRun | None:
    """The recorded closed-loop adaptive-beta run, or None when it is not installed."""
    name = recorded.ADAPTIVE
    return tv.recorded_run(name) if name in tv.recorded_names() else None


def local_global_recordings() -> list[TrainRun]:
    """The recorded GRPO and REINFORCE++ runs that are installed (in that order)."""
    installed = tv.recorded_names()
    return [tv.recorded_run(n) for n in recorded.LOCAL_GLOBAL_PAIR if n in installed]


def era_recordings() -> list[TrainRun]:
    """The recorded era pair that is installed (2024 first)."""
    installed = tv.recorded_names()
    return [tv.recorded_run(n) for n in recorded.ERA_PAIR if n in installed]


def adaptive_loop_chart(run: TrainRun, key: str, overlay: TrainRun | None = None) -> None:
    """Beta and KL over the steps of an adaptive run (target line), with its numbers below."""
    plot(training_charts.adaptive_beta_loop(run, overlay=overlay), key=key)
    summary = training_charts.adaptive_summary(run)
    if summary:
        st.caption(summary[0].upper() + summary[1:])


def _recording_note(names: Sequence[str]) -> None:
    """The recordings' step counts and the commands that made them, folded."""
    installed = [n for n in names if n in tv.recorded_names()]
    if not installed:
        return
    with st.expander("The recording: what it is and the command that made it"):
        for name in installed:
            run = tv.recorded_run(name)
            meta = tv.RECORDED[name]
            st.markdown(
                f"**{meta.title}**: {len(run.steps)} steps on {run.model}. {meta.description}"
            )
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


def _pair_controls(
    state: AppState,
    labels: Sequence[str],
    recordings: Sequence[TrainRun],
    key: str,
    start: Callable[[AppState], None],
    help_text: str,
) -> bool:
    """A pair tab's two controls side by side: the recording toggle and "Train both live".

    Returns:
        Whether the recording is shown (the toggle ``{key}_recorded``).
    """
    c1, c2 = st.columns(2)
    with c1:
        show = _overlay_toggle(bool(demo_runners(labels)), bool(recordings), f"{key}_recorded")
    with c2:
        st.button(
            "Train both live on the sidebar's prompts (slots A and B)",
            key=f"{key}_start",
            on_click=start,
            args=(state,),
            icon=":material/science:",
            help=help_text,
        )
    return show


def _pair_runs(
    labels: Sequence[str], recordings: Sequence[TrainRun]
) -> tuple[list[TrainRun], tuple[int, ...]] | None:
    """A pair tab's runs: the live ones (their status lines drawn) then the recordings shown.

    Returns:
        (runs, the indices drawn faint: the recordings when live runs exist), or None after
        telling the user there is nothing to draw yet.
    """
    table = demo_runners(labels)
    for slot, runner in table:
        tv.status_line(runner, slot)
    runs = [runner.run() for _, runner in table]
    faint = tuple(range(len(runs), len(runs) + len(recordings))) if runs else ()
    runs += recordings
    if not runs:
        st.info("Train them live or show the recorded pair.", icon=":material/info:")
        return None
    if not any(r.steps for r in runs):
        st.info(
            "No steps yet: the curves appear after the first step.", icon=":material/hourglass:"
        )
        return None
    return runs, faint


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
            tv.status_line(runner, slot)  # step k / N, s per step, time left
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
    _recording_note([recorded.ADAPTIVE])


def local_global_tab(state: AppState, refresh: float | None) -> None:
    """Tab: GRPO (each group's scale) against REINFORCE++ (the batch's scale) over steps."""
    recordings = local_global_recordings()
    show = _pair_controls(
        state,
        LOCAL_GLOBAL_LIVE,
        recordings,
        "tr_lg",
        start_local_global,
        f"verl, beta = 0, positive-words reward, lr 1e-3, at least {DEMO_STEPS} steps: "
        "GRPO in slot A, REINFORCE++ in slot B.",
    )

    @st.fragment(run_every=refresh)
    def local_global_panel() -> None:
        pair = _pair_runs(LOCAL_GLOBAL_LIVE, recordings if show else [])
        if pair is None:
            return
        runs, faint = pair
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
    _recording_note(recorded.LOCAL_GLOBAL_PAIR)


def era_tab(state: AppState, refresh: float | None) -> None:
    """Tab: "GRPO as published (2024)" against the "defaults of 2026", same prompts and seed."""
    recordings = era_recordings()
    show = _pair_controls(
        state,
        ERA_LIVE,
        recordings,
        "tr_era",
        start_eras,
        f"ROLL, positive-words reward, lr 1e-3, at least {DEMO_STEPS} steps: GRPO as "
        "published in slot A, the 2026 defaults (ScaleRL / Olmo 3) in slot B (the Eras page's "
        "recipes).",
    )

    @st.fragment(run_every=refresh)
    def era_panel() -> None:
        pair = _pair_runs(ERA_LIVE, recordings if show else [])
        if pair is None:
            return
        runs, faint = pair
        fig = training_charts.training_curves(runs, ERA_PANELS, per_prompt=False, faint=faint)
        plot(fig, key="tr_era_curves")

    era_panel()
    explainer(ERA_CAPTION, title="2024 vs 2026: what to look at")
    _recording_note(recorded.ERA_PAIR)
