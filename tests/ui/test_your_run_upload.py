"""Your run: several files or a zip dropped on the uploader open as one run with every step."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui import apptest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def no_runs_folder(monkeypatch):
    monkeypatch.delenv("ROLL_VIZ_RUNS", raising=False)


def _upload(files: list[tuple[str, bytes]]):
    at = apptest.open_page("your_run")
    uploader = at.file_uploader(key="run_upload")
    for name, data in files:
        uploader.upload(name, data)
    uploader.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_a_zip_of_per_step_files_opens_as_one_run_with_its_history(no_runs_folder):
    at = _upload([("verl_steps.zip", (FIXTURES / "uploads" / "verl_steps.zip").read_bytes())])
    assert not at.error, [e.value for e in at.error]
    pick = at.selectbox(key="run_pick")
    assert pick.value.startswith("upload:")
    assert pick.options[0] == "verl_steps"  # shown by name
    assert _metric(at, "Format") == "verl"
    assert _metric(at, "Steps") == "2"
    assert at.select_slider(key="run_step").options == ["1", "2"]
    keys = [el.proto.id for el in at.get("plotly_chart")]
    assert any(k.endswith("-run_zero") for k in keys)  # the history across both steps


def test_several_files_uploaded_together_are_one_run(no_runs_folder):
    files = [(n, (FIXTURES / "runs" / "verl" / n).read_bytes()) for n in ("1.jsonl", "2.jsonl")]
    at = _upload(files)
    assert not at.error, [e.value for e in at.error]
    assert _metric(at, "Steps") == "2"


def test_a_bad_zip_gets_a_message_not_a_traceback(no_runs_folder):
    at = _upload([("run.zip", b"PK\x03\x04 not really a zip")])
    said = " ".join(e.value for e in at.error)
    assert "cannot be read as a zip" in said
    assert "Traceback" not in said
