"""Your run's analyses are bounded by the file: the PODS sweep, the history over steps.

Figures of the defect: a CSV of one prompt x 8,000 rows made the PODS sweep try every m from 2
to n on every interaction (61 s a page run; 12,000 rows did not finish in 30 s); the history of a
200,000-step file was recomputed on every rerun.
"""

from __future__ import annotations

import time

import pytest
import torch

from roll_viz.analysis import downsampling
from roll_viz.ui import your_run_page as runs
from tests.ui import apptest

PAGE_BUDGET_S = 30.0


def test_sweep_points_are_capped():
    assert runs.sweep_ms(5) == [2, 3, 4, 5]
    ms = runs.sweep_ms(8000)
    assert len(ms) <= runs.MAX_SWEEP_POINTS
    assert ms[0] == 2
    assert ms[-1] == 8000


def test_the_capped_sweep_of_12000_rollouts_is_quick():
    rewards = torch.rand(1, 12_000, generator=torch.Generator().manual_seed(0)).double()
    t0 = time.perf_counter()
    table = downsampling.sweep(rewards, runs.sweep_ms(12_000))
    assert time.perf_counter() - t0 < 10.0
    assert len(table) <= runs.MAX_SWEEP_POINTS * len(downsampling.METHODS)


@pytest.mark.parametrize("rows", [8_000, 12_000])
def test_one_prompt_many_rows_opens_within_the_budget_and_reruns_fast(tmp_path, monkeypatch, rows):
    path = tmp_path / "big.csv"
    lines = ["prompt,response,reward"] + [f"p,r{i},{(i * 7919) % 13 / 13:.4f}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("ROLL_VIZ_RUNS", str(tmp_path))
    t0 = time.perf_counter()
    at = apptest.open_page("your_run")
    at.selectbox(key="run_pick").select("dir:big.csv").run()
    first = time.perf_counter() - t0
    assert not at.exception, [e.message for e in at.exception]
    assert first < PAGE_BUDGET_S
    t1 = time.perf_counter()
    at.run()  # a rerun reads the cached sweep and history
    again = time.perf_counter() - t1
    assert not at.exception
    assert again < PAGE_BUDGET_S / 2


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
    t0 = time.perf_counter()
    at = apptest.open_page("sensitivity", dump="dir:big.csv", dump_step="0", sw="G")
    assert not at.exception, [e.message for e in at.exception]
    assert time.perf_counter() - t0 < PAGE_BUDGET_S * 2
    assert at.selectbox(key="sw").value == "G"
    assert "your run" in " ".join(i.value for i in at.sidebar.info)  # the 8,000-rollout step
