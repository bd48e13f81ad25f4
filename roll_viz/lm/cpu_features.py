"""What this server's CPU can do natively: its feature flags, and whether bfloat16 is fast here.

A bfloat16 matrix product is only faster than float32 on a CPU with bf16 instructions
(AVX-512 BF16 or AMX); without them torch widens each operand to float32 and the product is
slower (an AVX2-only EPYC: a 2 x 8 x 64 decode 2x slower in bf16). The pages say so beside a
bf16 option instead of promising speed the machine cannot give.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@cache
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags of /proc/cpuinfo (empty off Linux or when unreadable)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> bool | None:
    """Whether the CPU multiplies bfloat16 natively; None when its flags cannot be read."""
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return None
    return bool(flags & NATIVE_BF16_FLAGS)


def bf16_slower_than_float32() -> bool:
    """Whether bf16 matmuls would be slower than float32 here: no GPU and a CPU without bf16."""
    return not torch.cuda.is_available() and native_bf16() is False
