"""verl ``trainer.rollout_data_dir`` JSONL: ``<dir>/<global_step>.jsonl``, one object per response.

Keys (run-formats.md 3.1): ``input``, ``output``, ``gts``, ``score``, ``step``, plus every
``reward_extra_infos_dict`` list of length n (kept as extra numeric columns when numeric).

- **V1 trainer** (default) adds ``uid`` = ``"{sample}_{rollout}_{output}"``; the group id is
  ``uid.rsplit("_", 2)[0]``;
- **legacy trainer** has no ``uid`` and ``balance_batch`` reorders rows: groups are identical
  ``input`` text;
- ``score`` is the pre-KL response score; there are no token ids, log-probs or advantages (the
  app re-derives advantages from ``score`` and the groups).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roll_viz.data.runs.parse import (
    Problems,
    RunFormatError,
    get_int,
    get_number,
    get_text,
    number_columns,
    require_object,
    rows_from_jsonl,
)
from roll_viz.data.runs.run_records import Row

FORMAT = "verl"
LABEL = "verl rollout_data_dir JSONL"
SCORE_KIND = "raw score (verl 'score': sum of token-level scores, before KL)"
NOTES = (
    "no token ids, log-probs or advantages: advantages are re-derived from score and groups",
    "texts are decoded without special tokens",
)
NOTE_V1 = "groups: uid.rsplit('_', 2)[0] (verl V1 trainer)"
NOTE_LEGACY = "groups: identical input text (legacy trainer, no uid; balance_batch reorders rows)"
_BASE_KEYS = ("input", "output", "gts", "score", "step", "uid", "request_id")


def matches(first: Any) -> bool:
    """A first line with verl's base keys."""
    return isinstance(first, dict) and all(k in first for k in ("input", "output", "score"))


def _step_from_name(file: str) -> int | None:
    stem = Path(file).stem
    return int(stem) if stem.isdigit() else None


def convert(value: Any, file: str, line: int) -> Row:
    """One verl line -> Row."""
    obj = require_object(value, file, line)
    default = _step_from_name(file)
    step = get_int(obj, "step", file, line, default=default)
    group = None
    if "uid" in obj:
        uid = get_text(obj, "uid", file, line)
        parts = uid.rsplit("_", 2)
        if len(parts) != 3:
            raise RunFormatError(
                file, line, "uid", f"expected '<sample>_<rollout>_<output>', got {uid!r:.60}"
            )
        group = parts[0]
    columns = number_columns(obj, _BASE_KEYS, file, line)
    return Row(
        step=step,
        prompt=get_text(obj, "input", file, line),
        response=get_text(obj, "output", file, line),
        score=get_number(obj, "score", file, line),
        group=group,
        columns=columns,
    )


def rows(files: list[Path], problems: Problems, locations=None):
    """Rows of verl files (see ``base.rows_from_jsonl``)."""
    return rows_from_jsonl(files, problems, convert, locations)


def scan_notes(present: set[str]) -> tuple[str, ...]:
    """How the groups were formed, from the fields the scan found (the registry's hook)."""
    return (NOTE_V1 if "group_ids" in present else NOTE_LEGACY,)
