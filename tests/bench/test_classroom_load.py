"""A classroom on one server: N = 5 websocket students for ~15 s, three sampling live at once.

Runs in ``make test`` (no browser: the students speak Streamlit's protobuf protocol over the
websocket, see benchmarks.classroom_load). Asserts only what must never happen under load:
errors (dropped connections, unfinished runs), exceptions on a page, a student's numbers changing
because of the others (every (page, settings) key shows one page, equal to the same URL opened
alone), a server that stops answering. Latency, reruns/s and RSS are printed as a BENCHMARK line.
"""

from __future__ import annotations

import json
import urllib.parse

import pytest

from benchmarks import classroom_load, st_client
from benchmarks.server import Server, health

pytestmark = pytest.mark.server  # every test here starts (or reads) a streamlit server

STUDENTS = 5
SECONDS = 15.0
LIVE = 3
REFERENCES = 6


@pytest.fixture(scope="module")
def srv(tiny_server):
    return tiny_server


@pytest.fixture(scope="module")
def classroom(srv):
    res = classroom_load.run_classroom(
        srv.base,
        STUDENTS,
        SECONDS,
        live_students=LIVE,
        seed=0,
        server_pid=srv.pid,
        reference_keys=REFERENCES,
    )
    return res, health(srv.base, timeout=10), srv.proc.poll() is None, srv.tracebacks()


def test_classroom_load_benchmark_and_invariants(classroom, capsys):
    res, healthy, alive, tracebacks = classroom
    line = res.summary()
    line["server_tracebacks"] = len(tracebacks)
    with capsys.disabled():
        print("\nBENCHMARK " + json.dumps(line))
    assert res.errors == []
    assert res.exceptions == []
    assert res.error_alerts == []
    assert res.isolation_mismatches == []
    assert tracebacks == []
    assert healthy
    assert alive
    # the run really exercised what it claims: every student moved (a page switch first),
    # on several pages, the live students all switched on sampling together, some keys were
    # shared by several students and keys were re-opened alone
    for student in range(STUDENTS):
        moves = [i for i in res.interactions if i.student == student and i.action != "open"]
        assert len(moves) >= classroom_load.MIN_ACTIONS, student
    assert len({i.page for i in res.interactions}) >= 3
    assert len(res.live_ms) == LIVE
    assert sum(1 for i in res.interactions if i.action == "live") == LIVE
    assert line["isolation_keys_shared"] >= 1
    assert res.reference_checked == min(REFERENCES, len(res.digests))


def test_a_slider_move_shows_what_its_url_shows_alone(srv):
    """The isolation check has teeth: the digest follows the numbers (beta 0.1 vs 0.3 with the
    KL in the reward differ), not the session (the same URL twice: one digest), and a slider
    moved through WidgetStates lands on the page its shareable URL shows (the sidebar's knob
    reruns its fragment; the page follows on the relay's settle, as in the browser)."""

    async def go(base):
        a = await classroom_load.open_alone(base, "Advantages|beta=0.1&klr=true")
        b = await classroom_load.open_alone(base, "Advantages|beta=0.1&klr=true")
        c = await classroom_load.open_alone(base, "Advantages|beta=0.3&klr=true")
        s = st_client.Session(base)
        await s.connect()
        try:
            first = await s.run(page="Advantages", query="beta=0.1&klr=true")
            moved = await s.run(changes={"beta": 0.3}, widgets=first.widgets)
            query = s.query
            settled = await s.run(triggers={"rv_knob_relay": ("settle", 1)}, widgets=s.widgets)
        finally:
            await s.close()
        return a, b, c, first, moved, settled, query

    a, b, c, first, moved, settled, query = st_client.run_coroutine(go(srv.base))
    for r in (a, b, c, first, settled):
        assert r.status == "FINISHED_SUCCESSFULLY"
        assert r.exceptions == []
    assert moved.status == st_client.FRAGMENT_FINISHED
    assert a.digest == b.digest == first.digest
    assert a.digest != c.digest
    assert settled.digest == c.digest
    assert dict(urllib.parse.parse_qsl(query)) == {"beta": "0.3", "klr": "true"}
    assert {"beta", "gamma", "lam", "G", "live"} <= set(a.widgets)
    assert a.widgets["beta"].kind == "slider"
    assert a.widgets["live"].kind == "checkbox"


def test_inconsistent_keys_names_the_key_and_the_students():
    digests = {
        "Advantages|beta=0.1": {"aaaa": [0, 2], "bbbb": [1]},
        "Rewards|": {"cccc": [0, 1, 3]},
    }
    lines = classroom_load.inconsistent_keys(digests)
    assert len(lines) == 1
    assert lines[0].startswith("Advantages|beta=0.1: 2 different pages")
    assert "aaaa by students [0, 2]" in lines[0]
    assert "bbbb by students [1]" in lines[0]
    assert classroom_load.inconsistent_keys({"Rewards|": {"cccc": [0, 1]}}) == []


def test_the_driver_talks_only_to_127_0_0_1():
    with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
        st_client.Session("http://example.org:8501")


def test_server_tracebacks_reads_plain_and_rich_logs(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "  You can now view your Streamlit app in your browser.\n"
        "2026-12-01 ERROR roll_viz.ui.guard: page 'Rewards' failed\n"
        "Traceback (most recent call last):\n"
        '  File "pages/2_Rewards.py", line 3, in <module>\n'
        "    x = 1 / 0\n"
        "ZeroDivisionError: division by zero\n"
        "\x1b[31m\u256d\u2500 \x1b[0m\x1b[1;31mTraceback \x1b[0m\x1b[1;2;31m(most recent call last)"
        "\x1b[0m\x1b[31m \u2500\u256e\x1b[0m\n"
        "\x1b[31m\u2502\x1b[0m   rollout = ui.cached_rollout(state)  \x1b[31m\u2502\x1b[0m\n"
        "\x1b[1;91mAttributeError: \x1b[0mmodule \x1b[32m'roll_viz.ui'\x1b[0m has no attribute\n"
        "  Stopping...\n"
    )
    srv = Server("http://127.0.0.1:1", None, log)
    assert srv.tracebacks() == [
        "ZeroDivisionError: division by zero",
        "AttributeError: module 'roll_viz.ui' has no attribute",
    ]
