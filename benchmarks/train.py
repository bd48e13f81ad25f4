"""Training-step benchmark: seconds per live RL step, phase by phase, against TRL's GRPOTrainer.

``python -m benchmarks --train`` (or ``python -m benchmarks.train``) prints JSON lines:

- per model (the bundled SmolLM2-135M and the tiny test model; ``--model`` picks one), in a fresh
  subprocess so its peak RSS is that run's own: one line per training step of 4 prompts x 4
  samples x 48 new tokens on CPU (``lm.train.Trainer.run_step``: sampling, scoring, the
  reward -> advantage pipeline, the LoRA update with its forward / backward / optimizer split),
  then a summary with the median of the steps after the first (the first includes adapter
  creation and warm-up), the 20 s target, and ``ru_maxrss``; between training steps a plain
  ``sample()`` of the same batch from the base model (no adapter, no update), so the cost of
  training over sampling reads directly as ``step_over_sample``.
- ``--peer trl``: roll-viz's step and TRL's ``GRPOTrainer`` on the same shape (2 prompts x G = 4
  x 32 new tokens, every answer full length, LoRA r16 / alpha 32 on all seven linear maps, beta
  0.04 with the reference = the adapter switched off, TRL's DAPO loss, lr 5e-4, CPU float32, one
  torch thread each), the two in two processes started together, so both see the same machine
  noise. Each prints its step lines (wall and CPU seconds); the parent prints the summary with
  ``speedup_wall`` and ``speedup_cpu`` (TRL's median over ours). TRL is a dev-only peer
  (``pip install trl==1.16.0``; without it the peer is skipped with that hint). It runs at its
  defaults otherwise (gradient checkpointing on); ``--trl-no-checkpointing`` turns that off.

``--peer trl`` also prints the machine's floor for that shape (``floor``, measured in the
parent before the two sides start, one thread as they run): the decode reads every weight once
per step (the model's weight bytes x (tokens - 1) steps / the measured one-thread read
bandwidth; the first token comes from the prefill) or, where that is longer, multiplies the
sampled rows by them (the decode FLOPs / the one-thread GEMM rate measured at that row count on
a body-shaped and a head-shaped product: the reference's scores are not counted, as if free),
and the prompt passes and the update are
matmuls (their FLOPs / the measured one-thread float32 GEMM rate on an update-shaped product):
forward 2 x non-embedding parameters x tokens plus the head at the response positions, the
backward about the same again (input gradients only: the base is frozen, the adapter's own
gradients are a rank-r fraction). ``floor_speedup`` is TRL's CPU seconds over that floor: the
most any implementation reaches in float32 on this machine.

Every run starts with a ``context`` line (commit, load average, CPU flags). Timing is never
asserted by a test; this is the place to read it.
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
import tempfile
import time

import torch

from benchmarks.machine import context, decode_compute_floor, gemm_rate
from benchmarks.sampling import memory_bandwidth, weight_bytes
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
PEER_SHAPE = {"prompts": 2, "group": 4, "tokens": 32, "rank": 16, "alpha": 32.0, "beta": 0.04}
PEER_LR = 5e-4
TRL_HINT = "pip install trl==1.16.0 (dev-only peer; it pulls no other torch or transformers)"


def _reward() -> RewardChoice:
    return RewardChoice.single("positive_words", per_word=0.25, cap=10.0)


def _one(model: str, steps: int, group: int, tokens: int, threads: int | None) -> int:
    """Benchmark one model in this process; prints the step lines and the summary."""
    t0 = time.perf_counter()
    bundle = load_models(model, device="cpu", dtype="float32", threads=threads)
    load_s = time.perf_counter() - t0
    settings = TrainSettings.flat(
        prompts=PROMPTS,
        group_size=group,
        max_new_tokens=tokens,
        steps=steps,
        reward=_reward(),
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


# ---------------------------------------------------------------------------------------------
# Side by side with TRL's GRPOTrainer (one process each, started together)


def _full_length(bundle):
    """The bundle with an EOS id that never occurs: every answer runs to max_new_tokens."""
    return dataclasses.replace(bundle, eos_ids=(-1,))


def _ours_vs_peer(model: str, steps: int) -> int:
    """roll-viz's side of ``--peer trl``: Trainer.run_step on the peer shape, one line per step."""
    shape = PEER_SHAPE
    bundle = _full_length(load_models(model, device="cpu", dtype="float32", threads=1))
    settings = TrainSettings.flat(
        prompts=PROMPTS[: shape["prompts"]],
        group_size=shape["group"],
        max_new_tokens=shape["tokens"],
        steps=steps,
        reward=_reward(),
        framework="trl",
        config=(),
        beta=shape["beta"],
        lr=PEER_LR,
        lora_rank=shape["rank"],
        lora_alpha=shape["alpha"],
        model=bundle.spec,
    )
    trainer = Trainer(bundle, settings)
    try:
        for step in range(steps):
            wall, cpu = time.perf_counter(), time.process_time()
            record = trainer.run_step(keep_samples=False)
            line = {
                "what": "step",
                "impl": "roll_viz",
                "step": step,
                "wall_s": round(time.perf_counter() - wall, 3),
                "cpu_s": round(time.process_time() - cpu, 3),
                "phases": record.metrics["seconds"],
                "update_phases": {
                    k.removeprefix("seconds_"): v
                    for k, v in record.metrics["update"].items()
                    if k.startswith("seconds_")
                },
                "response_length": record.metrics["response_length"],
                "loadavg": round(os.getloadavg()[0], 2),
            }
            print(json.dumps(line), flush=True)
    finally:
        trainer.close()
    return 0


def _trl_peer(model: str, steps: int, checkpointing: bool) -> int:
    """TRL's side of ``--peer trl``: GRPOTrainer on the same shape, one line per step."""
    try:
        from datasets import Dataset
        from peft import LoraConfig
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        print(json.dumps({"what": "skip", "impl": "trl", "hint": TRL_HINT}), flush=True)
        return 0
    import trl

    shape = PEER_SHAPE
    bundle = load_models(model, device="cpu", dtype="float32", threads=1)
    reward = _reward()
    prompts = PROMPTS[: shape["prompts"]]

    def reward_fn(prompts: list, completions: list, **_: object) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        users = [p[-1]["content"] if isinstance(p, list) else str(p) for p in prompts]
        return [float(x) for x in reward.score(users, texts, step=0)]

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.wall, self.cpu = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            line = {
                "what": "step",
                "impl": f"trl {trl.__version__} GRPOTrainer",
                "step": state.global_step - 1,
                "wall_s": round(time.perf_counter() - self.wall, 3),
                "cpu_s": round(time.process_time() - self.cpu, 3),
                "loadavg": round(os.getloadavg()[0], 2),
            }
            print(json.dumps(line), flush=True)

    batch = shape["prompts"] * shape["group"]
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=batch,
            num_generations=shape["group"],
            max_completion_length=shape["tokens"],
            generation_kwargs={"min_new_tokens": shape["tokens"]},  # full length, as ours
            beta=shape["beta"],
            learning_rate=PEER_LR,
            use_cpu=True,
            bf16=False,
            gradient_checkpointing=checkpointing,
            max_steps=steps,
            logging_steps=1000,
            save_strategy="no",
            report_to="none",
            seed=0,
        )
        peft_config = LoraConfig(
            r=shape["rank"],
            lora_alpha=shape["alpha"],
            lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj"],
        )  # fmt: skip
        trainer = GRPOTrainer(
            model=bundle.model,
            reward_funcs=reward_fn,
            args=args,
            train_dataset=data,
            processing_class=bundle.tokenizer,
            peft_config=peft_config,
            callbacks=[Clock()],
        )
        torch.set_num_threads(1)
        trainer.train()
    return 0


def json_line(text: str) -> dict | None:
    """A benchmark line (a JSON object with "what"), or None for other output (TRL's logs)."""
    try:
        line = json.loads(text)
    except ValueError:
        return None
    return line if isinstance(line, dict) and "what" in line else None


def machine_floor(model: str) -> dict:
    """The float32 floor of one peer-shape step on this machine (module docstring)."""
    shape = PEER_SHAPE
    bundle = load_models(model, device="cpu", dtype="float32", threads=1)
    head = bundle.model.get_output_embeddings().weight
    params = sum(p.numel() for p in bundle.model.parameters())
    body = params - head.numel()  # the tied embedding / head counted once, as the head
    contexts = sum(len(bundle.chat_ids(p)) for p in PROMPTS[: shape["prompts"]])
    responses = shape["prompts"] * shape["group"] * shape["tokens"]
    bandwidth = memory_bandwidth()["gb_per_s_by_threads"]["1"]
    rate = gemm_rate()
    decode_gb = weight_bytes(bundle) * (shape["tokens"] - 1) / 1e9
    rows = shape["prompts"] * shape["group"]
    decode = decode_compute_floor(bundle.model, rows, shape["tokens"] - 1, threads=1)
    prefill_gflop = 2 * 2 * body * contexts / 1e9  # policy and reference prompt passes
    forward_gflop = (2 * body * (contexts + responses) + 2 * head.numel() * responses) / 1e9
    update_gflop = 2 * forward_gflop  # forward + backward (input gradients)
    decode_s = max(decode_gb / bandwidth, decode["seconds"])
    matmul_s = (prefill_gflop + update_gflop) / rate
    return {
        "what": "floor",
        "read_gb_per_s_1thread": bandwidth,
        "gemm_gflop_per_s_1thread": round(rate, 1),
        "gemm_gflop_per_s_1thread_decode_rows": decode["gflop_per_s"],
        "decode_gb": round(decode_gb, 2),
        "decode_gflop": decode["gflop"],
        "decode_read_floor_s": round(decode_gb / bandwidth, 2),
        "decode_compute_floor_s": decode["seconds"],
        "prefill_gflop": round(prefill_gflop, 1),
        "update_gflop": round(update_gflop, 1),
        "decode_floor_s": round(decode_s, 2),
        "matmul_floor_s": round(matmul_s, 2),
        "floor_s": round(decode_s + matmul_s, 2),
        "loadavg": round(os.getloadavg()[0], 2),
    }


def _side_by_side(model: str, steps: int, checkpointing: bool) -> int:
    """Start both sides together, relay their lines, print the summary (medians after step 0)."""
    print(json.dumps(context()), flush=True)
    floor = machine_floor(model)
    print(json.dumps(floor), flush=True)
    env = {**os.environ, "ROLL_VIZ_THREADS": "1", "OMP_NUM_THREADS": "1"}
    base = [sys.executable, "-m", "benchmarks.train", "--model", model, "--steps", str(steps)]
    trl_cmd = base + ["--trl-one"] + ([] if checkpointing else ["--trl-no-checkpointing"])
    procs = {
        "roll_viz": subprocess.Popen(
            [*base, "--ours-one"], stdout=subprocess.PIPE, text=True, env=env
        ),
        "trl": subprocess.Popen(trl_cmd, stdout=subprocess.PIPE, text=True, env=env),
    }
    lines: dict[str, list[dict]] = {}
    for name, proc in procs.items():
        out, _ = proc.communicate()
        lines[name] = [line for line in map(json_line, out.splitlines()) if line]
        for line in lines[name]:
            print(json.dumps(line), flush=True)
    if any(x.get("what") == "skip" for x in lines["trl"]):
        return 0

    def median(name: str, key: str) -> float | None:
        values = [x[key] for x in lines[name] if x.get("what") == "step" and x["step"] > 0]
        return statistics.median(values) if values else None

    summary = {
        "what": "train_vs_trl",
        "shape": PEER_SHAPE,
        "checkpointing_trl": checkpointing,
        "steps_timed": max(steps - 1, 0),
        "roll_viz_wall_s": median("roll_viz", "wall_s"),
        "trl_wall_s": median("trl", "wall_s"),
        "roll_viz_cpu_s": median("roll_viz", "cpu_s"),
        "trl_cpu_s": median("trl", "cpu_s"),
        "target_speedup": 3.0,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    for kind in ("wall", "cpu"):
        ours, peer = summary[f"roll_viz_{kind}_s"], summary[f"trl_{kind}_s"]
        summary[f"speedup_{kind}"] = round(peer / ours, 2) if ours and peer else None
    summary["floor_s"] = floor["floor_s"]
    peer_cpu = summary["trl_cpu_s"]
    summary["floor_speedup"] = round(peer_cpu / floor["floor_s"], 2) if peer_cpu else None
    print(json.dumps(summary), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the training benchmark; prints JSON lines, returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks --train")
    parser.add_argument("--train", action="store_true", help="(accepted for the dispatcher)")
    parser.add_argument("--model", action="append", default=None, help="smollm2 / tiny / path")
    parser.add_argument("--steps", type=int, default=3, help="steps per model (first = warm-up)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--peer", choices=["trl"], default=None, help="side by side with TRL")
    parser.add_argument("--trl-no-checkpointing", action="store_true")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ours-one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trl-one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = args.model or ["smollm2", "tiny"]
    checkpointing = not args.trl_no_checkpointing
    if args.ours_one:
        return _ours_vs_peer(models[0], args.steps)
    if args.trl_one:
        return _trl_peer(models[0], args.steps, checkpointing)
    if args.peer:  # the one peer: TRL's GRPOTrainer
        return _side_by_side(models[0], args.steps, checkpointing)
    if args.one:
        return _one(models[0], args.steps, args.group_size, args.max_new_tokens, args.threads)
    print(json.dumps(context()), flush=True)
    code = 0
    for model in models:
        cmd = [sys.executable, "-m", "benchmarks.train", "--one", "--model", model,
               "--steps", str(args.steps), "--group-size", str(args.group_size),
               "--max-new-tokens", str(args.max_new_tokens)]  # fmt: skip
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        result = subprocess.run(cmd, check=False)
        code = code or result.returncode
    return code


if __name__ == "__main__":
    sys.exit(main())
