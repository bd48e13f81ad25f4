"""``python -m roll_viz runs inspect|export``: look into a training-run dump, convert one step.

``runs inspect PATH`` prints one JSON object: the detected format, the steps, prompts and samples
per step, which roll-viz fields the file has and which it lacks, the conventions applied and the
per-line problems (rows skipped). ``runs export PATH [--step K] --to unipo|rllb|compute
[--out FILE] [--framework F]`` writes one step (default: the last) in another format to stdout
or ``--out``: UNIPO JSONL, RL Logging Board JSONL, or the calculator's input (``compute``; the
dialect defaults to the format's framework, e.g. trl for TRL, with grpo for the others).

A bad file exits with status 2 and one line on stderr naming file, line and field. Per-line
problems are warnings (listed by inspect); ``--strict`` turns the first one into an error.
Nothing read from a file is executed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from roll_viz.core.pipeline import FRAMEWORKS
from roll_viz.data.runs import Run, RunFormatError, default_dialect, load_step, open_run
from roll_viz.data.runs.export import step_to_compute, step_to_rllb, step_to_unipo

USAGE = """usage: python -m roll_viz runs inspect PATH [--metrics FILE] [--strict]
       python -m roll_viz runs export PATH [--step K] --to unipo|rllb|compute [--out FILE]
           [--framework roll|verl|openrlhf|trl] [--metrics FILE] [--strict]"""
#: Steps listed one by one in ``inspect`` (the rest are counted).
MAX_LISTED_STEPS = 1000


def inspect_dict(run: Run) -> dict[str, Any]:
    """The JSON object ``runs inspect`` prints."""
    per_step = []
    for s in run.summaries[:MAX_LISTED_STEPS]:
        sizes = s.group_ids.bincount().tolist() if s.samples else []
        per_step.append(
            {
                "step": s.step,
                "prompts": s.num_prompts,
                "samples": s.samples,
                "samples_per_prompt": {"min": min(sizes), "max": max(sizes)} if sizes else None,
                "reward_mean": float(s.scores.mean()),
                "has_advantages": s.advantages is not None,
                "has_kl": s.kl_k1 is not None,
                "metrics": len(s.metrics),
            }
        )
    return {
        "path": run.path,
        "format": run.format,
        "label": run.label,
        "files": len(run.files),
        "first_files": list(run.files[:5]),
        "score_kind": run.score_kind,
        "num_steps": len(run.summaries),
        "steps": list(run.steps[:MAX_LISTED_STEPS]),
        "per_step": per_step,
        "length_unit": run.summaries[0].length_unit if run.summaries else None,
        "present": list(run.present),
        "missing": list(run.missing),
        "notes": list(run.notes),
        "header": dict(run.header),
        "warnings": [w.as_dict() for w in run.warnings],
        "warnings_dropped": run.warnings_dropped,
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m roll_viz runs",
        epilog=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="describe a dump as one JSON object")
    inspect.add_argument("path")
    inspect.add_argument("--strict", action="store_true", help="a per-line problem is an error")
    inspect.add_argument("--metrics", default=None, help="trainer_state.json or verl metrics JSONL")
    export = sub.add_parser("export", help="write one step in another format")
    export.add_argument("path")
    export.add_argument("--step", type=int, default=None, help="step to export (default: last)")
    export.add_argument("--to", required=True, choices=("unipo", "rllb", "compute"))
    export.add_argument("--out", default=None, help="output file (default: stdout)")
    export.add_argument("--framework", default=None, choices=FRAMEWORKS, help="compute dialect")
    export.add_argument("--strict", action="store_true", help="a per-line problem is an error")
    export.add_argument("--metrics", default=None, help="trainer_state.json or verl metrics JSONL")
    return parser


def main(argv: list[str]) -> int:
    """CLI entry; returns the exit code (2 for bad input, naming file, line and field)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2, message on stderr)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        run = open_run(args.path, metrics_path=args.metrics)
        if args.strict and run.warnings:
            raise run.warnings[0]
        if args.command == "inspect":
            text = json.dumps(inspect_dict(run), ensure_ascii=False)
        else:
            text = _export(run, args)
    except RunFormatError as err:
        sys.stderr.write(f"error: {err.one_line()}\n")
        return 2
    except (KeyError, ValueError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        sys.stderr.write(f"error: {' '.join(str(message).split())}\n")
        return 2
    except (OverflowError, RecursionError) as err:  # a reader that let one through
        kind = "a number too large" if isinstance(err, OverflowError) else "nesting too deep"
        sys.stderr.write(f"error: {args.path}: {kind} in the file ({type(err).__name__})\n")
        return 2
    if args.command == "export" and args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except OSError as err:
            sys.stderr.write(f"error: {args.out}: {err.strerror or err}\n")
            return 2
        return 0
    sys.stdout.write(text + "\n")
    return 0


def _export(run: Run, args: argparse.Namespace) -> str:
    step_no = run.steps[-1] if args.step is None else args.step
    step = load_step(run, step_no)
    if args.to == "unipo":
        return "\n".join(step_to_unipo(step, dict(run.header)))
    if args.to == "rllb":
        return "\n".join(step_to_rllb(step))
    framework, config = default_dialect(run.format)
    if args.framework is not None and args.framework != framework:
        framework, config = args.framework, {}
    return json.dumps(step_to_compute(step, framework, config), allow_nan=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
