"""Shared paths and small writers for the run-reader tests."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def fixture(name: str) -> Path:
    """A committed fixture under tests/fixtures/runs."""
    return FIXTURES / name


def write_jsonl(path: Path, rows: list) -> Path:
    """Write rows (dicts, or raw strings written as they are) one per line."""
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")
    return path
