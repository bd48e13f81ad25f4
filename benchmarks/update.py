"""Update-step benchmark: ``lm.update.update_step`` against the same step written plainly.

``python -m benchmarks.update`` prints one JSON line per (model, shape, implementation);
``--lr-probe smollm2`` instead measures how far one step moves real sampled text per lr.

- shapes: P prompts x G samples x T tokens, 2 x 8 x 32 (the Update page's batch: under 5 s is
  the target), 8 x 8 x 128 and 4 x 4 x 48, every row exactly T tokens long (seeded random
  ordinary tokens: a speed test, not a learning test); advantages are
  seeded sequence-constant values; old log-probs = the base model's own (so r = 1 in epoch 1).
- models: "tiny" and the bundled "smollm2" (CPU, float32).
- ours: ``LoraPolicy`` + ``update_step`` (verl loss, 1 epoch, 1 minibatch, lr 2e-4, r8/alpha16,
  the two-phase memory-bounded backward, each prompt's context run once and shared, the
  re-score for the page's delta log pi included), phases as the step reports them.
- ours bf16: the same step with ``UpdateConfig(precision="bf16")`` (the frozen base's matmuls in
  bfloat16), run after the pair; the ``bf16_effect`` line gives its log-prob gap to ours (every
  row is full length: the means are over all tokens).
- ours as the page (``--as-page``): the step as the Update page takes it (no re-score, so the
  page draws the step's figures; the re-score after, timed apart: ``step_s``, ``rescore_s``),
  alone on the machine with the server's thread policy (``lm.threads``: its start-up count,
  every core while the rest of the machine is idle), run after the others.
- peer: the same step written plainly with transformers + peft: ``get_peft_model``, a loop of
  micro-batches with gradient accumulation (token-mean PPO loss divided by the batch's token
  count, which is exact for token-mean), ``model(...).logits`` over the full sequence, AdamW,
  ``clip_grad_norm_`` 1.0, then a no-grad re-score. The peer copies OUR adapter's initial A
  matrices, so both take the same step: ``max_abs_delta_diff`` is the oracle check.

Each case runs in a fresh subprocess, so ``peak_rss_mb`` (``ru_maxrss``) is that case's peak
(model load included); ours and the peer of one shape run at the same time (one torch thread
each), so both see the same machine noise, and each line has its CPU seconds (``cpu_s``) next
to the wall time. Timings are single runs (one step mutates the adapter) on a shared, loaded
machine: read them as upper bounds. A ``context`` line (commit, load average) comes first.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

import torch

from benchmarks.machine import context
from roll_viz.core.records import Rollout
from roll_viz.lm import lora, update
from roll_viz.lm.models import ModelBundle, load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample

SHAPES = ((2, 8, 32), (8, 8, 128), (4, 4, 48))
MODELS = ("tiny", "smollm2")
PROMPT = "Tell me one fun fact about octopuses."
LR = 2e-4
SEED = 0


def synthetic_rollout(bundle: ModelBundle, prompts: int, group: int, width: int) -> Rollout:
    """(P*G, T) rows of seeded random ordinary tokens, every row full length, scored by the base.

    Args:
        bundle: the model.
        prompts: P (the same prompt text with a number, so contexts differ slightly).
        group: G.
        width: T.

    Returns:
        A Rollout whose logprobs/ref_logprobs are the base model's (unused fields zero).
    """
    rows = prompts * group
    vocab = int(bundle.model.get_output_embeddings().weight.shape[0])
    special = set(bundle.eos_ids) | {bundle.pad_id}
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, vocab, (rows, width), generator=gen)
    for bad in special:  # no EOS/pad inside a response
        ids[ids == bad] = (bad + 7) % vocab
    zeros = torch.zeros(rows, width)
    rollout = Rollout(
        prompts=tuple(f"{PROMPT} ({i + 1})" for i in range(prompts)),
        group_ids=torch.arange(prompts).repeat_interleave(group),
        responses=("",) * rows,
        token_ids=ids,
        tokens=tuple(("x",) * width for _ in range(rows)),
        response_mask=torch.ones(rows, width),
        logprobs=zeros,
        ref_logprobs=zeros,
        exact_kl=zeros,
        entropy=zeros,
        topk_ids=torch.zeros(rows, width, 1, dtype=torch.long),
        topk_logprobs=torch.zeros(rows, width, 1),
        topk_ref_logprobs=torch.zeros(rows, width, 1),
        finish_reasons=("length",) * rows,
        meta=(("logprob_temperature", 1.0), ("model_spec", bundle.spec)),
    )
    with lora.LoraPolicy(bundle, seed=SEED) as fresh:  # B = 0: the base model's log-probs
        base = update.policy_logprobs(fresh, rollout)
    return dataclasses.replace(rollout, logprobs=base, ref_logprobs=base)


def advantages_for(rollout: Rollout) -> torch.Tensor:
    """(B, T) seeded sequence-constant advantages with zero mean per group (GRPO-like)."""
    rows = rollout.token_ids.shape[0]
    gen = torch.Generator().manual_seed(SEED + 1)
    raw = torch.randn(rows, generator=gen)
    group = rollout.group_size
    raw = raw.view(-1, group)
    raw = (raw - raw.mean(-1, keepdim=True)).view(-1)
    return raw[:, None] * rollout.response_mask


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_ours(
    bundle: ModelBundle,
    rollout: Rollout,
    adv: torch.Tensor,
    precision: str = "float32",
    as_page: bool = False,
) -> tuple[dict, Any]:
    """Our step; returns (timings line, {"delta": (B, T), "before": (B, T) log-probs}).

    ``as_page``: as the Update page takes it: the step alone (``rescore=False``; the page draws
    its figures then), the re-score after it, timed apart (``step_s``, ``rescore_s``).
    """
    with lora.LoraPolicy(bundle, seed=SEED) as policy:
        cpu = time.process_time()
        cfg = update.UpdateConfig(lr=LR, seed=SEED, precision=precision, rescore=not as_page)
        t0 = time.perf_counter()
        result = update.update_step(policy, rollout, adv, framework="verl", cfg=cfg)
        step_s = time.perf_counter() - t0
        if as_page:
            t0 = time.perf_counter()
            result = update.rescore(policy, rollout, result)
            result.seconds["rescore"] = time.perf_counter() - t0
        cpu = time.process_time() - cpu
        sizes = policy.nbytes()
    mask = result.response_mask.bool()
    name = "ours" if precision == "float32" else f"ours {precision}"
    line = {
        "impl": name + (" as the page" if as_page else ""),
        "precision": precision,
        "seconds": {k: round(v, 3) for k, v in result.seconds.items()},
        "cpu_s": round(cpu, 3),
        "target_s": 5.0,
        "grad_norm": round(result.grad_norm, 6),
        "mean_abs_delta_logp": round(float(result.delta[mask].abs().mean()), 6),
        "max_abs_delta_logp": round(float(result.delta[mask].abs().max()), 6),
        "adapter_mb": round(sizes["adapter"] / 2**20, 2),
        "optimizer_mb": round(sizes["optimizer"] / 2**20, 2),
    }
    if as_page:
        line["step_s"] = round(step_s, 3)  # what the page waits for before drawing the step
        line["rescore_s"] = round(result.seconds["rescore"], 3)
    return line, {"delta": result.delta, "before": result.logprobs_before}


def run_peer(bundle: ModelBundle, rollout: Rollout, adv: torch.Tensor) -> tuple[dict, Any]:
    """The same step written plainly with transformers + peft (gradient accumulation loop)."""
    from peft import LoraConfig, get_peft_model

    # our adapter's initial A (same seed, same draw) so both implementations take the same step
    with lora.LoraPolicy(bundle, seed=SEED) as ours:
        init_a = {
            n: layer.lora_A[ours.name].weight.detach().clone()
            for n, layer in lora.adapter_layers(bundle)
        }
    model = get_peft_model(
        bundle.model,
        LoraConfig(
            r=lora.DEFAULT_RANK,
            lora_alpha=lora.DEFAULT_ALPHA,
            lora_dropout=0.0,
            target_modules=list(lora.LLAMA_TARGETS),
        ),
    )
    with torch.no_grad():
        for name, module in model.base_model.model.named_modules():
            if name in init_a:
                module.lora_A["default"].weight.copy_(init_a[name])
    params = [p for p in model.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    tok = bundle.tokenizer
    ctx = [
        tok(
            tok.apply_chat_template(
                [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
            ),
            add_special_tokens=False,
        )["input_ids"]
        for p in rollout.prompts
    ]
    rows = rollout.token_ids.shape[0]
    width = rollout.token_ids.shape[1]
    per = max(1, update.MICRO_TOKENS // width)
    n_tokens = float(rollout.response_mask.sum())
    seconds = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0, "rescore": 0.0}

    def logprobs(lo: int, hi: int) -> torch.Tensor:
        seqs = [
            ctx[int(g)] + rollout.token_ids[b].tolist()
            for b, g in zip(range(lo, hi), rollout.group_ids[lo:hi], strict=True)
        ]
        longest = max(len(s) for s in seqs)
        ids = torch.full((hi - lo, longest), bundle.pad_id, dtype=torch.long)
        attn = torch.zeros(hi - lo, longest, dtype=torch.long)
        for i, s in enumerate(seqs):  # left padding
            ids[i, longest - len(s) :] = torch.tensor(s)
            attn[i, longest - len(s) :] = 1
        positions = (attn.cumsum(-1) - 1).clamp_min(0)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits
        logits = logits[:, -width - 1 : -1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, -width:, None]).squeeze(-1)

    start, cpu = time.perf_counter(), time.process_time()
    for lo in range(0, rows, per):
        hi = min(rows, lo + per)
        t0 = time.perf_counter()
        lp = logprobs(lo, hi)
        ratio = torch.exp(lp - rollout.logprobs[lo:hi])
        a = adv[lo:hi]
        loss_tok = torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.2))
        loss = (loss_tok * rollout.response_mask[lo:hi]).sum() / n_tokens
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        seconds["forward"] += t1 - t0
        seconds["backward"] += t2 - t1
    t0 = time.perf_counter()
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    optim.step()
    optim.zero_grad(set_to_none=True)
    seconds["optimizer"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.no_grad():
        after = torch.cat([logprobs(lo, min(rows, lo + per)) for lo in range(0, rows, per)])
    seconds["rescore"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - start
    cpu = time.process_time() - cpu
    delta = (after - rollout.logprobs) * rollout.response_mask
    model.unload()
    line = {
        "impl": "peer (transformers + peft, plain loop)",
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "cpu_s": round(cpu, 3),
        "grad_norm": round(float(norm), 6),
        "mean_abs_delta_logp": round(float(delta.abs().mean()), 6),
    }
    return line, {"delta": delta}


def one_case(model: str, shape: tuple[int, int, int], impl: str) -> tuple[dict, dict]:
    """One (model, shape, implementation) measurement in this process: ((B, T) tensors, line).

    ``impl``: "ours", "ours_bf16" (``UpdateConfig.precision="bf16"``), "ours_page" (as the
    Update page takes it, threads as the server chooses them) or "peer".
    """
    bundle = load_models(model, device="cpu", dtype="float32")
    rollout = synthetic_rollout(bundle, *shape)
    adv = advantages_for(rollout)
    if impl == "peer":
        line, tensors = run_peer(bundle, rollout, adv)
    else:
        precision = "bf16" if impl == "ours_bf16" else "float32"
        line, tensors = run_ours(bundle, rollout, adv, precision, as_page=impl == "ours_page")
    return tensors, {
        "what": "update_step",
        "model": bundle.name,
        "shape": {"prompts": shape[0], "group": shape[1], "tokens": shape[2]},
        "threads": torch.get_num_threads(),
        **line,
        "loadavg": round(os.getloadavg()[0], 2),
        "peak_rss_mb": round(_rss_mb(), 1),
    }


def lr_probe(model: str, lrs: tuple[float, ...] = (1e-5, 1e-4, 2e-4, 1e-3)) -> list[dict]:
    """How far one step at each learning rate moves real sampled text (policy-update.md 2.3).

    8 samples x 48 tokens of one prompt at temperature 1 (seed 0), toy reward = response length
    in characters, GRPO-normalized within the group; one K=1 step per lr on a fresh adapter.
    "clip_next_epoch" is the share of tokens whose new/old ratio already lies outside
    [0.8, 1.2] (what a second PPO epoch would clip, in either direction).
    """
    bundle = load_models(model, device="cpu", dtype="float32")
    cfg = SamplingConfig(prompts=(PROMPT,), group_size=8, max_new_tokens=48, seed=SEED)
    rollout = sample(bundle, cfg)
    score = torch.tensor([float(len(r)) for r in rollout.responses])
    z = (score - score.mean()) / (score.std() + 1e-6)
    adv = z[:, None] * rollout.response_mask
    mask = rollout.response_mask.bool()
    out = []
    for lr in lrs:
        with lora.LoraPolicy(bundle, seed=SEED) as policy:
            result = update.update_step(
                policy, rollout, adv, framework="verl", cfg=update.UpdateConfig(lr=lr)
            )
        delta = result.delta[mask]
        moving = adv[mask] != 0
        seq = result.delta.sum(-1) / result.response_mask.sum(-1).clamp(min=1)
        ratio = torch.exp(result.logprobs_after - result.old_logprobs)[mask]
        out.append(
            {
                "what": "lr_probe",
                "model": bundle.name,
                "lr": lr,
                "rank": lora.DEFAULT_RANK,
                "alpha": lora.DEFAULT_ALPHA,
                "tokens": int(mask.sum()),
                "mean_abs_delta_logp": round(float(delta.abs().mean()), 5),
                "max_abs_delta_logp": round(float(delta.abs().max()), 4),
                "sign_agreement": round(float(((delta * adv[mask])[moving] > 0).float().mean()), 3),
                "corr_seq_delta_adv": round(float(torch.corrcoef(torch.stack([seq, z]))[0, 1]), 4),
                "clip_next_epoch": round(float(((ratio < 0.8) | (ratio > 1.2)).float().mean()), 4),
                "step_seconds": round(result.seconds["total"], 2),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run every case in a fresh subprocess and print one JSON line each (plus the oracle diff)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.update")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument(
        "--one", nargs=3, metavar=("MODEL", "SHAPE", "IMPL"), help=argparse.SUPPRESS
    )
    parser.add_argument("--lr-probe", metavar="MODEL", help="learning-rate probe on real text")
    parser.add_argument(
        "--as-page",
        action="store_true",
        help="also the step as the Update page takes it (step, then re-score; server threads)",
    )
    args = parser.parse_args(argv)
    if args.lr_probe:
        for line in lr_probe(args.lr_probe):
            print(json.dumps(line), flush=True)
        return 0
    if args.one:
        model, shape, impl = args.one
        tensors, line = one_case(model, tuple(int(x) for x in shape.split("x")), impl)
        print(json.dumps(line))
        # read back by the parent for the oracle and the bf16 effect
        print(json.dumps({k: v.tolist() for k, v in tensors.items()}))
        return 0
    print(json.dumps(context()), flush=True)
    env = {**os.environ, "ROLL_VIZ_THREADS": "1"}
    # as the page: the server's own thread policy (its start-up count, every core while idle)
    page_env = {k: v for k, v in os.environ.items() if k != "ROLL_VIZ_THREADS"}
    for model in args.models.split(","):
        for shape in args.shapes.split(","):
            out: dict[str, dict] = {}
            # ours and the peer at once (the same machine noise), then ours in bf16 alone
            for batch in (("ours", "peer"), ("ours_bf16",)):
                out.update(_run_cases(model, shape, batch, env))
            if args.as_page:
                out.update(_run_cases(model, shape, ("ours_page",), page_env))
            _oracle_lines(model, shape, out)
    return 0


def _run_cases(model: str, shape: str, impls: tuple[str, ...], env: dict) -> dict[str, dict]:
    """Run ``impls`` as subprocesses started together; print their lines, return their tensors."""
    procs = {
        impl: subprocess.Popen(
            [sys.executable, "-m", "benchmarks.update", "--one", model, shape, impl],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for impl in impls
    }
    out = {}
    for impl, proc in procs.items():
        stdout, stderr = proc.communicate()
        lines = stdout.strip().splitlines()
        if proc.returncode != 0 or len(lines) < 2:
            error = {"what": "update_step", "model": model, "shape": shape, "impl": impl}
            print(json.dumps({**error, "error": stderr.strip()[-600:]}), flush=True)
            continue
        print(lines[-2], flush=True)
        out[impl] = {k: torch.tensor(v) for k, v in json.loads(lines[-1]).items()}
    return out


def _oracle_lines(model: str, shape: str, out: dict[str, dict]) -> None:
    """Ours against the peer (the same step), and what bf16 did to the log-probs and the step."""
    if "ours" in out and "peer" in out:
        diff = float((out["ours"]["delta"] - out["peer"]["delta"]).abs().max())
        oracle = {"what": "oracle", "model": model, "shape": shape}
        print(json.dumps({**oracle, "max_abs_delta_diff": diff}), flush=True)
    if "ours" in out and "ours_bf16" in out:
        exact, bf16 = out["ours"], out["ours_bf16"]
        gap = (bf16["before"] - exact["before"]).abs()
        delta_gap = (bf16["delta"] - exact["delta"]).abs()
        line = {"what": "bf16_effect", "model": model, "shape": shape}
        line.update(
            {
                "max_abs_logprob_gap": round(float(gap.max()), 5),
                "mean_abs_logprob_gap": round(float(gap.mean()), 5),
                "mean_abs_delta_gap": round(float(delta_gap.mean()), 5),
                "mean_abs_delta_fp32": round(float(exact["delta"].abs().mean()), 5),
            }
        )
        print(json.dumps(line), flush=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
