"""Freeing a user's model state off the request path: the reaper thread and ``trim_memory``.

A closing browser session must never wait for model work. Streamlit calls a session-scoped
resource's ``on_release`` on its event loop (the thread that answers every other user and
``/_stcore/health``), so a release that joined a training thread, or waited for the model lock
another user holds, froze the whole server for the length of a step (10-41 s measured with the
bundled model). Here a release only marks the work as cancelled and hands the freeing to a
daemon thread:

- ``release_later(fn)`` queues ``fn`` (e.g. ``LoraPolicy.close``, which takes the model lock)
  on one daemon thread (``Reaper``) and returns at once; jobs run in order, an exception is
  logged and the next job runs;
- after each batch of jobs the reaper calls ``trim_memory()``: glibc's ``malloc_trim(0)`` gives
  the freed arenas back to the system (without it, the RSS of a server whose sessions freed
  their adapters and optimizer state stayed at its peak); a no-op off glibc;
- ``Cancelled`` is what a step raises at its next boundary once its owner was released;
- ``freeze_heap()`` (once per server process, after the model stack is imported) moves every
  object then alive into the interpreter's permanent generation (``gc.freeze``): a full
  collection holds the interpreter for its whole pass and walked the ~455,000 objects of
  torch, transformers and Streamlit each time (0.3-0.8 s on the 2-core box, the main cause of
  ``/_stcore/health`` stalls under load); after the freeze a pass walks only what the sessions
  made since.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import queue
import threading
from collections.abc import Callable

_LOG = logging.getLogger(__name__)


class Cancelled(RuntimeError):
    """The work's owner went away: the step stopped at a boundary (nothing half-applied)."""


def _load_libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        fn = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return libc


_LIBC = _load_libc()


def trim_memory() -> bool:
    """Collect garbage, then return free heap memory to the system (glibc ``malloc_trim(0)``).

    Returns:
        True when ``malloc_trim`` ran (glibc), False elsewhere (only ``gc.collect`` ran).
    """
    gc.collect()
    if _LIBC is None:
        return False
    _LIBC.malloc_trim(0)
    return True


_FROZEN: list[int] = []  # the object count ``freeze_heap`` moved (empty until it ran)
_FREEZE_LOCK = threading.Lock()


def freeze_heap() -> int:
    """Once per process: collect, then freeze every live object out of the cyclic collector.

    What is alive at start-up (imported modules, their classes and functions, the model's
    modules) lives as long as the process, yet each full collection walked it all while
    holding the interpreter. ``gc.freeze`` moves it to the permanent generation, which no
    collection walks; reference counting still frees any of it that is dropped. What the
    freeze costs: cyclic garbage among the frozen objects is never collected, so call it
    before users arrive (the first page run of the server, when at most one session exists).
    Later calls do nothing.

    Returns:
        How many objects the (first) freeze moved.
    """
    with _FREEZE_LOCK:
        if not _FROZEN:
            gc.collect()
            gc.freeze()
            _FROZEN.append(gc.get_freeze_count())
        return _FROZEN[0]


class Reaper:
    """One daemon thread that runs release jobs in order, off every request path."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], object]) -> None:
        """Queue ``job`` and return at once (the thread starts on first use)."""
        with self._lock:
            self._pending += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="roll-viz-reaper", daemon=True
                )
                self._thread.start()
        self._jobs.put(job)

    @property
    def pending(self) -> int:
        """Jobs queued or running."""
        return self._pending

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued job has run (tests, benchmarks); True when idle."""
        with self._lock:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # a failed release must not stop the others
                _LOG.exception("release job failed")
            with self._lock:
                self._pending -= 1
                last = self._pending == 0
            if last:
                trim_memory()
                with self._lock:
                    self._idle.notify_all()


REAPER = Reaper()


def release_later(job: Callable[[], object]) -> None:
    """Run ``job`` on the reaper thread (returns at once); memory is trimmed after it."""
    REAPER.submit(job)
