"""A shortened teaching day (#33): 3 classes of 6 on one tiny-model server, figures printed.

``python -m benchmarks.day_soak`` is the benchmark (``--day``: 8 classes of 20 on the
bundled model). Here each class trains, updates, uploads a run and moves knobs, closes every tab,
and the figures are read past the reconnect grace (shortened to ``GRACE_S`` for the server, its
parked runs and its uploads). Printed as a BENCHMARK line; no time is asserted. Asserted: no
error, exception or traceback; what a class leaves is gone after its grace (the upload folder
and Streamlit's held upload bytes back to the baseline); threads and file descriptors do not
climb from class to class (before: one 120.5 s timer thread per closed Your-run session and one
per parked run, alive through the next class).
"""

from __future__ import annotations

import json

import pytest

from benchmarks import churn_load, day_soak
from benchmarks.server import health, streamlit_server
from roll_viz.data.runs import uploads

pytestmark = [pytest.mark.server, pytest.mark.bench]

CLASSES, STUDENTS = 3, 6
GRACE_S = 3  # 5 s before: the same margins (settle - grace = 1 s), shorter waits
THREAD_SLACK = 2  # a training run's worker may still be finishing its cancelled step
FD_SLACK = 4


def test_a_short_day_leaves_nothing_behind_between_classes(capsys):
    env = {
        churn_load.GRACE_ENV: str(GRACE_S),
        "STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": str(GRACE_S),
    }
    with streamlit_server(model="tiny", extra_env=env) as srv:
        line = day_soak.run_day(
            srv.base,
            srv.pid,
            classes=CLASSES,
            students=STUDENTS,
            grace_s=GRACE_S,
            settle_s=4.0,
            hold_s=3.0,
        )
        healthy = health(srv.base, timeout=10)
        tracebacks = srv.tracebacks()
    line["server_tracebacks"] = len(tracebacks)
    with capsys.disabled():
        print("\nBENCHMARK " + json.dumps(line))
    assert line["errors"] == 0
    assert line["exceptions"] == 0
    assert tracebacks == []
    assert healthy
    assert len(line["rss_mib"]) == CLASSES
    assert line["upload_disk_bytes"] == [0] * CLASSES  # every class's uploads removed
    assert line["upload_held_bytes"] == [0] * CLASSES
    assert line["threads"][-1] <= line["threads"][0] + THREAD_SLACK, line["threads"]
    assert line["fds"][-1] <= line["fds"][0] + FD_SLACK, line["fds"]


def test_the_soak_reads_the_upload_folder_the_store_writes():
    assert day_soak.UPLOAD_PREFIX == uploads.PREFIX
