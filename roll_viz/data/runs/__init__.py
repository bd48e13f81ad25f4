"""Readers of real training-run dumps, one module per format, and exporters.

Public API::

    from roll_viz.data.runs import open_run, load_step, RunFormatError
    run = open_run("path/to/dump")           # detect + scan: per-step summaries, bounded memory
    run.format, run.steps, run.missing       # "rllb", (0, 1, ...), ("advantages", ...)
    step = load_step(run, run.steps[-1])     # RunStep: tensors for one step
    batch = step.to_batch()                  # calculator input (roll_viz.core.records.Batch)
    rollout = step.to_rollout()              # token-level Rollout (needs tokens + both log-probs)

Formats: ``rllb`` (RL Logging Board / ROLL save_logging_board_dir), ``trl`` (completions
parquet), ``verl`` (rollout_data_dir, V1 uid or legacy), ``roll-dump`` (ROLL rollout_dump_dir),
``unipo`` / ``unipo-jsonl`` (UNIPO canonical), ``plain`` / ``plain-csv`` (prompt, response,
reward[, group, step]), ``rollviz`` (roll-viz's own training runs, ``roll_viz.lm.runfile``).
Exporters (UNIPO JSONL, RL Logging Board JSONL, the calculator's compute input) are in
``roll_viz.data.runs.export``. Every problem names the file, line and field (``RunFormatError``);
per-line problems are collected as warnings and those rows skipped. Nothing from a file is
executed (no pickle, no eval). Caps are module constants in ``roll_viz.data.runs.parse``.

Modules: ``parse`` (caps, errors, safe getters, JSONL/JSON streaming), ``fast_lines`` (the
board reader's simdjson line path, plain lines only), ``run_records``
(``Row``, ``StepSummary``, ``RunStep``), ``detect`` (the format registry and ``detect``),
``scan`` (``open_run``, ``load_step``), ``jail`` (an allowed folder nothing can leave),
``uploads`` (the per-server upload folder with a quota), and one module per format (``rllb``,
``trl_completions``, ``verl_dump``, ``roll_dump``, ``unipo``, ``plain``, ``rollviz``).
"""

from roll_viz.data.runs.detect import FORMATS, default_dialect, detect
from roll_viz.data.runs.parse import (
    MAX_FILES,
    MAX_JSON_BYTES,
    MAX_LINE_BYTES,
    MAX_ROWS,
    MAX_STEP_TOKENS,
    MAX_TOKENS_PER_ROW,
    MAX_WARNINGS,
    RunFormatError,
)
from roll_viz.data.runs.run_records import RunStep, StepSummary
from roll_viz.data.runs.scan import EXPECTED_FIELDS, Run, load_step, open_run

__all__ = [
    "EXPECTED_FIELDS",
    "FORMATS",
    "MAX_FILES",
    "MAX_JSON_BYTES",
    "MAX_LINE_BYTES",
    "MAX_ROWS",
    "MAX_STEP_TOKENS",
    "MAX_TOKENS_PER_ROW",
    "MAX_WARNINGS",
    "Run",
    "RunFormatError",
    "RunStep",
    "StepSummary",
    "default_dialect",
    "detect",
    "load_step",
    "open_run",
]
