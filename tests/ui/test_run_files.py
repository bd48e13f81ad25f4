"""A student's runs belong to an unguessable key kept in a cookie; a run reopens from its file.

The key is what the runs and the Update adapter are parked under when a tab goes away
(``ui.reconnect``), so a reload of the same browser finds them within the grace; it never goes
into the URL (a shared link must not share runs). A finished run downloads as a run file and
opens again on the Training page (Recorded runs, "Open a run file").
"""

from __future__ import annotations

import json

import pytest

from roll_viz.data import recorded_runs as recorded
from roll_viz.ui import reconnect, run_files
from roll_viz.ui import training_page as tr
from tests.ui import apptest


def test_student_keys_are_unguessable_tokens_and_only_tokens_are_accepted():
    keys = {reconnect.new_student_key() for _ in range(1000)}
    assert len(keys) == 1000
    assert all(reconnect.valid_student_key(k) and len(k) == 32 for k in keys)
    for bad in ("", "abc", "x" * 31, "x" * 33, "a" * 31 + ";", "../" * 11, None, 12, ["k"]):
        assert not reconnect.valid_student_key(bad)
    key = next(iter(keys))
    script = reconnect.cookie_script(key)
    assert f"{reconnect.STUDENT_COOKIE}={key}" in script
    assert "SameSite=Strict" in script
    assert "path=/" in script
    with pytest.raises(ValueError, match="not a student key"):
        reconnect.cookie_script("'; alert(1); '")


def test_the_page_sets_the_cookie_once_and_never_puts_the_key_in_the_url():
    at = apptest.open_page("training")
    key = at.session_state[reconnect.KEY_STUDENT]
    assert reconnect.valid_student_key(key)
    scripts = [
        h.proto.body for h in at.sidebar.get("html") if reconnect.STUDENT_COOKIE in h.proto.body
    ]
    assert len(scripts) == 1
    assert key in scripts[0]
    assert all(key not in str(v) for v in dict(at.query_params).values())
    at.run()
    assert at.session_state[reconnect.KEY_STUDENT] == key  # fixed for the session
    assert not [h for h in at.sidebar.get("html") if reconnect.STUDENT_COOKIE in h.proto.body]


def test_a_run_file_parses_and_bad_files_get_one_line():
    data = (recorded.RECORDED_DIR / f"{recorded.ADAPTIVE}.jsonl").read_bytes()
    run = run_files.parse_run_file(data)
    assert not isinstance(run, str)
    assert run.settings.beta_mode == "adaptive"
    assert run_files.parse_run_file(b"\xff\xfe") == "The file is not UTF-8 text: not a run file."
    assert run_files.parse_run_file(b'{"type": "step"}').startswith("Not a run file of this app")
    assert run_files.parse_run_file(b"not json").startswith("Not a run file of this app: line 1")
    header = json.dumps(json.loads(data.decode().splitlines()[0]))
    assert run_files.parse_run_file(header.encode()) == "The run file has no steps."
    big = b" " * (run_files.MAX_RUN_FILE_MB * 1_000_000 + 1)
    assert "opens up to" in run_files.parse_run_file(big)


def test_a_finished_run_downloads_and_reopens_on_the_training_page():
    at = apptest.open_page("training", tab="Train live", tr_steps="2")
    next(b for b in at.button if b.key == "tr_start").click()
    at.run()
    runner = at.session_state[tr.KEY_RUNNERS]["A"]
    try:
        runner.join(timeout=120)
        assert runner.status == "done", (runner.status, runner.error)
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        assert [d for d in at.get("download_button") if d.proto.id.endswith("tr_download_A")]
        content = runner.run().to_jsonl().encode()
    finally:
        runner.close()
        at.session_state[tr.KEY_RUNNERS].clear()  # AppTests share one session id
    # a reload later, the server no longer has it: open its file
    again = apptest.open_page("training")
    again.file_uploader(key="tr_open_file").set_value(("run.jsonl", content, "application/jsonl"))
    again.run()
    assert not again.exception, [e.message for e in again.exception]
    assert any(
        c.value.startswith(":material/folder_open: **From a run file**") for c in again.caption
    )
    figs = {e.proto.id.rsplit("-", 1)[-1] for e in again.get("plotly_chart")}
    assert {"tr_file_curves", "tr_kl_map_file"} <= figs
    again.file_uploader(key="tr_open_file").set_value(("bad.jsonl", b"nope", "application/jsonl"))
    again.run()
    assert not again.exception
    assert any(e.value.startswith("Not a run file of this app") for e in again.error)
