"""A class moving the sidebar's gamma on one page: fragment reruns against page reruns.

``python -m benchmarks.classroom_load --gamma --students 10 20 --seconds 20`` (or
``python -m benchmarks.knob_load``) starts one server per N and path (the tiny model, a free
127.0.0.1 port) and prints one JSON line per N and path::

    {"name": "knob_load", "path": "fragment", "students": 20, "gamma_p50_ms": ..,
     "gamma_p95_ms": .., "settle_p95_ms": .., "full_runs_per_s": .., "fragment_runs_per_s": ..,
     "reruns_per_cpu_s": .., "cpu_ms_per_fragment_rerun": .., ...}

Each student (``benchmarks.st_client.Session``, the browser's websocket protocol) opens
Advantages on the default committed preset, then moves the sidebar's gamma slider (to one of
1.0, 0.99, 0.95, never its current value) every 0.5-1.5 s (its own seeded ``random.Random``),
waiting for each rerun; after a move it pauses, with probability ``pause`` (0.25), for 2-4 s.

- path ``fragment`` (today's app): the move names the sidebar fragment's id, as the browser
  does, so the server reruns the algorithm section only and the browser redraws the page's
  heatmaps itself; in a pause, 1.5 s after the last move (``relay.PAUSE_MS``), the student's
  relay sets its ``settle`` trigger as the browser's relay.js does, and the server reruns the
  page once (``settle_*``: that trigger -> the page's ``script_finished``).
- path ``page``: the same moves sent as page reruns (no fragment id), as every knob move was
  before the fragment; no settle.

Reported per line: gamma-move latency (p50 / p95 / max), settle latency, errors, full-page and
fragment runs per second (the runs the server started, ``Session.full_runs`` /
``fragment_runs``), the server process's CPU seconds over the window and reruns per CPU second
(= reruns per second one core sustains), and, measured alone on the same server before the
class (one session, 20 moves each way, idle otherwise), the CPU ms of one fragment rerun and of
one page rerun. Timings are printed, never asserted. Traffic goes only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from typing import Any

import psutil

from benchmarks.server import health, streamlit_server
from benchmarks.st_client import FINISHED, Session, run_coroutine
from roll_viz import nav

PAGE = "Advantages"
KEY = "gamma"
RELAY = "rv_knob_relay"
CHOICES = (1.0, 0.99, 0.95)
#: the relay's pause before the one page rerun, per mode (roll_viz/ui/instant/relay.py PAUSE_MS,
#: WHOLE_PAUSE_MS); "steady" pages never rerun
PAUSE_S = {"browser": 1.5, "whole": 0.5}
PATHS = ("fragment", "page")
SOLO_MOVES = 20


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))], 1)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of the server process so far (0 without a pid)."""
    if pid is None:
        return 0.0
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def relay_mode(res: Any) -> str | None:
    """The knob relay's mode in this run's data (``relay.move_mode``; None: not mounted)."""
    raw = res.component_json.get(RELAY)
    return json.loads(raw).get("mode") if raw else None


def _next_value(rng: random.Random, current: float) -> float:
    return rng.choice([v for v in CHOICES if v != current])


async def _student(
    idx: int, base: str, path: str, t_end: float, pause: float, seed: int, out: dict, page: str
) -> Session | None:
    rng = random.Random(seed * 1000 + idx)
    s = Session(base)
    try:
        await s.connect()
        res = await s.run(page=page, query="")
        if res.status not in FINISHED or KEY not in s.widgets:
            out["errors"].append(f"student {idx}: open ended {res.status}, {res.exceptions}")
            return s
        current = s.widgets[KEY].default
        while time.monotonic() < t_end:
            await s.idle(rng.uniform(0.5, 1.5))
            current = _next_value(rng, current)
            res = await s.run(changes={KEY: current}, widgets=s.widgets, page_reruns=path == "page")
            if res.status not in FINISHED or res.exceptions or res.error_alerts:
                out["errors"].append(
                    f"student {idx} gamma={current}: {res.status} "
                    f"{res.exceptions} {res.error_alerts}"
                )
                return s
            out["gamma_ms"].append(res.ms)
            mode = relay_mode(res) if res.fragment else None
            if rng.random() < pause:
                wait = rng.uniform(2.0, 4.0)
                if path == "fragment" and mode in PAUSE_S:
                    await s.idle(PAUSE_S[mode])  # the relay's timer, then its settle trigger
                    res = await s.run(triggers={RELAY: ("settle", idx)}, widgets=s.widgets)
                    if res.status not in FINISHED or res.exceptions or res.fragment:
                        out["errors"].append(
                            f"student {idx} settle: {res.status} "
                            f"fragment={res.fragment} {res.exceptions}"
                        )
                        return s
                    out["settle_ms"].append(res.ms)
                    wait -= PAUSE_S[mode]
                await s.idle(max(0.0, wait))
    except Exception as err:  # a dropped connection: an error, not a crash
        out["errors"].append(f"student {idx}: {err!r}")
    finally:
        await s.close()
    return s


async def solo(base: str, pid: int | None, page: str = PAGE) -> dict[str, float | None]:
    """CPU ms of one fragment rerun and of one page rerun, one session alone."""
    s = Session(base)
    await s.connect()
    try:
        await s.run(page=page, query="")
        got: dict[str, float | None] = {}
        for path in PATHS:
            for v in CHOICES:  # warm the caches of every value first
                await s.run(changes={KEY: v}, widgets=s.widgets, page_reruns=path == "page")
            c0 = cpu_seconds(pid)
            for i in range(SOLO_MOVES):
                v = CHOICES[i % len(CHOICES)]
                await s.run(changes={KEY: v}, widgets=s.widgets, page_reruns=path == "page")
            ms = (cpu_seconds(pid) - c0) / SOLO_MOVES * 1000.0
            got[f"cpu_ms_per_{path}_rerun"] = round(ms, 1) if pid is not None else None
        return got
    finally:
        await s.close()


async def knob_class(
    base: str,
    students: int,
    seconds: float,
    path: str,
    *,
    pause: float = 0.25,
    seed: int = 0,
    server_pid: int | None = None,
    page: str = PAGE,
    solo_figures: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """Run the gamma class against the server at ``base``; the benchmark line (no timing check).

    ``page``: the URL path of the page the class is on (Advantages by default).
    ``solo_figures``: ``solo``'s figures (both paths) measured on this server already, for a
    caller that runs both paths (None: measured here first).
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    alone = solo_figures if solo_figures is not None else await solo(base, server_pid, page)
    out: dict[str, Any] = {"errors": [], "gamma_ms": [], "settle_ms": []}
    c0, t0 = cpu_seconds(server_pid), time.monotonic()
    sessions = await asyncio.gather(
        *(_student(i, base, path, t0 + seconds, pause, seed, out, page) for i in range(students))
    )
    wall, cpu = time.monotonic() - t0, cpu_seconds(server_pid) - c0
    full = sum(s.full_runs for s in sessions if s is not None)
    frag = sum(s.fragment_runs for s in sessions if s is not None)
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "name": "knob_load",
        "page": page,
        "path": path,
        "students": students,
        "seconds": seconds,
        "moves": len(out["gamma_ms"]),
        "gamma_p50_ms": _pct(out["gamma_ms"], 0.5),
        "gamma_p95_ms": _pct(out["gamma_ms"], 0.95),
        "gamma_max_ms": _pct(out["gamma_ms"], 1.0),
        "settles": len(out["settle_ms"]),
        "settle_p50_ms": _pct(out["settle_ms"], 0.5),
        "settle_p95_ms": _pct(out["settle_ms"], 0.95),
        "errors": len(out["errors"]),
        "error_examples": out["errors"][:3],
        "full_runs_per_s": round(full / wall, 2),
        "fragment_runs_per_s": round(frag / wall, 2),
        "server_cpu_s": round(cpu, 2) if server_pid is not None else None,
        # reruns per CPU second: what one core sustains at this mix of full and fragment runs
        "reruns_per_cpu_s": round((full + frag) / cpu, 1) if server_pid and cpu > 0 else None,
        **alone,
        "wall_s": round(wall, 1),
        "cpus": os.cpu_count(),
        "load1": round(load1, 2),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI: one JSON line per N and path (a fresh server for each N, both paths on it)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.knob_load", description=__doc__)
    ap.add_argument("--gamma", action="store_true", help="(accepted for classroom_load)")
    ap.add_argument("--students", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    ap.add_argument("--pause", type=float, default=0.25, help="chance of a pause after a move")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--page",
        default=PAGE,
        choices=[p.url_path for p in nav.PAGES if p.url_path],
        help="the page the class is on (its URL path)",
    )
    args = ap.parse_args(argv)
    if not 0 < args.seconds <= 600 or not all(0 < n <= 200 for n in args.students):
        ap.error("--seconds in (0, 600], --students in [1, 200]")
    if not 0 <= args.pause <= 1:
        ap.error("--pause in [0, 1]")
    worst = 0
    for n in args.students:
        with streamlit_server() as srv:
            for path in args.paths:
                line = run_coroutine(
                    knob_class(
                        srv.base,
                        n,
                        args.seconds,
                        path,
                        pause=args.pause,
                        seed=args.seed,
                        server_pid=srv.pid,
                        page=args.page,
                    )
                )
                line["health_after"] = health(srv.base)
                line["server_tracebacks"] = len(srv.tracebacks())
                print(json.dumps(line), flush=True)
                if line["errors"] or line["server_tracebacks"]:
                    worst = 1
    return worst


if __name__ == "__main__":
    sys.exit(main())
