"""Sampling benchmark: our batched decode loop against plain ``model.generate`` on the same model.

``python -m roll_viz.bench --sampling`` (or ``python -m roll_viz.bench.sampling``) prints one JSON
line per measurement: the median wall time of a few runs after one warm-up run, and tokens/s.

- CPU: 8 samples x 64 new tokens (one prompt, G = 8), float32.
- CUDA (when present): 8 x 128 in bfloat16, plain generate vs our loop with a dynamic cache vs our
  loop with a static cache and a torch.compile'd decode step (CUDA graphs).
- ``--rss``: peak resident memory of ``sample()`` for 8 prompts x 8 samples x 128 tokens on CPU
  (all rows forced to full length), measured in a fresh subprocess so the figure is that run's.

Both sides draw exactly ``new_tokens`` tokens per row: EOS is disabled on both (our loop gets an
EOS id that never occurs, ``generate`` gets ``min_new_tokens``), top-k is off, temperature 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

from roll_viz.lm.models import ModelBundle, load_models
from roll_viz.lm.sampling import DecodeOptions, SamplingConfig, decode_batch, sample

PROMPT = "Explain quantum entanglement in one sentence."


def _timed(fns: dict[str, Callable[[], object]], runs: int, sync: bool) -> dict[str, list[float]]:
    """Wall seconds of ``runs`` calls of each function after one warm-up call each.

    The functions take turns (a, b, a, b, ...) so that a noisy, shared machine slows all of them
    alike instead of whichever happened to run during a busy spell.
    """
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            if sync:
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if sync:
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    return times


def _line(what: str, bundle: ModelBundle, rows: int, new_tokens: int, times: list[float]) -> dict:
    median = statistics.median(times)
    return {
        "what": what,
        "model": bundle.name,
        "device": str(bundle.device),
        "dtype": bundle.dtype_name,
        "rows": rows,
        "new_tokens": new_tokens,
        "runs": len(times),
        "median_s": round(median, 4),
        "tokens_per_s": round(rows * new_tokens / median, 1),
        "threads": torch.get_num_threads(),
    }


def bench_decode(bundle: ModelBundle, rows: int, new_tokens: int, runs: int) -> list[dict]:
    """Median decode time of generate and of our loop (variants by device) on the same prompt."""
    no_eos = dataclasses.replace(bundle, eos_ids=(-1,))  # never matches: every row runs full length
    sync = bundle.device.type == "cuda"
    with bundle.lock:
        ctx = bundle.chat_ids(PROMPT)
    ids = torch.tensor([ctx] * rows, device=bundle.device)
    attn = torch.ones_like(ids)

    def generate() -> None:
        with torch.inference_mode():
            bundle.model.generate(
                input_ids=ids,
                attention_mask=attn,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                pad_token_id=bundle.pad_id,
            )

    def ours(options: DecodeOptions) -> Callable[[], None]:
        def run() -> None:
            generator = torch.Generator(device=bundle.device).manual_seed(0)
            with torch.inference_mode():
                out = decode_batch(
                    no_eos, [ctx] * rows, rows, 1.0, 1.0, new_tokens, generator, options=options
                )
            assert all(len(r) == new_tokens for r in out)

        return run

    fns = {"hf_generate": generate, "roll_viz_decode": ours(DecodeOptions(static_cache=False))}
    if bundle.device.type == "cuda":
        options = DecodeOptions(static_cache=True, compile_decode=True)
        fns["roll_viz_decode_static_compiled"] = ours(options)
    times = _timed(fns, runs, sync)
    lines = [_line(name, bundle, rows, new_tokens, times[name]) for name in fns]
    base = lines[0]["median_s"]
    for line in lines[1:]:
        line["speedup_vs_generate"] = round(base / line["median_s"], 2)
    return lines


def bench_sample(bundle: ModelBundle, group: int, new_tokens: int, runs: int) -> dict:
    """The whole ``sample()`` (decode incl. one greedy row, policy + reference scoring)."""
    no_eos = dataclasses.replace(bundle, eos_ids=(-1,))
    cfg = SamplingConfig(
        prompts=(PROMPT,), group_size=group, max_new_tokens=new_tokens, policy_mode="steered"
    )
    times = _timed({"sample": lambda: sample(no_eos, cfg)}, runs, bundle.device.type == "cuda")
    return _line("roll_viz_sample_steered_full", bundle, group, new_tokens, times["sample"])


def peak_rss(model: str | None) -> dict:
    """Peak RSS of one ``sample()`` of 8 prompts x 8 samples x 128 tokens on CPU (this process)."""
    bundle = load_models(model, device="cpu", dtype="float32")
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    no_eos = dataclasses.replace(bundle, eos_ids=(-1,))
    prompts = tuple(f"Tell me fact number {i + 1} about the ocean." for i in range(8))
    cfg = SamplingConfig(prompts=prompts, group_size=8, max_new_tokens=128, policy_mode="steered")
    start = time.perf_counter()
    rollout = sample(no_eos, cfg)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "what": "peak_rss_sample_8x8x128_cpu",
        "model": bundle.name,
        "shape": list(rollout.token_ids.shape),
        "seconds": round(seconds, 2),
        "rss_after_load_mb": round(loaded),
        "peak_rss_mb": round(peak),
        "target_mb": 4096,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the sampling benchmark; prints JSON lines, returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m roll_viz.bench --sampling")
    parser.add_argument(
        "--sampling", action="store_true", help="(accepted for the bench dispatcher)"
    )
    parser.add_argument("--model", default=None, help="model spec (default: bundled SmolLM2)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs after one warm-up")
    parser.add_argument("--rss", action="store_true", help="only measure peak RSS (8x8x128, CPU)")
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS subprocess")
    parser.add_argument("--cpu-only", action="store_true", help="skip the CUDA measurements")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    out = sys.stdout
    if args.rss:
        out.write(json.dumps(peak_rss(args.model)) + "\n")
        return 0
    cpu = load_models(args.model, device="cpu", dtype="float32")
    out.write(json.dumps({"what": "load", "model": cpu.name, "source": cpu.source,
                          "seconds": round(cpu.load_seconds, 2)}) + "\n")  # fmt: skip
    for line in bench_decode(cpu, rows=8, new_tokens=64, runs=args.runs):
        out.write(json.dumps(line) + "\n")
    out.write(json.dumps(bench_sample(cpu, group=8, new_tokens=64, runs=args.runs)) + "\n")
    out.flush()
    if torch.cuda.is_available() and not args.cpu_only:
        gpu = load_models(args.model, device="cuda", dtype="bfloat16")
        for line in bench_decode(gpu, rows=8, new_tokens=128, runs=max(args.runs, 5)):
            line["target_s"] = 0.6
            out.write(json.dumps(line) + "\n")
        out.write(json.dumps(bench_sample(gpu, group=8, new_tokens=128, runs=args.runs)) + "\n")
    if not args.no_rss:
        cmd = [sys.executable, "-m", "roll_viz.bench.sampling", "--rss"]
        if args.model:
            cmd += ["--model", args.model]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        out.write(
            proc.stdout
            if proc.returncode == 0
            else json.dumps({"what": "peak_rss", "error": proc.stderr[-500:]}) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
