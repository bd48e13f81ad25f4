"""A lecture hall's hour, scripted: N students against one app process and against the hall.

``python -m benchmarks.lecture --students 200 [--hall --processes 2] [--seconds 30] [--quick]``
prints one JSON line per configuration: ``one_process`` (``python -m roll_viz serve``, lesson
rooms in the process, as ``make run``), then with ``--hall`` the hall (``roll_viz.cli.hall.Hall``:
Debian's ``redis-server`` with its append-only file, N app processes, ``haproxy`` sticky by its
cookie). Both run the tiny model; traffic goes only to 127.0.0.1.

The lecture (every student one seeded ``random.Random(seed * 100_003 + i)``; who does what is
drawn once from ``random.Random(seed)``, in exact shares):

1. the teacher opens the Lesson page and starts the built-in lesson ``seed_chain`` (its first
   question: four options);
2. **open**: every student opens the recipe's page, Advantages on the committed default preset
   (``quantum``), at a moment drawn in the first ``OPEN_S`` (20) seconds;
3. **knob**: for ``--seconds`` (30) the teacher says "try it" every ``BURST_EVERY_S`` (10) s; at
   each call 60 % of the students (``KNOB_SHARE``) react within ``REACT_S`` and move the
   sidebar's γ or β slider ``MOVES`` (2-4) times, 0.3-1.0 s apart (a drag); 10 %
   (``LIVE_SHARE``) switch **live** sampling on (the tiny model) once; 10 % (``CLOSE_SHARE``)
   **close** the tab and **reopen** it 1-3 s later (same cookies, same URL);
4. **vote**: every student's phone opens ``/vote?room=<code>`` in the first ``JOIN_S`` (5) s of
   the vote window (**join**), polls the room every 2 s as the page's ``run_every`` fragment
   does (**poll**), and casts its **vote** once within ``VOTE_S`` (30) s; the closers also reopen
   the phone's tab after voting (**phone_reopen**) and must see their own answer;
5. the teacher's page reruns: its count must read N / N, its reveal "first vote: N answers".

Every action is timed from sending the rerun to its ``script_finished`` (``st_client``); every
knob move goes through ``move_knob`` (one door). ``--quick`` scales every time by
``QUICK_SCALE`` (0.1) for the tests. Bounded: ``--students`` 1..``MAX_STUDENTS``, ``--seconds``
1..``MAX_SECONDS``, ``--processes`` 1..``hall.MAX_PROCESSES``, at most ``MAX_MOVES`` knob moves
and ``MAX_POLLS`` polls per student, every read ``st_client.RUN_TIMEOUT_S``.

Each line: the configuration, the plan (seconds, roles), ``tabs_per_process`` (laptop and phone
tabs per app process, by the proxy's cookie), ``errors`` (drops, timeouts, unfinished runs),
``exceptions`` (red boxes), ``error_alerts``, ``server_tracebacks``; ``votes``: cast, counted by
the teacher's page, in the room, revealed, in Redis (hall) and kept on a reopened phone; then
what ``benchmarks.lecture_figures`` measured (per action p50 / p95 / max, RSS and CPU per
process, Redis commandstats, per-core throughput) and its ``projection_8_cores``: throughput
scales with app processes = cores while Redis stays under the ceiling measured here (the model
is written in that module's docstring and in the line's ``model`` field).

The student-key cookie (``STUDENT_COOKIE``) is the one the app reads (``ui.reconnect``, which a
benchmark does not import: ``tests/bench/test_lecture.py`` checks they agree), so a reopened tab
is the same student and a phone's token, hence its vote, survives a reopen.
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
import secrets
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import redis

from benchmarks import lecture_figures, st_client
from benchmarks.knob_load import PAUSE_S, RELAY
from benchmarks.lecture_figures import Record
from benchmarks.lecture_tab import Tab
from benchmarks.server import Server, free_port, health, streamlit_server
from roll_viz.cli import hall as hall_cli

#: the app's student-key cookie (``ui.reconnect.STUDENT_COOKIE``) and its key's length in bytes
STUDENT_COOKIE, STUDENT_KEY_BYTES = "roll_viz_student", 24
RECIPE_PAGE = "Advantages"  # on the committed default preset (quantum): no query
LESSON = "seed_chain"
OPTIONS = 4  # its first question's options
KNOB_VALUES: dict[str, tuple[float, ...]] = {
    "gamma": (1.0, 0.99, 0.95, 0.9),
    "beta": (0.0, 0.05, 0.1, 0.2),
}
LIVE_KEY = "live"
TRACKED = frozenset({*KNOB_VALUES, LIVE_KEY})
KNOB_SHARE, LIVE_SHARE, CLOSE_SHARE = 0.6, 0.1, 0.1
OPEN_S, BURST_EVERY_S, REACT_S, JOIN_S, VOTE_S = 20.0, 10.0, 2.0, 5.0, 30.0
MOVES = (2, 4)
THINK_S = (0.3, 1.0)
REOPEN_S = (1.0, 3.0)
POLL_S = 2.0  # vote_page.PHONE_POLL_S: the phone's question is a run_every fragment
QUICK_SCALE = 0.1
MAX_STUDENTS, MAX_SECONDS = 400, 600.0
MAX_MOVES = 40
MAX_POLLS = 200


async def move_knob(
    tab: Tab, changes: dict[str, Any], widgets: dict[str, st_client.Widget], keep: dict[str, Any]
) -> st_client.RunResult:
    """One sidebar knob move, as the frontend sends it: every knob move of the lecture comes here.

    The sidebar's algorithm knobs sit in a fragment: ``Session.run`` names its id, so the server
    reruns that fragment alone and the page's figures follow in the browser (``settle`` then
    reruns the page once after the burst).
    """
    return await tab.run(changes=changes, widgets=widgets, keep=keep)


@dataclasses.dataclass(frozen=True)
class Plan:
    """When things happen (seconds from the lecture's start) and how many students do what."""

    students: int
    open_s: float
    knob_at: float
    knob_s: float
    burst_every_s: float
    react_s: float
    vote_at: float
    join_s: float
    vote_s: float
    scale: float
    knobbers: frozenset[int]
    live: frozenset[int]
    closers: frozenset[int]

    @property
    def end(self) -> float:
        """When the phones stop polling (a tick after the vote window)."""
        return self.vote_at + self.vote_s + POLL_S * self.scale


def plan(students: int, seconds: float, seed: int, quick: bool) -> Plan:
    """The lecture's timeline and roles (exact shares, drawn from ``random.Random(seed)``)."""
    k = QUICK_SCALE if quick else 1.0
    order = list(range(students))
    random.Random(seed).shuffle(order)
    n_knob = round(KNOB_SHARE * students)
    n_live, n_close = (max(1, round(s * students)) for s in (LIVE_SHARE, CLOSE_SHARE))
    knob_s = seconds * k
    return Plan(
        students=students,
        open_s=OPEN_S * k,
        knob_at=OPEN_S * k,
        knob_s=knob_s,
        burst_every_s=BURST_EVERY_S * k,
        react_s=REACT_S * k,
        vote_at=OPEN_S * k + knob_s,
        join_s=JOIN_S * k,
        vote_s=VOTE_S * k,
        scale=k,
        knobbers=frozenset(order[:n_knob]),
        live=frozenset(order[-n_live:]),
        closers=frozenset(order[n_knob : n_knob + n_close] or order[:n_close]),
    )


def _valid(value: float, w: st_client.Widget) -> bool:
    if not w.lo - 1e-9 <= value <= w.hi + 1e-9:
        return False
    n = (value - w.lo) / w.step if w.step > 0 else 0.0
    return abs(n - round(n)) < 1e-6


class Student:
    """One student: a laptop tab on the recipe's page and a phone tab on the vote page."""

    def __init__(self, i: int, base: str, cookies: dict[str, str], seed: int, rec: Record) -> None:
        self.i, self.base, self.cookies, self.rec = i, base, cookies, rec
        self.rng = random.Random(seed * 100_003 + i)
        self.tab = Tab(base, cookies)
        self.values: dict[str, Any] = {}
        self.widgets: dict[str, st_client.Widget] = {}
        self.moves = 0

    async def wait_until(self, t: float) -> None:
        """Think until ``t`` (lecture seconds), reading what the server still sends."""
        left = self.rec.t0 + t - time.monotonic()
        if left > 0:
            await self.tab.idle(left)

    def keep(self, changes: dict[str, Any]) -> dict[str, Any]:
        """The tracked widgets' current values that ``changes`` leaves alone (resent, as a tab)."""
        return {
            k: self.values.get(k, w.default)
            for k, w in self.widgets.items()
            if k in TRACKED and k not in changes
        }

    async def change(self, action: str, changes: dict[str, Any]) -> bool:
        """A knob move or the live switch, timed; False when it failed (the student stops)."""
        self.values.update(changes)
        if action == "live":
            res = await self.rec.timed(
                f"student {self.i}",
                action,
                self.tab.run(changes=changes, widgets=self.widgets, keep=self.keep(changes)),
            )
        else:
            res = await self.rec.timed(
                f"student {self.i}",
                action,
                move_knob(self.tab, changes, self.widgets, self.keep(changes)),
            )
        if res is not None:
            self.widgets = res.widgets or self.widgets
        return res is not None

    async def settle(self, p: Plan) -> bool:
        """The page rerun after a burst: the relay's timer, then its trigger, as relay.js sends it.

        Only where the page has the relay (a page the browser cannot redraw reran at each move).
        """
        if RELAY not in self.widgets:
            return True
        await self.tab.idle(PAUSE_S["browser"] * p.scale)  # Advantages: its figures follow
        res = await self.rec.timed(
            f"student {self.i}",
            "settle",
            self.tab.run(
                triggers={RELAY: ("settle", self.i)}, widgets=self.widgets, keep=self.keep({})
            ),
        )
        if res is not None:
            self.widgets = res.widgets or self.widgets
        return res is not None

    def next_move(self) -> dict[str, Any]:
        """γ or β to a value of ``KNOB_VALUES`` it does not have now ({} when none is drawn)."""
        keys = [k for k in KNOB_VALUES if k in self.widgets]
        if not keys:
            return {}
        key = self.rng.choice(keys)
        current = self.values.get(key, self.widgets[key].default)
        options = [v for v in KNOB_VALUES[key] if v != current and _valid(v, self.widgets[key])]
        return {key: self.rng.choice(options)} if options else {}

    async def laptop(self, p: Plan) -> None:
        """Open the recipe's page, then the knob phase (bursts, live, close and reopen)."""
        await asyncio.sleep(self.rng.uniform(0.0, p.open_s))
        try:
            await self.tab.connect()
        except Exception as err:
            self.rec.errors.append(f"student {self.i} connect: {err!r}")
            return
        res = await self.rec.timed(f"student {self.i}", "open", self.tab.run(RECIPE_PAGE, query=""))
        if res is None:
            return
        self.widgets = res.widgets
        live_at = p.knob_at + self.rng.uniform(0.0, p.knob_s / 2)
        close_at = p.knob_at + self.rng.uniform(0.0, p.knob_s)
        events: list[tuple[float, str]] = []
        if self.i in p.knobbers:
            bursts = max(1, math.ceil(p.knob_s / p.burst_every_s))
            for b in range(bursts):
                events.append(
                    (p.knob_at + b * p.burst_every_s + self.rng.uniform(0, p.react_s), "burst")
                )
        if self.i in p.live:
            events.append((live_at, "live"))
        if self.i in p.closers:
            events.append((close_at, "close"))
        for at, what in sorted(events):
            await self.wait_until(at)
            if what == "burst":
                for n in range(self.rng.randint(*MOVES)):
                    move = self.next_move()
                    if not move or self.moves >= MAX_MOVES:
                        break
                    if n:
                        await self.tab.idle(self.rng.uniform(*THINK_S) * p.scale)
                    self.moves += 1
                    if not await self.change("knob", move):
                        return
                if not await self.settle(p):
                    return
            elif what == "live" and LIVE_KEY in self.widgets:
                if not await self.change("live", {LIVE_KEY: True}):
                    return
            elif what == "close" and not await self.reopen(p):
                return
        await self.wait_until(p.end)  # the tab stays open through the lecture
        await self.tab.close()

    async def reopen(self, p: Plan) -> bool:
        """Close the tab, wait, open the same URL in a new tab (the browser's cookies kept)."""
        query = self.tab.query
        await self.tab.close()
        await asyncio.sleep(self.rng.uniform(*REOPEN_S) * p.scale)
        self.tab = Tab(self.base, self.cookies)
        try:
            await self.tab.connect()
        except Exception as err:
            self.rec.errors.append(f"student {self.i} reconnect: {err!r}")
            return False
        res = await self.rec.timed(
            f"student {self.i}", "reopen", self.tab.run(RECIPE_PAGE, query=query)
        )
        if res is not None:
            self.widgets = res.widgets
        return res is not None

    async def phone(self, p: Plan, code: str, phone_cookies: dict[str, str]) -> None:
        """Join the room in the vote window, poll it, vote once; closers reopen the phone's tab."""
        rec, who = self.rec, f"phone {self.i}"
        join_at = p.vote_at + self.rng.uniform(0.0, p.join_s)
        vote_at = self.rng.uniform(join_at + 0.5 * p.scale, p.vote_at + p.vote_s)
        await asyncio.sleep(max(0.0, rec.t0 + join_at - time.monotonic()))
        tab = Tab(self.base, phone_cookies)
        try:
            await tab.connect()
        except Exception as err:
            rec.errors.append(f"{who} connect: {err!r}")
            return
        try:
            if await rec.timed(who, "join", tab.open("vote", f"room={code}")) is None:
                return
            choice = f"vote_0_1_{self.i % OPTIONS}"
            voted, polls, next_poll = False, 0, join_at + POLL_S
            while polls < MAX_POLLS:
                at = next_poll if voted else min(next_poll, vote_at)
                if at > p.end and voted:
                    break
                await asyncio.sleep(max(0.0, rec.t0 + at - time.monotonic()))
                if not voted and at == vote_at:
                    if choice not in tab.buttons:
                        rec.errors.append(f"{who}: no button {choice} on the vote page")
                        return
                    res = await rec.timed(who, "vote", tab.press(choice))
                    if res is None:
                        return
                    voted = True
                    rec.votes_cast += 1
                    continue
                fragment = next(iter(tab.fragments.values()), "")
                if await rec.timed(who, "poll", tab.fragment_run(fragment)) is None:
                    return
                polls += 1
                # the next tick after this one answered (a slow answer delays it, no catch-up)
                next_poll = max(next_poll + POLL_S, time.monotonic() - rec.t0)
        finally:
            await tab.close()
        if self.i in p.closers:
            again = Tab(self.base, phone_cookies)
            try:
                await again.connect()
                res = await rec.timed(who, "phone_reopen", again.open("vote", f"room={code}"))
                rec.phone_reopens += 1
                if res is not None and any("Your answer" in t for t in again.texts):
                    rec.answers_kept += 1
            except Exception as err:
                rec.errors.append(f"{who} reopen: {err!r}")
            finally:
                await again.close()


def _sticky(base: str) -> dict[str, str]:
    """The proxy's cookie for a new browser ({} when no proxy sets one)."""
    with urllib.request.urlopen(base + "/", timeout=st_client.HTTP_TIMEOUT_S) as resp:
        for header in resp.headers.get_all("Set-Cookie") or []:
            if header.startswith("RVHALL="):
                return {"RVHALL": header.split(";")[0].split("=", 1)[1]}
    return {}


async def _browser(base: str, hall: bool) -> dict[str, str]:
    cookies = {STUDENT_COOKIE: secrets.token_urlsafe(STUDENT_KEY_BYTES)}
    if hall:
        cookies.update(await asyncio.to_thread(_sticky, base))
    return cookies


def _count(metrics: list[str]) -> tuple[int, int] | None:
    """``"57 / 60"`` -> (57, 60): the teacher's answers / phones metric (the last one drawn)."""
    for m in reversed(metrics):
        a, _, b = m.partition("/")
        with contextlib.suppress(ValueError):
            return int(a), int(b)
    return None


async def lecture(base: str, students: int, seconds: float, seed: int, quick: bool, hall: bool):
    """Run one lecture against ``base``; returns (Record, Plan, room code, teacher's results)."""
    p = plan(students, seconds, seed, quick)
    rec = Record()
    teacher = Tab(base, await _browser(base, hall))
    await teacher.connect()
    t = await rec.timed("teacher", "teacher", teacher.open("Lesson", f"lesson={LESSON}"))
    if t is None or "lesson_start" not in teacher.buttons:
        raise RuntimeError(f"the Lesson page did not open: {rec.errors} {rec.exceptions}")
    await rec.timed("teacher", "teacher", teacher.press("lesson_start"))
    code = dict(urllib.parse.parse_qsl(teacher.query)).get("room", "")
    if not code:
        raise RuntimeError(f"no room was started: {rec.errors} {rec.exceptions}")
    browsers = list(await asyncio.gather(*(_browser(base, hall) for _ in range(2 * students))))
    # the proxy deals its cookies round robin in arrival order: laptops and phones arrive mixed
    # (else every laptop landed on one process and every phone on the other)
    random.Random(seed).shuffle(browsers)
    pool = [Student(i, base, browsers[2 * i], seed, rec) for i in range(students)]
    spread = {
        tab: dict(sorted(Counter(b.get("RVHALL", "app1") for b in browsers[k::2]).items()))
        for k, tab in enumerate(("laptops", "phones"))
    }
    rec.t0 = time.monotonic()
    await asyncio.gather(
        *(s.laptop(p) for s in pool),
        *(s.phone(p, code, browsers[2 * i + 1]) for i, s in enumerate(pool)),
    )
    wall = time.monotonic() - rec.t0
    await rec.timed("teacher", "teacher", teacher.rerun())
    counted = _count(teacher.metrics)
    await rec.timed("teacher", "teacher", teacher.press("lesson_revealed"))
    revealed = "\n".join(teacher.texts)
    await teacher.close()
    return rec, p, code, {"counted": counted, "revealed": revealed, "wall_s": wall, "tabs": spread}


def summarise(
    name: str,
    rec: Record,
    p: Plan,
    teacher: dict,
    meter: dict,
    processes: int,
    tracebacks: int,
    votes_in_store: int | None,
) -> dict[str, Any]:
    """The configuration's JSON line (fields: this docstring and ``lecture_figures``)."""
    wall = teacher["wall_s"]
    counted = teacher["counted"] or (None, None)
    hall = votes_in_store is not None
    line: dict[str, Any] = {
        "name": "lecture",
        "config": name,
        "students": p.students,
        "processes": processes,
        "seconds": {"open": p.open_s, "knobs": p.knob_s, "vote": p.vote_s, "wall": round(wall, 1)},
        "recipe_page": f"{RECIPE_PAGE} (committed default preset)",
        "lesson": LESSON,
        "roles": {"knob": len(p.knobbers), "live": len(p.live), "close_reopen": len(p.closers)},
        "tabs_per_process": teacher["tabs"],
        "errors": len(rec.errors),
        "exceptions": len(rec.exceptions),
        "error_alerts": len(rec.error_alerts),
        "server_tracebacks": tracebacks,
        "knob_fragment_runs": rec.knob_fragment_runs,
        "votes": {
            "cast": rec.votes_cast,
            "counted": counted[0],
            "phones_in_room": counted[1],
            "revealed": f"first vote: {p.students} answers" in teacher["revealed"],
            "in_store": votes_in_store,
            "answers_kept_on_reopen": f"{rec.answers_kept} / {rec.phone_reopens}",
        },
        **lecture_figures.figures(rec.actions, wall, meter, hall),
    }
    line["projection_8_cores"] = lecture_figures.project(line, hall)
    return line


def _tracebacks(logs: list[Path]) -> int:
    return sum(len(Server("", None, log).tracebacks()) for log in logs)  # type: ignore[arg-type]


def _votes_in_store(redis_url: str, code: str) -> int:
    return int(redis.Redis.from_url(redis_url).hlen(f"rv:{code}:votes:0:1"))


async def _measured(base: str, meter: lecture_figures.Meter, args: argparse.Namespace, hall: bool):
    sampler = asyncio.create_task(meter.sample())
    try:
        out = await lecture(base, args.students, args.seconds, args.seed, args.quick, hall)
    finally:
        measured = meter.stop()
        await sampler
    return (*out, measured)


def run_one_process(args: argparse.Namespace) -> dict[str, Any]:
    """The lecture against one ``roll_viz serve`` process (rooms in the process)."""
    env = {"ROLL_VIZ_REDIS": "", "STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": "30"}
    log = Path(tempfile.mkdtemp(prefix="roll-viz-lecture-")) / "app1.log"
    with streamlit_server(model=args.model, log=log, extra_env=env) as srv:

        async def go() -> tuple:
            return await _measured(
                srv.base, lecture_figures.Meter({"app1": srv.pid}, None), args, hall=False
            )

        rec, p, _code, teacher, measured = st_client.run_coroutine(go())
        tracebacks = len(srv.tracebacks())
    line = summarise("one_process", rec, p, teacher, measured, 1, tracebacks, None)
    return _with_details(line, rec, args)


def run_hall(args: argparse.Namespace) -> dict[str, Any]:
    """The lecture against a hall of ``args.processes`` app processes, Redis and haproxy."""
    folder = Path(tempfile.mkdtemp(prefix="roll-viz-lecture-hall-"))
    os.environ.update({"ROLL_VIZ_MODEL": args.model, "HF_HUB_OFFLINE": "1"})
    hall = hall_cli.Hall(folder=folder, port=free_port(), processes=args.processes)
    try:
        hall.start([])
        base = f"http://127.0.0.1:{hall.port}"
        pids = {name: proc.pid for name, proc in hall.procs.items()}

        async def go() -> tuple:
            return await _measured(
                base, lecture_figures.Meter(pids, hall.redis_url), args, hall=True
            )

        rec, p, code, teacher, measured = st_client.run_coroutine(go())
        in_store = _votes_in_store(hall.redis_url, code)
        healthy = health(base, timeout=10)
    finally:
        hall.stop()
    logs = [folder / f"app{i}.log" for i in range(1, args.processes + 1)]
    line = summarise("hall", rec, p, teacher, measured, args.processes, _tracebacks(logs), in_store)
    line["health_after"] = healthy
    return _with_details(line, rec, args)


def _with_details(line: dict[str, Any], rec: Record, args: argparse.Namespace) -> dict[str, Any]:
    if args.verbose:
        for what in ("errors", "exceptions", "error_alerts"):
            for item in getattr(rec, what)[:20]:
                print(f"  {what}: {item}", file=sys.stderr)
    return line


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The options, checked against their bounds."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lecture", description=__doc__)
    ap.add_argument("--students", type=int, default=200, help=f"1..{MAX_STUDENTS}")
    ap.add_argument("--seconds", type=float, default=30.0, help="the knob phase (s)")
    ap.add_argument("--hall", action="store_true", help="also run the hall (after one process)")
    ap.add_argument("--hall-only", action="store_true", help="the hall only")
    ap.add_argument("--processes", type=int, default=2, help="the hall's app processes")
    ap.add_argument("--quick", action="store_true", help=f"every time x {QUICK_SCALE}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="tiny", help="ROLL_VIZ_MODEL of the apps")
    ap.add_argument("--verbose", action="store_true", help="print the first errors")
    args = ap.parse_args(argv)
    if not 1 <= args.students <= MAX_STUDENTS:
        ap.error(f"--students must be 1..{MAX_STUDENTS}")
    if not 1 <= args.seconds <= MAX_SECONDS:
        ap.error(f"--seconds must be 1..{MAX_SECONDS:g}")
    if not 1 <= args.processes <= hall_cli.MAX_PROCESSES:
        ap.error(f"--processes must be 1..{hall_cli.MAX_PROCESSES}")
    return args


def main(argv: list[str] | None = None) -> int:
    """One JSON line per configuration; 1 when any line has an error or a miscounted vote."""
    args = parse(argv)
    runs = []
    if not args.hall_only:
        runs.append(run_one_process)
    if args.hall or args.hall_only:
        runs.append(run_hall)
    worst = 0
    for run in runs:
        line = run(args)
        print(json.dumps(line), flush=True)
        v = line["votes"]
        if (
            line["errors"]
            or line["exceptions"]
            or line["error_alerts"]
            or line["server_tracebacks"]
        ):
            worst = 1
        if not v["cast"] == v["counted"] == args.students:
            worst = 1
    return worst


if __name__ == "__main__":
    sys.exit(main())
