"""The Training page's async parts: the sampler k steps behind, pi_old's anchor, and their views.

``controls`` draws two selects beside the sampler's: the lag k (``TrainSettings.staleness``, 0..2:
step s samples with the adapter of step s - k) and what the loss uses as pi_old
(``TrainSettings.old_policy``). Both are bound to the URL (``?tr_lag=1&tr_old=current``) and
checked on the server with the page's other fields (``training_page.field_specs``).

``async_tab`` is the page's "Async" tab:

1. the three log-prob columns of a live run's last update (mu, pi_old, pi_theta per token, kept by
   the trainer: ``Trainer.lagged.columns``), PPO's ratio and clip share under each anchor, one
   sample token by token;
2. discard-and-requeue against pacing (``analysis.staleness.discard_vs_pace``) on lengths from
   a seeded synthetic set (hard prompts long every time; the default), a live run or a recorded
   one (instant, no model), per answer or per group: the lengths each trains on.

Model output (tokens, answers) reaches the page only as escaped hover text and plain dataframe
cells.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from roll_viz.analysis import staleness
from roll_viz.data import recorded_runs as recorded
from roll_viz.lm.runfile import MAX_LAG, OLD_POLICIES, TrainRun
from roll_viz.lm.train import TrainRunner
from roll_viz.ui.fields import Field
from roll_viz.ui.table_fit import table
from roll_viz.ui.widgets import plot
from roll_viz.views import staleness_charts

KEY_LAG = "tr_lag"
KEY_OLD = "tr_old"
KEY_TOKENS = "tr_tps"
KEY_BOUND = "tr_max_stale"
KEY_SLOT = "tr_st_slot"
KEY_ROW = "tr_st_row"
KEY_RUN = "tr_st_run"
KEY_UNIT = "tr_st_unit"

LAGS = tuple(range(MAX_LAG + 1))
#: the sampler's speed in tokens per trainer step, and the staleness bounds offered (bounded)
TOKEN_RATES = (4, 8, 16, 32, 64, 128)
BOUNDS = (0, 1, 2, 3, 4)

FIELDS = {
    KEY_LAG: Field(0, options=LAGS),
    KEY_OLD: Field("recomputed", options=OLD_POLICIES),
    KEY_TOKENS: Field(32, options=TOKEN_RATES),
    KEY_BOUND: Field(1, options=BOUNDS),
}

OLD_LABELS = {
    "recomputed": "recomputed at the sampler's weights (correct)",
    "current": "π_old := π_θ (miles #1829, SkyRL #1315)",
    "mu": "π_old := μ (the sampler's log-probs)",
}


def _value(key: str) -> Any:
    spec = FIELDS[key]
    value = st.session_state.get(key, spec.default)
    return value if spec.accepts(value) else spec.default


def chosen() -> tuple[int, str]:
    """(the sampler's lag k, pi_old's anchor) of the page (valid values only)."""
    return int(_value(KEY_LAG)), str(_value(KEY_OLD))


def controls(disabled: bool = False) -> None:
    """The lag and anchor selects, side by side, and one caption on what they do.

    Call after ``training_page.controls`` (which checks these fields' values first).
    """
    c1, c2 = st.columns(2)
    with c1:
        lag = st.selectbox(
            "Sampler lag k (steps behind the trainer)",
            list(LAGS),
            key=KEY_LAG,
            bind="query-params",
            disabled=disabled,
            help=f"Async training: step s samples with the adapter of step s - k (at most "
            f"{MAX_LAG}; prime-rl runs one step behind). Each lag keeps k copies of the LoRA "
            "weights (no optimizer state), so k is bounded.",
        )
    with c2:
        old = st.selectbox(
            "π_old in the loss",
            list(OLD_POLICIES),
            key=KEY_OLD,
            bind="query-params",  # the link carries the value itself (no format_func)
            disabled=disabled,
            help="What PPO's ratio divides by. recomputed: the trainer at the sampler's weights. "
            "current: π_old := π_θ, as a trainer that keeps no old weights does: the ratio is 1 "
            "and nothing is ever clipped. mu: π_old := μ, the sampler's own log-probs.",
        )
    st.caption(f"π_old: {OLD_LABELS.get(str(old), str(old))}.")
    if lag == 0 and old == "recomputed":
        st.caption("Synchronous: the sampler is the adapter being trained (μ, π_old, π_θ agree).")
    elif old == "current":
        st.caption(
            "π_old := π_θ: the loss's ratio is exactly 1 on every token, so clipping is off "
            "however stale the samples (the clip-fraction curve stays at 0)."
        )
    else:
        st.caption(
            f"The sampler runs {lag} step{'s' if lag != 1 else ''} behind: the Async tab shows "
            "μ, π_old and π_θ per token of the last step."
        )


# ---------------------------------------------------------------------------------------------
# 1. The three columns of a live run


def _columns_of(runner: Any) -> Any:
    trainer = runner.trainer
    return None if trainer is None else trainer.lagged.columns


def columns_panel(runners: dict[str, TrainRunner]) -> None:
    """The three columns of a live run's last update (a slot picker when several ran).

    ``runners``: this session's runners by slot (``training_page.runners``).
    """
    table_ = {s: r for s, r in sorted(runners.items()) if _columns_of(r) is not None}
    if not table_:
        st.info(
            "No live run has updated yet: start one in Train live (pick a sampler lag there, "
            "e.g. k = 1), then come back.",
            icon=":material/info:",
        )
        return
    slot = st.segmented_control("Run", list(table_), default=next(iter(table_)), key=KEY_SLOT)
    runner = table_.get(str(slot)) or next(iter(table_.values()))
    cols = _columns_of(runner)
    three = staleness.three_policies(
        cols.mu, cols.old, cols.theta, cols.advantages, cols.mask, cols.eps
    )
    st.caption(
        f"Step {cols.step}: the sampler was the adapter of step {cols.step - cols.lag} (lag "
        f"{cols.lag}); the loss used {OLD_LABELS[cols.old_policy]}, its clip fraction "
        f"{cols.clip_frac:.3f} (mean over the update's epochs)."
    )
    frame = three.table.copy()
    frame["what"] = [OLD_LABELS[a] for a in frame["anchor"]]
    table(frame.drop(columns="anchor"), key="tr_st_anchors")
    st.caption(
        f"Each row: PPO's ratio π_θ / π_old at the first pass under that π_old, and the share "
        f"of tokens clipped at ε = {cols.eps:g} (A > 0 and r > 1 + ε, or A < 0 and r < 1 - ε). "
        "δ = log π_old - log μ is the sampler's numeric gap; drift = log π_θ - log π_old is how "
        "far the trainer moved in k steps."
    )
    rows = list(range(int(cols.mask.shape[0])))
    row = st.selectbox("Sample", rows, key=KEY_ROW) if len(rows) > 1 else 0
    row = row if row in rows else 0
    plot(
        staleness_charts.three_columns_figure(three, row, cols.tokens[row], cols.eps),
        key="tr_st_cols",
    )
    st.dataframe(
        staleness.token_rows(three, row, cols.tokens[row]), hide_index=True, key="tr_st_tokens"
    )


# ---------------------------------------------------------------------------------------------
# 2. Discard stale groups, or pace the sampler


#: the synthetic source: seeded lengths, hard prompts long every time (no run needed)
SYNTHETIC = "synthetic: 64 prompts x 8 attempts, hard prompts long every time"


def _runs(runners: dict[str, TrainRunner]) -> dict[str, Any]:
    """Where lengths come from, label -> a function giving a run (None: the synthetic source).

    The synthetic source first, then the live slots, then the recorded runs (whose answers
    mostly stop at their 32-token cap).
    """
    out: dict[str, Any] = {SYNTHETIC: lambda: None}
    for slot, runner in sorted(runners.items()):
        out[f"live {slot}"] = runner.run
    for name in recorded.available():
        out[f"recorded: {recorded.RECORDED[name].title}"] = lambda n=name: recorded.load_recorded(n)
    return out


def _attempts(run: TrainRun | None, unit: str) -> list[list[int]]:
    if run is None:
        return staleness.synthetic_attempts()
    steps = [
        (r.samples.group_ids, [len(t) for t in r.samples.token_ids])
        for r in run.steps
        if r.samples is not None and r.samples.token_ids
    ]
    units = staleness.attempts_of(steps, unit)[: staleness.MAX_GROUPS]
    return [a[: staleness.MAX_ATTEMPTS] for a in units]


def discard_panel(runners: dict[str, TrainRunner]) -> None:
    """Discard-and-requeue vs pacing on a run's group lengths (tinker-cookbook PR #822)."""
    runs = _runs(runners)
    label = st.selectbox("Lengths from", list(runs), key=KEY_RUN)
    synthetic = label == SYNTHETIC
    c0, c1, c2 = st.columns(3)
    with c0:
        if synthetic:  # one length per prompt and attempt: nothing to choose (no greyed control)
            st.caption(
                "Unit of work: a prompt (the synthetic source has one length per prompt "
                "and attempt)"
            )
            unit = "prompt"
        else:
            unit = st.segmented_control(
                "Unit of work",
                list(staleness.UNITS),
                default="answer",
                key=KEY_UNIT,
                required=True,
                help="answer: each answer on its own. group: a prompt's whole group, done when "
                "its longest answer is (tinker-cookbook discards whole groups).",
            )
            unit = str(unit)
    with c1:
        rate = st.select_slider(
            "Sampler speed (tokens per trainer step)",
            options=list(TOKEN_RATES),
            value=FIELDS[KEY_TOKENS].default,
            key=KEY_TOKENS,
            bind="query-params",
            help="How many tokens of one answer the sampler produces while the trainer takes "
            "one step: a group that needs more is stale by the steps it took beyond the first.",
        )
    with c2:
        bound = st.segmented_control(
            "Max staleness K",
            list(BOUNDS),
            default=1,
            key=KEY_BOUND,
            bind="query-params",
            required=True,
            help="Discard drops a group staler than K and samples its prompt again (tinker's "
            "max_steps_off_policy); pacing makes the trainer wait instead.",
        )
    attempts = _attempts(runs[label](), unit)
    if not attempts:
        st.info("This run kept no samples yet.", icon=":material/info:")
        return
    discard, pace = staleness.discard_vs_pace(attempts, int(rate), int(bound))
    data = [a[0] for a in attempts]
    plot(staleness_charts.lengths_figure(data, discard, pace, unit), key="tr_st_lengths")
    table(staleness.summary(data, discard, pace), key="tr_st_summary")
    st.caption(
        f"{len(attempts)} prompts, seeded: each has its own length scale (log-normal around 40 "
        "tokens), each attempt varies around it."
        if synthetic
        else f"{len(attempts)} {unit}s; attempt 1 is the first kept step's, a requeue draws the "
        "next kept step's (the run samples the same prompts every step)."
    )
    if discard.never:
        st.caption(
            f"Never trained under discard: {len(discard.never)} of {len(attempts)} {unit}s, "
            "every attempt slower than the bound. Pacing trains them, at the cost of the "
            "trainer's waiting steps."
        )


def async_tab(runners: Callable[[], dict[str, TrainRunner]], refresh: float | None) -> None:
    """The Async tab: the three columns of a live run, then discard vs pace.

    ``runners``: gives this session's runners by slot (``training_page.runners``).
    """
    st.markdown(
        "Inference runs a step behind training in the 2026 frameworks (prime-rl; bounded at "
        "a few steps in AReaL, slime / GLM-5, TRL AsyncGRPO). Three policies then meet in one "
        "loss: the sampler **μ** (the adapter of k steps ago, as the sampler reported its "
        "log-probs), **π_old** (the trainer recomputing those tokens at the sampler's weights) "
        "and **π_θ** (the trainer now). A framework that keeps no old weights sets π_old := π_θ "
        "and its clipping is off without a warning (miles #1829, SkyRL #1315, TRL #6945)."
    )
    st.subheader("1. μ, π_old and π_θ on your run's last step")

    @st.fragment(run_every=refresh)
    def live() -> None:
        columns_panel(runners())

    live()
    st.subheader("2. Discard stale groups, or pace the sampler")
    st.markdown(
        "Slow groups are the long ones, and the long ones are often the hard prompts. "
        "Discarding what is staler than K and sampling it again trains on a shorter "
        "distribution than the data; a prompt slower than K steps is never trained on "
        "(tinker-cookbook PR #822). Pacing the sampler (AReaL; Magistral's invariant: the "
        "trained lengths match the data's) trains everything and makes the trainer wait."
    )
    discard_panel(runners())
