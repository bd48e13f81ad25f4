"""The lecture benchmark, shortened (``--quick``), on a hall of two processes: structure and votes.

``benchmarks.lecture`` runs its mix (open the recipe's page, knob bursts, live sampling, close and
reopen, join, poll, vote) through the real ``redis-server`` and ``haproxy``; here 12 students in a
few seconds. Asserted: no error, exception or server traceback; every vote counted once (the
teacher's page, its reveal and Redis agree with the votes cast); each closer's reopened phone
shows its own answer; every field of the line and of the 8-core projection is there. Printed as
a BENCHMARK line; no time is asserted.
"""

from __future__ import annotations

import argparse
import json
import secrets

import pytest

from benchmarks import lecture, lecture_figures
from roll_viz.cli.hall import HAPROXY, REDIS
from roll_viz.ui import reconnect
from tests.bench.test_hall import _need

pytestmark = [pytest.mark.server, pytest.mark.bench]

STUDENTS = 12


def test_a_short_lecture_on_the_hall_counts_every_vote_once(capsys):
    _need(REDIS)
    _need(HAPROXY)
    args = lecture.parse(["--students", str(STUDENTS), "--quick", "--hall-only", "--seconds", "20"])
    line = lecture.run_hall(args)
    with capsys.disabled():
        print("\nBENCHMARK " + json.dumps(line))
    assert line["errors"] == 0
    assert line["exceptions"] == 0
    assert line["error_alerts"] == 0
    assert line["server_tracebacks"] == 0
    assert line["health_after"]
    votes = line["votes"]
    assert votes["cast"] == votes["counted"] == votes["phones_in_room"] == STUDENTS
    assert votes["in_store"] == STUDENTS
    assert votes["revealed"]
    roles = line["roles"]
    assert votes["answers_kept_on_reopen"] == f"{roles['close_reopen']} / {roles['close_reopen']}"
    actions = line["actions"]
    for action in (
        "open",
        "knob",
        "settle",
        "live",
        "reopen",
        "join",
        "poll",
        "vote",
        "phone_reopen",
    ):
        assert actions[action]["n"] > 0, action
        assert set(actions[action]) == {"n", "p50_ms", "p95_ms", "max_ms"}
    assert actions["open"]["n"] == STUDENTS
    # every knob move reran the sidebar's fragment alone; each burst ended in one page rerun
    assert line["knob_fragment_runs"] == actions["knob"]["n"]
    assert 0 < actions["settle"]["n"] <= actions["knob"]["n"]
    assert actions["vote"]["n"] == STUDENTS
    assert actions["live"]["n"] == roles["live"]
    assert set(line["processes_measured"]) == {"redis", "app1", "app2", "proxy"}
    for tabs in line["tabs_per_process"].values():  # the proxy spread each kind of tab
        assert set(tabs) == {"app1", "app2"}
        assert sum(tabs.values()) == STUDENTS
    for proc in line["processes_measured"].values():
        assert proc["rss_mib_peak"] > 0
    redis_line = line["redis"]
    assert redis_line["calls"] == sum(redis_line["per_command"].values()) > 0
    assert redis_line["per_command"]["hset"] >= STUDENTS  # each vote and each join writes one
    assert "info" not in redis_line["per_command"]
    assert line["per_core_reruns_per_s"] > 0
    projection = line["projection_8_cores"]
    assert projection["cores"] == projection["processes"] == 8
    assert projection["bound"] in ("cores", "redis")
    assert projection["reruns_per_s"] > 0
    assert projection["students"] > 0
    assert projection["model"] == lecture_figures.MODEL
    assert "redis_ceiling" in projection["model"]


def test_every_knob_move_goes_through_one_door(monkeypatch):
    """A knob move goes through ``move_knob`` (where a fragment-aware call can replace it)."""
    seen = []

    async def door(tab, changes, widgets, keep):
        seen.append(changes)
        return lecture.st_client.RunResult(ms=1.0, status="FINISHED_SUCCESSFULLY")

    monkeypatch.setattr(lecture, "move_knob", door)
    rec = lecture.Record()
    student = lecture.Student(0, "http://127.0.0.1:1", {}, 0, rec)
    student.widgets = {
        "gamma": lecture.st_client.Widget("g", "slider", 0.0, 1.0, 0.01, 1.0),
    }
    assert lecture.st_client.run_coroutine(student.change("knob", student.next_move()))
    assert len(seen) == 1
    assert set(seen[0]) == {"gamma"}
    assert seen[0]["gamma"] in lecture.KNOB_VALUES["gamma"]
    assert seen[0]["gamma"] != 1.0  # a move, not the value it has
    assert [a for a, _s, _ms in rec.actions] == ["knob"]


def test_the_plan_keeps_its_shares_and_bounds():
    p = lecture.plan(200, 30.0, seed=3, quick=False)
    assert (len(p.knobbers), len(p.live), len(p.closers)) == (120, 20, 20)
    assert not p.knobbers & p.closers
    assert p.vote_at == lecture.OPEN_S + 30.0
    assert lecture.plan(200, 30.0, seed=3, quick=False) == p  # seeded
    small = lecture.plan(3, 30.0, seed=0, quick=True)
    assert len(small.live) == len(small.closers) == 1
    assert small.open_s == pytest.approx(lecture.OPEN_S * lecture.QUICK_SCALE)
    with pytest.raises(SystemExit):
        lecture.parse(["--students", str(lecture.MAX_STUDENTS + 1)])
    with pytest.raises(SystemExit):
        lecture.parse(["--seconds", "0"])
    assert isinstance(lecture.parse([]), argparse.Namespace)


def test_the_lecture_sends_the_cookie_the_app_reads():
    assert lecture.STUDENT_COOKIE == reconnect.STUDENT_COOKIE
    assert reconnect.valid_student_key(secrets.token_urlsafe(lecture.STUDENT_KEY_BYTES))
