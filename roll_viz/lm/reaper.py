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
- ``Cancelled`` is what a step raises at its next boundary once its owner was released.
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
