"""Per-phase thread choice (lm.threads): machine readings, the policy, the slow-step watch."""

import hashlib
import os
import threading
import time

import pytest
import torch

from roll_viz.lm import threads
from roll_viz.lm.decode import DecodeOptions
from roll_viz.lm.sampling import sample
from roll_viz.lm.threads import configure_threads, default_threads, resolve_threads
from tests.lm.helpers import wait_until

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux /proc")


class FixedMonitor:
    def __init__(self, busy):
        self.busy = busy
        self.asked_with = None

    def others_busy(self, own=()):
        self.asked_with = tuple(own)
        return self.busy


def test_choose_all_cores_only_when_the_rest_is_idle(monkeypatch):
    monkeypatch.delenv("ROLL_VIZ_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert threads.choose(1, monitor=FixedMonitor(0.05)) == 2
    assert threads.choose(1, monitor=FixedMonitor(threads.QUIET_CORES + 0.01)) == 1
    assert threads.choose(1, monitor=FixedMonitor(None)) == 1  # nothing measured yet
    monitor = FixedMonitor(0.0)
    assert threads.choose(2, own=(123,), monitor=monitor) == 2  # base already every core
    assert monitor.asked_with == (123,)


def test_a_number_in_the_environment_pins_the_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setenv("ROLL_VIZ_THREADS", "1")
    assert threads.choose(1, monitor=FixedMonitor(0.0)) == 1
    monkeypatch.setenv("ROLL_VIZ_THREADS", "auto")
    assert threads.choose(1, monitor=FixedMonitor(0.0)) == 2


def test_monitor_sees_another_python_thread_and_excludes_the_callers_own():
    # the background reader takes one reading at start and then sleeps: the two others_busy
    # calls below read the same window (a 50 ms reader had replaced it between them under load)
    monitor = threads.CpuMonitor(period=3600.0)
    assert wait_until(lambda: monitor.others_busy() is not None)
    monitor.sample()
    start = time.monotonic()
    stop = threading.Event()
    data = b"x" * (1 << 20)

    def spin():
        # hashing a megabyte releases the GIL: a pure-Python loop would hold it and delay the
        # monitor's own reading by tens of ms, which it counts as the window but not the thread's
        while not stop.is_set():
            hashlib.sha256(data).digest()

    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    clock = time.pthread_getcpuclockid(worker.ident)
    try:
        time.sleep(1.0)
        monitor.sample()
        # the worker's own CPU time, read through another door than the monitor's /proc files;
        # it started after the first reading, so all of it falls inside the window
        share = time.clock_gettime(clock) / (time.monotonic() - start)
        counted = monitor.others_busy()
        excluded = monitor.others_busy(own=(worker.native_id,))
    finally:
        stop.set()
        worker.join()
    assert counted is not None
    assert excluded is not None
    # the spinning thread held a share of a core (how much depends on the machine's load);
    # naming it as our own removes exactly that share
    assert share > 0.0
    assert counted - excluded == pytest.approx(share, abs=0.05)


def test_step_watch_flags_a_slow_multithreaded_step():
    watch = threads.StepWatch()
    assert not watch.slow(2, 0.050)
    assert not watch.slow(2, 0.055)
    assert watch.slow(2, 0.050 * threads.SLOW_STEP + 0.01)
    assert not watch.slow(1, 0.5)  # one thread is the fallback: never flagged
    assert not watch.slow(1, 5.0)


def test_adaptive_sampling_restores_the_start_up_count(tiny, steered_cfg, monkeypatch):
    monkeypatch.setattr(threads, "choose", lambda base, own=(), monitor=None: 2)
    seen = []
    real_apply = threads.apply

    def spy(count):
        seen.append(count)
        return real_apply(count)

    monkeypatch.setattr(threads, "apply", spy)
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        sample(tiny, steered_cfg, decode=DecodeOptions())
        assert 2 in seen  # the phases ran with two threads
        assert torch.get_num_threads() == 1  # and the start-up count is back
        seen.clear()
        sample(tiny, steered_cfg, decode=DecodeOptions(adapt_threads=False))
        assert 2 not in seen
    finally:
        torch.set_num_threads(saved)


def test_thread_policy(monkeypatch):
    assert default_threads(1) == 1
    assert default_threads(2) == 1
    assert default_threads(8) == 4
    assert default_threads(4) == 2
    monkeypatch.setenv("ROLL_VIZ_THREADS", "3")
    assert resolve_threads() == 3
    assert resolve_threads(2) == 2
    monkeypatch.setenv("ROLL_VIZ_THREADS", "auto")
    assert resolve_threads() == default_threads()
    monkeypatch.setenv("ROLL_VIZ_THREADS", "lots")
    with pytest.raises(ValueError, match="positive number"):
        resolve_threads()
    monkeypatch.delenv("ROLL_VIZ_THREADS")
    saved = torch.get_num_threads()
    try:
        assert configure_threads(1) == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(saved)
