"""Every torch CPU thread decision: the start-up count, and the count per request phase.

Start-up count (``configure_threads``, applied by ``models.load_models``): ``ROLL_VIZ_THREADS``
(a number, or "all" for every core), else the default: ONE torch intra-op thread on a machine
with 1-3 cores, half the cores (at least 2) on bigger ones. Measured on the 2-core classroom box
(SmolLM2-135M, one cached decode step, median ms over 16 steps, same process, interleaved;
"busy" = the machine's other users kept the load average at 1 or more):

=====================  ==============  ==============
decode step            1 thread        2 threads
=====================  ==============  ==============
8 rows, fp32, busy     122 / 134       1178 / 1201
18 rows, fp32, busy    167 / 184       181 / 263
8 rows, int8, busy     51 / 51         66 / 1014
18 rows, int8, busy    72 / 85         56 / 86
=====================  ==============  ==============

(two repeats per cell; ``python -m benchmarks --sampling --only threads`` prints the table
quiet and under a competing single-thread matmul process.) Two threads win when the second core
is free (a big scoring pass ~1.5x, an int8 decode step ~1.5x), but lose up to ten times over as
soon as anything else holds a core (OpenMP threads wait on each other at every op): three
students sampling at once waited up to 243 s with 2 threads fixed, 21 s with 1. So the count set
at start-up is the base, and a sampling request raises it per phase only while the rest of the
machine is measured idle, dropping back at once when a step comes out slow (below;
``ROLL_VIZ_THREADS=<n>`` pins a count). The numbers do not depend on it: the decode step and the
scoring passes give bitwise the same results under 1 and 2 threads (tested).

Why per phase and not once: on the 2-core classroom box a second torch thread makes a big
teacher-forced pass about 1.5x faster and an int8 decode step about 1.5x faster, but as soon
as anything else holds a core (another process, or another student's script thread in this
server), OpenMP's threads wait for each other at every op and a step gets up to ten times slower
(the table above). So a sampling request asks ``choose()`` at the start of every phase
(decode, every ``RECHECK_STEPS`` decode steps, each scoring pass), and the decode loop drops to
one thread at once when a step comes out slow (``StepWatch``).

"The rest of the machine is idle" is measured, not guessed: a daemon thread (``CpuMonitor``)
reads ``/proc/stat`` (all CPU time), ``/proc/self/stat`` (this process) and the per-thread times
of this process's other Python threads every ``PERIOD`` seconds; ``others_busy()`` is the cores
they used over the last window: other processes plus other Python threads of this process, not
counting the calling thread, its torch workers or the threads it names as its own. Off Linux
(no ``/proc``) nothing is known and the start-up count is kept.

Policy (``choose``): ``ROLL_VIZ_THREADS`` set to a number pins that count (no adapting); unset
or "auto" means: all cores when ``others_busy() < QUIET_CORES``, else the start-up default.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import torch

PERIOD = 0.25  # seconds between readings
QUIET_CORES = 0.3  # others may use this much CPU and the machine still counts as idle
RECHECK_STEPS = 16  # decode steps between two looks at the machine
SLOW_STEP = 1.6  # a step this much slower than the run's typical step means contention

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _system_busy() -> float | None:
    """CPU seconds all cores spent busy since boot (None without /proc)."""
    text = _read("/proc/stat")
    if not text:
        return None
    fields = [int(x) for x in text.split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / _TICKS


def _task_seconds(stat: str | None) -> float:
    """User + system CPU seconds of a /proc .../stat line, in seconds (0 when unreadable)."""
    if not stat:
        return 0.0
    parts = stat.rsplit(")", 1)[-1].split()
    return (int(parts[11]) + int(parts[12])) / _TICKS


class CpuMonitor:
    """Background readings of how busy the machine is besides the calling thread."""

    def __init__(self, period: float = PERIOD) -> None:
        self.period = period
        self.guard = threading.Lock()
        self.available = _system_busy() is not None
        self._last: tuple[float, float, float, dict[int, float]] | None = None
        self._rates: tuple[float, dict[int, float]] = (0.0, {})  # (outside cores, per thread)
        self._thread: threading.Thread | None = None

    def _reading(self) -> tuple[float, float, float, dict[int, float]]:
        threads = {
            t.native_id: _task_seconds(_read(f"/proc/self/task/{t.native_id}/stat"))
            for t in threading.enumerate()
            if t.native_id is not None
        }
        own = _task_seconds(_read("/proc/self/stat"))
        return time.monotonic(), _system_busy() or 0.0, own, threads

    def sample(self) -> None:
        """Take one reading and update the rates (called by the daemon thread)."""
        now = self._reading()
        with self.guard:
            last, self._last = self._last, now
            if last is None:
                return
            span = max(now[0] - last[0], 1e-3)
            outside = max(0.0, (now[1] - last[1]) - (now[2] - last[2])) / span
            # a thread new in this window (each script rerun is a new thread) ran all its CPU
            # time inside the window
            per_thread = {
                tid: min(1.0, max(0.0, seconds - last[3].get(tid, 0.0)) / span)
                for tid, seconds in now[3].items()
            }
            self._rates = (outside, per_thread)

    def _run(self) -> None:
        while True:
            self.sample()
            time.sleep(self.period)

    def start(self) -> None:
        """Start the daemon thread once (idempotent)."""
        with self.guard:
            if self._thread is not None or not self.available:
                return
            self._thread = threading.Thread(target=self._run, name="roll_viz.cpu", daemon=True)
            self._thread.start()

    def others_busy(self, own: Iterable[int] = ()) -> float | None:
        """Cores used over the last window by other processes and other Python threads.

        Args:
            own: native thread ids that count as the caller's (besides the calling thread).

        Returns:
            Cores (0 = idle), or None when nothing has been measured yet / no /proc.
        """
        self.start()
        with self.guard:
            if self._last is None or not self.available:
                return None
            outside, per_thread = self._rates
        mine = {threading.get_native_id(), *own}
        if self._thread is not None:
            mine.add(self._thread.native_id)
        inside = sum(rate for tid, rate in per_thread.items() if tid not in mine)
        return outside + inside


MONITOR = CpuMonitor()


def default_threads(cpus: int | None = None) -> int:
    """Torch intra-op threads when ROLL_VIZ_THREADS is unset: 1 on 1-3 cores, else cpus // 2."""
    cpus = cpus or os.cpu_count() or 1
    return 1 if cpus <= 3 else max(2, cpus // 2)


def resolve_threads(threads: int | str | None = None) -> int:
    """The thread count to use: argument, else ROLL_VIZ_THREADS, else ``default_threads()``.

    Args:
        threads: a positive count, "all" (every core), "auto"/0/None (the default policy).

    Returns:
        The count, at least 1.

    Raises:
        ValueError: not a positive number, "all" or "auto".
    """
    value = threads if threads not in (None, "", 0) else os.environ.get("ROLL_VIZ_THREADS", "")
    text = str(value).strip().lower()
    if text in ("", "auto", "0"):
        return default_threads()
    if text == "all":
        return os.cpu_count() or 1
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(
            f"ROLL_VIZ_THREADS must be a positive number, 'all' or 'auto' (got {value!r})"
        )
    return count


def configure_threads(threads: int | str | None = None) -> int:
    """Set torch's intra-op thread count by the policy in the module docstring; returns it."""
    count = resolve_threads(threads)
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


def pinned() -> int | None:
    """The count ``ROLL_VIZ_THREADS`` pins (a number), or None for the adaptive policy."""
    text = os.environ.get("ROLL_VIZ_THREADS", "").strip().lower()
    if text in ("", "auto", "0"):
        return None
    return resolve_threads(text)


def choose(base: int, own: Iterable[int] = (), monitor: CpuMonitor = MONITOR) -> int:
    """Threads for the next phase: every core when the machine is otherwise idle, else ``base``.

    Args:
        base: the start-up count (``configure_threads``).
        own: native ids of helper threads that belong to the caller (e.g. the noise thread).
        monitor: the readings to use (tests pass their own).

    Returns:
        The count to ``torch.set_num_threads`` for this phase.
    """
    fixed = pinned()
    if fixed is not None:
        return fixed
    cpus = os.cpu_count() or 1
    busy = monitor.others_busy(own)
    if busy is None or cpus <= base:
        return base
    return cpus if busy < QUIET_CORES else base


def apply(count: int) -> int:
    """``torch.set_num_threads(count)`` if it differs; returns the count."""
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    return count


class StepWatch:
    """Drops a multi-threaded decode to one thread as soon as a step comes out slow."""

    def __init__(self) -> None:
        self.typical: dict[int, float] = {}  # threads -> smallest step seconds seen

    def slow(self, threads: int, seconds: float) -> bool:
        """Record a step; True when it ran ``SLOW_STEP`` x slower than this run's typical one."""
        best = self.typical.get(threads)
        self.typical[threads] = seconds if best is None else min(best, seconds)
        return threads > 1 and best is not None and seconds > SLOW_STEP * best


BACKGROUND_NICE = 10  # how much lower a background model thread runs than the server's threads


def lower_priority(nice: int = BACKGROUND_NICE) -> bool:
    """Run the calling thread (and the torch workers it starts) at a lower CPU priority.

    Background model work (a training run's thread) then yields the cores to the server's event
    loop and to the students' page scripts, so a class training at once does not delay the
    pages. Linux sets a nice value per thread (``setpriority`` on the thread id); elsewhere
    nothing changes.

    Returns:
        True when the priority was lowered.
    """
    if not hasattr(os, "setpriority") or not Path("/proc/self/task").exists():
        return False
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(current + nice, 19))
    except OSError:
        return False
    return True
