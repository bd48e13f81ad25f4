"""``python -m benchmarks.runs``: open a big RL Logging Board dump; the pipeline at RL scale.

Prints one JSON line per measurement:

- ``write``: a synthetic dump of P prompts x G samples x up to T tokens (one step, one row per
  sample, lengths uniform in [T/4, T], every token series ROLL writes) in a temp folder. To
  write ~1-2 GB fast, the heavy token arrays come from a pool of pre-serialised rows (each row
  still differs in prompt, reward and length-pool slot), so the file parses like a real one;
- ``read_peer``: the floor any reader pays, ``json.loads`` of every line and nothing else;
- ``scan``: ``open_run`` (detect, validate every row, per-step summaries with per-sample KL),
  with its peak RSS: the chosen reader (board lines parsed by simdjson, ``runs.fast_lines``:
  number lists taken as float64 buffers, a 0/1 mask counted on its int64 buffer, lists the
  scan does not use never converted; any line it does not vouch for is read plainly);
- ``scan_plain``: the same ``open_run`` with the simdjson path off (orjson lines; when the line
  holds no JSON boolean, number lists packed into float64 arrays in one C pass and a 0/1 mask
  only counted: the reader before it);
- ``scan_checked``: the same ``open_run`` with every number list type-checked element by
  element before numpy converts it (the reader before the one-pass conversion);
- ``baseline``: ``open_run`` of the project's reader at an earlier commit (``--baseline-commit``,
  repeatable; default ``9bed76f^``, the reader when issue 22 was filed: ``json.loads`` per line),
  its ``roll_viz`` tree extracted by ``git archive`` into a temp folder and run there in the
  same Python: one record per commit, time and peak RSS like ``scan``;
- ``pyarrow``: ``pyarrow.json.open_json`` streaming the dump into Arrow record batches, one
  thread (a columnar engine: no per-line messages, a bad line fails its whole block);
- ``polars``: ``polars.read_ndjson`` of the dump in line-aligned 64 MB pieces, nothing kept, on
  polars' own threads (polars is not a dependency: the record says ``skipped`` when it is not
  installed; install it only to run this peer);
- ``load_step``: ``load_step`` of the step (token tensors for whole prompts up to
  ``MAX_STEP_TOKENS`` positions), its peak RSS;
- ``pipeline``: ``roll_viz.core.pipeline.run`` (ROLL GRPO with token-level KL in the reward) on
  a P x G x T float64 batch, beside a framework-style per-sample Python loop (group stats,
  normalised reward, per-token k1 KL, token rewards, reward-to-go) timed on ``--loop-prompts``
  prompts and scaled linearly; both are checked to agree on that subset.

Each phase runs in its own subprocess so ``peak_rss_mb`` (``ru_maxrss``) is that phase's own
(``rss_at_start_mb`` is the interpreter with torch imported: the reader's own memory is the
difference); ``peak_pss_mb`` is the peak proportional set size of the phase's process and its
children, sampled every ``SAMPLE_SECONDS`` (pages shared between processes counted once: the
memory a reader really holds). The reader phases print wall ``seconds`` and ``cpu_seconds``
(this process's CPU time, steadier than the wall time on a loaded machine).
``--quick`` uses tiny sizes (smoke test); ``--keep DIR`` writes the dump there and keeps it (an
existing dump there is reused: ``--phases`` without ``write``); ``--rounds N`` interleaves the
reader phases N times so each sees the same machine load.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.machine import context
from roll_viz.core import pipeline
from roll_viz.core.records import Batch
from roll_viz.data.runs import MAX_STEP_TOKENS, fast_lines, json_numbers, load_step, open_run, parse

POOL = 32
FILE_NAME = "data_20260101_000000_000.jsonl"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def write_dump(folder: Path, P: int, G: int, T: int, seed: int = 0) -> dict:
    """Write the synthetic board dump; returns bytes, rows and seconds."""
    rng = random.Random(seed)  # a local generator (no global RNG)
    pool = []
    for k in range(POOL):
        n = rng.randint(max(1, T // 4), T)
        lp = [round(-rng.random() * 3, 4) for _ in range(n)]
        ref = [round(v - 0.1 + 0.2 * rng.random(), 4) for v in lp]
        ent = [round(rng.random() * 2, 4) for _ in range(n)]
        tokens = [f"t{(k * 7919 + t) % 50000}" for t in range(n)]
        pad = T - n
        zeros = ", ".join(["0.0"] * pad)
        tail = ", " + zeros if pad else ""
        arrays = {
            "response_tokens": json.dumps(tokens),
            "logprobs": "[" + ", ".join(map(str, lp)) + tail + "]",
            "log_probs2": "[" + ", ".join(map(str, lp)) + tail + "]",
            "ref_logprobs": "[" + ", ".join(map(str, ref)) + tail + "]",
            "old_log_probs2_entropy": "[" + ", ".join(map(str, ent)) + tail + "]",
            "new_response_mask": "["
            + ", ".join(["1"] * n)
            + (", " + ", ".join(["0"] * pad) if pad else "")
            + "]",
        }
        pool.append((n, ", ".join(f'"{key}": {value}' for key, value in arrays.items())))
    start = time.perf_counter()
    path = folder / FILE_NAME
    rows = 0
    with open(path, "w", encoding="utf-8") as handle:
        for p in range(P):
            prompt = json.dumps(f"<|im_start|>user\nQuestion {p}: what is {p} + {p}?<|im_end|>\n")
            for g in range(G):
                n, arrays = pool[(p * G + g) % POOL]
                reward = round(rng.gauss(0.0, 1.0), 4)
                token_rewards = (
                    "[" + ", ".join(["0.0"] * (n - 1) + [str(reward)] + ["0.0"] * (T - n)) + "]"
                )
                handle.write(
                    f'{{"step": 0, "prompt": {prompt}, "response": "answer {p} {g}", '
                    f'"reward": {reward}, {arrays}, "values": {token_rewards}, '
                    f'"token_rewards": {token_rewards}}}\n'
                )
                rows += 1
    return {"bytes": path.stat().st_size, "rows": rows, "seconds": time.perf_counter() - start}


def phase_read_peer(folder: Path) -> dict:
    """The reading floor: ``json.loads`` of every line, nothing kept; and the readers' orjson.

    ``seconds`` is ``json.loads`` (the floor of a stdlib reader), ``seconds_orjson`` the line
    parser the run readers use (``data.runs.json_numbers.loads``: orjson, json for NaN lines).
    """
    timings = {}
    count = 0
    for name, parse_line in (("seconds", json.loads), ("seconds_orjson", json_numbers.loads)):
        start = time.perf_counter()
        count = 0
        with open(folder / FILE_NAME, "rb") as handle:
            for line in handle:
                parse_line(line)
                count += 1
        timings[name] = time.perf_counter() - start
    timings["orjson_speedup"] = timings["seconds"] / max(timings["seconds_orjson"], 1e-9)
    return {"rows": count, **timings}


def phase_scan(folder: Path) -> dict:
    """``open_run`` of the dump (detect, validate, per-step summaries)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    run = open_run(folder)
    seconds = time.perf_counter() - start
    cpu = time.process_time() - start_cpu
    s = run.summaries[0]
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "steps": len(run.steps),
        "samples": s.samples,
        "prompts": s.num_prompts,
        "warnings": len(run.warnings),
        "kl_k3_mean": float(s.kl_k3.mean()),
    }


def _refuse_line(lines, raw):
    raise fast_lines.SlowLine


def phase_scan_plain(folder: Path) -> dict:
    """``open_run`` with the simdjson line path off (every line read by orjson)."""
    fast_lines.FastLines.object = _refuse_line  # this subprocess only
    return phase_scan(folder)


def phase_scan_checked(folder: Path) -> dict:
    """``open_run`` on orjson lines, every number list's elements type-checked first."""
    fast_lines.FastLines.object = _refuse_line  # this subprocess only
    parse._has_bools = lambda raw: True
    return phase_scan(folder)


def phase_pyarrow(folder: Path) -> dict:
    """The pyarrow JSON reader streaming the dump (one thread), nothing kept."""
    import pyarrow.json as pa_json

    start, start_cpu = time.perf_counter(), time.process_time()
    rows = 0
    options = pa_json.ReadOptions(use_threads=False, block_size=16 << 20)
    with pa_json.open_json(folder / FILE_NAME, read_options=options) as reader:
        for batch in reader:
            rows += batch.num_rows
    return {
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - start_cpu,
        "rows": rows,
    }


#: The reader when issue 22 was filed (``json.loads`` per line): ``--baseline-commit`` default.
ISSUE_COMMIT = "9bed76f^"
#: Polars' piece size: whole lines up to this many bytes per ``read_ndjson`` call.
POLARS_PIECE = 64 << 20

# Run in the extracted tree of an earlier commit (cwd and PYTHONPATH there): its own open_run.
_BASELINE_CHILD = """
import json, resource, sys, time
import roll_viz
from roll_viz.data.runs import open_run
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start, start_cpu = time.perf_counter(), time.process_time()
run = open_run(sys.argv[1])
seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
s = run.summaries[0]
print(json.dumps({
    "seconds": seconds, "cpu_seconds": cpu, "steps": len(run.steps), "samples": s.samples,
    "prompts": s.num_prompts, "warnings": len(run.warnings),
    "kl_k3_mean": float(s.kl_k3.mean()), "reader": roll_viz.__file__,
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "rss_at_start_mb": before,
}))
"""


def extract_commit(commit: str, dest: Path) -> str:
    """``git archive`` the ``roll_viz`` tree of ``commit`` into ``dest``; returns its short sha."""
    root = Path(__file__).resolve().parents[1]
    sha = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", f"{commit}^{{commit}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    tar_bytes = subprocess.run(
        ["git", "-C", str(root), "archive", sha, "roll_viz"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        tar.extractall(dest, filter="data")
    return sha


def run_baseline(folder: Path, tree: Path) -> dict:
    """``open_run`` of the dump by the reader in ``tree`` (a fresh interpreter run there)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code, out, err, pss = run_sampled(
        [sys.executable, "-c", _BASELINE_CHILD, str(folder)], cwd=tree, env=env
    )
    if code != 0:
        return {"error": err.strip()[-500:]}
    return {**json.loads(out.strip().splitlines()[-1]), "peak_pss_mb": pss}


#: Seconds between two samples of a phase's memory (PSS of its process and its children).
SAMPLE_SECONDS = 0.1


def tree_pss_mb(pid: int) -> float | None:
    """Proportional set size of a process and its descendants (shared pages split), or None.

    The sum is the memory the tree holds, pages shared between its processes counted once.
    """
    total, todo = 0, [pid]
    if not Path(f"/proc/{pid}/smaps_rollup").exists():
        return None
    while todo:
        proc = todo.pop()
        try:
            with open(f"/proc/{proc}/smaps_rollup") as handle:
                total += next(int(x.split()[1]) for x in handle if x.startswith("Pss:"))
            for task in os.listdir(f"/proc/{proc}/task"):
                with open(f"/proc/{proc}/task/{task}/children") as handle:
                    todo.extend(int(c) for c in handle.read().split())
        except (OSError, StopIteration, ValueError):
            continue  # the process ended between two reads
    return total / 1024


def run_sampled(cmd: list[str], **kwargs) -> tuple[int, str, str, float | None]:
    """Run ``cmd``; returns its code, stdout, stderr and the peak PSS of its process tree."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )
    peak = None
    while True:
        try:
            out, err = proc.communicate(timeout=SAMPLE_SECONDS)
            break
        except subprocess.TimeoutExpired:
            pss = tree_pss_mb(proc.pid)
            if pss is not None:
                peak = max(peak or 0.0, pss)
    return proc.returncode, out, err, peak


def _line_pieces(path: Path, size: int):
    """Whole lines of ``path`` in pieces of about ``size`` bytes."""
    with open(path, "rb") as handle:
        rest = b""
        while True:
            block = handle.read(size)
            if not block:
                if rest:
                    yield rest
                return
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            rest = block[cut:]
            yield block[:cut]


def phase_polars(folder: Path) -> dict:
    """``polars.read_ndjson`` of the dump in line-aligned pieces (polars' threads), nothing kept."""
    try:
        import polars as pl
    except ImportError:
        return {"skipped": "polars is not installed (a benchmark peer only)"}
    start, start_cpu = time.perf_counter(), time.process_time()
    rows = 0
    for piece in _line_pieces(folder / FILE_NAME, POLARS_PIECE):
        rows += pl.read_ndjson(io.BytesIO(piece)).height
    return {
        "seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() - start_cpu,
        "rows": rows,
        "threads": pl.thread_pool_size(),
        "version": pl.__version__,
    }


def phase_load(folder: Path) -> dict:
    """``open_run`` then ``load_step`` of its step (timed alone)."""
    run = open_run(folder)
    rss_after_scan = _rss_mb()
    start = time.perf_counter()
    step = load_step(run, run.steps[0])
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "kept_prompts": len(step.prompts),
        "total_prompts": step.total_prompts,
        "kept_samples": int(step.scores.numel()),
        "token_positions": int(step.response_mask.sum()),
        "max_step_tokens": MAX_STEP_TOKENS,
        "rss_after_scan_mb": rss_after_scan,
    }


def make_batch(P: int, G: int, T: int, seed: int = 0):
    """A P x G x T float64 Batch with lengths in [T/4, T] (seeded torch.Generator)."""
    gen = torch.Generator().manual_seed(seed)
    B = P * G
    lengths = torch.randint(max(1, T // 4), T + 1, (B,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.float64)
    lp = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 3 * mask
    ref = (lp + (torch.rand(B, T, generator=gen, dtype=torch.float64) - 0.5) * 0.2) * mask
    return Batch(
        scores=torch.randn(B, generator=gen, dtype=torch.float64),
        response_mask=mask,
        group_ids=torch.arange(B) // G,
        group_labels=tuple(range(P)),
        logprobs=lp,
        ref_logprobs=ref,
    )


BETA = 0.05
CONFIG = {"adv_estimator": "grpo", "add_token_level_kl": True, "init_kl_coef": BETA}


def loop_peer(scores: list, mask: list, lp: list, ref: list, G: int) -> list:
    """Framework-style per-sample loop: ROLL GRPO with k1 KL in the reward (plain floats).

    Group mean and unbiased std (+1e-6), normalised reward on the last valid token, minus
    beta * (logp - ref) on every token, reward-to-go with gamma 1.
    """
    out = []
    for b in range(len(scores)):
        start = (b // G) * G
        group = scores[start : start + G]
        mu = sum(group) / G
        sd = math.sqrt(sum((x - mu) ** 2 for x in group) / (G - 1))
        reward = (scores[b] - mu) / (sd + 1e-6)
        row_mask = mask[b]
        last = max(t for t in range(len(row_mask)) if row_mask[t])
        tok = []
        for t in range(len(row_mask)):
            if not row_mask[t]:
                tok.append(0.0)
                continue
            r = -BETA * (lp[b][t] - ref[b][t])
            if t == last:
                r += reward
            tok.append(r)
        adv, running = [0.0] * len(tok), 0.0
        for t in reversed(range(len(tok))):
            running = tok[t] + running
            adv[t] = running * row_mask[t]
        out.append(adv)
    return out


def phase_pipeline(P: int, G: int, T: int, loop_prompts: int) -> dict:
    """``pipeline.run`` on P x G x T beside the per-sample loop on a subset, scaled by P."""
    torch.set_num_threads(1)
    batch = make_batch(P, G, T)
    start = time.perf_counter()
    trace = pipeline.run(batch, "roll", CONFIG)
    seconds = time.perf_counter() - start
    rss = _rss_mb()
    n = loop_prompts * G
    sub = make_batch(loop_prompts, G, T, seed=1)
    vec = pipeline.run(sub, "roll", CONFIG).advantages
    start = time.perf_counter()
    loop = loop_peer(
        sub.scores.tolist(),
        sub.response_mask.tolist(),
        sub.logprobs.tolist(),
        sub.ref_logprobs.tolist(),
        G,
    )
    loop_seconds = time.perf_counter() - start
    diff = float((torch.tensor(loop, dtype=torch.float64) - vec).abs().max())
    scaled = loop_seconds * (P / loop_prompts)
    del trace
    return {
        "seconds": seconds,
        "peak_rss_after_run_mb": rss,
        "loop_subset": f"{loop_prompts}x{G}x{T}",
        "loop_seconds_subset": loop_seconds,
        "loop_seconds_scaled": scaled,
        "loop_scaled_by": P / loop_prompts,
        "speedup": scaled / seconds,
        "max_abs_diff_subset": diff,
        "rows_checked": n,
    }


def _child(phase: str, args: argparse.Namespace) -> dict:
    folder = Path(args.dir)
    if phase == "write":
        return write_dump(folder, args.prompts, args.group, args.tokens)
    if phase == "read_peer":
        return phase_read_peer(folder)
    if phase == "scan":
        return phase_scan(folder)
    if phase == "scan_plain":
        return phase_scan_plain(folder)
    if phase == "scan_checked":
        return phase_scan_checked(folder)
    if phase == "pyarrow":
        return phase_pyarrow(folder)
    if phase == "polars":
        return phase_polars(folder)
    if phase == "load_step":
        return phase_load(folder)
    if phase == "pipeline":
        return phase_pipeline(args.prompts, args.group, args.tokens, args.loop_prompts)
    raise ValueError(f"unknown phase {phase!r}")


PHASES = (
    "write",
    "read_peer",
    "scan",
    "scan_plain",
    "scan_checked",
    "pyarrow",
    "load_step",
    "pipeline",
)
#: The readers compared side by side; ``--rounds N`` runs them N times, interleaved.
READERS = ("baseline", "scan", "scan_plain", "scan_checked", "pyarrow", "polars")


def main(argv: list[str]) -> int:
    """Run every phase in a subprocess and print one JSON line each."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.runs")
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--loop-prompts", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--keep", default=None, help="write the dump to this folder and keep it")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument(
        "--rounds", type=int, default=1, help="run the reader phases this many times, interleaved"
    )
    parser.add_argument(
        "--baseline-commit",
        action="append",
        default=None,
        help=f"the baseline phase's reader at this commit (repeatable; default {ISSUE_COMMIT})",
    )
    parser.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.group, args.tokens, args.loop_prompts = 4, 4, 64, 1
    if args.phase is not None:
        before = _rss_mb()
        record = _child(args.phase, args)
        _emit({"phase": args.phase, **record, "peak_rss_mb": _rss_mb(), "rss_at_start_mb": before})
        return 0
    scale = f"{args.prompts}x{args.group}x{args.tokens}"
    phases = args.phases.split(",")
    readers = [p for p in phases if p in READERS]
    if args.rounds > 1 and readers:
        at = phases.index(readers[0])
        rest = [p for p in phases if p not in READERS]
        phases = rest[:at] + readers * args.rounds + rest[at:]
    _emit({"name": "context", **context()})
    with (
        tempfile.TemporaryDirectory(prefix="rollviz-bench-runs-") as tmp,
        tempfile.TemporaryDirectory(prefix="rollviz-bench-trees-") as trees,
    ):
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        baselines = []
        if "baseline" in phases:
            for commit in args.baseline_commit or [ISSUE_COMMIT]:
                tree = Path(trees) / f"tree{len(baselines)}"
                baselines.append((commit, extract_commit(commit, tree), tree))
        for phase in phases:
            if phase == "baseline":
                for commit, sha, tree in baselines:
                    record = run_baseline(folder, tree)
                    _emit({
                        "name": "baseline", "commit": f"{commit} ({sha})", "scale": scale,
                        **record, "load1": os.getloadavg()[0],
                    })  # fmt: skip
                continue
            cmd = [
                sys.executable, "-m", "benchmarks.runs", "--phase", phase, "--dir",
                str(folder), "--prompts", str(args.prompts), "--group", str(args.group),
                "--tokens", str(args.tokens), "--loop-prompts", str(args.loop_prompts),
            ]  # fmt: skip
            code, out, err, pss = run_sampled(cmd, env=os.environ.copy())
            if code != 0:
                _emit({"name": phase, "scale": scale, "error": err.strip()[-500:]})
                return 1
            record = json.loads(out.strip().splitlines()[-1])
            record.pop("phase")
            _emit({
                "name": phase, "scale": scale, **record, "peak_pss_mb": pss,
                "load1": os.getloadavg()[0],
            })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
