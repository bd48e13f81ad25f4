"""The Your run page on the committed fixtures: open a dump, pick a step, drive every page."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz.ui import state as ui_state
from tests.ui import apptest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "runs"


@pytest.fixture
def runs_dir(monkeypatch):
    monkeypatch.setenv("ROLL_VIZ_RUNS", str(FIXTURES))


def open_run_page(run: str) -> AppTest:
    at = apptest.open_page("your_run")
    at.selectbox(key="run_pick").select(f"dir:{run}").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


@pytest.mark.parametrize(
    ("folder", "run"),
    [("", "rllb"), ("", "trl"), ("", "verl"), ("unipo", "run.jsonl"), ("unipo", "run.json"),
     ("plain", "samples.csv"), ("plain", "samples.jsonl"), ("", "roll_dump"), ("", "rollviz")],
)  # fmt: skip
def test_every_format_opens_with_history_and_pods(monkeypatch, folder, run):
    monkeypatch.setenv("ROLL_VIZ_RUNS", str(FIXTURES / folder))
    at = open_run_page(run)
    formats = [m.value for m in at.metric if m.label == "Format"]
    assert formats
    assert formats[0]
    keys = [el.proto.id for el in at.get("plotly_chart")]
    assert any(k.endswith("-run_zero") for k in keys)
    assert not at.error, [e.value for e in at.error]  # every section drew, PODS included


def test_a_step_drives_every_page(runs_dir):
    at = open_run_page("rllb")
    at.button(key="run_use").click().run()
    assert not at.exception
    assert at.session_state[ui_state.KEY_RUN_SOURCE].startswith("run:dir:rllb#")
    for page in ("rewards", "advantages", "kl", "local_global", "frameworks"):
        at.switch_page(apptest.page_file(page)).run()
        assert not at.exception, (page, [e.message for e in at.exception])
        assert not at.error, (page, [e.value for e in at.error])
        info = " ".join(i.value for i in at.sidebar.info)
        assert "your run" in info


def test_trl_cross_check_is_shown(runs_dir):
    at = open_run_page("trl")
    tables = [d.value for d in at.dataframe if "explained_by" in d.value.columns]
    assert tables
    assert tables[0]["match"].all()  # the fixture's advantages follow TRL's own formula


@pytest.mark.parametrize("bad", ["empty.jsonl", "all_bad.jsonl", "unknown.jsonl", "mixed.jsonl"])
def test_a_bad_file_gives_a_message_not_a_traceback(monkeypatch, bad):
    monkeypatch.setenv("ROLL_VIZ_RUNS", str(FIXTURES / "bad"))
    at = open_run_page(bad)
    assert not at.exception
    said = " ".join(e.value for e in at.error) + " ".join(w.value for w in at.warning)
    said += " ".join(m.value for m in at.markdown)
    assert "Traceback" not in said
    assert at.error or at.warning or "skipped" in said.lower() or at.metric
