"""Which format a run is: the format registry and ``detect(path)``.

``FORMATS`` is the literal registry, one ``Format`` per readable format: its reader (from its
own module: ``rllb``, ``trl_completions``, ``verl_dump``, ``roll_dump``, ``unipo``, ``plain``,
``rollviz``), what its score means, its notes and its hooks (``header``, ``scan_notes``,
``reward_columns``), so the scan asks the registry instead of branching on format names.
``detect`` picks the format of a file (parquet magic, CSV header, the first JSON line against
each format's matcher, most specific first, then the whole JSON document) or of a folder of
per-step files, and finds the metrics side files next to it. ``default_dialect`` says which
framework's advantage a format's files were made with.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roll_viz.core.pipeline import dialects
from roll_viz.data.runs import (
    atif,
    plain,
    rllb,
    roll_dump,
    rollviz,
    trl_completions,
    unipo,
    verl_dump,
)
from roll_viz.data.runs.jail import RunsJail
from roll_viz.data.runs.json_document import read_json_document
from roll_viz.data.runs.parse import (
    MAX_FILES,
    MAX_NUL_RUNS,
    SNIFF_BYTES,
    DocumentTooLarge,
    Problems,
    RunFormatError,
    iter_jsonl,
)
from roll_viz.data.runs.run_records import Row

_NUL_RUNS = re.compile(rb"\x00+")


def sniff_text(path: Path) -> bytes:
    """The first bytes of a file; RunFormatError for an empty or binary (non-UTF-8) file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as err:
        raise RunFormatError(path, None, None, f"cannot read: {err.strerror or err}") from None
    if not head.strip(b" \t\r\n\x00"):
        raise RunFormatError(path, None, None, "empty file")
    # A crash-truncated text file holds one or a few zero-filled stretches (its lines there are
    # skipped as problems); a binary file has NUL bytes scattered all over.
    if len(_NUL_RUNS.findall(head)) > MAX_NUL_RUNS:
        raise RunFormatError(path, None, None, "binary file (NUL bytes), not a text dump")
    text = head.replace(b"\x00", b"").decode("utf-8", errors="replace")
    if text.count("\ufffd") > max(4, len(text) // 10):  # a stray bad byte is a line problem
        raise RunFormatError(path, None, None, "binary file (mostly not UTF-8 text)")
    return head


#: The dialect (framework, config) whose advantage matches each format's framework by default:
#: the framework whose record lists the format (``RUN_FORMATS``), with its GRPO recipe.
DEFAULT_DIALECT: dict[str, tuple[str, dict[str, Any]]] = {
    fmt: (name, dialect.RECIPES["grpo"])
    for name, dialect in dialects.DIALECTS.items()
    for fmt in dialect.RUN_FORMATS
}
#: Fallback dialect for formats from no particular framework: the app's default flow.
FALLBACK_DIALECT: tuple[str, dict[str, Any]] = (
    dialects.DEFAULT_FRAMEWORK,
    dialects.get(dialects.DEFAULT_FRAMEWORK).RECIPES["grpo"],
)


def default_dialect(fmt: str) -> tuple[str, dict[str, Any]]:
    """(framework, config) used to recompute advantages for a format (a fresh dict)."""
    framework, config = DEFAULT_DIALECT.get(fmt, FALLBACK_DIALECT)
    return framework, dict(config)


def no_header(path: Path) -> tuple:
    """A format without run-level metadata."""
    return ()


def no_scan_notes(present: set[str]) -> tuple[str, ...]:
    """A format whose notes do not depend on the fields found."""
    return ()


@dataclass(frozen=True)
class Format:
    """One readable format: its name, label, reader, what its score means, and its hooks.

    Attributes:
        name: reader name (``Run.format``).
        label: human name of the format.
        kind: "jsonl", "json", "parquet" or "csv".
        rows: ``rows(files, problems, locations=None)`` -> the files' Rows in file order.
        score_kind: what the file's score is (raw score, normalised reward, ...).
        notes: the format's conventions, always shown.
        header: run-level metadata of the first file as sorted (key, value) pairs.
        scan_notes: notes that depend on the fields the scan found.
        reward_columns: the extra per-sample columns are the reward functions' scores.
    """

    name: str
    label: str
    kind: str
    rows: Callable[..., Iterator[Row]]
    score_kind: str
    notes: tuple[str, ...]
    header: Callable[[Path], tuple] = no_header
    scan_notes: Callable[[set[str]], tuple[str, ...]] = no_scan_notes
    reward_columns: bool = False


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(rllb.FORMAT, rllb.LABEL, "jsonl", rllb.rows, rllb.SCORE_KIND, rllb.NOTES),
        Format(
            trl_completions.FORMAT,
            trl_completions.LABEL,
            "parquet",
            trl_completions.rows,
            trl_completions.SCORE_KIND,
            trl_completions.NOTES,
            reward_columns=True,
        ),
        Format(
            verl_dump.FORMAT,
            verl_dump.LABEL,
            "jsonl",
            verl_dump.rows,
            verl_dump.SCORE_KIND,
            verl_dump.NOTES,
            scan_notes=verl_dump.scan_notes,
        ),
        Format(
            roll_dump.FORMAT,
            roll_dump.LABEL,
            "jsonl",
            roll_dump.rows,
            roll_dump.SCORE_KIND,
            roll_dump.NOTES,
        ),
        Format(
            unipo.FORMAT,
            unipo.LABEL,
            "json",
            unipo.rows_document,
            unipo.SCORE_KIND,
            unipo.NOTES,
            header=unipo.header_pairs,
        ),
        Format(
            unipo.FORMAT_JSONL,
            unipo.LABEL_JSONL,
            "jsonl",
            unipo.rows_jsonl,
            unipo.SCORE_KIND,
            unipo.NOTES,
            header=unipo.header_pairs_jsonl,
        ),
        Format(plain.FORMAT, plain.LABEL, "jsonl", plain.rows, plain.SCORE_KIND, plain.NOTES),
        Format(
            plain.FORMAT_CSV, plain.LABEL_CSV, "csv", plain.rows_csv, plain.SCORE_KIND, plain.NOTES
        ),
        Format(
            rollviz.FORMAT,
            rollviz.LABEL,
            "jsonl",
            rollviz.rows,
            rollviz.SCORE_KIND,
            rollviz.NOTES,
            header=rollviz.header,
        ),
    )
}

# first-line matchers for JSONL files, most specific first
_JSONL_MATCHERS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    (rollviz.FORMAT, rollviz.matches),
    (unipo.FORMAT_JSONL, unipo.matches_jsonl),
    (roll_dump.FORMAT, roll_dump.matches),
    (rllb.FORMAT, rllb.matches),
    (verl_dump.FORMAT, verl_dump.matches),
    (plain.FORMAT, plain.matches),
)


# ---------------------------------------------------------------------------------------------
# Detection


def _natural_key(path: Path) -> tuple:
    parts = re.split(r"(\d+)", path.name)
    return tuple(int(p) if p.isdigit() else p for p in parts)


def _first_value(path: Path, problems: Problems | None = None) -> Any:
    """The first well-formed JSON line of a file (None when there is none)."""
    for _, _, value in iter_jsonl(path, problems if problems is not None else Problems()):
        return value
    return None


def _is_parquet(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"PAR1"
    except OSError:
        return False


def _detect_file(path: Path) -> str:
    """Format name of a single file, or RunFormatError saying why none fits."""
    if path.suffix == ".parquet" or _is_parquet(path):
        if not _is_parquet(path):
            raise RunFormatError(path, None, None, "not a parquet file (no PAR1 magic)")
        names = trl_completions.parquet_file(path).schema_arrow.names
        if not trl_completions.matches_columns(names):
            raise RunFormatError(
                path, None, "prompt", f"parquet without TRL's prompt/completion columns: {names}"
            )
        return trl_completions.FORMAT
    head = sniff_text(path)
    text = head.decode("utf-8", errors="ignore").lstrip()
    if path.suffix == ".csv" or (not text.startswith(("{", "["))):
        first = text.splitlines()[0] if text else ""
        names = next(iter(csv.reader([first])), [])
        if plain.matches_header(names):
            return plain.FORMAT_CSV
        raise RunFormatError(
            path,
            1,
            None,
            "not a known run format: expected JSONL, parquet, UNIPO JSON or a CSV with "
            "prompt, response and reward columns (the first line has none of them)",
        )
    if path.suffix == ".json":  # a document first (parsed once per open: ``parse_once``)
        try:
            doc = read_json_document(path)
        except DocumentTooLarge:
            raise
        except RunFormatError:
            doc = None  # not one document: maybe JSON lines under a .json name
        if unipo.matches_document(doc):
            return unipo.FORMAT
        if isinstance(doc, dict) and roll_dump.matches(doc):
            return roll_dump.FORMAT
        if atif.matches(doc):
            raise RunFormatError(path, None, None, atif.NOT_A_RUN)
        if isinstance(doc, dict):
            keys = sorted(map(str, doc))[:12]
            raise RunFormatError(path, 1, None, f"not a known run format (top-level keys: {keys})")
    scratch = Problems()
    first = _first_value(path, scratch)
    if first is None and path.suffix != ".json" and scratch.items:
        raise scratch.items[0]
    for name, matches in _JSONL_MATCHERS:
        if first is not None and matches(first):
            return name
    if atif.matches(first):
        raise RunFormatError(path, 1, None, atif.NOT_A_RUN)
    if path.suffix == ".json" or first is None:
        doc = read_json_document(path)
        if unipo.matches_document(doc):
            return unipo.FORMAT
        if isinstance(doc, dict) and roll_dump.matches(doc):
            return roll_dump.FORMAT
    keys = sorted(first)[:12] if isinstance(first, dict) else type(first).__name__
    raise RunFormatError(path, 1, None, f"not a known run format (first line keys: {keys})")


def detect(path: str | Path, jail: RunsJail | None = None) -> tuple[str, list[Path], list[Path]]:
    """The format of a file or folder, the sample files to read and any metrics side files.

    Args:
        path: a dump file, or a folder of per-step files (verl ``<step>.jsonl``, ROLL
            ``rollout_dump_data.step_<N>.jsonl``, TRL ``completions_*.parquet``, board files).
        jail: when given, every file and folder read must resolve inside it (``jail``);
            entries that lead outside are left out.

    Returns:
        ``(format name, sample files, metrics files)``; metrics files are TRL
        ``trainer_state.json`` or verl FileLogger JSONL found next to the samples.

    Raises:
        RunFormatError: missing path, empty folder, unknown or mixed formats.
    """
    return detect_files(path, jail)[:3]


def step_folder(path: Path, jail: RunsJail | None = None) -> Path:
    """Where a run folder's step files are: its ``completions/`` (TRL) in ``jail``, or itself."""
    sub = path / "completions"
    return sub if sub.is_dir() and (jail is None or jail.contains(sub)) else path


def detect_files(
    path: str | Path, jail: RunsJail | None = None
) -> tuple[str, list[Path], list[Path], int]:
    """``detect`` plus how many entries were left out because they lead outside ``jail``."""
    path = Path(path)
    if not path.exists():
        raise RunFormatError(path, None, None, "no such file or folder")

    def inside(p: Path) -> bool:
        return jail is None or jail.contains(p)

    if jail is not None and not inside(path):
        raise RunFormatError(path, None, None, "leads outside the allowed folder")
    if path.is_file():
        return _detect_file(path), [path], [s for s in _side_files(path.parent) if inside(s)], 0
    folder = step_folder(path, jail)
    candidates = [
        p
        for p in folder.iterdir()
        if not p.name.startswith(".")
        and p.suffix in (".jsonl", ".parquet", ".csv", ".json")
        and p.name != "trainer_state.json"
    ]
    kept = [p for p in candidates if inside(p) and p.is_file()]
    skipped = sum(1 for p in candidates if not inside(p))
    files = sorted(kept, key=_natural_key)
    if not files:
        why = f" ({skipped} lead outside the allowed folder)" if skipped else ""
        raise RunFormatError(
            path, None, None, f"folder has no .jsonl/.parquet/.csv/.json files{why}"
        )
    if len(files) > MAX_FILES:
        raise RunFormatError(path, None, None, f"{len(files)} files, more than the cap {MAX_FILES}")
    found: dict[str, list[Path]] = {}
    metrics = []
    first_error = None
    for p in files:
        if p.suffix == ".jsonl" and _is_metrics_log(p):
            metrics.append(p)
            continue
        try:
            found.setdefault(_detect_file(p), []).append(p)
        except RunFormatError as err:
            first_error = first_error or err
    if not found:
        raise first_error or RunFormatError(path, None, None, "no readable run files")
    if len(found) > 1:
        kinds = {k: [p.name for p in v][:3] for k, v in found.items()}
        raise RunFormatError(path, None, None, f"folder mixes formats: {kinds}")
    name, chosen = next(iter(found.items()))
    side = [s for s in _side_files(folder, also_parent=True) if inside(s)]
    return name, chosen, metrics + side, skipped


def _is_metrics_log(path: Path) -> bool:
    first = _first_value(path)
    return isinstance(first, dict) and set(first) == {"step", "data"}


def _side_files(folder: Path, also_parent: bool = False) -> list[Path]:
    out = []
    for candidate in (folder, folder.parent) if also_parent else (folder,):
        state = candidate / "trainer_state.json"
        if state.is_file():
            out.append(state)
            break
    return out
