"""Churn load: students train and update on one server and close their tabs mid-step.

``python -m benchmarks.churn_load --students 12`` starts a server (the tiny model, a free
local port) and prints one JSON line::

    {"name": "churn_load", "students": 12, "health_max_ms": ..., "health_p99_ms": ...,
     "health_over_1s": 0, "rss_mib_before": ..., "rss_mib_peak": ..., "rss_mib_after": ...,
     "progress": [...], "closed_mid_step": ..., "errors": 0, ...}

What happens (every student is one websocket session, ``benchmarks.st_client.Session``):

1. warm-up: one session opens the Training page and the Update page with a live batch and
   leaves, so the model and the pages are loaded; then ``rss_mib_before`` is read;
2. half the students (even index) open Training and press Start at the same moment (a
   barrier), the others open Update with a live batch (``?live=true``) and press "Take one
   update step" at the same moment;
3. each keeps its tab open for a seeded random 1-``hold_s`` seconds (training students read
   their status line once: "step k / N", and the queue position when waiting), then closes
   the tab with no goodbye while its step is in flight (updating students close
   ``update_close_s`` after pressing, before the step's page came back);
4. after the last close, the driver waits ``settle_s`` seconds (``settle_idle``: then until the
   server is idle, ``wait_idle``) and reads ``rss_mib_after``.

Closed sessions keep their runs and adapters ``reconnect_grace_s`` seconds for a reconnect (120 s
in the app, Streamlit keeps the session's state as long), so an ``rss_mib_after`` read sooner
says nothing about memory coming back. ``--grace G`` starts the server with both graces set to
G seconds (``ROLL_VIZ_RECONNECT_GRACE_S``, ``server.disconnectedSessionTTL``) and settles G + 25 s
by default, so the freeing (reaper thread, ``malloc_trim``) happens inside the measurement; the
line states ``reconnect_grace_s`` and ``rss_after_past_grace``.

Throughout, a thread asks ``/_stcore/health`` every ``HEALTH_PERIOD_S`` (each request bounded by
``HEALTH_TIMEOUT_S``) and a sampler reads the server's RSS (psutil). The health latency is the
figure of the defect: closing a tab mid-step froze the event loop for 10-41 s; the bound is
1 s. ``health_*`` cover the whole run; ``warmup_health_*`` the warm-up (the process's first page
runs import torch and transformers) and ``churn_health_*`` what follows (students, closes,
settling and freeing). ``progress`` is the steps each training student saw done before it left
(fairness: turns are first come first served, so with N runs the spread is small).
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
import re
import sys
import threading
import time
import urllib.request
from typing import Any

import psutil

from benchmarks.server import health, streamlit_server
from benchmarks.st_client import FINISHED, RunResult, Session, run_coroutine

HEALTH_PERIOD_S = 0.1
HEALTH_TIMEOUT_S = 30.0
TRAIN_PAGE, UPDATE_PAGE = "Training", "Update"
START_KEY, STEP_KEY = "tr_start", "upd_step"
TRAIN_QUERY = "tab=Train+live"  # the Training page runs only its open tab
_STEP_RE = re.compile(r"step (\d+) / (\d+)")
_LINE_RE = re.compile(r"number (\d+) in line")
#: the app's reconnect grace and its variable (``ui.reconnect``, which bench may not import)
APP_GRACE_S = 120.0
GRACE_ENV = "ROLL_VIZ_RECONNECT_GRACE_S"
SLOTS_ENV = "ROLL_VIZ_PAGE_SLOTS"  # the server's page slots (``lm.admission``), inherited
STALL_MS = 300.0  # a health answer slower than this is listed with its time in ``stalls``
GRACE_MARGIN_S = 25.0  # settle past the grace: the timers fire, the reaper frees and trims
IDLE_CPU_PERCENT = 10.0  # below this the server is done with closed tabs' work (one core = 100)
IDLE_WAIT_MAX_S = 180.0  # at most this long past the settling for it to get there


def wait_idle(pid: int, max_s: float = IDLE_WAIT_MAX_S) -> float:
    """Wait until the server's CPU use over 2 s is under ``IDLE_CPU_PERCENT``; seconds waited.

    A step closed mid-flight stops at its next boundary and its memory is freed after it: on a
    loaded 2-core machine that can be later than grace + settle, and RSS read then is the
    step's, not what the class left (one update-only class read 3.0 GB there, 1.3 GB idle).
    """
    proc = psutil.Process(pid)
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        if proc.cpu_percent(interval=2.0) < IDLE_CPU_PERCENT:
            break
    return round(time.monotonic() - t0, 1)


@dataclasses.dataclass
class ChurnResult:
    """What one churn run measured (``summary()`` is the benchmark line)."""

    students: int
    health_ms: list[float]
    health_failures: int
    churn_t0: float  # time.monotonic() when the students started (after the warm-up)
    rss_before: float
    rss_samples: list[float]
    rss_after: float
    progress: list[int]
    queue_positions: list[int]
    closed_mid_step: int
    errors: list[str]
    exceptions: list[str]
    wall_s: float
    health_at: list[float] = dataclasses.field(default_factory=list)  # when each was sent
    grace_s: float = 120.0
    settle_s: float = 0.0
    last_close_s: float = 0.0  # seconds after the students started
    page_s: list[float] = dataclasses.field(default_factory=list)  # each student's page open
    start_s: list[float] = dataclasses.field(default_factory=list)  # each Start press's page run

    def summary(self) -> dict[str, Any]:
        """The benchmark line (JSON-ready)."""
        ms = sorted(self.health_ms)
        pairs = list(zip(self.health_ms, self.health_at, strict=True))
        warm = sorted(m for m, t in pairs if t < self.churn_t0)
        churn = sorted(m for m, t in pairs if t >= self.churn_t0)
        return {
            "name": "churn_load",
            "students": self.students,
            "health_checks": len(ms),
            "health_p50_ms": _pct(ms, 0.5),
            "health_p99_ms": _pct(ms, 0.99),
            "health_max_ms": _pct(ms, 1.0),
            "health_over_1s": sum(1 for x in ms if x > 1000.0) + self.health_failures,
            "warmup_health_max_ms": _pct(warm, 1.0),
            "churn_health_p99_ms": _pct(churn, 0.99),
            "churn_health_max_ms": _pct(churn, 1.0),
            "stalls": self.stalls(),
            "reconnect_grace_s": self.grace_s,
            "settle_s": self.settle_s,
            "rss_after_past_grace": self.settle_s > self.grace_s,
            "last_close_s": round(self.last_close_s, 1),
            "rss_mib_before": round(self.rss_before, 1),
            "rss_mib_peak": round(max(self.rss_samples, default=self.rss_before), 1),
            "rss_mib_after": round(self.rss_after, 1),
            "page_open_p50_s": _pct_s(self.page_s, 0.5),
            "page_open_max_s": _pct_s(self.page_s, 1.0),
            "start_page_max_s": _pct_s(self.start_s, 1.0),
            "page_slots": os.environ.get(SLOTS_ENV) or "app default",
            "progress": self.progress,
            "queue_positions_seen": sorted(set(self.queue_positions)),
            "closed_mid_step": self.closed_mid_step,
            "errors": len(self.errors),
            "exceptions": len(self.exceptions),
            "wall_s": round(self.wall_s, 1),
        }

    def stalls(self, over_ms: float = STALL_MS) -> list[list[float]]:
        """[seconds after the students started, ms] of each health answer slower than over_ms.

        Negative times fall in the warm-up; the students start at 0, the last tab closes at
        ``last_close_s``, the reconnect grace ends ``grace_s`` later (reaping, ``malloc_trim``).
        """
        return [
            [round(t - self.churn_t0, 2), round(m)]
            for m, t in zip(self.health_ms, self.health_at, strict=True)
            if m > over_ms
        ]


def _pct_s(seconds: list[float], q: float) -> float | None:
    """The q-quantile of ``seconds`` (unsorted), to 0.01 s."""
    if not seconds:
        return None
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 2)


def _pct(sorted_ms: list[float], q: float) -> float | None:
    if not sorted_ms:
        return None
    return round(sorted_ms[min(len(sorted_ms) - 1, math.ceil(q * len(sorted_ms)) - 1)], 1)


class HealthProbe:
    """A thread asking ``/_stcore/health`` every ``HEALTH_PERIOD_S``; latencies in ms."""

    def __init__(self, base: str) -> None:
        self.url = f"{base}/_stcore/health"
        self.ms: list[float] = []
        self.at: list[float] = []  # time.monotonic() each request was sent
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-probe", daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(HEALTH_TIMEOUT_S + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            sent = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=HEALTH_TIMEOUT_S) as resp:
                    resp.read()
                self.ms.append((time.perf_counter() - t0) * 1000.0)
                self.at.append(sent)
            except OSError:
                self.failures += 1
            self._stop.wait(HEALTH_PERIOD_S)


def rss_mib(pid: int | None) -> float:
    """The RSS of ``pid`` in MiB (nan when unknown)."""
    if pid is None:
        return math.nan
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return math.nan


async def _sampler(pid: int | None, out: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        out.append(rss_mib(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)


def _check(res: RunResult | None, who: str, out: dict[str, list]) -> bool:
    if res is None:
        return False
    if res.status not in FINISHED:  # a sidebar knob's fragment rerun finishes as such
        out["errors"].append(f"{who}: run ended with {res.status}")
        return False
    out["exceptions"].extend(f"{who}: {e}" for e in res.exceptions)
    return True


async def _open(session: Session, page: str, query: str, who: str, out: dict) -> RunResult | None:
    t0 = time.monotonic()
    try:
        await session.connect()
        res = await session.run(page=page, query=query)
    except Exception as err:
        out["errors"].append(f"{who}: could not open {page}: {err!r}")
        return None
    out["page_s"].append(time.monotonic() - t0)
    return res if _check(res, who, out) else None


async def _trainer(
    idx: int, base: str, rng: random.Random, barrier: asyncio.Barrier, hold_s: float, out: dict
) -> None:
    who = f"student {idx} (training)"
    s = Session(base)
    try:
        res = await _open(s, TRAIN_PAGE, TRAIN_QUERY, who, out)
        with contextlib.suppress(asyncio.BrokenBarrierError, TimeoutError):
            await asyncio.wait_for(barrier.wait(), 120)
        if res is None or START_KEY not in res.widgets:
            out["errors"].append(f"{who}: no Start button")
            return
        t0 = time.monotonic()
        res = await s.run(changes={START_KEY: True}, widgets=res.widgets)
        out["start_s"].append(time.monotonic() - t0)
        if not _check(res, who, out):
            return
        await asyncio.sleep(rng.uniform(1.0, hold_s))
        res = await s.run()  # read the status line once more
        if _check(res, who, out):
            steps = [int(m.group(1)) for t in res.progress if (m := _STEP_RE.search(t))]
            out["progress"].append(steps[0] if steps else 0)
            out["positions"].extend(
                int(m.group(1)) for t in res.progress if (m := _LINE_RE.search(t))
            )
        out["closed_mid_step"] += 1  # the run is still going: the tab closes mid-step
    finally:
        await s.abandon()


async def _updater(
    idx: int, base: str, rng: random.Random, barrier: asyncio.Barrier, close_s: float, out: dict
) -> None:
    who = f"student {idx} (update)"
    s = Session(base)
    try:
        res = await _open(s, UPDATE_PAGE, "live=true", who, out)
        with contextlib.suppress(asyncio.BrokenBarrierError, TimeoutError):
            await asyncio.wait_for(barrier.wait(), 120)
        if res is None or STEP_KEY not in res.widgets:
            out["errors"].append(f"{who}: no update button")
            return
        await s.send_rerun(changes={STEP_KEY: True}, widgets=res.widgets)
        await asyncio.sleep(rng.uniform(0.05, close_s))
        out["closed_mid_step"] += 1
    finally:
        await s.abandon()


def empty_result() -> dict[str, Any]:
    """The per-student tallies a churn (or a day-soak class) fills in."""
    return {
        "errors": [],
        "exceptions": [],
        "progress": [],
        "positions": [],
        "closed_mid_step": 0,
        "page_s": [],
        "start_s": [],
    }


async def churn(
    base: str,
    students: int,
    *,
    seed: int = 0,
    server_pid: int | None = None,
    hold_s: float = 6.0,
    update_close_s: float = 1.0,
    settle_s: float = 10.0,
    grace_s: float = 120.0,
    settle_idle: bool = False,
) -> ChurnResult:
    """Run the churn against the server at ``base`` (see the module docstring).

    Args:
        base: ``http://127.0.0.1:<port>`` of a running ``streamlit run app.py``.
        students: how many sessions (even indices train, odd ones update).
        seed: seeds each student's hold time.
        server_pid: the server's pid for RSS (None: no RSS).
        hold_s: a training student keeps its tab open 1 to ``hold_s`` seconds after Start.
        update_close_s: an updating student closes 0.05 to this many seconds after pressing.
        settle_s: how long after the last close ``rss_mib_after`` is read.
        grace_s: the server's reconnect grace (only reported: the server is started with it).
        settle_idle: after ``settle_s``, also wait until the server is idle (``wait_idle``:
            the steps closed mid-flight finished, the reaper freed and trimmed) before RSS.

    Returns:
        The ChurnResult.
    """
    out = empty_result()
    for page, query in ((TRAIN_PAGE, TRAIN_QUERY), (UPDATE_PAGE, "live=true")):
        warm = Session(base)
        await _open(warm, page, query, "warm-up", out)
        await warm.close()
    out["page_s"].clear()  # the students' pages only
    await asyncio.sleep(2.0)
    before = rss_mib(server_pid)
    samples: list[float] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sampler(server_pid, samples, stop))
    t0 = t0_mono = time.monotonic()
    n_train = (students + 1) // 2
    b_train = asyncio.Barrier(max(n_train, 1))
    b_update = asyncio.Barrier(max(students - n_train, 1))
    jobs = []
    for i in range(students):
        rng = random.Random(seed * 1000 + i)
        if i % 2 == 0:
            jobs.append(_trainer(i, base, rng, b_train, hold_s, out))
        else:
            jobs.append(_updater(i, base, rng, b_update, update_close_s, out))
    await asyncio.gather(*jobs)
    last_close = time.monotonic() - t0
    await asyncio.sleep(settle_s)
    if settle_idle and server_pid is not None:
        await asyncio.to_thread(wait_idle, server_pid)
    after = rss_mib(server_pid)
    stop.set()
    await sampler
    return ChurnResult(
        students=students,
        health_ms=[],
        health_failures=0,
        churn_t0=t0_mono,
        rss_before=before,
        rss_samples=samples,
        rss_after=after,
        progress=sorted(out["progress"]),
        queue_positions=out["positions"],
        closed_mid_step=out["closed_mid_step"],
        page_s=out["page_s"],
        start_s=out["start_s"],
        errors=out["errors"],
        exceptions=out["exceptions"],
        wall_s=time.monotonic() - t0,
        grace_s=grace_s,
        settle_s=settle_s,
        last_close_s=last_close,
    )


def run_churn(base: str, students: int, **kwargs: Any) -> ChurnResult:
    """``churn`` with the health probe running throughout (a fresh event loop)."""
    with HealthProbe(base) as probe:
        res = run_coroutine(churn(base, students, **kwargs))
    res.health_ms, res.health_at, res.health_failures = probe.ms, probe.at, probe.failures
    return res


def main(argv: list[str] | None = None) -> int:
    """CLI: one JSON line; exit 1 when health went over 1 s or a student saw an error."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.churn_load", description=__doc__)
    ap.add_argument("--students", type=int, default=12)
    ap.add_argument("--hold", type=float, default=6.0, help="training tabs stay 1-HOLD s")
    ap.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds after the last close before RSS after (default 10, or GRACE + 25)",
    )
    ap.add_argument(
        "--grace",
        type=float,
        default=None,
        help="start the server with this reconnect grace in s (default: the app's 120 s)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="tiny")
    args = ap.parse_args(argv)
    settle = args.settle
    if settle is None:
        settle = 10.0 if args.grace is None else args.grace + GRACE_MARGIN_S
    if (
        not 0 < args.students <= 60
        or not 1.0 <= args.hold <= 120
        or not 0 <= settle <= 400
        or (args.grace is not None and not 1.0 <= args.grace <= 300)
    ):
        ap.error("--students in [1, 60], --hold in [1, 120], --settle in [0, 400], --grace 1-300")
    env = {}
    if args.grace is not None:
        env = {
            GRACE_ENV: f"{args.grace:g}",
            "STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": str(max(1, round(args.grace))),
        }
    grace = args.grace if args.grace is not None else APP_GRACE_S
    with streamlit_server(model=args.model, extra_env=env) as srv:
        res = run_churn(
            srv.base,
            args.students,
            seed=args.seed,
            server_pid=srv.pid,
            hold_s=args.hold,
            settle_s=settle,
            grace_s=grace,
        )
        line = res.summary()
        line["health_after"] = health(srv.base)
        line["server_tracebacks"] = len(srv.tracebacks())
    print(json.dumps(line), flush=True)
    bad = line["health_over_1s"] or res.errors or res.exceptions or line["server_tracebacks"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
