"""A lecture hall: two app processes behind haproxy sharing one lesson room through Redis.

``python -m roll_viz hall``'s own ``Hall`` starts a real ``redis-server``, two app processes (the
tiny model) and a real ``haproxy``, sticky by its cookie. A teacher starts the built-in lesson;
50 phones, spread over both processes by the proxy, vote at once (each with its own student-key
cookie, as a browser keeps it); the teacher's page counts every vote once. Then one app process is
killed mid-lesson: its phones reconnect through the proxy (their sticky cookie names the dead
process; the proxy sends them to the other), find the same room and question with their own answer
still recorded (the cookie's student key gives the same voter token), and the teacher's count
and the reveal still hold all 50 votes. A student who took an Update step on the killed process
comes back through the proxy with the same link: the page says the adapter's step is gone and
what to press. Asserts what must hold; prints the times (BENCHMARK).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import time
import urllib.parse
import urllib.request

import pytest

from benchmarks import st_client
from roll_viz.cli.hall import HAPROXY, REDIS, Hall, free_port
from roll_viz.ui import reconnect
from tests.bench.test_lesson_load import OPTIONS, Tab, _ok

pytestmark = pytest.mark.server

PHONES = 50
#: a live batch the tiny model samples at once (Update needs the model that wrote the tokens)
UPDATE_LIVE = "preset=quantum&live=true&G=2&T=8"


def _need(binary: str) -> None:
    if shutil.which(binary):
        return
    if os.environ.get("REQUIRE_E2E") == "1":
        pytest.fail(
            f"REQUIRE_E2E=1 but {binary} is missing (apt-get install -y redis-server haproxy)"
        )
    pytest.skip(f"{binary} is not installed (apt-get install -y redis-server haproxy)")


def sticky_cookie(base: str) -> str:
    """The proxy's cookie for a new browser: which app process its session lives in."""
    with urllib.request.urlopen(base + "/", timeout=30) as resp:
        for header in resp.headers.get_all("Set-Cookie") or []:
            if header.startswith("RVHALL="):
                return header.split(";")[0].split("=", 1)[1]
    raise AssertionError("the proxy set no RVHALL cookie")


class Phone(Tab):
    """A browser tab behind the hall: the proxy's cookie and its own student-key cookie."""

    def __init__(self, base: str, app: str, student: str) -> None:
        super().__init__(base)
        self.app, self.student = app, student
        self.cookies = {"RVHALL": app, reconnect.STUDENT_COOKIE: student}


async def _hall_lesson(base: str, hall: Hall) -> dict:
    teacher = Phone(base, sticky_cookie(base), reconnect.new_student_key())
    await teacher.connect()
    _ok(await teacher.open("Lesson", ""))
    _ok(await teacher.press("lesson_start"))
    code = dict(urllib.parse.parse_qsl(teacher.query))["room"]
    phones = [Phone(base, sticky_cookie(base), reconnect.new_student_key()) for _ in range(PHONES)]
    await asyncio.gather(*(p.connect() for p in phones))
    for result in await asyncio.gather(*(p.open("vote", f"room={code}") for p in phones)):
        _ok(result)
    choices = [i % OPTIONS for i in range(PHONES)]
    votes = await asyncio.gather(
        *(p.press(f"vote_0_1_{c}") for p, c in zip(phones, choices, strict=True))
    )
    for result in votes:
        _ok(result)
    _ok(await teacher.rerun())
    before = list(teacher.metrics)
    # one process dies mid-lesson (not the teacher's: the teacher's page reruns throughout);
    # a student there has taken an Update step: the link keeps the mark of the adapter's steps
    victim = "app1" if teacher.app != "app1" else "app2"
    learner = Phone(base, victim, reconnect.new_student_key())
    await learner.connect()
    _ok(await learner.open("Update", UPDATE_LIVE))
    _ok(await learner.press("upd_step"))
    stepped = learner.query

    hall.procs[victim].kill()
    hall.procs[victim].wait(timeout=10)
    moved = [p for p in phones if p.app == victim]
    for p in moved:
        await p.close()
    t0 = time.perf_counter()
    fresh = [Phone(base, p.app, p.student) for p in moved]  # the same browsers reconnect
    await asyncio.gather(*(p.connect() for p in fresh))
    reopened = await asyncio.gather(*(p.open("vote", f"room={code}") for p in fresh))
    reconnect_s = time.perf_counter() - t0
    for result in reopened:
        _ok(result)
    mine = [
        any("Your answer" in t for t in p.texts) and p.buttons for p in fresh
    ]  # still open: their answer shown, the options pressable
    await learner.close()
    back = Phone(base, learner.app, learner.student)  # the learner's browser, same link
    await back.connect()
    _ok(await back.open("Update", stepped))
    told = [t for t in back.texts if "adapter of 1 step is gone" in t]
    _ok(await teacher.rerun())
    after = list(teacher.metrics)
    _ok(await teacher.press("lesson_revealed"))
    revealed = "\n".join(teacher.texts)
    for p in [*phones, *fresh, teacher, back]:
        await p.close()
    return {
        "apps": sorted({p.app for p in phones}),
        "moved": len(moved),
        "before": before,
        "after": after,
        "revealed": revealed,
        "answers_kept": sum(bool(m) for m in mine),
        "vote_ms": sorted(r.ms for r in votes),
        "reconnect_s": reconnect_s,
        "stepped": stepped,
        "told": told,
    }


def test_two_processes_share_a_room_and_a_killed_one_loses_no_vote(tmp_path, monkeypatch, capsys):
    _need(REDIS)
    _need(HAPROXY)
    monkeypatch.setenv("ROLL_VIZ_MODEL", "tiny")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hall = Hall(folder=tmp_path, port=free_port(), processes=2)
    try:
        hall.start([])
        base = f"http://127.0.0.1:{hall.port}"
        out = st_client.run_coroutine(_hall_lesson(base, hall))
        logs = "".join((tmp_path / f"app{i}.log").read_text() for i in (1, 2))
    finally:
        hall.stop()
    ms = out["vote_ms"]
    line = {
        "bench": "hall_votes",
        "processes": 2,
        "phones": PHONES,
        "vote_p50_ms": round(statistics.median(ms), 1),
        "vote_p95_ms": round(statistics.quantiles(ms, n=20)[-1], 1),
        "vote_max_ms": round(ms[-1], 1),
        "moved_phones": out["moved"],
        "reconnect_s": round(out["reconnect_s"], 2),
    }
    with capsys.disabled():
        print("\nBENCHMARK " + json.dumps(line))
    assert out["apps"] == ["app1", "app2"]  # the proxy spread the phones over both processes
    assert out["moved"] > 0
    assert f"{PHONES} / {PHONES}" in out["before"][-1]  # every vote counted once
    assert any(f"{PHONES} / " in m for m in out["after"])  # still every vote after the kill
    assert out["answers_kept"] == out["moved"]  # each moved phone sees its own answer
    assert f"first vote: {PHONES} answers" in out["revealed"]
    # the learner's adapter died with its process: the link's mark, and the page says so
    assert "upd_live=" in out["stepped"]
    assert out["told"], "the Update page did not say the adapter was lost"
    assert out["told"][0].startswith("The server restarted")
    assert "Traceback" not in logs
