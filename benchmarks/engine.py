"""The engine benchmark: N students sampling the lecture request at once, in-process vs vLLM.

``python -m benchmarks --engine --students 1 3 6`` (or ``python -m benchmarks.engine``)
prints one JSON line per measurement, side by side in one run:

- ``engine_conformance``: ``lm.engine_check.conformance`` of the server against the in-process
  model (max |delta log p|, base and adapter, sampler vs scoring);
- per N of ``--students``: ``engine_students`` lines for ``path`` = "in-process" (N threads
  calling ``rollout.shared_sample``: they queue on the model's lock) and ``path`` = "engine"
  (N threads calling ``engine_rollout.engine_sample``: the server batches them), each student
  sampling the lecture request (2 prompts x 8 answers x 64 tokens, steered, so both the policy
  and the reference score) with its own seed. ``per_student_s`` is each student's wall time
  from the common start, ``total_s`` the time until the last one finished, ``tokens`` the
  answers' tokens (natural EOS on both paths); ``engine_vs_in_process`` puts the totals side by
  side;
- ``engine_identical``: the largest N of students sending the SAME request to the engine path
  share one run (``shared``: every student got the same Rollout object).

Without ``--url`` the benchmark starts its own server (``lm.engine_server``, needs
``.engine-venv``: ``make engine-venv``) and stops it by PID at the end; ``--url`` uses a running
one. Timings are printed, never asserted; every line carries ``load1``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from roll_viz.lm import engine_rollout, engine_server
from roll_viz.lm.engine import EngineError
from roll_viz.lm.engine_check import conformance
from roll_viz.lm.engine_http import HttpEngine
from roll_viz.lm.engine_sync import AdapterSync
from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.rollout import shared_sample

LECTURE_PROMPTS = ("Explain quantum entanglement in one sentence.", "Write a haiku about the sea.")
LECTURE = SamplingConfig(
    prompts=LECTURE_PROMPTS, group_size=8, max_new_tokens=64, policy_mode="steered", seed=0
)


def _emit(line: dict) -> None:
    line["load1"] = round(os.getloadavg()[0], 2)
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def students_at_once(work: Callable[[int], Any], students: int) -> tuple[list[float], list[Any]]:
    """Run ``work(i)`` for i < N in N threads started together; (seconds each, results)."""
    seconds, results, errors = [0.0] * students, [None] * students, []
    gate = threading.Barrier(students + 1)

    def one(i: int) -> None:
        gate.wait()
        start = time.perf_counter()
        try:
            results[i] = work(i)
        except Exception as err:  # reported in the line
            errors.append(f"{type(err).__name__}: {err}")
        seconds[i] = time.perf_counter() - start

    threads = [threading.Thread(target=one, args=(i,)) for i in range(students)]
    for thread in threads:
        thread.start()
    gate.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise EngineError("; ".join(errors[:3]))
    return seconds, results


def _tokens(rollouts: list[Any]) -> int:
    return int(sum(float(r.response_mask.sum()) for r in rollouts))


def bench_students(bundle: Any, engine: HttpEngine, counts: list[int]) -> None:
    """The ``engine_students`` and ``engine_vs_in_process`` lines for each N."""
    for students in counts:
        totals = {}
        for path in ("in-process", "engine"):

            def work(i: int, path: str = path) -> Any:
                cfg = replace(LECTURE, seed=1000 + i)
                if path == "in-process":
                    return shared_sample(bundle, cfg)
                return engine_rollout.engine_sample(bundle, engine, cfg)

            start = time.perf_counter()
            seconds, rollouts = students_at_once(work, students)
            total = time.perf_counter() - start
            totals[path] = total
            _emit({
                "what": "engine_students", "path": path, "students": students,
                "request": "2x8x64 steered", "per_student_s": [round(s, 2) for s in seconds],
                "mean_student_s": round(sum(seconds) / students, 2), "total_s": round(total, 2),
                "tokens": _tokens(rollouts),
            })  # fmt: skip
        _emit({
            "what": "engine_vs_in_process", "students": students,
            "in_process_total_s": round(totals["in-process"], 2),
            "engine_total_s": round(totals["engine"], 2),
            "speedup": round(totals["in-process"] / totals["engine"], 2),
        })  # fmt: skip


def bench_identical(bundle: Any, engine: HttpEngine, students: int) -> None:
    """N students sending the same request on the engine path: one shared run."""
    seconds, rollouts = students_at_once(
        lambda i: engine_rollout.shared_engine_sample(bundle, engine, LECTURE), students
    )
    _emit({
        "what": "engine_identical", "students": students,
        "per_student_s": [round(s, 2) for s in seconds],
        "shared": all(r is rollouts[0] for r in rollouts),
    })  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Print the engine benchmark's JSON lines (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks --engine")
    parser.add_argument("--students", type=int, nargs="+", default=[1, 3, 6])
    parser.add_argument("--url", default=None, help="a running server (default: start one)")
    parser.add_argument("--model", default="smollm2", help="the app's spec the server serves")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    server = None
    try:
        if args.url:
            engine = HttpEngine(args.url)
        else:
            server = engine_server.start()
            _emit({"what": "engine_server_start", "ready_s": round(server.ready_s, 1),
                   "pid": server.pid})  # fmt: skip
            engine = HttpEngine(server.url)
        engine.probe()
        bundle = load_models(args.model, dtype="float32")
        result = conformance(bundle, engine, AdapterSync(engine))
        _emit({
            "what": "engine_conformance", "passed": result.passed,
            "max_abs_dlogp_base": result.base, "max_abs_dlogp_adapter": result.adapter,
            "max_abs_dlogp_sampler_vs_scoring": result.sampler, "tokens": result.tokens,
            "summary": result.summary(),
        })  # fmt: skip
        bench_students(bundle, engine, args.students)
        bench_identical(bundle, engine, max(args.students))
    except EngineError as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    finally:
        if server is not None:
            server.stop()
    _emit({"what": "engine_bench_done", "seconds": round(time.perf_counter() - started, 1)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
