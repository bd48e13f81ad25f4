"""60 phones vote at once on one server: every vote counted once, p95 of a vote, teacher responsive.

The phones and the teacher speak Streamlit's websocket protocol (``benchmarks.st_client``),
pressing the pages' buttons as the frontend does (a ``trigger_value`` in ``WidgetStates``). The
teacher starts the built-in lesson on the Lesson page; 60 phones open ``/vote?room=<code>``; all
press an option at the same moment while the teacher's page reruns; then the teacher's page must
show 60 answers out of 60 phones and, on reveal, the distribution as cast. Then every phone's
question polls at the same tick while the teacher's page reruns. Prints a BENCHMARK line (the
times); asserts what must hold (every vote counted once, no exception, no stall).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import urllib.parse
from typing import Any

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg

from benchmarks import st_client
from benchmarks.server import health

pytestmark = pytest.mark.server

PHONES = 60
OPTIONS = 4  # the first gate of the built-in lesson; option 2 is the right one
#: a stall guard, not the target: like the classroom benchmark, the times are printed (BENCHMARK)
#: and asserted only loosely, because the shared CI machine's load moves them. Measured on the
#: 2-core machine: vote p95 0.3-0.9 s for 60 phones pressing at the same moment.
STALL_S = 5.0
FINISHED = ("FINISHED_SUCCESSFULLY", "FINISHED_FRAGMENT_RUN_SUCCESSFULLY")


class Tab(st_client.Session):
    """A session that also tracks buttons and metrics, and can press a button."""

    def __init__(self, base: str) -> None:
        super().__init__(base)
        self.buttons: dict[str, str] = {}
        self.fragments: dict[str, str] = {}  # button key -> the fragment that draws it
        self.metrics: list[str] = []
        self.texts: list[str] = []

    def _delta(self, fm: Any, elements: dict, result: st_client.RunResult) -> None:
        st_client.Session._delta(fm, elements, result)
        delta = fm.delta
        if delta.WhichOneof("type") != "new_element":
            return
        el = delta.new_element
        kind = el.WhichOneof("type")
        if kind == "button":
            key = st_client._user_key(el.button.id)
            self.buttons[key] = el.button.id
            self.fragments[key] = delta.fragment_id
        elif kind == "metric":
            self.metrics.append(el.metric.body)
        elif kind in ("markdown", "alert"):
            self.texts.append(getattr(el, kind).body)

    async def open(self, page: str, query: str) -> st_client.RunResult:
        self.buttons.clear()
        self.metrics.clear()
        self.texts.clear()
        return await self.run(page=page, query=query)

    async def press(self, key: str) -> st_client.RunResult:
        """Press a button as the frontend does: inside a fragment, only that fragment reruns."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query
        cs.page_name = self.page
        cs.page_script_hash = self.page_hash
        if self.fragments.get(key):
            cs.fragment_id = self.fragments[key]
        state = cs.widget_states.widgets.add()
        state.id = self.buttons[key]
        state.trigger_value = True
        self.buttons.clear()
        self.metrics.clear()
        self.texts.clear()
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        return await self._read_run(t0)

    async def poll(self, fragment_id: str) -> st_client.RunResult:
        """One tick of a ``run_every`` fragment, as the frontend sends it."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query
        cs.page_name = self.page
        cs.page_script_hash = self.page_hash
        cs.fragment_id = fragment_id
        cs.is_auto_rerun = True
        t0 = time.perf_counter()
        await self.ws.send(msg.SerializeToString())
        return await self._read_run(t0)

    async def rerun(self) -> st_client.RunResult:
        self.metrics.clear()
        self.texts.clear()
        return await self.run(query=self.query)


def _ok(result: st_client.RunResult) -> None:
    assert result.status in FINISHED, result.status
    assert result.exceptions == []
    assert result.error_alerts == []


async def _lesson(base: str) -> dict[str, Any]:
    teacher = Tab(base)
    await teacher.connect()
    _ok(await teacher.open("Lesson", ""))
    _ok(await teacher.press("lesson_start"))
    query = dict(urllib.parse.parse_qsl(teacher.query))
    code = query["room"]
    assert "key" not in query  # the teacher key stays in the teacher's browser (its cookie)
    _ok(await teacher.rerun())

    phones = [Tab(base) for _ in range(PHONES)]
    await asyncio.gather(*(p.connect() for p in phones))
    for result in await asyncio.gather(*(p.open("vote", f"room={code}") for p in phones)):
        _ok(result)
    _ok(await teacher.rerun())
    assert teacher.metrics  # answers / phones: one student each
    assert teacher.metrics[-1].endswith(f"/ {PHONES}")

    choices = [i % OPTIONS for i in range(PHONES)]
    start = time.perf_counter()
    votes, teacher_run = await asyncio.gather(
        asyncio.gather(*(p.press(f"vote_0_1_{c}") for p, c in zip(phones, choices, strict=True))),
        teacher.rerun(),
    )
    wall = time.perf_counter() - start
    for result in votes:
        _ok(result)
    _ok(teacher_run)
    # a double tap: the same vote again changes nothing
    _ok(await phones[0].press(f"vote_0_1_{choices[0]}"))
    # every phone's question polls the room at the same tick, while the teacher's page reruns
    fragments = [next(iter(p.fragments.values())) for p in phones]
    assert all(fragments)
    polls, teacher_poll_run = await asyncio.gather(
        asyncio.gather(*(p.poll(f) for p, f in zip(phones, fragments, strict=True))),
        teacher.rerun(),
    )
    for result in polls:
        _ok(result)
    _ok(teacher_poll_run)

    _ok(await teacher.rerun())
    count = list(teacher.metrics)
    _ok(await teacher.press("lesson_revealed"))
    revealed = "\n".join(teacher.texts)
    for p in [*phones, teacher]:
        await p.close()
    return {
        "code": code,
        "count": count,
        "revealed": revealed,
        "vote_ms": sorted(r.ms for r in votes),
        "teacher_ms": teacher_run.ms,
        "poll_ms": sorted(r.ms for r in polls),
        "teacher_poll_ms": teacher_poll_run.ms,
        "wall_s": wall,
    }


def test_sixty_phones_vote_at_once(capsys, tiny_server):
    srv = tiny_server
    out = st_client.run_coroutine(_lesson(srv.base))
    healthy = health(srv.base, timeout=10)
    tracebacks = srv.tracebacks()
    ms = out["vote_ms"]
    p95 = statistics.quantiles(ms, n=20)[-1] / 1000.0
    line = {
        "bench": "lesson_votes",
        "phones": PHONES,
        "vote_p50_ms": round(statistics.median(ms), 1),
        "vote_p95_ms": round(p95 * 1000.0, 1),
        "vote_max_ms": round(ms[-1], 1),
        "teacher_rerun_ms_under_load": round(out["teacher_ms"], 1),
        "poll_p95_ms": round(statistics.quantiles(out["poll_ms"], n=20)[-1], 1),
        "teacher_rerun_ms_under_polls": round(out["teacher_poll_ms"], 1),
        "wall_s": round(out["wall_s"], 2),
    }
    with capsys.disabled():
        print("\nBENCHMARK " + json.dumps(line))
    assert healthy
    assert tracebacks == []
    assert f"{PHONES} / {PHONES}" in out["count"]  # every vote counted, none twice
    # on reveal: 60 answers, 15 of them option 2, the right one
    assert f"first vote: {PHONES} answers, 25% right" in out["revealed"]
    assert p95 < STALL_S, line
    assert out["teacher_ms"] / 1000.0 < STALL_S, line  # the teacher's page keeps answering
