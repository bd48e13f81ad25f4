"""A run in the server's folder that changes is read anew: a dump rewritten under the same name,
and a folder a running job keeps adding step files to (``run_source.run_version``).

Before, the scan was cached by the run's name: the page kept the first version until the server
restarted, the new steps of a live verl ``rollout_data_dir`` never appeared.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from roll_viz.ui import run_source
from tests.ui import apptest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
HEADER = "prompt,response,reward,group,step\n"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setenv("ROLL_VIZ_RUNS", str(runs))
    return runs


def _steps(at) -> int:
    return int(next(m.value for m in at.metric if m.label == "Steps"))


def _rows(step: int, rewards: tuple[float, ...]) -> str:
    return "".join(f"Say hi,hi {i},{r},b,{step}\n" for i, r in enumerate(rewards))


def _your_run(run_id: str):
    """The Your run page with ``run_id`` picked."""
    at = apptest.open_page("your_run")
    at.selectbox(key="run_pick").select(run_id).run()
    return at


def _rewards_on(run_id: str):
    """The Rewards page with the last step of ``run_id`` the data of every page."""
    at = _your_run(run_id)
    at.button(key="run_use").click().run()
    at.switch_page(apptest.page_file("rewards")).run()
    return at


def test_a_dump_rewritten_under_the_same_name_is_read_anew(folder):
    run = folder / "run.csv"
    run.write_text(HEADER + _rows(0, (0.0, 1.0)))
    at = _your_run("dir:run.csv")
    assert _steps(at) == 1
    at.run()
    assert _steps(at) == 1
    run.write_text(HEADER + _rows(0, (0.0, 1.0)) + _rows(1, (1.0, 1.0)))
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert _steps(at) == 2


def test_a_folder_that_grows_shows_its_new_steps(folder):
    job = folder / "job"
    job.mkdir()
    shutil.copy(FIXTURES / "verl" / "1.jsonl", job / "1.jsonl")
    at = _your_run("dir:job")
    assert _steps(at) == 1
    shutil.copy(FIXTURES / "verl" / "2.jsonl", job / "2.jsonl")  # the job wrote its next step
    at.run()
    assert _steps(at) == 2


def test_every_page_reads_the_step_as_it_is_now(folder):
    run = folder / "run.csv"
    run.write_text(HEADER + _rows(0, (0.0, 1.0, 0.5)))
    at = _rewards_on("dir:run.csv")
    assert apptest.reward_bars(at)[0] == [0.0, 1.0, 0.5]
    run.write_text(HEADER + _rows(0, (0.25, 0.75, 1.0)))  # the same step, rescored
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert apptest.reward_bars(at)[0] == [0.25, 0.75, 1.0]


def test_the_version_follows_the_files_and_nothing_else(folder):
    run = folder / "run.csv"
    run.write_text(HEADER + _rows(0, (0.0, 1.0)))
    first = run_source.run_version("dir:run.csv")
    assert run_source.run_version("dir:run.csv") == first  # unchanged: the cache holds
    (folder / "other.csv").write_text(HEADER)  # another run beside it changes nothing
    assert run_source.run_version("dir:run.csv") == first
    run.write_text(HEADER + _rows(0, (0.25, 1.0)))  # rescored
    assert run_source.run_version("dir:run.csv") != first


def test_a_page_on_a_run_step_takes_the_version_once_a_rerun(folder, monkeypatch):
    # a stat per file of the run: the sidebar takes it and the state carries it to the page
    run = folder / "run.csv"
    run.write_text(HEADER + _rows(0, (0.0, 1.0, 0.5)))
    at = _rewards_on("dir:run.csv")
    calls = []
    taken = run_source.run_version

    def counted(run_id: str) -> str:
        calls.append(run_id)
        return taken(run_id)

    monkeypatch.setattr(run_source, "run_version", counted)
    run.write_text(HEADER + _rows(0, (0.25, 0.75, 1.0)))  # every cache misses: the most calls
    at.run()
    assert apptest.reward_bars(at)[0] == [0.25, 0.75, 1.0]
    assert calls == ["dir:run.csv"]
