"""Your run's analyses are bounded by the file: the PODS sweep, the history over steps.

Figures of the defect: a CSV of one prompt x 8,000 rows made the PODS sweep try every m from 2
to n on every interaction (61 s a page run; 12,000 rows did not finish in 30 s); the history of a
200,000-step file was recomputed on every rerun. The bounds are checked as work counted (points
swept, computations run), never as time: a busy machine changes the seconds, not the work.
"""

from __future__ import annotations

import pytest
import streamlit as st
import torch

from roll_viz.analysis import downsampling
from roll_viz.ui import your_run_page as runs
from tests.ui import apptest


def test_sweep_points_are_capped():
    assert runs.sweep_ms(5) == [2, 3, 4, 5]
    ms = runs.sweep_ms(8000)
    assert len(ms) <= runs.MAX_SWEEP_POINTS
    assert ms[0] == 2
    assert ms[-1] == 8000


def test_the_capped_sweep_of_12000_rollouts_is_bounded():
    rewards = torch.rand(1, 12_000, generator=torch.Generator().manual_seed(0)).double()
    table = downsampling.sweep(rewards, runs.sweep_ms(12_000))
    assert len(table) <= runs.MAX_SWEEP_POINTS * len(downsampling.METHODS)


@pytest.mark.parametrize("rows", [8_000, 12_000])
def test_one_prompt_many_rows_sweeps_capped_points_once(tmp_path, monkeypatch, rows):
    path = tmp_path / f"big{rows}.csv"  # the scanned run is cached by its name
    lines = ["prompt,response,reward"] + [f"p,r{i},{(i * 7919) % 13 / 13:.4f}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("ROLL_VIZ_RUNS", str(tmp_path))
    swept, histories = [], []
    sweep, history_table = downsampling.sweep, runs.history.history_table

    def counted_sweep(rewards, ms):
        swept.append((int(rewards.shape[-1]), len(ms)))
        return sweep(rewards, ms)

    def counted_history(run):
        histories.append(run)
        return history_table(run)

    monkeypatch.setattr(downsampling, "sweep", counted_sweep)
    monkeypatch.setattr(runs.history, "history_table", counted_history)
    st.cache_data.clear()  # the sweep and the history are cached by the run's name
    at = apptest.open_page("your_run")
    at.selectbox(key="run_pick").select(f"dir:big{rows}.csv").run()
    assert not at.exception, [e.message for e in at.exception]
    assert swept == [(rows, len(runs.sweep_ms(rows)))]  # one sweep, of at most the cap
    assert swept[0][1] <= runs.MAX_SWEEP_POINTS
    assert len(histories) <= 1
    at.run()  # a rerun reads the cached sweep and history
    assert not at.exception
    assert len(swept) == 1
    assert len(histories) <= 1


def test_sweep_grids_are_thinned_with_both_ends():
    grid = tuple(float(g) for g in range(2, 8001))
    thin = runs.capped_grid(grid)
    assert len(thin) <= runs.MAX_SWEEP_POINTS
    assert thin[0] == 2.0
    assert thin[-1] == 8000.0
    assert list(thin) == sorted(thin)
    assert runs.capped_grid((0.0, 0.5, 1.0)) == (0.0, 0.5, 1.0)


def test_sensitivity_on_a_step_of_8000_rollouts_is_bounded(tmp_path, monkeypatch):
    path = tmp_path / "big.csv"
    lines = ["prompt,response,reward"] + [f"p,r{i},{(i * 7919) % 13 / 13:.4f}" for i in range(8000)]
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("ROLL_VIZ_RUNS", str(tmp_path))
    at = apptest.open_page("sensitivity", dump="dir:big.csv", dump_step="0", sw="G")
    assert not at.exception, [e.message for e in at.exception]
    assert at.selectbox(key="sw").value == "G"
    assert "your run" in " ".join(i.value for i in at.sidebar.info)  # the 8,000-rollout step
