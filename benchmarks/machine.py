"""What every benchmark line says about where it ran: the commit, the load, the CPU, the threads.

``context()`` is printed once per benchmark family so a figure can be traced to the code and the
machine state it was measured under (a shared 2-core box swings from load 1 to load 11).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import torch

from roll_viz.lm.cpu_features import cpu_flags

REPO = Path(__file__).resolve().parents[1]


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


def gemm_rate(
    rows: int = 512, inner: int = 576, cols: int = 1536, repeats: int = 5, threads: int = 1
) -> float:
    """The float32 GEMM rate (GFLOP/s, best of ``repeats``) at ``threads`` torch threads.

    ``rows x inner`` activations times a ``cols x inner`` weight, as ``nn.Linear`` multiplies.
    """
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(rows, inner), torch.randn(cols, inner)
    best = 0.0
    try:
        torch.nn.functional.linear(a, b)  # warm-up
        done, began = 0, time.perf_counter()
        # at least ``repeats`` products and 0.3 s: a 1 ms product needs many tries on a busy box
        while done < repeats or time.perf_counter() - began < 0.3:
            start = time.perf_counter()
            torch.nn.functional.linear(a, b)
            best = max(best, 2 * rows * inner * cols / (time.perf_counter() - start) / 1e9)
            done += 1
    finally:
        torch.set_num_threads(saved)
    return best


def decode_compute_floor(model: torch.nn.Module, rows: int, steps: int, threads: int) -> dict:
    """The matmul time of ``steps`` decode steps of ``rows`` rows at this machine's GEMM rate.

    A decode step multiplies only the sampled rows by every weight; at a handful of rows the
    GEMM runs far below its rate on long products (an AVX2-only EPYC at 8 rows: 9-16 GFLOP/s on
    the head against 52 on 512 rows), so a step can be compute-bound long before it is
    bandwidth-bound. The rate is measured at that row count on a body-shaped (hidden x 4 hidden)
    and a head-shaped (hidden x vocabulary) product; attention, norms and sampling count as free.
    """
    head = model.get_output_embeddings().weight
    body = sum(p.numel() for p in model.parameters()) - head.numel()  # tied head counted once
    hidden = head.shape[1]
    rate_body = gemm_rate(rows=rows, inner=hidden, cols=4 * hidden, threads=threads)
    rate_head = gemm_rate(rows=rows, inner=hidden, cols=head.shape[0], threads=threads)
    seconds = 2 * rows * steps * (body / rate_body + head.numel() / rate_head) / 1e9
    return {
        "rows": rows,
        "threads": threads,
        "gflop": round(2 * rows * steps * (body + head.numel()) / 1e9, 1),
        "gflop_per_s": {"body": round(rate_body, 1), "head": round(rate_head, 1)},
        "seconds": round(seconds, 2),
    }
