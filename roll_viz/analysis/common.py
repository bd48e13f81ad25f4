"""Shared constants of the analyses and a helper that runs bursts of small tensor ops on one thread.

The seed's worked example (8.2 / 6.5 / 9.1) and the low-variance prompt of the editable table live
here, so every analysis and its test use the same numbers.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from roll_viz.core.pipeline.dialects import roll

# ---------------------------------------------------------------------------------------------
# Shared constants
# ---------------------------------------------------------------------------------------------

#: The seed's worked example: one prompt ("quantum"), three sampled answers and their rewards.
EXAMPLE_PROMPT = "quantum"
EXAMPLE_REWARDS: tuple[float, float, float] = (8.2, 6.5, 9.1)
#: A second, low-variance prompt for the editable table, so local amplification shows at once.
LOW_VARIANCE_PROMPT = "capital of France"
LOW_VARIANCE_REWARDS: tuple[float, float, float] = (5.0, 5.1, 4.9)

#: ROLL's group/batch std epsilon: ``(r - mean) / (std + EPS)`` (the dialect's ``STD_EPS``).
ROLL_EPS = roll.STD_EPS

#: Generic sweep parameters (keys of ``pipeline.ALIASES[fw]``, plus the group size ``G``).
SWEEP_PARAMS: tuple[str, ...] = ("beta", "gamma", "lam", "G")


_THREADS_LOCK = threading.Lock()
_THREADS_STATE = {"depth": 0, "saved": 0}


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run a burst of small tensor ops on one torch intra-op thread, then restore the setting.

    A sweep is dozens of pipeline runs on (B, T) <= (64, 128) tensors; their matmuls are far
    faster on one thread than split across busy cores (measured on the 2-core CI machine under
    load: a 22-run sweep on 64 x 128 tokens took 1450 ms with 2 threads, 35 ms with 1).
    ``torch.set_num_threads`` is process-wide, so nested/concurrent users share one counter and
    the last one out restores the saved value.
    """
    with _THREADS_LOCK:
        if _THREADS_STATE["depth"] == 0:
            _THREADS_STATE["saved"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _THREADS_STATE["depth"] += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _THREADS_STATE["depth"] -= 1
            if _THREADS_STATE["depth"] == 0:
                torch.set_num_threads(_THREADS_STATE["saved"])


def one_thread(fn: Callable) -> Callable:
    """Decorator: run ``fn`` inside ``single_threaded()``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_threaded():
            return fn(*args, **kwargs)

    return wrapper
