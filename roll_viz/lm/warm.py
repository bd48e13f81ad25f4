"""The teacher's warm-up: one throwaway sample and update step, so class starts warm.

The first update step on a server pays one-time costs (LoRA injection, autograd and the math
library's first calls) that the Update page's first press in class should not. ``warm_up`` takes
that step on a scratch adapter that is released at once, never on anyone's own: a lecture's
adapter is at step 0 when class begins, so its epoch 1 shows every ratio = 1 (README, "Giving a
lecture"). Once per model per process: later calls return at once.
"""

from __future__ import annotations

import threading
import time
import weakref

import torch

from roll_viz.lm import sampling
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.models import ModelBundle
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.update import UpdateConfig, update_step

#: a two-answer, four-token batch: the smallest that runs every phase of a real step
WARM_BATCH = SamplingConfig(prompts=("Say hello.",), group_size=2, max_new_tokens=4, greedy=False)

_WARMED: weakref.WeakSet[ModelBundle] = weakref.WeakSet()  # a freed model is forgotten
_LOCK = threading.Lock()


def is_warm(bundle: ModelBundle) -> bool:
    """True once ``warm_up`` has run on this model in this process."""
    return bundle in _WARMED


def warm_up(bundle: ModelBundle) -> float:
    """Sample the warm batch and take one step on a scratch adapter; returns the seconds taken.

    The adapter is released before returning (the shared base is never changed); the advantages
    are random so the step has a real gradient. 0.0 when this model was already warm.
    """
    with _LOCK:
        if bundle in _WARMED:
            return 0.0
        start = time.perf_counter()
        rollout = sampling.sample(bundle, WARM_BATCH)
        gen = torch.Generator().manual_seed(0)  # its own generator: no global RNG
        advantages = torch.randn(rollout.logprobs.shape, generator=gen) * rollout.response_mask
        with LoraPolicy(bundle, seed=0) as scratch:
            update_step(scratch, rollout, advantages, cfg=UpdateConfig(epochs=1))
        _WARMED.add(bundle)
        return time.perf_counter() - start
