"""Single-flight: identical concurrent calls share one run, its result or its error."""

import threading

import pytest

from roll_viz.lm.flight import SingleFlight
from tests.lm.helpers import run_in_threads, wait_until


def test_followers_share_the_leaders_result_and_progress():
    table, gate, runs, seen = SingleFlight(), threading.Event(), [], []

    def work(report):
        runs.append(1)
        report(0.5, "half")
        gate.wait(10)
        return object()

    workers, results, errors = run_in_threads(
        [lambda: table.run("k", work), lambda: table.run("k", work, lambda f, m: seen.append(m))]
    )
    assert wait_until(lambda: "k" in table.flights and table.flights["k"].followers)
    gate.set()
    for w in workers:
        w.join(10)
    assert not errors
    assert len(runs) == 1
    assert results[0] is results[1]
    assert table.in_flight() == 0
    assert any("shared with an identical request" in m for m in seen)


@pytest.mark.parametrize("wrap", [True, False])
def test_the_leaders_error_reaches_every_caller(wrap):
    table, gate = SingleFlight(), threading.Event()

    def work(report):
        gate.wait(10)
        raise ValueError("boom")

    workers, _, errors = run_in_threads([lambda: table.run("k", work, wrap_error=wrap)] * 2)
    assert wait_until(lambda: "k" in table.flights and table.flights["k"].followers)
    gate.set()
    for w in workers:
        w.join(10)
    kinds = sorted(type(e).__name__ for e in errors)
    assert kinds == (["RuntimeError", "ValueError"] if wrap else ["ValueError", "ValueError"])
    assert table.in_flight() == 0


def test_beyond_the_limit_requests_run_alone():
    table, gate = SingleFlight(max_flights=1), threading.Event()
    workers, results, errors = run_in_threads(
        [lambda: table.run("a", lambda r: gate.wait(10) and "a")]
    )
    assert wait_until(lambda: table.in_flight() == 1)
    assert table.run("b", lambda r: "b") == "b"  # not tracked: the table is full
    gate.set()
    workers[0].join(10)
    assert results == ["a"]
    assert not errors
