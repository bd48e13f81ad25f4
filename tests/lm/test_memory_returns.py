"""Memory comes back: freed adapters and optimizer state, and the heap handed back to the system.

The defect: 20 sessions holding one Update result each took the server from 1.5 to 4.2 GB and it
stayed at 4.2 GB after they left. Freed small allocations stay in glibc's heap unless
``malloc_trim`` returns them; the reaper calls it after every batch of releases.
"""

from __future__ import annotations

import psutil
import pytest
import torch

from roll_viz.lm import lora
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.reaper import _LIBC, REAPER, trim_memory
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample
from roll_viz.lm.update import update_step

MIB = 2**20
CHUNKS = 20_000  # x 8 KiB = 156 MiB of small heap blocks, as many small optimizer states make
KEEP_EVERY = 50  # keep 2 %: a fragmented heap (one live block can pin a whole free stretch)
TRIM_MARGIN_MIB = 48.0  # RSS after the trim stays within this of the baseline + what is kept


def _rss() -> float:
    return psutil.Process().memory_info().rss / MIB


@pytest.mark.skipif(_LIBC is None, reason="malloc_trim is glibc's; nothing to return elsewhere")
def test_trim_returns_a_fragmented_heap():
    trim_memory()
    base = _rss()
    blocks = [torch.empty(2048, dtype=torch.float32).fill_(1.0) for _ in range(CHUNKS)]
    peak = _rss()
    assert peak - base > 100  # the blocks really sit in this process's heap
    kept = blocks[::KEEP_EVERY]
    del blocks
    assert trim_memory()
    after = _rss()
    kept_mib = len(kept) * 8 / 1024
    assert after - base < kept_mib + TRIM_MARGIN_MIB, (base, peak, after)
    del kept


def test_released_policies_free_adapter_and_optimizer(tiny):
    rollout = sample(
        tiny, SamplingConfig(prompts=("hello",), group_size=4, max_new_tokens=6, seed=3)
    )
    adv = torch.randn(rollout.token_ids.shape) * rollout.response_mask
    trim_memory()
    base = _rss()
    policies = []
    for seed in range(20):  # 20 sessions, one Update result each
        policy = LoraPolicy(tiny, seed=seed)
        update_step(policy, rollout, adv)
        policies.append(policy)
    held = sum(p.nbytes()["total"] for p in policies) / MIB
    assert all(p.optimizer is not None for p in policies)
    for p in policies:
        p.release()
    assert REAPER.wait_idle(timeout=60)
    assert lora.adapter_names(tiny) == ()
    assert all(p.closed and p.optimizer is None and p.parameters() == [] for p in policies)
    after = _rss()
    assert after - base < held + TRIM_MARGIN_MIB, (base, after, held)
