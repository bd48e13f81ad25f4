"""Sampling benchmark: our batched decode loop against plain ``model.generate`` on the same model.

``python -m benchmarks --sampling`` (or ``python -m benchmarks.sampling``) prints one JSON
line per measurement: the median wall time of a few runs after one warm-up run, and tokens/s.
Peers of one line group take turns (a, b, c, a, b, c, ...), so a busy spell on the shared machine
slows them alike; ``loadavg`` records how busy it was.

- CPU decode line: 8 samples x 64 new tokens (one prompt, G = 8): ``generate`` vs our loop in its
  exact float form (the lean step: same draws as the plain loop), the plain loop
  (``PLAIN_DECODE``, start-up thread count only), and the labelled int8 fast path
  (``FAST_DECODE``); once at the start-up thread count and once at every core, all variants of a
  group pinned to the same count; ``speedup_vs_generate`` against the group's ``generate``.
- int8 and bf16 fidelity: mean KL(float || int8 / bf16) of the next-token distributions along
  float-drawn answers, and how often the top token agrees (what each fast path costs).
- CPU lecture request: ``sample()`` of 2 prompts x 8 samples x 64 tokens (steered: two scoring
  passes), float, int8 and the opt-in bf16 decode, against the 5 s target, with
  ``estimate_seconds`` before it and the machine's memory-bandwidth floor beside it:
  ``bandwidth_floor_s`` = the model's weight bytes x 64 decode steps / the read bandwidth
  measured in the same run (``memory_bandwidth``: the best of a few ``sum`` passes over 1 GiB at
  one thread and at every core). A decode step reads every weight once, so no float decode of
  64 steps can beat that floor on this machine. The float line also has ``compute_floor_s``:
  the decode's matmuls alone (16 rows x 64 steps x every weight) at the float32 GEMM rate
  measured at 16 rows (``machine.decode_compute_floor``, the better of one thread and every
  core): where a few rows keep the GEMM far below its peak, that floor is the higher one.
  ``phase_s`` / ``phase_cpu_s`` split each run (``PhaseMarks``: template and prefill, decode,
  policy pass, reference pass with the per-token scores, text).
- ``--threads-table``: one decode step of 8 and 18 rows at 1 and 2 torch threads, quiet and
  while a second process runs a single-threaded matmul loop (a competing student).
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
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch
from torch import Tensor

from benchmarks.machine import context, decode_compute_floor
from roll_viz.lm.decode import (
    BF16_DECODE,
    FAST_DECODE,
    PLAIN_DECODE,
    DecodeOptions,
    decode_batch,
)
from roll_viz.lm.lean_step import LeanDecoder
from roll_viz.lm.models import ModelBundle, load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample
from roll_viz.lm.serving import estimate_seconds
from roll_viz.lm.threads import configure_threads

PROMPT = "Explain quantum entanglement in one sentence."
LECTURE_PROMPTS = (PROMPT, "Write a haiku about the sea.")
COMPETITOR = (  # a second student's work on one core; exits when the benchmark process is gone
    "import os, torch\n"
    "parent = os.getppid()\n"
    "torch.set_num_threads(1)\n"
    "a = torch.randn(768, 768)\n"
    "while os.getppid() == parent:\n"
    "    a = torch.tanh(a @ a)\n"
)


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
        "min_s": round(min(times), 4),
        "tokens_per_s": round(rows * new_tokens / median, 1),
        "threads": torch.get_num_threads(),
        "loadavg": round(os.getloadavg()[0], 2),
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

    if bundle.device.type == "cuda":
        fns = {"hf_generate": generate}
        fns["roll_viz_decode"] = ours(DecodeOptions(static_cache=False))
        options = DecodeOptions(static_cache=True, compile_decode=True)
        fns["roll_viz_decode_static_compiled"] = ours(options)
        return _speedups(
            [_line(n, bundle, rows, new_tokens, t) for n, t in _timed(fns, runs, sync).items()]
        )
    # CPU: each group at one pinned thread count, generate and ours alike (no adapting inside)
    fixed = DecodeOptions(adapt_threads=False)
    lines = []
    start_count = torch.get_num_threads()
    counts = sorted({start_count, os.cpu_count() or 1})
    try:
        for count in counts:
            torch.set_num_threads(count)
            fns = {"hf_generate": generate}
            fns["roll_viz_decode"] = ours(fixed)  # exact float (lean step): the plain loop's draws
            if count == start_count:  # the loop before the speed work
                fns["roll_viz_decode_plain"] = ours(PLAIN_DECODE)
            fns["roll_viz_decode_int8"] = ours(replace(FAST_DECODE, adapt_threads=False))
            times = _timed(fns, runs, sync)
            lines += _speedups([_line(n, bundle, rows, new_tokens, t) for n, t in times.items()])
    finally:
        torch.set_num_threads(start_count)
    return lines


def bench_int8_fidelity(
    bundle: ModelBundle, rows: int = 8, new_tokens: int = 48, weights: str = "int8"
) -> dict:
    """How far the int8 (or bf16) decode step's next-token distributions are from the float's.

    Float decode draws ``rows`` answers; both steps (float and ``weights`` lean) then replay them
    from the same float prefill, and the line reports the mean KL(float || weights) per position
    and how often the most likely token agrees. Not a timing: what a fast path costs in
    fidelity.
    """
    bundle = dataclasses.replace(bundle, eos_ids=(-1,))  # every answer runs full length
    with bundle.lock, torch.inference_mode():
        ctx = bundle.chat_ids(PROMPT)
        generator = torch.Generator().manual_seed(0)
        answers = decode_batch(
            bundle, [ctx] * rows, rows, 1.0, 1.0, new_tokens, generator, options=DecodeOptions()
        )
        steps = min(len(a) for a in answers)
        width = len(ctx)
        ids = torch.tensor([ctx] * rows)
        prefill = bundle.model(input_ids=ids, use_cache=True)
        tokens = torch.tensor([a[:steps] for a in answers])
        logp: dict[str, list[Tensor]] = {}
        for kind in ("model", weights):
            lean = LeanDecoder(bundle.model, kind)
            buffers = lean.allocate(rows, width + steps, torch.float32, bundle.device)
            lean.load_cache(buffers, prefill.past_key_values, width)
            logp[kind] = []
            for t in range(steps - 1):
                mask = torch.ones(rows, width + t + 1)
                pos = torch.full((rows, 1), width + t)
                logits = lean.step(buffers, tokens[:, t], pos, width + t, mask)[1]
                logp[kind].append(torch.log_softmax(logits.float(), -1))
        exact, approx = torch.stack(logp["model"]), torch.stack(logp[weights])
        kl = (exact.exp() * (exact - approx)).sum(-1)
        agree = (exact.argmax(-1) == approx.argmax(-1)).float().mean()
    return {
        "what": f"{weights}_decode_fidelity",
        "model": bundle.name,
        "positions": int(kl.numel()),
        f"mean_kl_float_vs_{weights}": round(float(kl.mean()), 6),
        f"max_kl_float_vs_{weights}": round(float(kl.max()), 6),
        "top1_agreement": round(float(agree), 3),
    }


def _speedups(lines: list[dict]) -> list[dict]:
    """Add ``speedup_vs_generate`` to every line after the first (generate, same threads)."""
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


def memory_bandwidth(gib: float = 1.0, repeats: int = 3) -> dict:
    """Read bandwidth of this machine: best GB/s of ``sum`` over a ``gib`` GiB float32 tensor."""
    data = torch.ones(int(gib * 2**30) // 4)
    saved = torch.get_num_threads()
    best: dict[int, float] = {}
    try:
        for count in sorted({1, os.cpu_count() or 1}):
            torch.set_num_threads(count)
            for _ in range(repeats):
                start = time.perf_counter()
                data.sum()
                rate = data.numel() * 4 / (time.perf_counter() - start) / 1e9
                best[count] = max(best.get(count, 0.0), rate)
    finally:
        torch.set_num_threads(saved)
    return {
        "what": "memory_bandwidth",
        "gb_per_s_by_threads": {str(k): round(v, 2) for k, v in best.items()},
        "gb_per_s": round(max(best.values()), 2),
        "loadavg": round(os.getloadavg()[0], 2),
    }


class PhaseMarks:
    """A ``sample()`` progress callback that notes when each phase starts (wall and CPU clocks).

    The phases follow ``sample``'s messages: the chat template with the decode's prefill (the
    first "Sampling" message comes after the first token), the decode loop, the policy's
    teacher-forced pass (skipped when the decode's own states are reused), the reference's pass
    together with the per-token scores, and the text decoding.
    """

    PHASES = ("template_and_prefill", "decode", "policy_pass", "reference_pass_and_scores", "text")
    STARTS = (  # message prefix -> the phase it starts
        ("Applying the chat template", "template_and_prefill"),
        ("Sampling responses", "decode"),
        ("Scoring the responses under the policy", "policy_pass"),
        ("Scoring the same tokens under the reference", "reference_pass_and_scores"),
        ("Decoding text", "text"),
    )

    def __init__(self) -> None:
        self.marks: list[tuple[str, float, float]] = []

    def __call__(self, fraction: float, message: str) -> None:
        """Note the start of the phase ``message`` names (repeats of a phase are ignored)."""
        phase = next((p for m, p in self.STARTS if message.startswith(m)), None)
        if phase is not None and (not self.marks or self.marks[-1][0] != phase):
            self.marks.append((phase, time.perf_counter(), time.process_time()))

    def split(self) -> dict[str, tuple[float, float]]:
        """Phase -> (wall s, CPU s); the last phase ends now; a phase not seen took 0."""
        ends = [*self.marks[1:], ("end", time.perf_counter(), time.process_time())]
        out = dict.fromkeys(self.PHASES, (0.0, 0.0))
        for (phase, wall, cpu), (_, wall_end, cpu_end) in zip(self.marks, ends, strict=True):
            out[phase] = (wall_end - wall, cpu_end - cpu)
        return out


def weight_bytes(bundle: ModelBundle) -> int:
    """Bytes of the model's weights (a tied embedding / LM head counted once)."""
    return sum(p.numel() * p.element_size() for p in bundle.model.parameters())


def bench_lecture(bundle: ModelBundle, runs: int, bandwidth_gib: float = 1.0) -> list[dict]:
    """``sample()`` of 2 prompts x 8 samples x 64 tokens (steered), float vs int8 decode."""
    no_eos = dataclasses.replace(bundle, eos_ids=(-1,))
    cfg = SamplingConfig(
        prompts=LECTURE_PROMPTS, group_size=8, max_new_tokens=64, policy_mode="steered"
    )
    variants = {
        "float_decode": DecodeOptions(),
        "int8_decode": FAST_DECODE,
        "bf16_decode": BF16_DECODE,  # opt-in; its fidelity line says what it costs
    }
    estimates: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    phases: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in variants}

    def run(name: str) -> Callable[[], None]:
        def go() -> None:
            estimates[name].append(estimate_seconds(no_eos, cfg, variants[name]))
            marks = PhaseMarks()
            start = time.process_time()
            sample(no_eos, cfg, progress=marks, decode=variants[name])
            cpu[name].append(time.process_time() - start)
            phases[name].append(marks.split())

        return go

    times = _timed({name: run(name) for name in variants}, runs, bundle.device.type == "cuda")
    bandwidth = memory_bandwidth(bandwidth_gib)
    floor_s = weight_bytes(bundle) * cfg.max_new_tokens / (bandwidth["gb_per_s"] * 1e9)
    lines = [{**bandwidth, "weight_gb": round(weight_bytes(bundle) / 1e9, 3)}]
    # the float decode's matmuls alone, at the best thread count (module docstring)
    compute = min(
        (
            decode_compute_floor(bundle.model, cfg.num_sequences, cfg.max_new_tokens, threads=t)
            for t in sorted({1, os.cpu_count() or 1})
        ),
        key=lambda floor: floor["seconds"],
    )
    for name in variants:
        line = _line(f"roll_viz_sample_2x8x64_steered_{name}", bundle, 16, 64, times[name])
        line["estimate_s_before_run"] = [round(e, 2) for e in estimates[name][1:]]
        # CPU seconds of this process (all its threads): what the run costs on an idle machine
        line["cpu_s_median"] = round(statistics.median(cpu[name][1:]), 2)
        # where the time went (wall s, CPU s of this process), median over the timed runs
        for key, index in (("phase_s", 0), ("phase_cpu_s", 1)):
            line[key] = {
                phase: round(statistics.median(run[phase][index] for run in phases[name][1:]), 2)
                for phase in PhaseMarks.PHASES
            }
        line["target_s"] = 5.0
        # the float weights' floor; int8 reads a quarter of the bytes, bf16 half
        share = {"int8_decode": 4, "bf16_decode": 2}.get(name, 1)
        line["bandwidth_floor_s"] = round(floor_s / share, 2)
        if name == "float_decode":
            line["compute_floor_s"] = compute["seconds"]
            line["compute_floor"] = compute
        lines.append(line)
    return lines


def _step_ms(bundle: ModelBundle, rows: int, steps: int) -> float:
    """Median ms of one cached decode step of ``rows`` rows (float model, plain forward)."""
    with bundle.lock:
        ctx = bundle.chat_ids(PROMPT)
    ids = torch.tensor([ctx] * rows)
    width = ids.shape[1]
    times = []
    with bundle.lock, torch.inference_mode():
        out = bundle.model(input_ids=ids, use_cache=True, logits_to_keep=1)
        token = torch.zeros(rows, 1, dtype=torch.long)
        for step in range(steps):
            start = time.perf_counter()
            out = bundle.model(
                input_ids=token,
                attention_mask=torch.ones(rows, width + step + 1, dtype=torch.long),
                position_ids=torch.full((rows, 1), width + step),
                past_key_values=out.past_key_values,
                use_cache=True,
            )
            times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 1)


def bench_threads(bundle: ModelBundle, steps: int = 6, rounds: int = 2) -> Iterator[dict]:
    """Decode-step ms at 1 vs 2 threads, quiet and with a competing single-thread matmul process.

    Thread counts take turns within each condition; each cell is the median over rounds of the
    median step time of ``steps`` steps.
    """
    saved = torch.get_num_threads()
    for condition in ("no_competitor", "competing_load"):
        proc = None
        if condition == "competing_load":
            proc = subprocess.Popen([sys.executable, "-c", COMPETITOR])
            time.sleep(2.0)
        try:
            for rows in (8, 18):
                cells: dict[int, list[float]] = {1: [], 2: []}
                for _ in range(rounds):
                    for threads in (1, 2):
                        torch.set_num_threads(threads)
                        cells[threads].append(_step_ms(bundle, rows, steps))
                for threads, values in cells.items():
                    yield (
                        {
                            "what": "decode_step_threads",
                            "model": bundle.name,
                            "condition": condition,
                            "rows": rows,
                            "threads": threads,
                            "median_step_ms": statistics.median(values),
                            "rounds_ms": values,
                            "loadavg": round(os.getloadavg()[0], 2),
                        }
                    )
        finally:
            torch.set_num_threads(saved)
            if proc is not None:
                proc.kill()
                proc.wait()


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
    parser = argparse.ArgumentParser(prog="python -m benchmarks --sampling")
    parser.add_argument(
        "--sampling", action="store_true", help="(accepted for the bench dispatcher)"
    )
    parser.add_argument("--model", default=None, help="model spec (default: bundled SmolLM2)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs after one warm-up")
    parser.add_argument("--rss", action="store_true", help="only measure peak RSS (8x8x128, CPU)")
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS subprocess")
    parser.add_argument("--cpu-only", action="store_true", help="skip the CUDA measurements")
    parser.add_argument(
        "--threads", default=None, help="torch CPU threads (default: ROLL_VIZ_THREADS / policy)"
    )
    parser.add_argument(
        "--threads-table", action="store_true", help="also time 1 vs 2 threads, quiet and loaded"
    )
    parser.add_argument(
        "--only", default="", help="comma list of parts: decode,fidelity,lecture,sample,threads"
    )
    args = parser.parse_args(argv)
    parts = set(filter(None, args.only.split(","))) or {"decode", "fidelity", "lecture", "sample"}
    if args.threads_table:
        parts.add("threads")
    out = sys.stdout
    if args.rss:
        configure_threads(args.threads)
        out.write(json.dumps(peak_rss(args.model)) + "\n")
        return 0
    out.write(json.dumps(context()) + "\n")
    cpu = load_models(args.model, device="cpu", dtype="float32", threads=args.threads)
    out.write(json.dumps({"what": "load", "model": cpu.name, "source": cpu.source,
                          "seconds": round(cpu.load_seconds, 2),
                          "threads": torch.get_num_threads()}) + "\n")  # fmt: skip
    out.flush()
    if "threads" in parts:
        for line in bench_threads(cpu):
            out.write(json.dumps(line) + "\n")
            out.flush()
    if "decode" in parts:
        for line in bench_decode(cpu, rows=8, new_tokens=64, runs=args.runs):
            out.write(json.dumps(line) + "\n")
        out.flush()
    if "fidelity" in parts:
        for weights in ("int8", "bf16"):
            out.write(json.dumps(bench_int8_fidelity(cpu, weights=weights)) + "\n")
        out.flush()
    if "lecture" in parts:
        for line in bench_lecture(cpu, runs=args.runs):
            out.write(json.dumps(line) + "\n")
        out.flush()
    if "sample" in parts:
        out.write(json.dumps(bench_sample(cpu, group=8, new_tokens=64, runs=args.runs)) + "\n")
        out.flush()
    if torch.cuda.is_available() and not args.cpu_only:
        gpu = load_models(args.model, device="cuda", dtype="bfloat16", threads=args.threads)
        for line in bench_decode(gpu, rows=8, new_tokens=128, runs=max(args.runs, 5)):
            line["target_s"] = 0.6
            out.write(json.dumps(line) + "\n")
        out.write(json.dumps(bench_sample(gpu, group=8, new_tokens=128, runs=args.runs)) + "\n")
    if not args.no_rss:
        cmd = [sys.executable, "-m", "benchmarks.sampling", "--rss"]
        if args.model:
            cmd += ["--model", args.model]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        out.write(
            proc.stdout
            if proc.returncode == 0
            else json.dumps({"what": "peak_rss", "error": proc.stderr[-500:]}) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
