"""TRL ``GRPOTrainer(log_completions=True)``: ``completions/completions_<step:05d>.parquet``.

Columns (run-formats.md 3.4): ``step``, ``prompt``, ``completion``, one column per reward function
(raw, unweighted reward), any user ``log_extra`` columns, ``advantage`` (the final advantage).
Conventions an importer must know:

- there is no group id: **consecutive** rows with equal ``prompt`` are one group (TRL gathers
  ``num_generations`` completions per prompt in order); the same prompt appearing again later
  starts a new group;
- the score is the sum of the reward-function columns with weight 1 (``reward_weights`` is not
  in the file; say so when comparing). Every numeric column except ``step`` and ``advantage`` is
  taken as a reward function unless ``log_extra`` columns are named; NaN rewards (a function
  returned None) are skipped in the sum as TRL's ``nansum`` does;
- texts are decoded without special tokens; there are no token ids or log-probs.

Read with pyarrow in record batches (bounded memory); nothing is executed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from roll_viz.data.runs.parse import Problems, RunFormatError, step_number
from roll_viz.data.runs.run_records import Row

FORMAT = "trl"
LABEL = "TRL completions parquet (GRPOTrainer log_completions)"
SCORE_KIND = "raw score (sum of the reward-function columns, weight 1)"
NOTES = (
    "groups: consecutive rows with the same prompt (TRL writes no group id)",
    "score = sum of the reward-function columns with weight 1 (reward_weights is not in the file)",
    "no token ids, log-probs or token rewards (texts decoded without special tokens)",
)
REQUIRED = ("prompt", "completion")
_NOT_REWARDS = ("step", "advantage", "prompt", "completion")
_BATCH_ROWS = 4096


def matches_columns(names: list[str]) -> bool:
    """Whether a parquet schema looks like TRL's completions table."""
    return all(name in names for name in REQUIRED)


def parquet_file(path: Path) -> Any:
    """The opened parquet file (schema and row groups; RunFormatError when unreadable)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several types for a corrupt file
        raise RunFormatError(path, None, None, f"not a readable parquet file: {err}") from None


def reward_columns(path: Path) -> list[str]:
    """Numeric columns taken as reward functions (everything numeric but step/advantage)."""
    import pyarrow as pa

    schema = parquet_file(path).schema_arrow
    out = []
    for column in schema:
        if column.name in _NOT_REWARDS:
            continue
        t = column.type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            out.append(column.name)
    return out


def _step_from_name(path: Path) -> int | None:
    stem = path.stem
    digits = stem.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else None


def rows(files: list[Path], problems: Problems, locations=None):
    """Rows of TRL parquet files (``locations`` is ignored: the step's files are read)."""
    for path in files:
        if locations is not None and str(path) not in locations:
            continue
        yield from _file_rows(path, problems)


def _file_rows(path: Path, problems: Problems):
    handle = parquet_file(path)
    names = handle.schema_arrow.names
    for key in REQUIRED:
        if key not in names:
            raise RunFormatError(path, None, key, "missing column")
    rewards = reward_columns(path)
    if not rewards:
        raise RunFormatError(path, None, "reward", "no numeric reward-function column")
    wanted = [n for n in ("step", "prompt", "completion", "advantage") if n in names] + rewards
    default_step = _step_from_name(path)
    name = str(path)
    line = 0
    previous_prompt = None
    group = -1
    for batch in handle.iter_batches(batch_size=_BATCH_ROWS, columns=wanted):
        data = batch.to_pydict()
        for i in range(batch.num_rows):
            line += 1
            try:
                row = _row(data, i, name, line, rewards, default_step)
            except RunFormatError as err:
                problems.add(err)
                continue
            if row.prompt != previous_prompt:
                group += 1
                previous_prompt = row.prompt
            row.group = f"g{group}"
            row.file, row.line = name, line
            yield row


def _row(data: dict, i: int, file: str, line: int, rewards: list[str], step: int | None) -> Row:
    prompt, completion = data["prompt"][i], data["completion"][i]
    for key, value in (("prompt", prompt), ("completion", completion)):
        if not isinstance(value, str):
            raise RunFormatError(file, line, key, f"expected a string, got {value!r:.40}")
    if "step" in data and data["step"][i] is not None:
        step = step_number(data["step"][i], file, line)
    if step is None:
        raise RunFormatError(file, line, "step", "missing (no step column and none in the name)")
    columns = {}
    for key in rewards:
        value = data[key][i]
        columns[key] = math.nan if value is None else float(value)
    finite = [v for v in columns.values() if not math.isnan(v)]
    if not finite:
        raise RunFormatError(file, line, rewards[0], "every reward function returned None")
    if any(math.isinf(v) for v in finite):
        raise RunFormatError(file, line, rewards[0], "infinite reward")
    advantage = None
    if "advantage" in data:
        value = data["advantage"][i]
        if value is not None:
            advantage = float(value)
            if not math.isfinite(advantage):
                raise RunFormatError(file, line, "advantage", f"non-finite number {advantage}")
    return Row(
        step=step,
        prompt=prompt,
        response=completion,
        score=sum(finite),
        advantage=advantage,
        columns=columns,
    )
