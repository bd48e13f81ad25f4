"""A page reload (a new websocket session) finds the student's run and adapter; nobody else's.

Websocket clients speaking Streamlit's protocol, each carrying the student cookie a browser would
(``ui.reconnect.STUDENT_COOKIE``). A reload is a new session with a new id: before the runs were
keyed by session id, so a reload lost them ("No run yet" where it read "step k / 50"; the Update
adapter back at "Step 1"). Another student's key, or a crafted cookie, finds nothing.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from benchmarks.st_client import Session, run_coroutine
from roll_viz.ui.reconnect import STUDENT_COOKIE, new_student_key

pytestmark = pytest.mark.server

STEP_RE = re.compile(r"step (\d+) / (\d+)")
RELOAD_S = 1.0  # the browser closes the old socket, loads the page, opens a new one
TRAIN = "tab=Train+live&tr_steps=50"


def _steps(res) -> int | None:
    found = [int(m.group(1)) for t in res.progress if (m := STEP_RE.search(t))]
    return found[0] if found else None


def _texts(res) -> str:
    return " ".join(p[3] for p in res.parts)


async def _open(base: str, key: str) -> Session:
    s = Session(base, cookies={STUDENT_COOKIE: key})
    await s.connect()
    return s


async def _reload_training(base: str, key: str, other: str) -> dict:
    tab = await _open(base, key)
    first = await tab.run(page="Training", query=TRAIN)
    res = await tab.run(changes={"tr_start": True}, widgets=first.widgets)
    before = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        res = await tab.run()
        before = _steps(res)
        if before and before >= 1:
            break
    assert before, res.progress
    old_session = tab.session_id
    await tab.close()  # the reload: this session is gone
    await asyncio.sleep(RELOAD_S)
    tab = await _open(base, key)
    try:
        after = await tab.run(page="Training", query=TRAIN)
        new_session = tab.session_id
        if _steps(after) is None:  # the old tab's release may land after this run
            await asyncio.sleep(1.0)
            after = await tab.run()
    finally:
        await tab.close()
    out = {"before": before, "after": _steps(after), "text": _texts(after)}
    out["sessions"] = (old_session, new_session)
    for name, cookie in (("other", other), ("crafted", key[:-1] + "!")):
        tab = await _open(base, cookie)
        try:
            out[name] = await tab.run(page="Training", query=TRAIN)
        finally:
            await tab.close()
    return out


async def _reload_update(base: str, key: str, other: str) -> tuple[str, str, str]:
    tab = await _open(base, key)
    first = await tab.run(page="Update", query="live=true")
    one = await tab.run(changes={"upd_step": True}, widgets=first.widgets)
    await tab.close()
    await asyncio.sleep(RELOAD_S)
    tab = await _open(base, key)
    try:
        page = await tab.run(page="Update", query="live=true")
        two = await tab.run(changes={"upd_step": True}, widgets=page.widgets)
    finally:
        await tab.close()
    tab = await _open(base, other)
    try:
        page = await tab.run(page="Update", query="live=true")
        theirs = await tab.run(changes={"upd_step": True}, widgets=page.widgets)
    finally:
        await tab.close()
    return _texts(one), _texts(two), _texts(theirs)


def test_a_reload_keeps_the_run_and_the_adapter_and_nobody_else_sees_them(tiny_server):
    mine, theirs = new_student_key(), new_student_key()
    srv = tiny_server
    training = run_coroutine(_reload_training(srv.base, mine, theirs))
    one, two, other = run_coroutine(_reload_update(srv.base, mine, theirs))
    tracebacks = srv.tracebacks()
    old, new = training["sessions"]
    assert old
    assert new != old  # a reload is a new websocket session
    assert "No run yet" not in training["text"]
    assert training["after"] is not None, training["text"]
    assert training["after"] >= training["before"]
    for name in ("other", "crafted"):  # another student's key, or a crafted cookie: nothing
        assert _steps(training[name]) is None, training[name].progress
        assert "No run yet" in _texts(training[name])
    assert "Step 1 of this session's adapter" in one
    assert "Step 2 of this session's adapter" in two  # steps accumulate across the reload
    assert "Step 1 of this session's adapter" in other  # another student starts from 1
    assert tracebacks == []
