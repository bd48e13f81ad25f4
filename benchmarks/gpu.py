"""The GPU benchmark, prepared for a session lent a GPU: one call, JSON lines, under 5 minutes.

``python -m benchmarks --gpu`` (or ``python -m benchmarks.gpu``) on a CUDA host prints:

- ``gpu_device``: the device, torch and CUDA versions;
- ``gpu_sample_in_process``: ``sampling.sample`` of 1 prompt x 8 answers x 128 tokens (EOS
  ignored, steered: both scorings) on the in-process path with a static cache and the compiled
  decode step (``DecodeOptions(static_cache=True, compile_decode=True)``): the first run
  (compiling) and the median of the next ``--runs``;
- ``gpu_sample_vllm``: the same request through upstream vLLM when ``.engine-venv`` holds it
  (``make engine-venv`` on the GPU host): server start-up and the median request time; else
  ``"status": "skipped: ..."``;
- ``gpu_update_step``: one ``lm.update.update_step`` (LoRA r=8) on that batch;
- ``gpu_train_step``: one ``lm.train.Trainer.run_step`` (sample, reward, advantages, update),
  2 prompts x G=8 x 64 tokens;
- ``gpu_peak_memory``: ``torch.cuda.max_memory_allocated`` over the run.

``--cpu-check`` runs the same script on the CPU with the tiny model and small shapes, skipping
the GPU-only parts (compile, vLLM), so the script is known to run before a GPU session spends
its minutes on it. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

import torch

from roll_viz.lm import engine_rollout, engine_server
from roll_viz.lm.decode import DecodeOptions
from roll_viz.lm.engine import EngineError
from roll_viz.lm.engine_http import HttpEngine
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.train import Trainer
from roll_viz.lm.update import UpdateConfig, update_step

PROMPT = "Write a short story about a lighthouse keeper."
LECTURE_PROMPTS = ("Explain quantum entanglement in one sentence.", "Write a haiku about the sea.")


def _emit(line: dict) -> None:
    line["load1"] = round(os.getloadavg()[0], 2)
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn: Any, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def bench_in_process(bundle: Any, cfg: SamplingConfig, runs: int, gpu: bool) -> Any:
    """The in-process sample (static cache + compiled step on a GPU); returns the last Rollout."""
    options = DecodeOptions(static_cache=True, compile_decode=True) if gpu else DecodeOptions()
    no_eos = replace(bundle, eos_ids=(-1,))
    out: dict = {}

    def run() -> None:
        out["rollout"] = sample(no_eos, cfg, decode=options)

    first = _timed(run, bundle.device)
    times = [_timed(run, bundle.device) for _ in range(runs)]
    _emit({
        "what": "gpu_sample_in_process", "device": str(bundle.device),
        "shape": f"{len(cfg.prompts)}x{cfg.group_size}x{cfg.max_new_tokens}",
        "static_cache": options.static_cache, "compiled": options.compile_decode,
        "first_s": round(first, 3), "median_s": round(statistics.median(times), 3),
        "runs": runs,
    })  # fmt: skip
    return out["rollout"]


def bench_vllm(bundle: Any, cfg: SamplingConfig, runs: int) -> None:
    """The same request through the engine venv's vLLM, when there is one."""
    try:
        engine_server.engine_python()
    except EngineError as err:
        _emit({"what": "gpu_sample_vllm", "status": f"skipped: {err}"})
        return
    try:
        server = engine_server.start()
    except EngineError as err:
        _emit({"what": "gpu_sample_vllm", "status": f"failed: {str(err)[:300]}"})
        return
    try:
        engine = HttpEngine(server.url)
        times = [
            _timed(lambda: engine_rollout.engine_sample(bundle, engine, cfg), torch.device("cpu"))
            for _ in range(runs)
        ]
        _emit({
            "what": "gpu_sample_vllm", "ready_s": round(server.ready_s, 1),
            "shape": f"{len(cfg.prompts)}x{cfg.group_size}x{cfg.max_new_tokens}",
            "median_s": round(statistics.median(times), 3), "runs": runs,
            "note": "natural EOS (the engine path has no ignore-EOS switch)",
        })  # fmt: skip
    except EngineError as err:
        _emit({"what": "gpu_sample_vllm", "status": f"failed: {str(err)[:300]}"})
    finally:
        server.stop()


def bench_update(bundle: Any, rollout: Any) -> None:
    """One LoRA update step on the sampled batch."""
    policy = LoraPolicy(bundle, seed=0)
    try:
        advantages = torch.randn(
            rollout.token_ids.shape[0], generator=torch.Generator().manual_seed(0)
        )
        advantages = advantages[:, None] * rollout.response_mask
        seconds = _timed(
            lambda: update_step(policy, rollout, advantages, cfg=UpdateConfig(seed=0)),
            bundle.device,
        )
    finally:
        policy.close()
    _emit({"what": "gpu_update_step", "rows": int(rollout.token_ids.shape[0]),
           "seconds": round(seconds, 3)})  # fmt: skip


def bench_train(bundle: Any, group: int, tokens: int) -> None:
    """One training step (sample -> reward -> advantages -> update) of the Training page."""
    settings = TrainSettings.flat(
        prompts=LECTURE_PROMPTS, group_size=group, max_new_tokens=tokens, model=bundle.spec
    )
    trainer = Trainer(bundle, settings)
    try:
        record: dict = {}
        seconds = _timed(lambda: record.setdefault("r", trainer.run_step()), bundle.device)
    finally:
        trainer.close()
    _emit({
        "what": "gpu_train_step", "shape": f"{len(LECTURE_PROMPTS)}x{group}x{tokens}",
        "seconds": round(seconds, 3),
    })  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Print the GPU benchmark's JSON lines (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks --gpu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--cpu-check", action="store_true", help="tiny model on the CPU, GPU-only parts skipped"
    )
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    gpu = torch.cuda.is_available() and not args.cpu_check
    if not gpu and not args.cpu_check:
        sys.stderr.write("error: no CUDA device; run with --cpu-check to try the script here\n")
        return 2
    device = "cuda" if gpu else "cpu"
    bundle = load_models("tiny" if args.cpu_check else args.model, device=device)
    _emit({
        "what": "gpu_device", "device": torch.cuda.get_device_name(0) if gpu else "cpu",
        "torch": torch.__version__, "cuda": torch.version.cuda, "dtype": bundle.dtype_name,
        "model": bundle.name,
    })  # fmt: skip
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    small = args.cpu_check
    cfg = SamplingConfig(
        prompts=(PROMPT,), group_size=8, max_new_tokens=16 if small else 128,
        policy_mode="steered", greedy=False,
    )  # fmt: skip
    rollout = bench_in_process(bundle, cfg, 1 if small else args.runs, gpu)
    if gpu:
        bench_vllm(bundle, cfg, args.runs)
    else:
        _emit({"what": "gpu_sample_vllm", "status": "skipped: --cpu-check"})
    bench_update(bundle, rollout)
    bench_train(bundle, 4 if small else 8, 8 if small else 64)
    peak = torch.cuda.max_memory_allocated() if gpu else 0
    _emit({"what": "gpu_peak_memory", "bytes": int(peak), "gib": round(peak / 2**30, 3)})
    _emit({"what": "gpu_bench_done", "seconds": round(time.perf_counter() - started, 1)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
