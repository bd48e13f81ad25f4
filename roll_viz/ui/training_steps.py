"""One step of a training run, recorded or live: the step scrubber and the settings table.

The scrubber shows a kept step's samples as token heatmaps (exact KL, advantages) and its answers
beside step 0's; the Training page, Your run's run files and the live slots share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st
import torch

from roll_viz.lm.runfile import TrainRun
from roll_viz.ui.table_fit import table
from roll_viz.ui.widgets import plot
from roll_viz.views import heatmaps, training_charts

KEY_SCRUB = "tr_step"


def scrubber(run: TrainRun, key: str) -> int | None:
    """The step scrubber: a step's samples with token heatmaps, and step 0 beside it."""
    steps = run.sampled_steps()
    if not steps:
        return None
    step = st.select_slider(
        "Step (samples are kept every few steps)",
        options=steps,
        value=steps[-1],
        key=f"{KEY_SCRUB}_{key}",
    )
    record = run.steps[step]
    samples = record.samples
    rollout = samples.to_rollout()
    first = run.steps[0].samples
    c1, c2 = st.columns(2)
    with c1:
        kl_map = heatmaps.exact_kl_heatmap(rollout)
        kl_map.update_layout(title_text=f"{kl_map.layout.title.text} at step {step}")
        plot(kl_map, key=f"tr_kl_map_{key}")
    with c2:
        plot(
            heatmaps.heatmap(
                _grid(samples.advantages, rollout),
                rollout.response_mask,
                rollout=rollout,
                title=f"Advantages at step {step}",
                quantity="advantage A",
                signed=True,
                zmax=3.0,
            ),
            key=f"tr_adv_map_{key}",
        )
    # rewards first, then the chosen step's answer: a long step-0 answer hid it at 1280 px
    frame = pd.DataFrame(
        {
            "prompt": [samples.prompts[g] for g in samples.group_ids],
            "reward at step 0": list(first.rewards) if first else [None] * len(samples.responses),
            f"reward at step {step}": list(samples.rewards),
            f"answer at step {step}": list(samples.responses),
            "answer at step 0": list(first.responses) if first else [""] * len(samples.responses),
        }
    )
    table(frame, key="tr_step_answers")
    return step


def _grid(rows: Sequence[Sequence[float]], rollout: Any) -> Any:
    out = torch.zeros_like(rollout.response_mask)
    for b, row in enumerate(rows):
        if row:
            out[b, : len(row)] = torch.tensor(row, dtype=out.dtype)
    return out


def settings_panel(runs: Sequence[TrainRun]) -> None:
    """The settings of the runs, differing rows first."""
    frame = training_charts.settings_table(runs)
    st.dataframe(frame, width="stretch")
