"""The Your run page and the run link refuse what leaves the runs folder, saying nothing of it.

A symlink out of ROLL_VIZ_RUNS, the folder itself (``dir:``, ``dir:.``) and a loop are refused
with one message that shows neither a server path nor the refused file's content.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from roll_viz.ui import state as ui_state
from tests.ui import apptest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
SECRET = "password=hunter2"


@pytest.fixture
def runs(tmp_path, monkeypatch):
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(FIXTURES / "plain" / "samples.csv", folder / "good.csv")
    private = tmp_path / "private.csv"
    private.write_text(SECRET + "\n")
    (folder / "leak.csv").symlink_to(private)
    (folder / "loop.csv").symlink_to(folder / "loop.csv")
    monkeypatch.setenv("ROLL_VIZ_RUNS", str(folder))
    return folder


def _shown(at) -> str:
    parts = [e.value for e in at.error] + [w.value for w in at.warning]
    parts += [m.value for m in at.markdown] + [c.value for c in at.caption]
    return " ".join(str(p) for p in parts)


def test_the_picker_lists_only_entries_inside(runs):
    at = apptest.open_page("your_run")
    options = at.selectbox(key="run_pick").options  # shown by name
    assert "good.csv" in options
    assert "leak.csv" not in options
    assert "loop.csv" not in options


@pytest.mark.parametrize("run_id", ["dir:", "dir:.", "dir:leak.csv", "dir:loop.csv", "dir:../x"])
def test_a_refused_run_link_gets_one_message_without_path_or_content(runs, run_id):
    at = apptest.open_page(
        "advantages", **{ui_state.KEY_RUN_URL: run_id, ui_state.KEY_STEP_URL: "0"}
    )
    assert not at.exception, [e.message for e in at.exception]
    shown = _shown(at) + " ".join(str(i.value) for i in at.sidebar.info)
    assert SECRET not in shown
    assert str(runs) not in shown
    assert str(runs.resolve()) not in shown
    assert "cannot be opened" in shown


def _twice_script():
    import streamlit as st

    from roll_viz.ui import your_run_page as runs

    class Upload:
        name, file_id, reads = "samples.csv", "f1", 0

        def getvalue(self):
            Upload.reads += 1
            return b"prompt,response,reward\np,r,1\np,s,0\n"

    up = Upload()
    first = runs.save_uploaded(up)
    again = runs.save_uploaded(up)  # the next rerun hands the same file again
    st.write(f"{first == again} {Upload.reads} {first}")


def test_an_upload_is_hashed_and_written_once_not_on_every_rerun():
    at = AppTest.from_function(_twice_script, default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    same, reads, run_id = at.markdown[0].value.split(" ", 2)
    assert same == "True"
    assert reads == "1"
    assert run_id.startswith("upload:")
