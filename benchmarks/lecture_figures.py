"""What a lecture measured, per configuration, and its projection to an 8-core machine.

``benchmarks.lecture`` runs the lecture; this module records its timed actions (``Record``)
and reads what it cost. ``Meter`` samples the
RSS of each process of the configuration (psutil, every 0.5 s) and reads its CPU time at the
start and the end (apps, and in a hall Redis and the proxy), and Redis's INFO commandstats and
INFO cpu at both ends. ``figures`` turns the timed actions and the meter into the line's fields:

- ``actions``: per action count, p50 / p95 / max (ms, nearest rank);
- ``processes_measured``: RSS peak / end (MiB) and CPU seconds per process;
- ``redis``: the calls Redis ran (total, per command; ``info`` itself left out), ops per second
  and per rerun, Redis's own CPU seconds (INFO cpu: getrusage, finer than psutil's ticks) and its
  ceiling (commands per second of its CPU time);
- ``reruns`` and ``reruns_per_s`` (every timed action, wall clock); ``cpu_ms_per_rerun`` (the
  apps' CPU time per rerun); ``per_core_reruns_per_s`` (reruns per CPU second of the whole
  configuration, Redis and the proxy included: what one core sustains of this mix, whatever else
  the machine ran); ``peak_sends_per_s`` (the busiest ``PEAK_WINDOW_S`` of sends);
- ``projection_8_cores``: the model (``MODEL``, printed in the line): throughput scales with app
  processes = cores, each core giving ``per_core_reruns_per_s``, while Redis (one thread) stays
  under its ceiling, ``reruns_per_s = min(8 * per_core, redis_ceiling / redis_ops_per_rerun)``;
  the ceiling counts Redis's idle housekeeping in its CPU time (conservative). ``students``
  scales N by that rate over this run's peak sends per second (closed-loop clients send less
  when served slowly: optimistic when this run saturated). One process runs its scripts on one
  interpreter: its projection stays at one core.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import time
from typing import Any

import psutil
import redis

from benchmarks import st_client
from benchmarks.lecture_tab import FINISHED


@dataclasses.dataclass
class Record:
    """Every timed action and every failure of one lecture (shared by all students)."""

    t0: float = 0.0
    actions: list[tuple[str, float, float]] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    exceptions: list[str] = dataclasses.field(default_factory=list)
    error_alerts: list[str] = dataclasses.field(default_factory=list)
    votes_cast: int = 0
    answers_kept: int = 0
    knob_fragment_runs: int = 0  # knob moves the server answered with the sidebar fragment alone
    phone_reopens: int = 0

    async def timed(self, who: str, action: str, coro: Any) -> st_client.RunResult | None:
        """Await one run; file its time (by send moment) or its failure. None when it failed."""
        sent = time.monotonic() - self.t0
        try:
            res = await coro
        except Exception as err:  # a drop or a protocol error: counted, never a crash
            self.errors.append(f"{who} {action}: {err!r}")
            return None
        if res.status not in FINISHED:
            self.errors.append(f"{who} {action}: {res.status}")
            return None
        self.actions.append((action, sent, res.ms))
        self.knob_fragment_runs += action == "knob" and res.fragment
        self.exceptions += [f"{who} {action}: {e}" for e in res.exceptions]
        self.error_alerts += [f"{who} {action}: {e}" for e in res.error_alerts]
        return res


CORES = 8
PEAK_WINDOW_S = 5.0
MODEL = (
    "throughput scales with app processes = cores, each core giving per_core_reruns_per_s "
    "(reruns per CPU second of apps, Redis and proxy together), while Redis (one thread) stays "
    "under its ceiling (commands per second of its own CPU time, measured here): reruns_per_s = "
    "min(cores * per_core, redis_ceiling / redis_ops_per_rerun); students = N * reruns_per_s / "
    "peak_sends_per_s"
)


class Meter:
    """RSS (sampled) and CPU time of the configuration's processes; Redis's commandstats."""

    def __init__(self, pids: dict[str, int], redis_url: str | None) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.rss: dict[str, list[float]] = {name: [] for name in pids}
        self.cpu0 = {name: self._cpu(p) for name, p in self.procs.items()}
        self.r = redis.Redis.from_url(redis_url, decode_responses=True) if redis_url else None
        self.stats0 = self._stats()
        self._stop = asyncio.Event()

    @staticmethod
    def _cpu(p: psutil.Process) -> float:
        t = p.cpu_times()
        return t.user + t.system

    def _stats(self) -> dict[str, float]:
        """Calls per command, and Redis's own CPU seconds under ``"cpu"`` (getrusage: µs)."""
        if self.r is None:
            return {}
        raw = self.r.info("commandstats")
        out: dict[str, float] = {
            k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in raw.items()
        }
        cpu = self.r.info("cpu")
        out["cpu"] = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        return out

    async def sample(self) -> None:
        """Sample every process's RSS each 0.5 s until ``stop``."""
        while not self._stop.is_set():
            for name, p in self.procs.items():
                with contextlib.suppress(psutil.Error):
                    self.rss[name].append(p.memory_info().rss / 2**20)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 0.5)

    def stop(self) -> dict[str, Any]:
        """Stop sampling; RSS peak / end and CPU seconds per process, Redis's calls per command."""
        self._stop.set()
        out: dict[str, Any] = {"processes": {}}
        for name, p in self.procs.items():
            cpu = None
            with contextlib.suppress(psutil.Error):
                cpu = round(self._cpu(p) - self.cpu0[name], 2)
                self.rss[name].append(p.memory_info().rss / 2**20)
            seen = self.rss[name]
            out["processes"][name] = {
                "rss_mib_peak": round(max(seen), 1) if seen else None,
                "rss_mib_end": round(seen[-1], 1) if seen else None,
                "cpu_s": cpu,
            }
        if self.r is not None:
            after = self._stats()
            delta = {k: v - self.stats0.get(k, 0) for k, v in after.items() if k != "info"}
            out["redis_cpu_s"] = round(delta.pop("cpu"), 4)
            out["redis_calls"] = {k: int(v) for k, v in sorted(delta.items()) if v}
        return out


def pct(ms: list[float], q: float) -> float | None:
    """Nearest-rank percentile (None when empty)."""
    if not ms:
        return None
    s = sorted(ms)
    return round(s[min(len(s) - 1, math.ceil(q * len(s)) - 1)], 1)


def peak_sends(sends: list[float], window: float = PEAK_WINDOW_S) -> float:
    """The most sends in any ``window`` seconds, per second."""
    s, best, lo = sorted(sends), 0, 0
    for hi, t in enumerate(s):
        while t - s[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return round(best / window, 2)


def figures(
    actions: list[tuple[str, float, float]], wall: float, meter: dict[str, Any], hall: bool
) -> dict[str, Any]:
    """The measured fields of a line (module docstring).

    Args:
        actions: (action, seconds from the start when it was sent, ms to script_finished).
        wall: the lecture's seconds.
        meter: what ``Meter.stop`` returned.
        hall: whether the configuration is a hall (its projection uses every core).
    """
    by: dict[str, list[float]] = {}
    for action, _sent, ms in actions:
        by.setdefault(action, []).append(ms)
    reruns = len(actions)
    procs = meter["processes"]
    app_cpu = sum(v["cpu_s"] or 0.0 for k, v in procs.items() if k.startswith("app"))
    all_cpu = sum(v["cpu_s"] or 0.0 for v in procs.values())
    line: dict[str, Any] = {
        "actions": {
            a: {"n": len(v), "p50_ms": pct(v, 0.5), "p95_ms": pct(v, 0.95), "max_ms": pct(v, 1.0)}
            for a, v in sorted(by.items())
        },
        "processes_measured": procs,
        "reruns": reruns,
        "reruns_per_s": round(reruns / wall, 2) if wall else None,
        "cpu_ms_per_rerun": round(1000 * app_cpu / reruns, 2) if reruns else None,
        "per_core_reruns_per_s": round(reruns / all_cpu, 2) if all_cpu else None,
        "peak_sends_per_s": peak_sends([s for _a, s, _ms in actions]),
        "cpus": os.cpu_count(),
        "load1": round(os.getloadavg()[0], 2),
    }
    calls = meter.get("redis_calls")
    if calls is not None:
        total, redis_cpu = sum(calls.values()), meter.get("redis_cpu_s")
        line["redis"] = {
            "calls": total,
            "per_command": calls,
            "ops_per_s": round(total / wall, 1) if wall else None,
            "ops_per_rerun": round(total / reruns, 2) if reruns else None,
            "cpu_s": redis_cpu,
            "ceiling_ops_per_s": round(total / redis_cpu) if redis_cpu else None,
        }
    return line


def project(line: dict[str, Any], hall: bool) -> dict[str, Any]:
    """The 8-core projection from this run's per-core figures (``MODEL``)."""
    per_core = line["per_core_reruns_per_s"]
    if per_core is None:
        return {"cores": CORES, "model": MODEL, "reruns_per_s": None, "students": None}
    if not hall:
        rate, bound = per_core, "one process: its scripts share one interpreter (one core)"
    else:
        rate, bound = CORES * per_core, "cores"
        r = line.get("redis") or {}
        if r.get("ceiling_ops_per_s") and r.get("ops_per_rerun"):
            ceiling = r["ceiling_ops_per_s"] / r["ops_per_rerun"]
            if ceiling < rate:
                rate, bound = ceiling, "redis"
    peak = line["peak_sends_per_s"]
    return {
        "cores": CORES,
        "processes": CORES if hall else 1,
        "model": MODEL,
        "bound": bound,
        "reruns_per_s": round(rate, 1),
        "redis_ops_per_s": round(rate * (line.get("redis") or {}).get("ops_per_rerun", 0.0), 1),
        "students": int(line["students"] * rate / peak) if peak else None,
    }
