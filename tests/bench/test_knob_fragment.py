"""The sidebar's knobs rerun a fragment, not the page: over the websocket, as the browser does.

A scripted client (``benchmarks.st_client``) opens Advantages and moves the sidebar's gamma: the
rerun names the algorithm fragment's id, the server reruns that fragment only (its script_finished
says so) and draws the knobs and the relay, nothing of the page; the URL keeps the value. The
relay's settle trigger then reruns the whole page once, with the new gamma; sent without the
fragment id the same move reruns the page (the old path). The gamma class
(``benchmarks.knob_load``) runs both paths with no error. Timings are printed, never asserted.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import knob_load, knob_pages
from benchmarks.st_client import FRAGMENT_FINISHED, Session, run_coroutine

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def srv(tiny_server):
    return tiny_server


def _kinds(res) -> set[str]:
    return {kind for _path, kind, _h, _text in res.parts}


def test_a_knob_move_reruns_the_fragment_and_the_settle_the_page(srv):
    async def go():
        s = Session(srv.base)
        await s.connect()
        try:
            opened = await s.run(page="Advantages", query="")
            gamma = s.widgets["gamma"]
            moved = await s.run(changes={"gamma": 0.9}, widgets=s.widgets)
            query_after_move = s.query
            settled = await s.run(triggers={"rv_knob_relay": ("settle", "x")}, widgets=s.widgets)
            old_path = await s.run(changes={"gamma": 0.8}, widgets=s.widgets, page_reruns=True)
            return opened, gamma, moved, query_after_move, settled, old_path, s
        finally:
            await s.close()

    opened, gamma, moved, query, settled, old_path, s = run_coroutine(go())
    assert opened.status == "FINISHED_SUCCESSFULLY"
    assert gamma.fragment_id  # drawn inside the sidebar's fragment
    # the data section is not; a preset's G is a fragment of its own (test below)
    assert s.widgets["G"].fragment_id != gamma.fragment_id
    assert moved.status == FRAGMENT_FINISHED
    assert moved.fragment
    assert not moved.exceptions
    # the fragment drew its markdown heading and nothing of the page (no alert, no plot, no LaTeX)
    assert _kinds(moved) <= {"markdown"}, moved.parts
    assert "gamma=0.9" in query
    assert settled.status == "FINISHED_SUCCESSFULLY"
    assert not settled.fragment
    assert not settled.exceptions
    assert len(settled.parts) > len(moved.parts)  # the whole page again
    assert old_path.status == "FINISHED_SUCCESSFULLY"
    assert not old_path.fragment
    assert s.fragment_runs >= 2  # the move, and the settle's fragment run before its page run
    assert s.full_runs == 3  # open, settle, the old path


def test_a_group_move_over_a_preset_reruns_its_fragment_and_the_settle_the_page(srv):
    async def go():
        s = Session(srv.base)
        await s.connect()
        try:
            await s.run(page="Advantages", query="")
            moved = await s.run(changes={"G": 4}, widgets=s.widgets)
            settled = await s.run(triggers={"rv_group_relay": ("settle", "x")}, widgets=s.widgets)
            return moved, settled, s
        finally:
            await s.close()

    moved, settled, s = run_coroutine(go())
    assert s.widgets["G"].fragment_id
    assert moved.status == FRAGMENT_FINISHED  # the heatmaps follow G in the browser
    assert not moved.exceptions
    assert "G=4" in s.query
    assert settled.status == "FINISHED_SUCCESSFULLY"
    assert not settled.fragment
    assert not settled.exceptions


@pytest.fixture(scope="module")
def solo(srv):
    """CPU ms of one fragment and one page rerun, one session alone: once for both paths."""
    return run_coroutine(knob_load.solo(srv.base, srv.pid))


@pytest.mark.parametrize("path", knob_load.PATHS)
def test_knob_class_benchmark(srv, solo, path, capsys):
    line = run_coroutine(
        knob_load.knob_class(
            srv.base, 3, 4.0, path, pause=0.5, seed=1, server_pid=srv.pid, solo_figures=solo
        )
    )
    with capsys.disabled():
        print("BENCHMARK " + json.dumps(line))
    assert line["errors"] == 0, line["error_examples"]
    assert line["moves"] >= 3
    if path == "fragment":
        assert line["fragment_runs_per_s"] > 0
    else:
        assert line["fragment_runs_per_s"] == 0
        assert line["settles"] == 0
    assert line["cpu_ms_per_fragment_rerun"] is not None


def test_every_page_follows_a_knob_move_without_a_page_run(srv, capsys):
    # benchmarks.knob_pages on a page of each mode: the relay's mode read from the relay's own
    # data, the moves fragment reruns, a settle per burst only where the page waits for one
    lines = {
        page: run_coroutine(knob_pages.page_cost(srv.base, page, srv.pid))
        for page in ("sensitivity", "advantages", "normalisation")
    }
    with capsys.disabled():
        print("\n" + "\n".join(json.dumps(line) for line in lines.values()))
    moves = knob_pages.BURSTS * knob_pages.BURST
    assert lines["sensitivity"]["mode"] == "whole"
    assert lines["advantages"]["mode"] == "browser"
    assert lines["normalisation"]["mode"] == "steady"
    for page, line in lines.items():
        assert line["moves"] == moves, page
        assert line["cpu_ms_per_fragment_move"] >= 0
        assert line["cpu_ms_per_page_move"] >= 0
    assert lines["sensitivity"]["settles"] == knob_pages.BURSTS
    assert lines["advantages"]["settles"] == knob_pages.BURSTS
    assert lines["normalisation"]["settles"] == 0
    assert lines["normalisation"]["cpu_ms_per_settle"] is None
    assert not srv.tracebacks()
