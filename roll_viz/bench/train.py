"""Training-step benchmark: seconds per live RL step, phase by phase, and peak memory.

``python -m roll_viz.bench --train`` (or ``python -m roll_viz.bench.train``) prints JSON lines:

- per model (the bundled SmolLM2-135M and the tiny test model; ``--model`` picks one), in a fresh
  subprocess so its peak RSS is that run's own: one line per training step of 4 prompts x 4
  samples x 48 new tokens on CPU (``lm.train.Trainer.run_step``: sampling, scoring, the
  reward -> advantage pipeline, the LoRA update with its forward / backward / optimizer /
  re-score split), then a summary with the median of the steps after the first (the first
  includes adapter creation and warm-up), the 20 s target, and ``ru_maxrss``;
- the peer, measured in the same process between training steps: a plain ``sample()`` of the
  same batch from the base model (no adapter, no update), so the cost of training over sampling
  reads directly as ``step_over_sample``; ``loadavg`` says how busy the shared machine was.

Timing is never asserted by a test; this is the place to read it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import RewardChoice, TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.train import Trainer

PROMPTS = (
    "Write a fun fact about octopuses.",
    "Describe your favourite day.",
    "What is 17 + 25?",
    "Give me one tip for learning to cook.",
)
TARGET_SECONDS = 20.0


def _one(model: str, steps: int, group: int, tokens: int, threads: int | None) -> int:
    """Benchmark one model in this process; prints the step lines and the summary."""
    t0 = time.perf_counter()
    bundle = load_models(model, device="cpu", dtype="float32", threads=threads)
    load_s = time.perf_counter() - t0
    settings = TrainSettings(
        prompts=PROMPTS,
        group_size=group,
        max_new_tokens=tokens,
        steps=steps,
        reward=RewardChoice.single("positive_words", per_word=0.25, cap=10.0),
        lr=5e-4,
        model=bundle.spec,
    )
    trainer = Trainer(bundle, settings)
    totals, peers = [], []
    try:
        for step in range(steps):
            record = trainer.run_step(keep_samples=False)
            m = record.metrics
            secs = dict(m["seconds"])
            upd = {k.removeprefix("seconds_"): v for k, v in m["update"].items()
                   if k.startswith("seconds_")}  # fmt: skip
            t = time.perf_counter()
            sample(
                bundle,
                SamplingConfig(
                    prompts=PROMPTS,
                    group_size=group,
                    max_new_tokens=tokens,
                    seed=settings.sampling_seed(step),
                    greedy=False,
                    topk=1,
                    feature_dim=1,
                ),
            )
            peer = time.perf_counter() - t
            if step > 0:
                totals.append(secs["total"])
                peers.append(peer)
            line = {
                "what": "train_step",
                "model": bundle.name,
                "step": step,
                "batch": f"{len(PROMPTS)}x{group}x{tokens}",
                "seconds": secs,
                "update_phases": upd,
                "peer_sample_seconds": round(peer, 3),
                "response_length": m["response_length"],
                "loadavg": os.getloadavg()[0],
            }
            print(json.dumps(line), flush=True)
    finally:
        trainer.close()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    median = statistics.median(totals) if totals else None
    summary = {
        "what": "train_summary",
        "model": bundle.name,
        "load_seconds": round(load_s, 2),
        "median_step_seconds": median,
        "median_peer_sample_seconds": statistics.median(peers) if peers else None,
        "step_over_sample": (median / statistics.median(peers)) if peers and median else None,
        "target_seconds": TARGET_SECONDS,
        "under_target": None if median is None else median < TARGET_SECONDS,
        "peak_rss_mb": round(rss_mb, 1),
        "torch_threads": torch.get_num_threads(),
        "loadavg": os.getloadavg()[0],
    }
    print(json.dumps(summary), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the training benchmark; prints JSON lines, returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m roll_viz.bench --train")
    parser.add_argument("--train", action="store_true", help="(accepted for the dispatcher)")
    parser.add_argument("--model", action="append", default=None, help="smollm2 / tiny / path")
    parser.add_argument("--steps", type=int, default=3, help="steps per model (first = warm-up)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = args.model or ["smollm2", "tiny"]
    if args.one:
        return _one(models[0], args.steps, args.group_size, args.max_new_tokens, args.threads)
    code = 0
    for model in models:
        cmd = [sys.executable, "-m", "roll_viz.bench.train", "--one", "--model", model,
               "--steps", str(args.steps), "--group-size", str(args.group_size),
               "--max-new-tokens", str(args.max_new_tokens)]  # fmt: skip
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        result = subprocess.run(cmd, check=False)
        code = code or result.returncode
    return code


if __name__ == "__main__":
    sys.exit(main())
