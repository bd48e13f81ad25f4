"""What every benchmark line says about where it ran: the commit, the load, the CPU, the threads.

``context()`` is printed once per benchmark family so a figure can be traced to the code and the
machine state it was measured under (a shared 2-core box swings from load 1 to load 11).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def commit() -> str:
    """The short commit of the checkout, with ``+dirty`` when tracked files differ ("" if none)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "diff", "--quiet", "HEAD", "--", "roll_viz"],
            check=False, timeout=10,
        ).returncode  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+dirty" if dirty else "")


def cpu_flags() -> set[str]:
    """The CPU feature flags of /proc/cpuinfo (empty off Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def context() -> dict:
    """One JSON-ready dict: commit, load average, cores, torch threads, bf16 support."""
    flags = cpu_flags()
    return {
        "what": "context",
        "commit": commit(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "avx512_bf16": "avx512_bf16" in flags,
        "amx_bf16": "amx_bf16" in flags,
    }
