"""A teaching day on one server: classes back to back, what the server holds after each.

``python -m benchmarks.day_soak --day`` starts one server (the bundled model: ``--model``
to change it) and runs 8 classes of 20 students back to back, the server never restarted
(``--classes``, ``--students`` for other sizes). Each student is one websocket session
(``benchmarks.st_client``) doing one of four things, by index:

- 0: opens Training, presses Start with the others at the same moment, reads its status once
  and closes the tab mid-run (``churn_load``'s trainer);
- 1: opens Update with a live batch, presses "Take one update step" with the others and closes
  the tab before the step's page comes back (``churn_load``'s updater);
- 2: opens *Your run*, uploads a zipped verl run through the upload endpoint as the frontend
  does (upload URL, PUT, the uploader set to it), reads its Format metric and closes;
- 3: opens Advantages, moves beta twice, opens Samples with a live batch and closes.

After each class the driver waits until the reconnect grace has passed (``--grace``: the app's
120 s by default; the server is started with it, for the parked runs and Streamlit's
``server.disconnectedSessionTTL``) plus ``--settle`` seconds, then until the server is idle
(``wait_idle``: the steps closed mid-flight finished and freed), and reads, from outside the
process: RSS, threads, open file descriptors, the bytes in the server's upload folder
(``<temp>/roll-viz-uploads-<pid>``) and the upload bytes Streamlit holds in memory (its own
``/_stcore/metrics``); threads are also read right after the last tab closed (the timers
waiting out the grace). A thread asks ``/_stcore/health`` every 0.1 s the whole day; each class
reports its max. One JSON line per class as it ends, then the day's line::

    {"name": "day_soak", "classes": 8, "students": 20, "rss_mib": [...], "rss_growth_mib": ...,
     "threads": [...], "fds": [...], "upload_disk_bytes": [...], "health_max_ms": ..., ...}

``rss_growth_mib`` is RSS after the last class minus after the first. No time is asserted here
(``tests/bench/test_day_soak.py`` runs 3 classes of 6 on the tiny model and prints its figures).
Lessons with votes are not part of a class here (``tests/bench/test_lesson_load.py`` drives
them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from benchmarks import churn_load
from benchmarks.churn_load import HealthProbe, rss_mib, wait_idle
from benchmarks.server import health, streamlit_server
from benchmarks.st_client import Session, UploadedFile, put_file, run_coroutine, xsrf_cookie

ROOT = Path(__file__).resolve().parents[1]
UPLOAD_FIXTURE = ROOT / "tests" / "fixtures" / "uploads" / "verl_steps.zip"
UPLOAD_SHOWS = "verl"  # the Format metric Your run shows for that fixture (a verl dump)
UPLOAD_PREFIX = "roll-viz-uploads"  # ``data.runs.uploads.PREFIX`` (the folder of one server)
KNOB_PAGE, SAMPLES_PAGE, RUN_PAGE = "Advantages", "Samples", "Your_run"
_HELD = re.compile(r'cache_memory_bytes\{cache_type="UploadedFileManager"[^}]*\}\s+(\d+)')


def held_upload_bytes(base: str) -> int:
    """Upload bytes Streamlit's uploaded-file manager holds (its metric, cached 5 s there)."""
    url = f"{base}/_stcore/metrics?families=cache_memory_bytes"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return sum(int(m.group(1)) for m in _HELD.finditer(text))


def upload_disk_bytes(pid: int) -> int:
    """Bytes in the server's upload folder (0 when it has none yet)."""
    root = Path(tempfile.gettempdir()) / f"{UPLOAD_PREFIX}-{pid}"
    if not root.is_dir():
        return 0
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def process_figures(pid: int) -> dict[str, Any]:
    """RSS (MiB), threads, open file descriptors and open files of the server process."""
    proc = psutil.Process(pid)
    with proc.oneshot():
        return {
            "rss_mib": round(proc.memory_info().rss / 2**20, 1),
            "threads": proc.num_threads(),
            "fds": proc.num_fds(),
            "open_files": len(proc.open_files()),
        }


async def _uploader(idx: int, base: str, xsrf: str, data: bytes, out: dict) -> None:
    who = f"student {idx} (upload)"
    s = Session(base)
    try:
        res = await churn_load._open(s, RUN_PAGE, "", who, out)
        if res is None or "run_upload" not in res.widgets:
            out["errors"].append(f"{who}: no uploader")
            return
        urls = await s.file_urls([UPLOAD_FIXTURE.name])
        if len(urls) != 1:
            out["errors"].append(f"{who}: no upload URL")
            return
        ((file_id, url),) = urls
        status = (await asyncio.to_thread(put_file, base, url, UPLOAD_FIXTURE.name, data, xsrf))[0]
        if status != 204:
            out["errors"].append(f"{who}: upload answered {status}")
            return
        upload = UploadedFile(file_id, UPLOAD_FIXTURE.name, len(data), url)
        res = await s.run(files={"run_upload": [upload]}, widgets=res.widgets)
        if churn_load._check(res, who, out) and not any(
            kind == "metric" and text == UPLOAD_SHOWS for _, kind, _, text in res.parts
        ):
            out["errors"].append(f"{who}: the upload did not open as a verl run")
    finally:
        await s.abandon()


async def _knobs(idx: int, base: str, rng: random.Random, out: dict) -> None:
    who = f"student {idx} (knobs)"
    s = Session(base)
    try:
        res = await churn_load._open(s, KNOB_PAGE, "", who, out)
        if res is None or "beta" not in res.widgets:
            out["errors"].append(f"{who}: no beta slider")
            return
        spec = res.widgets["beta"]
        for _ in range(2):
            steps = max(round((spec.hi - spec.lo) / spec.step), 1)
            value = round(spec.lo + spec.step * rng.randint(0, steps), 10)
            res = await s.run(changes={"beta": value}, widgets=res.widgets)
            if not churn_load._check(res, who, out):
                return
        churn_load._check(await s.run(page=SAMPLES_PAGE, query="live=true"), who, out)
    finally:
        await s.abandon()


ROLES = (0, 1, 2, 3)  # train, update, upload, knobs (see the module docstring)


async def one_class(
    base: str, students: int, seed: int, hold_s: float, out: dict, roles: tuple = ROLES
) -> None:
    """One class: every student's job at once (student i does ``roles[i % len(roles)]``)."""
    xsrf = await asyncio.to_thread(xsrf_cookie, base)
    data = UPLOAD_FIXTURE.read_bytes()
    roles = [roles[i % len(roles)] for i in range(students)]
    b_train = asyncio.Barrier(max(roles.count(0), 1))
    b_update = asyncio.Barrier(max(roles.count(1), 1))
    jobs = []
    for i, role in enumerate(roles):
        rng = random.Random(seed * 1000 + i)
        if role == 0:
            jobs.append(churn_load._trainer(i, base, rng, b_train, hold_s, out))
        elif role == 1:
            jobs.append(churn_load._updater(i, base, rng, b_update, 1.0, out))
        elif role == 2:
            jobs.append(_uploader(i, base, xsrf, data, out))
        else:
            jobs.append(_knobs(i, base, rng, out))
    await asyncio.gather(*jobs)


async def day(
    base: str,
    pid: int,
    probe: HealthProbe,
    *,
    classes: int,
    students: int,
    grace_s: float,
    settle_s: float,
    hold_s: float = 6.0,
    roles: tuple = ROLES,
    emit=None,
) -> dict[str, Any]:
    """Run the day against the server at ``base`` (process ``pid``); returns the day's line.

    Args:
        base: ``http://127.0.0.1:<port>``.
        pid: the server's process id (figures are read from outside the process).
        probe: the running health probe (each class reports the max of its window).
        classes: classes back to back.
        students: students per class.
        grace_s: the server's reconnect grace (the wait after a class is ``grace_s + settle_s``).
        settle_s: seconds past the grace before the figures are read.
        hold_s: a training student keeps its tab 1 to ``hold_s`` s after Start.
        roles: the jobs students take in turn (a subset finds which one leaves memory behind).
        emit: called with each class's line as it ends (None: nothing).
    """
    warm = churn_load.empty_result()
    for page, query in (
        (churn_load.TRAIN_PAGE, churn_load.TRAIN_QUERY),
        (churn_load.UPDATE_PAGE, "live=true"),
        (RUN_PAGE, ""),
        (KNOB_PAGE, ""),
    ):
        s = Session(base)
        await churn_load._open(s, page, query, "warm-up", warm)
        await s.close()
    await asyncio.sleep(grace_s + settle_s)
    await asyncio.to_thread(wait_idle, pid)
    baseline = {
        **process_figures(pid),
        "upload_disk_bytes": upload_disk_bytes(pid),
        "upload_held_bytes": await asyncio.to_thread(held_upload_bytes, base),
    }
    lines = []
    for k in range(classes):
        out = churn_load.empty_result()
        t0 = time.monotonic()
        peak = [0.0]
        stop = asyncio.Event()
        sampler = asyncio.create_task(_peak(pid, peak, stop))
        await one_class(base, students, seed=k, hold_s=hold_s, out=out, roles=roles)
        closed = process_figures(pid)
        await asyncio.sleep(grace_s + settle_s)
        idle_wait = await asyncio.to_thread(wait_idle, pid)
        stop.set()
        await sampler
        window = [m for m, t in zip(probe.ms, probe.at, strict=False) if t >= t0]
        line = {
            "class": k + 1,
            **process_figures(pid),
            "rss_peak_mib": round(peak[0], 1),
            "threads_at_close": closed["threads"],
            "idle_wait_s": idle_wait,
            "upload_disk_bytes": upload_disk_bytes(pid),
            "upload_held_bytes": await asyncio.to_thread(held_upload_bytes, base),
            "health_max_ms": round(max(window), 1) if window else None,
            "health_over_1s": sum(1 for m in window if m > 1000.0),
            "closed_mid_step": out["closed_mid_step"],
            "errors": out["errors"][:5],
            "exceptions": out["exceptions"][:5],
            "wall_s": round(time.monotonic() - t0, 1),
        }
        lines.append(line)
        if emit is not None:
            emit(line)
    return summary(baseline, lines, classes, students, grace_s)


async def _peak(pid: int, peak: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mib(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


def summary(
    baseline: dict, lines: list[dict], classes: int, students: int, grace_s: float
) -> dict[str, Any]:
    """The day's line: the per-class series and what came back to the baseline."""
    last = lines[-1] if lines else baseline
    rss = [line["rss_mib"] for line in lines]
    healths = [line["health_max_ms"] for line in lines if line["health_max_ms"] is not None]
    return {
        "name": "day_soak",
        "classes": classes,
        "students": students,
        "reconnect_grace_s": grace_s,
        "baseline": baseline,
        "rss_mib": rss,
        "rss_peak_mib": [line["rss_peak_mib"] for line in lines],
        "rss_growth_mib": round(rss[-1] - rss[0], 1) if rss else math.nan,
        "threads": [line["threads"] for line in lines],
        "threads_at_close": [line["threads_at_close"] for line in lines],
        "fds": [line["fds"] for line in lines],
        "open_files": [line["open_files"] for line in lines],
        "upload_disk_bytes": [line["upload_disk_bytes"] for line in lines],
        "upload_held_bytes": [line["upload_held_bytes"] for line in lines],
        "threads_back": last["threads"] - baseline["threads"],
        "fds_back": last["fds"] - baseline["fds"],
        "upload_disk_back": last["upload_disk_bytes"] - baseline["upload_disk_bytes"],
        "health_max_ms": max(healths) if healths else None,
        "health_over_1s": sum(line["health_over_1s"] for line in lines),
        "errors": sum(len(line["errors"]) for line in lines),
        "exceptions": sum(len(line["exceptions"]) for line in lines),
    }


def run_day(base: str, pid: int, **kwargs: Any) -> dict[str, Any]:
    """``day`` with the health probe running throughout (a fresh event loop)."""
    with HealthProbe(base) as probe:
        line = run_coroutine(day(base, pid, probe, **kwargs))
    line["health_failures"] = probe.failures
    return line


def main(argv: list[str] | None = None) -> int:
    """CLI: a JSON line per class, then the day's; exit 1 on an error, exception or traceback."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.day_soak", description=__doc__)
    ap.add_argument("--day", action="store_true", help="8 classes of 20 on the bundled model")
    ap.add_argument("--classes", type=int, default=None)
    ap.add_argument("--students", type=int, default=None)
    ap.add_argument("--model", default=None, help="ROLL_VIZ_MODEL (--day: smollm2, else tiny)")
    ap.add_argument("--grace", type=float, default=None, help="reconnect grace, s (app: 120)")
    ap.add_argument("--settle", type=float, default=20.0, help="s past the grace before reading")
    ap.add_argument(
        "--roles", default="0,1,2,3", help="jobs in turn: 0 train, 1 update, 2 upload, 3 knobs"
    )
    args = ap.parse_args(argv)
    try:
        roles = tuple(int(r) for r in args.roles.split(","))
    except ValueError:
        roles = ()
    if not roles or not set(roles) <= set(ROLES):
        ap.error("--roles: a comma-separated list of 0, 1, 2, 3")
    classes = args.classes or (8 if args.day else 3)
    students = args.students or (20 if args.day else 6)
    model = args.model or ("smollm2" if args.day else "tiny")
    grace = args.grace if args.grace is not None else churn_load.APP_GRACE_S
    if not 1 <= classes <= 20 or not 1 <= students <= 60 or not 1 <= grace <= 300:
        ap.error("--classes in [1, 20], --students in [1, 60], --grace in [1, 300]")
    env = {
        churn_load.GRACE_ENV: f"{grace:g}",
        "STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": str(max(1, round(grace))),
    }
    with streamlit_server(model=model, extra_env=env) as srv:
        line = run_day(
            srv.base,
            srv.pid,
            classes=classes,
            students=students,
            grace_s=grace,
            settle_s=args.settle,
            roles=roles,
            emit=lambda c: print(json.dumps({"name": "day_soak_class", **c}), flush=True),
        )
        line["model"] = model
        line["roles"] = list(roles)
        line["health_after"] = health(srv.base)
        line["server_tracebacks"] = len(srv.tracebacks())
    print(json.dumps(line), flush=True)
    bad = line["errors"] or line["exceptions"] or line["server_tracebacks"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
