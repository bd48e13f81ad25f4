"""Classroom load: N simulated students on one ``streamlit run app.py`` server on 127.0.0.1.

``python -m benchmarks.classroom_load --students 5 15 30 --seconds 30`` starts one server
per N (the tiny model, a free local port), runs the classroom and prints one JSON line per N::

    {"name": "classroom_load", "students": 5, "interactions": ..., "p50_ms": ..., "p95_ms": ...,
     "max_ms": ..., "reruns_per_s": ..., "errors": 0, "exceptions": 0, "isolation_ok": true,
     "rss_mib_start": ..., "rss_mib_peak": ..., "rss_mib_end": ..., ...}

A student is one websocket session speaking the browser's protocol
(``benchmarks.st_client.Session``: protobuf ``BackMsg`` / ``ForwardMsg`` over
``/_stcore/stream``), far cheaper than a browser per student. It opens a
page, switches page once, then every 0.5-1.5 s (its own seeded ``random.Random``) moves a
sidebar slider (beta, gamma, lambda, G) or switches page (``page_script_hash`` from the
``navigation`` message). Like the frontend it sends the moved slider's new value in
``WidgetStates`` under the widget id read from the deltas of its last run, together with the
current values of the other widgets it tracks, and edits the URL itself (``key=value``, or the
key dropped at its default: the widgets are bound to the query string). One interaction = from
sending the rerun to its ``script_finished``. A few students switch on live sampling with the
tiny model at the same moment (a barrier, then one send each), so they contend for the shared
model and its LRU.

What is recorded, per run of every student:

- exceptions: ``Exception`` elements in the deltas (the red box a browser would show);
- error alerts: ``st.error`` boxes (the app's page guard turns a failure into one);
- errors: connection drops, runs that do not finish within ``RUN_TIMEOUT_S``, compile errors,
  page-not-found, runs nobody asked for, protocol surprises;
- the displayed content: a digest of the final page (every content element - markdown, plots,
  tables, metrics, html - in delta-path order; widgets, progress bars and download buttons left
  out, so a live run that sampled and one that hit the cache read the same).

Isolation: every run is keyed by (page, the widget values this student set, defaults dropped).
Two runs with the same key must show the same digest, whoever ran them and whatever ran
alongside; after the load, up to ``reference_keys`` of the keys (most-shared first) are opened
alone by a fresh session through the shareable URL (``page?beta=...``) and must match too; a
mismatch names the first differing elements. Server RSS is sampled with psutil on the server
pid; ``Server.tracebacks()`` reads the exceptions the server logged (``benchmarks.server``).

The sidebar's algorithm knobs (beta, gamma, lambda) sit in a fragment: a move reruns that
fragment only, as in the browser (``st_client``: the rerun names the fragment's id), and the
page reruns when the student's relay says so (``benchmarks.knob_load`` simulates that; here a
student never pauses long enough). ``full_runs_per_s`` / ``fragment_runs_per_s`` count the runs
the server started of each kind, ``reruns_per_cpu_s`` divides them by the server's CPU seconds
(reruns per second one core sustains); the isolation check compares full runs only.
``--gamma`` runs ``benchmarks.knob_load`` instead: the class that moves the sidebar's gamma on
Advantages, fragment path against page path (``--paths``).

Traffic goes only to the server's 127.0.0.1 port; every loop is bounded in count and time.

Size: one file over 600 lines because the class, its isolation check (every run key against the
same URL opened alone) and its report read the same interactions; the gamma class lives in
``knob_load``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import os
import random
import statistics
import sys
import time
import urllib.parse
from typing import Any

import psutil

from benchmarks import knob_load
from benchmarks.server import health, streamlit_server
from benchmarks.st_client import (
    FINISHED,
    RUN_TIMEOUT_S,
    RunResult,
    Session,
    Widget,
    run_coroutine,
    url_value,
)
from roll_viz import nav

#: Pages the students wander through (url path names; "" is Home): the page table's, those of
#: them the server lists, less ``LEFT_OUT``. Update and Training are only drawn (nobody presses
#: their buttons).
LEFT_OUT = {
    "self_test": "it runs the oracle suite, a different load from a class exploring the chain",
    "your_run": "it needs a run file of the student's own",
    "silent_bugs": "a lesson page, outside the chain the class explores",
}
PAGES = tuple(p.url_path for p in nav.PAGES if p.key not in LEFT_OUT)

START_PAGE = "Advantages"
#: Every student makes at least this many moves (even past the end time), at most MAX_ACTIONS.
MIN_ACTIONS = 2
MAX_ACTIONS = 10_000
#: Slider values the students pick from (each is checked against the slider's range and step).
SLIDER_CHOICES: dict[str, tuple[float, ...]] = {
    "beta": (0.0, 0.05, 0.1, 0.2, 0.3),
    "gamma": (1.0, 0.99, 0.95),
    "lam": (0.95, 0.9, 1.0),
    "G": (4.0, 6.0, 8.0),
}
LIVE_KEY = "live"
TRACKED = frozenset({*SLIDER_CHOICES, LIVE_KEY})


# --------------------------------------------------------------------------- the classroom


@dataclasses.dataclass
class Interaction:
    """One timed interaction of one student."""

    student: int
    action: str
    page: str
    key: str
    ms: float
    status: str
    digest: str = ""


@dataclasses.dataclass
class ClassroomResult:
    """Everything one classroom run measured (``summary()`` is the benchmark line)."""

    students: int
    seconds: float
    live_students: int
    interactions: list[Interaction]
    errors: list[str]
    exceptions: list[str]
    error_alerts: list[str]
    isolation_mismatches: list[str]
    digests: dict[str, set[str]]
    reference_checked: int
    live_ms: list[float]
    alone_ms: list[float]
    wall_s: float
    rss_mib: list[float]
    server_runs: int
    full_runs: int = 0
    fragment_runs: int = 0
    server_cpu_s: float | None = None

    @property
    def isolation_ok(self) -> bool:
        """True when every key showed one digest, equal to its solo reference."""
        return not self.isolation_mismatches

    def summary(self) -> dict[str, Any]:
        """The benchmark line (JSON-ready).

        ``p50_ms`` / ``p95_ms`` / ``max_ms`` cover every finished interaction (the first
        open and the live switch included); ``steady_*`` only slider moves and page switches.
        """
        done = [i for i in self.interactions if i.status == "FINISHED_SUCCESSFULLY"]
        ok = sorted(i.ms for i in done)
        steady = sorted(i.ms for i in done if i.action == "page" or i.action.startswith("slider"))
        by_action: dict[str, list[float]] = {}
        for i in done:
            by_action.setdefault(i.action, []).append(i.ms)
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        return {
            "name": "classroom_load",
            "students": self.students,
            "seconds": self.seconds,
            "live_students": self.live_students,
            "interactions": len(self.interactions),
            "p50_ms": _pct(ok, 0.5),
            "p95_ms": _pct(ok, 0.95),
            "max_ms": _pct(ok, 1.0),
            "steady_p50_ms": _pct(steady, 0.5),
            "steady_p95_ms": _pct(steady, 0.95),
            "steady_max_ms": _pct(steady, 1.0),
            "median_ms_by_action": {
                a: round(statistics.median(v), 1) for a, v in sorted(by_action.items())
            },
            "live_switch_ms": [round(x, 1) for x in self.live_ms],
            # peer: the same run keys opened alone (fresh session, one at a time) right after
            "alone_p50_ms": _pct(sorted(self.alone_ms), 0.5),
            "alone_max_ms": _pct(sorted(self.alone_ms), 1.0),
            "reruns_per_s": round(self.server_runs / self.wall_s, 2) if self.wall_s else 0.0,
            "full_runs_per_s": round(self.full_runs / self.wall_s, 2) if self.wall_s else 0.0,
            "fragment_runs_per_s": round(self.fragment_runs / self.wall_s, 2)
            if self.wall_s
            else 0.0,
            "server_cpu_s": None if self.server_cpu_s is None else round(self.server_cpu_s, 2),
            # reruns per CPU second of the server: what one core sustains at this mix
            "reruns_per_cpu_s": round((self.full_runs + self.fragment_runs) / self.server_cpu_s, 1)
            if self.server_cpu_s
            else None,
            "errors": len(self.errors),
            "exceptions": len(self.exceptions),
            "error_alerts": len(self.error_alerts),
            "isolation_ok": self.isolation_ok,
            "isolation_keys": len(self.digests),
            "isolation_keys_shared": sum(1 for k in self.digests if _shared(self, k)),
            "reference_checked": self.reference_checked,
            "rss_mib_start": round(self.rss_mib[0], 1) if self.rss_mib else None,
            "rss_mib_peak": round(max(self.rss_mib), 1) if self.rss_mib else None,
            "rss_mib_end": round(self.rss_mib[-1], 1) if self.rss_mib else None,
            "wall_s": round(self.wall_s, 1),
            "cpus": os.cpu_count(),
            "load1": round(load1, 2),
        }


def inconsistent_keys(digests: dict[str, dict[str, list[int]]]) -> list[str]:
    """Run keys that showed more than one page.

    Args:
        digests: run key -> page digest -> the students (one entry per run) that saw it.

    Returns:
        One line per inconsistent key, naming the digests and who saw each.
    """
    lines = []
    for key, seen in sorted(digests.items()):
        if len(seen) > 1:
            who = "; ".join(f"{d[:10]} by students {sorted(set(v))}" for d, v in seen.items())
            lines.append(f"{key}: {len(seen)} different pages: {who}")
    return lines


def _diff_parts(
    seen: list[tuple[tuple[int, ...], str, str, str]],
    ref: list[tuple[tuple[int, ...], str, str, str]],
    limit: int = 3,
) -> str:
    """The first ``limit`` content elements that differ (path, kind, text), seen vs alone."""
    a, b = dict((p[0], p[1:]) for p in seen), dict((p[0], p[1:]) for p in ref)
    out = []
    for path in sorted(set(a) | set(b)):
        if a.get(path) != b.get(path):
            out.append(f"{list(path)} load={a.get(path)} alone={b.get(path)}")
            if len(out) == limit:
                break
    return "; ".join(out) or "same elements, different order"


def _pct(sorted_ms: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_ms:
        return None
    return round(sorted_ms[min(len(sorted_ms) - 1, math.ceil(q * len(sorted_ms)) - 1)], 1)


def _shared(res: ClassroomResult, key: str) -> bool:
    return len({i.student for i in res.interactions if i.key == key}) > 1


def _state_key(page: str, values: dict[str, Any]) -> str:
    """``page|beta=0.1&live=true`` (sorted; the same string names the shareable URL)."""
    return page + "|" + _query_of(values)


def _query_of(values: dict[str, Any]) -> str:
    return urllib.parse.urlencode({k: url_value(values[k]) for k in sorted(values)})


def _valid(value: float, spec: Widget) -> bool:
    lo, hi, step = spec.lo, spec.hi, spec.step
    if not lo - 1e-9 <= value <= hi + 1e-9:
        return False
    n = (value - lo) / step if step > 0 else 0.0
    return abs(n - round(n)) < 1e-6


class _Student:
    def __init__(self, idx: int, base: str, seed: int, live: bool) -> None:
        self.idx = idx
        self.session = Session(base)
        self.rng = random.Random(seed * 1000 + idx)
        self.live = live
        self.values: dict[str, Any] = {}
        self.widgets: dict[str, Widget] = {}
        self.page = START_PAGE
        self.history: list[str] = []

    def keep(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Current values of the tracked widgets on this page that ``changes`` leaves alone."""
        return {
            key: self.values.get(key, w.default)
            for key, w in self.widgets.items()
            if key in TRACKED and key not in changes
        }

    def set(self, changes: dict[str, Any]) -> None:
        """Remember the values this student set.

        A value back at its default is dropped, so "beta at its default" and "beta never
        touched" are the same run key.
        """
        for key, value in changes.items():
            widget = self.widgets.get(key)
            if widget is not None and value == widget.default:
                self.values.pop(key, None)
            else:
                self.values[key] = value


async def _record(
    student: _Student,
    action: str,
    coro: Any,
    out: dict[str, Any],
) -> RunResult | None:
    try:
        res = await coro
    except Exception as err:  # a dropped connection, a protocol error: an error, not a crash
        out["errors"].append(f"student {student.idx} {action} on /{student.page}: {err!r}")
        out["interactions"].append(
            Interaction(student.idx, action, student.page, "", float("nan"), "error")
        )
        return None
    key = _state_key(student.page, student.values)
    out["interactions"].append(
        Interaction(student.idx, action, student.page, key, res.ms, res.status, res.digest[:10])
    )
    where = f"student {student.idx} /{student.page} ({action}, {key})"
    if res.status not in FINISHED:
        out["errors"].append(f"{where}: run ended with {res.status}")
        return None
    out["exceptions"].extend(f"{where}: {e}" for e in res.exceptions)
    out["error_alerts"].extend(f"{where}: {e}" for e in res.error_alerts)
    if not res.exceptions and not res.fragment:  # a fragment run's digest is the fragment's
        out["digests"].setdefault(key, {}).setdefault(res.digest, []).append(student.idx)
        out["examples"].setdefault(
            (key, res.digest), (student.idx, list(student.history[-3:]), res.parts)
        )
    student.history.append(f"{action} -> {key}")
    student.widgets = student.session.widgets or student.widgets  # fragment reruns merged in
    return res


def _next_action(student: _Student) -> tuple[str, str | None, dict[str, Any]]:
    """(action, page, changes): a slider move (70 %) or a page switch (30 %)."""
    rng = student.rng
    sliders = [k for k in SLIDER_CHOICES if k in student.widgets]
    if sliders and rng.random() < 0.7:
        key = rng.choice(sliders)
        current = student.values.get(key, student.widgets[key].default)
        options = [
            v for v in SLIDER_CHOICES[key] if v != current and _valid(v, student.widgets[key])
        ]
        if options:
            return f"slider:{key}", None, {key: rng.choice(options)}
    listed = student.session.page_hashes
    page = rng.choice([p for p in PAGES if p != student.page and (not listed or p in listed)])
    return "page", page, {}


async def _student_loop(
    student: _Student,
    t_end: float,
    live_at: float,
    live_barrier: asyncio.Barrier | None,
    out: dict[str, Any],
) -> None:
    s = student.session
    try:
        await s.connect()
    except Exception as err:
        out["errors"].append(f"student {student.idx} could not connect: {err!r}")
        return
    try:
        res = await _record(student, "open", s.run(page=student.page, query=""), out)
        if res is None:
            return
        live_done = not student.live
        n = actions = 0
        while (time.monotonic() < t_end or actions < MIN_ACTIONS) and n < MAX_ACTIONS:
            n += 1
            think = student.rng.uniform(0.5, 1.5)
            if not live_done and time.monotonic() + think >= live_at:
                await s.idle(max(0.0, live_at - time.monotonic()))
                live_done = True
                if live_barrier is not None:
                    with contextlib.suppress(asyncio.BrokenBarrierError, TimeoutError):
                        await asyncio.wait_for(live_barrier.wait(), RUN_TIMEOUT_S)
                if LIVE_KEY not in student.widgets:
                    student.page = START_PAGE
                    res = await _record(student, "page", s.run(page=START_PAGE), out)
                    if res is None:
                        return
                student.set({LIVE_KEY: True})
                t0 = time.perf_counter()
                res = await _record(
                    student,
                    "live",
                    s.run(
                        changes={LIVE_KEY: True},
                        widgets=student.widgets,
                        keep=student.keep({LIVE_KEY: True}),
                    ),
                    out,
                )
                out["live_ms"].append((time.perf_counter() - t0) * 1000.0)
                if res is None:
                    return
                continue
            unasked = await s.idle(think)
            if unasked:
                out["errors"].append(
                    f"student {student.idx} /{student.page}: {unasked} run(s) nobody asked for"
                )
                return
            if time.monotonic() >= t_end and actions >= MIN_ACTIONS:
                break
            if actions == 0:  # first a page switch: every student leaves the start page
                listed = s.page_hashes
                others = [p for p in PAGES if p != START_PAGE and (not listed or p in listed)]
                action, page, changes = "page", others[student.idx % len(others)], {}
            else:
                action, page, changes = _next_action(student)
            actions += 1
            if page is not None:
                student.page = page
            student.set(changes)
            res = await _record(
                student,
                action,
                s.run(
                    page=page,
                    changes=changes,
                    widgets=student.widgets,
                    keep=student.keep(changes) if page is None else None,
                ),
                out,
            )
            if res is None:
                return
    finally:
        await s.close()


async def open_alone(base: str, key: str) -> RunResult:
    """Open run key ``page|query`` in a fresh session (the shareable URL) and read its page.

    Args:
        base: ``http://127.0.0.1:<port>``.
        key: a run key as in ``Interaction.key``, e.g. ``"Advantages|beta=0.1&klr=true"``.

    Returns:
        The RunResult of that one run.
    """
    page, _, query = key.partition("|")
    s = Session(base)
    await s.connect()
    try:
        return await s.run(page=page, query=query)
    finally:
        await s.close()


async def _rss_sampler(pid: int | None, samples: list[float], stop: asyncio.Event) -> None:
    if pid is None:
        return
    try:
        proc = psutil.Process(pid)
        while not stop.is_set():
            samples.append(proc.memory_info().rss / 2**20)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        samples.append(proc.memory_info().rss / 2**20)
    except psutil.Error:
        return


async def classroom(
    base: str,
    students: int,
    seconds: float,
    *,
    live_students: int = 3,
    live_at_fraction: float = 0.3,
    seed: int = 0,
    server_pid: int | None = None,
    reference_keys: int = 8,
) -> ClassroomResult:
    """Run ``students`` simulated students against the server at ``base`` for ``seconds``.

    Args:
        base: ``http://127.0.0.1:<port>`` of a running ``streamlit run app.py``.
        students: number of concurrent sessions N.
        seconds: how long the students keep interacting (each finishes its last run after).
        live_students: how many of them switch on live sampling at the same moment.
        live_at_fraction: when (fraction of ``seconds``) they do so.
        seed: seeds every student's ``random.Random`` (student i: seed * 1000 + i).
        server_pid: the server's pid for the RSS samples (None: no RSS).
        reference_keys: how many run keys to re-open alone afterwards (shared keys first).

    Returns:
        The ClassroomResult.
    """
    out: dict[str, Any] = {
        "interactions": [],
        "errors": [],
        "exceptions": [],
        "error_alerts": [],
        "digests": {},
        "examples": {},
        "live_ms": [],
    }
    n_live = min(live_students, students)
    pool = [_Student(i, base, seed, live=i < n_live) for i in range(students)]
    barrier = asyncio.Barrier(n_live) if n_live > 1 else None
    rss: list[float] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_rss_sampler(server_pid, rss, stop))
    cpu0 = knob_load.cpu_seconds(server_pid)
    t0 = time.monotonic()
    t_end = t0 + seconds
    live_at = t0 + seconds * live_at_fraction
    await asyncio.gather(
        *(_student_loop(st, t_end, live_at, barrier, out) for st in pool),
        return_exceptions=False,
    )
    wall = time.monotonic() - t0
    cpu = knob_load.cpu_seconds(server_pid) - cpu0 if server_pid is not None else None
    server_runs = sum(st.session.runs for st in pool)
    digests: dict[str, dict[str, list[int]]] = out["digests"]
    mismatches = inconsistent_keys(digests)
    # solo references: shared keys first (most students), then the rest, deterministic order
    order = sorted(
        digests,
        key=lambda k: (-len({s for v in digests[k].values() for s in v}), k),
    )
    checked = 0
    alone_ms: list[float] = []
    for key in order[:reference_keys]:
        try:
            ref = await open_alone(base, key)
        except Exception as err:
            out["errors"].append(f"reference run {key}: {err!r}")
            continue
        checked += 1
        alone_ms.append(ref.ms)
        if ref.status != "FINISHED_SUCCESSFULLY" or ref.exceptions or ref.error_alerts:
            out["errors"].append(
                f"reference run {key}: {ref.status} {ref.exceptions} {ref.error_alerts}"
            )
            continue
        seen = set(digests[key])
        if seen != {ref.digest}:
            detail = []
            for d in sorted(seen - {ref.digest}):
                who, before, parts = out["examples"][(key, d)]
                detail.append(f"student {who} after {before}: " + _diff_parts(parts, ref.parts))
            mismatches.append(
                f"{key}: alone {ref.digest[:10]}, under load {sorted(d[:10] for d in seen)}; "
                + " | ".join(detail)
            )
    stop.set()
    await sampler
    return ClassroomResult(
        students=students,
        seconds=seconds,
        live_students=n_live,
        interactions=out["interactions"],
        errors=out["errors"],
        exceptions=out["exceptions"],
        error_alerts=out["error_alerts"],
        isolation_mismatches=mismatches,
        digests={k: set(v) for k, v in digests.items()},
        reference_checked=checked,
        live_ms=out["live_ms"],
        alone_ms=alone_ms,
        wall_s=wall,
        rss_mib=rss,
        server_runs=server_runs,
        full_runs=sum(st.session.full_runs for st in pool),
        fragment_runs=sum(st.session.fragment_runs for st in pool),
        server_cpu_s=cpu,
    )


def run_classroom(base: str, students: int, seconds: float, **kwargs: Any) -> ClassroomResult:
    """Synchronous wrapper of ``classroom`` (a fresh event loop)."""
    return run_coroutine(classroom(base, students, seconds, **kwargs))


def main(argv: list[str] | None = None) -> int:
    """CLI: one JSON line per N (a fresh server each); ``--gamma``: ``knob_load``'s class."""
    argv = sys.argv[1:] if argv is None else argv
    if "--gamma" in argv:
        return knob_load.main(argv)
    ap = argparse.ArgumentParser(prog="python -m benchmarks.classroom_load", description=__doc__)
    ap.add_argument("--students", type=int, nargs="+", default=[5, 15, 30])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--live", type=int, default=3, help="students sampling live at once")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="also print errors / mismatches")
    ap.add_argument("--gamma", action="store_true", help="the gamma class (benchmarks.knob_load)")
    args = ap.parse_args(argv)
    if not 0 < args.seconds <= 600 or not all(0 < n <= 200 for n in args.students):
        ap.error("--seconds in (0, 600], --students in [1, 200]")
    worst = 0
    for n in args.students:
        with streamlit_server() as srv:
            res = run_classroom(
                srv.base,
                n,
                args.seconds,
                live_students=args.live,
                seed=args.seed,
                server_pid=srv.pid,
            )
            line = res.summary()
            line["health_after"] = health(srv.base)
            tracebacks = srv.tracebacks()
            line["server_tracebacks"] = len(tracebacks)
        print(json.dumps(line), flush=True)
        if args.verbose:
            for what in ("errors", "exceptions", "error_alerts", "isolation_mismatches"):
                for item in getattr(res, what)[:20]:
                    print(f"  {what}: {item}", file=sys.stderr)
            for item in tracebacks[:20]:
                print(f"  server traceback: {item}", file=sys.stderr)
        if res.errors or res.exceptions or res.error_alerts or tracebacks or not res.isolation_ok:
            worst = 1
    return worst


if __name__ == "__main__":
    sys.exit(main())
