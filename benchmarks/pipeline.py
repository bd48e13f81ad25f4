"""``python -m benchmarks``: time the vectorized pipeline against a plain Python loop.

Prints one JSON line per measurement::

    {"name": "pipeline", "batch": "8x8x256", "median_ms": ..., "loop_median_ms": ...,
     "speedup": ..., ...}

"pipeline" is the whole reward -> advantage flow on one batch (float64): LitePPO
post-processing (group mean, batch std), running statistics, clipping, all four KL estimators,
token rewards with KL, all eight advantage estimators, whitening and advantage clipping. Its peer
is a plain per-token / per-sample Python loop over floats (the textbook formulas), timed in the
same run, interleaved with it so both see the same machine load (the line reports the 1-minute
load average). At RL scale the loop peer is timed on a subset of prompts and scaled linearly
(the JSON line says so). "gae_scan" compares the blocked-scan GAE with the framework-style loop
over T (torch ops across the batch, one Python iteration per token). "run:<framework>" lines
time ``roll_viz.core.pipeline.run`` per dialect (no peer). "run_vs_stages:<framework>:<estimator>"
lines time the whole ``run`` at RL scale (64 x 16 x 1024, float32 inputs as a trainer hands them
over) against the time spent inside its stage functions during the same calls (the KL, token
reward, normalization and estimator functions the dialect calls, counted once at the outermost
stage call): the rest is ``run``'s own overhead (validation, conversion, notes, the final
finite check). Target: run <= 2x its stages. Each side is timed in wall and in CPU seconds
(``*_cpu_ms``, ``ratio_cpu``: steadier on a loaded machine). The verl lines also time verl's own
``compute_advantage`` (``trainer/ppo/ray_trainer.py``, verl 0.9.1) on the same float32 tensors
in the same loop (``framework_peer_ms``, ``framework_peer_cpu_ms``; ``run_vs_peer`` and
``run_vs_peer_cpu`` = run / peer) and give the largest difference of its advantages and returns
from ``run``'s over the response tokens (``peer_max_abs_diff_*``; ``*_f64``: verl on float64
copies). verl is not a dependency (its package imports ray at the top):
``benchmarks.framework_peers`` fetches its wheel with ``pip download --no-deps`` into
``--peer-cache DIR`` (default ``~/.cache/roll-viz/peers``), stubs the heavy imports and runs
verl's functions; without pip or network the line says ``"framework_peer": "skipped:
<reason>"``. ``--no-peer`` leaves the peer out; so does ``--quick`` unless ``--peer-cache`` is
given.

``--only run_vs_stages`` (or any comma-separated line names: pipeline, gae_scan, run,
run_vs_stages) prints only those lines. ``--quick`` uses tiny batches (for the smoke test);
``--threads N`` sets torch's intra-op threads (default 1: the tensors here are small, and on a
shared 2-core machine OpenMP/MKL threading made the classroom pipeline ~15x slower, 68 ms vs
3.8 ms, while other processes held the cores; the loop peer is single-threaded anyway);
``--sampling``, ``--update``, ``--train``, ``--runs``, ``--load`` and ``--classroom`` delegate to
the module of that family (``benchmarks.<family>``; ``--load`` runs ``classroom_load``).

Targets: classroom batch (8 prompts x 8 samples x 256 tokens) < 20 ms on CPU; >= 20x faster
than the loop at RL scale (64 x 16 x 1024).
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

from benchmarks import framework_peers
from benchmarks.machine import context
from roll_viz.core import ops
from roll_viz.core.ops import SCAN_BLOCK, masked_whiten
from roll_viz.core.pipeline import ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, EstimatorParams, run
from roll_viz.core.pipeline import advantages as advantages_stage
from roll_viz.core.pipeline import dialects as dialect_registry
from roll_viz.core.pipeline import kl as kl_stage
from roll_viz.core.pipeline import losses as losses_stage
from roll_viz.core.pipeline import postprocess as postprocess_stage
from roll_viz.core.pipeline import values as values_stage
from roll_viz.core.pipeline.advantages import gae, token_rewards
from roll_viz.core.pipeline.kl import token_kl
from roll_viz.core.pipeline.postprocess import (
    clip_rewards,
    normalize_scores,
    update_running_moments,
)
from roll_viz.core.records import Batch, RunningMoments

GAMMA, LAM, BETA, CLIP, ADV_CLIP = 0.99, 0.95, 0.05, 5.0, 2.0


def make_inputs(P: int, G: int, T: int, seed: int = 0) -> dict:
    """A random batch as float64 tensors (B = P * G rows, lengths in [T/4, T])."""
    g = torch.Generator().manual_seed(seed)
    B = P * G
    lengths = torch.randint(max(1, T // 4), T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)
    return {
        "scores": torch.rand(B, generator=g, dtype=torch.float64) * 10,
        "mask": mask,
        "gids": torch.arange(B) // G,
        "lp": -torch.rand(B, T, generator=g, dtype=torch.float64) * 3,
        "ref": -torch.rand(B, T, generator=g, dtype=torch.float64) * 3,
        "values": torch.rand(B, T, generator=g, dtype=torch.float64),
        "baseline": torch.rand(B, generator=g, dtype=torch.float64) * 10,
    }


def pipeline_vectorized(x: dict) -> dict:
    """The whole flow with roll-viz's vectorized primitives; returns the advantages."""
    mask, gids = x["mask"], x["gids"]
    update_running_moments(RunningMoments(), x["scores"])
    norm = normalize_scores(x["scores"], gids, "group", "batch")
    rewards, _ = clip_rewards(norm.rewards, -CLIP, CLIP)
    kls = {name: token_kl(x["lp"], x["ref"], mask, name, clamp=10.0) for name in KL_ESTIMATORS}
    tokens = token_rewards(rewards, mask, kls["k1"], BETA)
    params = EstimatorParams(
        gamma=GAMMA, lam=LAM, values=x["values"], baseline_scores=x["baseline"], carry_through=False
    )
    out = {
        name: fn(tokens, mask, gids, params).advantages for name, fn in ADVANTAGE_ESTIMATORS.items()
    }
    out["gae"] = masked_whiten(out["gae"], mask).clamp(-ADV_CLIP, ADV_CLIP)
    return out


def pipeline_loop(x: dict) -> dict:
    """The same flow as plain Python loops over samples and tokens (floats, no tensors)."""
    scores, mask, gids = x["scores"], x["mask"], x["gids"]
    lp, ref, values, base = x["lp"], x["ref"], x["values"], x["baseline"]
    B, T = len(mask), len(mask[0])
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(gids):
        groups.setdefault(g, []).append(i)
    mean_all = sum(scores) / B
    var_all = sum((s - mean_all) ** 2 for s in scores) / (B - 1)
    rewards = []
    for i in range(B):
        idx = groups[gids[i]]
        mu = sum(scores[j] for j in idx) / len(idx)
        r = (scores[i] - mu) / (math.sqrt(var_all) + 1e-6)
        rewards.append(max(-CLIP, min(CLIP, r)))
    kls = {}
    for name in ("k1", "abs", "k2", "k3"):
        rows = []
        for b in range(B):
            row = []
            for t in range(T):
                d = lp[b][t] - ref[b][t] if mask[b][t] else 0.0
                k = {"k1": d, "abs": abs(d), "k2": 0.5 * d * d}.get(name)
                if k is None:
                    k = math.exp(-d) - 1 + d
                row.append(max(-10.0, min(10.0, k)) if mask[b][t] else 0.0)
            rows.append(row)
        kls[name] = rows
    tok = []
    for b in range(B):
        last = max((t for t in range(T) if mask[b][t]), default=None)
        tok.append(
            [
                ((rewards[b] if t == last else 0.0) - BETA * kls["k1"][b][t]) * mask[b][t]
                for t in range(T)
            ]
        )
    seq = [sum(tok[b]) for b in range(B)]
    out = {}
    adv = []
    for b in range(B):  # gae
        row, last = [0.0] * T, 0.0
        for t in reversed(range(T)):
            nv = values[b][t + 1] if t + 1 < T else 0.0
            last = tok[b][t] + GAMMA * nv - values[b][t] + GAMMA * LAM * last
            row[t] = last * mask[b][t]
        adv.append(row)
    out["gae"] = [[max(-ADV_CLIP, min(ADV_CLIP, v)) for v in row] for row in _whiten(adv, mask)]
    rets = []
    for b in range(B):  # reinforce
        row, run_ = [0.0] * T, 0.0
        for t in reversed(range(T)):
            run_ = tok[b][t] + GAMMA * run_
            row[t] = run_ * mask[b][t]
        rets.append(row)
    out["reinforce"] = rets
    out["reinforce_pp"] = _whiten(rets, mask)
    stats = {}
    for g, idx in groups.items():
        xs = [seq[i] for i in idx]
        mu = sum(xs) / len(xs)
        sd = math.sqrt(sum((v - mu) ** 2 for v in xs) / (len(xs) - 1)) if len(xs) > 1 else 1.0
        stats[g] = (mu, sd, sum(xs), len(xs))
    for name in ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"):
        rows = []
        for b in range(B):
            mu, sd, total, n = stats[gids[b]]
            a = {
                "grpo": (seq[b] - mu) / (sd + 1e-6),
                "dr_grpo": seq[b] - mu,
                "rloo": seq[b] - (total - seq[b]) / max(n - 1, 1),
                "reinforce_pp_baseline": seq[b] - mu,
            }[name]
            rows.append([a * mask[b][t] for t in range(T)])
        out[name] = _whiten(rows, mask) if name == "reinforce_pp_baseline" else rows
    remax = []
    for b in range(B):
        row, run_ = [0.0] * T, 0.0
        for t in reversed(range(T)):
            run_ = tok[b][t] + run_
            row[t] = (run_ - base[b]) * mask[b][t]
        remax.append(row)
    out["remax"] = remax
    return out


def _whiten(x: list, mask: list) -> list:
    n = total = 0.0
    for row, m in zip(x, mask, strict=True):
        for v, k in zip(row, m, strict=True):
            n += k
            total += v * k
    mean = total / n
    sq = 0.0
    for row, m in zip(x, mask, strict=True):
        for v, k in zip(row, m, strict=True):
            sq += k * (v - mean) ** 2
    inv = 1.0 / math.sqrt(sq / (n - 1) + 1e-8)
    return [
        [(v - mean) * inv * k for v, k in zip(row, m, strict=True)]
        for row, m in zip(x, mask, strict=True)
    ]


def gae_loop_over_t(rewards: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Framework-style GAE: tensors across B, one Python iteration per token."""
    T = rewards.shape[1]
    last = torch.zeros_like(rewards[:, 0])
    out = []
    for t in reversed(range(T)):
        next_v = values[:, t + 1] if t + 1 < T else torch.zeros_like(last)
        last = rewards[:, t] + GAMMA * next_v - values[:, t] + GAMMA * LAM * last
        out.append(last)
    return torch.stack(out[::-1], dim=1)


def _to_lists(x: dict) -> dict:
    return {k: v.tolist() for k, v in x.items()}


def _subset(x: dict, rows: int) -> dict:
    return {k: v[:rows] for k, v in x.items()}


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn()`` in milliseconds (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def paired_median_ms(
    fast: Callable[[], object], slow: Callable[[], object], repeats: int, slow_repeats: int
) -> tuple[float, float]:
    """Median ms of two functions timed interleaved, so both see the same machine load."""
    fast()
    slow()
    fast_times, slow_times = [], []
    for i in range(max(repeats, slow_repeats)):
        for fn, times, n in ((fast, fast_times, repeats), (slow, slow_times, slow_repeats)):
            if i < n:
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1000)
    return statistics.median(fast_times), statistics.median(slow_times)


def _check_same(x: dict, loop_rows: int) -> float:
    """Max |vectorized - loop| over all estimators on the first ``loop_rows`` rows."""
    sub = _subset(x, loop_rows)
    fast, slow = pipeline_vectorized(sub), pipeline_loop(_to_lists(sub))
    return max(
        (fast[k] - torch.tensor(slow[k], dtype=torch.float64)).abs().max().item() for k in fast
    )


def bench_pipeline(P: int, G: int, T: int, repeats: int, loop_prompts: int, loop_repeats: int):
    """One JSON-ready dict for the whole pipeline at this size."""
    x = make_inputs(P, G, T)
    sub = _to_lists(_subset(x, loop_prompts * G))
    fast, slow_sub = paired_median_ms(
        lambda: pipeline_vectorized(x), lambda: pipeline_loop(sub), repeats, loop_repeats
    )
    factor = P / loop_prompts
    line = {
        "name": "pipeline",
        "batch": f"{P}x{G}x{T}",
        "median_ms": round(fast, 3),
        "loop_median_ms": round(slow_sub * factor, 1),
        "speedup": round(slow_sub * factor / fast, 1),
        "repeats": repeats,
        "loop_repeats": loop_repeats,
        "max_abs_diff_vs_loop": _check_same(x, min(loop_prompts, 2) * G),
        "threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    if loop_prompts < P:
        line["loop_note"] = (
            f"loop timed on {loop_prompts} of {P} prompts ({loop_prompts * G} rows) and scaled "
            f"x{factor:g} (per-row cost; whitening/batch stats are linear in rows)"
        )
    return line


def bench_gae(P: int, G: int, T: int, repeats: int) -> dict:
    """Blocked-scan GAE vs the framework-style Python loop over T."""
    x = make_inputs(P, G, T)
    r, v = x["lp"], x["values"]
    fast, slow = paired_median_ms(
        lambda: gae(r, v, GAMMA, LAM), lambda: gae_loop_over_t(r, v), repeats, repeats
    )
    diff = (gae(r, v, GAMMA, LAM) - gae_loop_over_t(r, v)).abs().max().item()
    return {
        "name": "gae_scan",
        "batch": f"{P}x{G}x{T}",
        "median_ms": round(fast, 3),
        "loop_median_ms": round(slow, 3),
        "speedup": round(slow / fast, 1),
        "loop_kind": "torch ops over B, Python loop over T (verl/ROLL/OpenRLHF style)",
        "max_abs_diff_vs_loop": diff,
        "scan_block": SCAN_BLOCK,
    }


def bench_dialects(P: int, G: int, T: int, repeats: int) -> list[dict]:
    """``run()`` per dialect (its GRPO-like estimator, KL in reward/loss) at this size."""
    x = make_inputs(P, G, T)
    batch = Batch(
        scores=x["scores"],
        response_mask=x["mask"],
        group_ids=x["gids"],
        logprobs=x["lp"],
        ref_logprobs=x["ref"],
        values=x["values"],
        baseline_scores=x["baseline"],
    )
    configs = {
        "roll": {"adv_estimator": "grpo", "add_token_level_kl": True, "whiten_advantages": True},
        "verl": {"adv_estimator": "gae", "use_kl_in_reward": True},
        "openrlhf": {"advantage_estimator": "reinforce_baseline"},
        "trl": {"beta": 0.04},
    }
    return [
        {
            "name": f"run:{fw}",
            "batch": f"{P}x{G}x{T}",
            "config": cfg,
            "median_ms": round(median_ms(lambda fw=fw, cfg=cfg: run(batch, fw, cfg), repeats), 3),
        }
        for fw, cfg in configs.items()
    ]


STAGE_MODULES = tuple(
    m.__name__
    for m in (ops, advantages_stage, kl_stage, losses_stage, postprocess_stage, values_stage)
)

#: Dialect helpers that are a stage call in a thin wrapper (the batch's token KL, the adaptive
#: controller); the shared module's other helpers (``make_trace``'s masking, the notes) are
#: ``run``'s overhead.
STAGE_EXTRA = frozenset(
    f"roll_viz.core.pipeline.dialects.shared.{name}" for name in ("batch_kl", "controller")
)

#: (framework, estimator config) pairs of the run-vs-stages lines: GRPO and GAE in each dialect
#: (TRL has no GAE: its GRPO only).
RUN_CASES = (
    ("roll", {"adv_estimator": "grpo"}),
    ("roll", {"adv_estimator": "gae"}),
    ("verl", {"adv_estimator": "grpo"}),
    ("verl", {"adv_estimator": "gae"}),
    ("openrlhf", {"advantage_estimator": "group_norm"}),
    ("openrlhf", {"advantage_estimator": "gae"}),
    ("trl", {}),
)


class StageTimer:
    """Wraps the stage functions a dialect module calls and sums the time spent inside them.

    Every module-level callable of the dialect modules whose ``__module__`` is a stage module
    (``STAGE_MODULES``) or that is listed in ``STAGE_EXTRA``, and every stage callable held in
    a module-level dict (the estimator tables), is replaced by a timing wrapper while the
    ``with`` block runs; nested stage calls count once (only the outermost call is timed).
    """

    def __init__(self, modules: list[ModuleType]):
        self.modules = modules
        self.total = 0.0
        self.total_cpu = 0.0
        self._depth = 0
        self._undo: list[Callable[[], None]] = []

    def _wrap(self, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            start, start_cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - start
                self.total_cpu += time.process_time() - start_cpu
                self._depth -= 1

        return timed

    @staticmethod
    def _is_stage(value: object) -> bool:
        if not callable(value):
            return False
        where = getattr(value, "__module__", None)
        return where in STAGE_MODULES or f"{where}.{getattr(value, '__name__', '')}" in STAGE_EXTRA

    def __enter__(self) -> StageTimer:
        seen: set[int] = set()
        for module in self.modules:
            for name, value in list(vars(module).items()):
                if isinstance(value, type):
                    continue
                if self._is_stage(value):
                    setattr(module, name, self._wrap(value))
                    self._undo.append(lambda m=module, n=name, v=value: setattr(m, n, v))
                elif isinstance(value, dict) and id(value) not in seen:
                    seen.add(id(value))
                    for key, item in list(value.items()):
                        if self._is_stage(item) and not isinstance(item, type):
                            value[key] = self._wrap(item)
                            self._undo.append(lambda d=value, k=key, v=item: d.__setitem__(k, v))
        return self

    def __exit__(self, *exc) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def rl_batch(P: int, G: int, T: int, dtype: torch.dtype = torch.float32) -> Batch:
    """The benchmark batch as a trainer hands it over (float tensors in ``dtype``)."""
    x = make_inputs(P, G, T)
    x = {k: v.to(dtype) if v.is_floating_point() else v for k, v in x.items()}
    return Batch(
        scores=x["scores"],
        response_mask=x["mask"],
        group_ids=x["gids"],
        logprobs=x["lp"],
        ref_logprobs=x["ref"],
        values=x["values"],
        baseline_scores=x["baseline"],
    )


PeerOrWhyNot = framework_peers.VerlPeer | str


def load_verl_peer(cache: Path | None = None) -> framework_peers.VerlPeer | str:
    """The verl peer (its ``compute_advantage`` from the wheel), or ``"skipped: <reason>"``."""
    try:
        return framework_peers.verl_peer(cache)
    except framework_peers.PeerUnavailable as err:
        return f"skipped: {err}"


def bench_run_vs_stages(
    P: int, G: int, T: int, repeats: int, peers: dict[str, PeerOrWhyNot] | None = None
) -> list[dict]:
    """``run`` against the time inside its stage functions, GRPO and GAE per dialect.

    A framework in ``peers`` (today verl: ``{"verl": load_verl_peer()}``) also has its own
    estimator call timed on the same batch, or its line says why not (a string).
    """
    batch = rl_batch(P, G, T)
    # the framework files themselves (a record's functions look up the stages in its module)
    modules = [
        sys.modules[dialect_registry.get(fw).pipeline.__module__]
        for fw in dialect_registry.FRAMEWORKS
    ]
    lines = []
    for fw, cfg in RUN_CASES:
        peer, peer_call = (peers or {}).get(fw), None
        if isinstance(peer, framework_peers.VerlPeer):
            peer_args = peer.inputs(batch, {**dialect_registry.get(fw).DEFAULTS, **cfg})
            peer_call = lambda args=peer_args, p=peer: p.call(*args)  # noqa: E731
            peer_call()  # warm-up
        run(batch, fw, cfg)  # warm-up
        run_times, stage_times, run_cpu, stage_cpu, peer_times, peer_cpu = [], [], [], [], [], []
        for _ in range(repeats):  # interleaved: plain run, the instrumented one, the peer
            start, start_cpu = time.perf_counter(), time.process_time()
            run(batch, fw, cfg)
            run_times.append((time.perf_counter() - start) * 1000)
            run_cpu.append((time.process_time() - start_cpu) * 1000)
            with StageTimer(modules) as timer:
                run(batch, fw, cfg)
            stage_times.append(timer.total * 1000)
            stage_cpu.append(timer.total_cpu * 1000)
            if peer_call is not None:
                start, start_cpu = time.perf_counter(), time.process_time()
                peer_call()
                peer_times.append((time.perf_counter() - start) * 1000)
                peer_cpu.append((time.process_time() - start_cpu) * 1000)
        run_ms, stage_ms = statistics.median(run_times), statistics.median(stage_times)
        run_cpu_ms, stage_cpu_ms = statistics.median(run_cpu), statistics.median(stage_cpu)
        line = {
            "name": f"run_vs_stages:{fw}:{next(iter(cfg.values()), 'grpo')}",
            "batch": f"{P}x{G}x{T}",
            "input_dtype": "float32",
            "run_ms": round(run_ms, 2),
            "stages_ms": round(stage_ms, 2),
            "ratio": round(run_ms / stage_ms, 2),
            "run_cpu_ms": round(run_cpu_ms, 2),
            "stages_cpu_ms": round(stage_cpu_ms, 2),
            "ratio_cpu": round(run_cpu_ms / max(stage_cpu_ms, 1e-9), 2),
            "target_ratio": 2.0,
            "repeats": repeats,
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
        if peer is not None:
            line["framework_peer"] = peer if isinstance(peer, str) else peer.label
        if peer_call is not None:
            line |= framework_peers.agreement(
                peer, peer_args, run(batch, fw, cfg), batch.response_mask,
                {"run_ms": run_ms, "run_cpu_ms": run_cpu_ms},
                {"peer_ms": peer_times, "peer_cpu_ms": peer_cpu},
            )  # fmt: skip
        lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line per measurement; ``--quick`` for tiny sizes."""
    argv = list(sys.argv[1:] if argv is None else argv)
    families = {  # --flag -> the module whose main(argv) runs that benchmark family
        "--sampling": "benchmarks.sampling",
        "--update": "benchmarks.update",
        "--train": "benchmarks.train",
        "--runs": "benchmarks.runs",
        "--load": "benchmarks.classroom_load",
        "--classroom": "benchmarks.classroom",
        "--engine": "benchmarks.engine",
        "--gpu": "benchmarks.gpu",
    }
    if argv and argv[0] in families:
        module = __import__(families[argv[0]], fromlist=["main"])
        return module.main(argv[1:])
    quick = "--quick" in argv
    only = set(argv[argv.index("--only") + 1].split(",")) if "--only" in argv else None
    wanted = (lambda name: True) if only is None else only.__contains__
    threads = int(argv[argv.index("--threads") + 1]) if "--threads" in argv else 1
    torch.set_num_threads(threads)
    random.seed(0)
    if quick:
        sizes = [(2, 2, 16, 3, 2, 1), (2, 4, 64, 2, 1, 1)]
    else:
        sizes = [(8, 8, 256, 30, 8, 5), (64, 16, 1024, 7, 4, 3)]
    for P, G, T, repeats, loop_prompts, loop_repeats in sizes if wanted("pipeline") else []:
        line = bench_pipeline(P, G, T, repeats, loop_prompts, loop_repeats)
        print(json.dumps(line), flush=True)
    P, G, T = sizes[-1][:3]
    if wanted("gae_scan"):
        print(json.dumps(bench_gae(P, G, T, 3 if quick else 5)), flush=True)
    for line in bench_dialects(*sizes[0][:3], 3 if quick else 20) if wanted("run") else []:
        print(json.dumps(line), flush=True)
    if wanted("run_vs_stages"):
        cache = Path(argv[argv.index("--peer-cache") + 1]) if "--peer-cache" in argv else None
        if "--no-peer" in argv:
            peer: PeerOrWhyNot = "skipped: --no-peer"
        elif quick and cache is None:
            peer = "skipped: --quick (give --peer-cache DIR to time verl's compute_advantage)"
        else:
            peer = load_verl_peer(cache)
        for line in bench_run_vs_stages(P, G, T, 3 if quick else 7, {"verl": peer}):
            print(json.dumps(line), flush=True)
    print(json.dumps({"name": "context", **context()}), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
