"""Scan a run into per-step summaries (``open_run``), then load one step as tensors (``load_step``).

``open_run(path)`` detects the format (``runs.detect``), streams every row once and keeps only
per-sample scalars per step (score, group, length, mean KL, the file's advantage, extra
columns) plus where each step's lines are, so a 512 x 16 x 4096-token dump opens in bounded
memory; metrics side files (TRL ``trainer_state.json``, verl FileLogger JSONL) are merged in.
``load_step(run, k)`` reads that step's lines again and builds a ``RunStep`` with token tensors
for as many whole prompts as fit in ``MAX_STEP_TOKENS`` positions.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from roll_viz.data.runs.detect import FORMATS, detect_files
from roll_viz.data.runs.jail import RunsJail
from roll_viz.data.runs.json_document import parse_once, read_json_document
from roll_viz.data.runs.json_numbers import Unreadable
from roll_viz.data.runs.parse import (
    MAX_ROWS,
    MAX_STEP_TOKENS,
    Problems,
    RunFormatError,
    is_number,
    iter_jsonl,
)
from roll_viz.data.runs.run_records import TOKEN_SERIES, Row, RunStep, StepSummary

#: Fields roll-viz can use; ``Run.missing`` lists those a file does not provide.
EXPECTED_FIELDS = (
    "group_ids",
    "values",
    "advantages",
    "tokens",
    "token_ids",
    "logprobs",
    "ref_logprobs",
    "token_rewards",
    "token_advantages",
    "entropy",
    "metrics",
)


@dataclass(frozen=True)
class Run:
    """A scanned run: its format, steps and per-step summaries (no token arrays).

    Attributes:
        path: what was opened (a file or a folder).
        format: reader name ("rllb", "trl", "verl", "roll-dump", "unipo", "unipo-jsonl",
            "plain", "plain-csv", "rollviz").
        label: human name of the format.
        files: the files read, in order.
        score_kind: what the step's ``scores`` are (raw score, normalised reward, ...).
        summaries: one StepSummary per step, sorted by step.
        present: roll-viz fields the file provides.
        missing: roll-viz fields it lacks (from ``EXPECTED_FIELDS``).
        warnings: per-line problems (rows skipped), each naming file, line and field.
        warnings_dropped: problems beyond the kept ``MAX_WARNINGS``.
        notes: the format's conventions applied, and any cap that bit.
        header: run-level metadata pairs (UNIPO header, roll-viz config), sorted.
        step_metrics: (step, sorted (key, value) pairs) for every step with metrics, including
            steps that have metrics but no samples (UNIPO entries without prompts, roll-viz
            steps without kept samples, side-file steps).
    """

    path: str
    format: str
    label: str
    files: tuple[str, ...]
    score_kind: str
    summaries: tuple[StepSummary, ...]
    present: tuple[str, ...]
    missing: tuple[str, ...]
    warnings: tuple[RunFormatError, ...] = ()
    warnings_dropped: int = 0
    notes: tuple[str, ...] = ()
    header: tuple = ()
    step_metrics: tuple = ()
    locations: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def steps(self) -> tuple[int, ...]:
        """Step numbers, ascending."""
        return tuple(s.step for s in self.summaries)

    def summary(self, step: int) -> StepSummary:
        """The summary of one step (KeyError naming the known steps)."""
        for s in self.summaries:
            if s.step == step:
                return s
        raise KeyError(f"step {step} is not in {self.path} (steps: {list(self.steps)[:20]})")


# ---------------------------------------------------------------------------------------------
# Metrics side files


def _numbers(obj: dict, file: Path, line: int | None, where: str) -> dict[str, float]:
    """Finite metrics of one entry; an unreadable number is a RunFormatError naming it."""
    for k, v in obj.items():
        if isinstance(v, Unreadable):
            raise RunFormatError(file, line, f"{where}{k}", v.why)
    return {
        str(k): float(v)
        for k, v in obj.items()
        if k != "step" and is_number(v) and math.isfinite(float(v))
    }


def read_metrics(path: Path, problems: Problems) -> dict[int, dict[str, float]]:
    """Per-step metrics from TRL ``trainer_state.json`` (log_history) or verl FileLogger JSONL."""
    out: dict[int, dict[str, float]] = {}
    if path.name.endswith(".json"):
        try:
            doc = read_json_document(path)
        except RunFormatError as err:
            problems.add(err)
            return out
        history = doc.get("log_history") if isinstance(doc, dict) else None
        if not isinstance(history, list):
            problems.add(RunFormatError(path, None, "log_history", "missing or not a list"))
            return out
        for i, entry in enumerate(history):
            if isinstance(entry, dict) and isinstance(entry.get("step"), int):
                try:  # an entry with a number that cannot be read is skipped with a message
                    values = _numbers(entry, path, None, f"log_history[{i}].")
                except RunFormatError as err:
                    problems.add(err)
                    continue
                out.setdefault(entry["step"], {}).update(values)
        return out
    for line, _, value in iter_jsonl(path, problems):
        if not (isinstance(value, dict) and isinstance(value.get("data"), dict)):
            problems.add(RunFormatError(path, line, "data", "expected {step, data}"))
            continue
        if isinstance(value.get("step"), int):
            try:
                values = _numbers(value["data"], path, line, "data.")
            except RunFormatError as err:
                problems.add(err)
                continue
            out.setdefault(value["step"], {}).update(values)
    return out


# ---------------------------------------------------------------------------------------------
# Scan


class _Acc:
    """Per-step accumulator of per-sample scalars."""

    def __init__(self) -> None:
        self.scores = array("d")
        self.gidx = array("q")
        self.lengths = array("d")
        self.adv = array("d")
        self.k1 = array("d")
        self.k3 = array("d")
        self.columns: dict[str, array] = {}
        self.groups: dict[tuple, int] = {}
        self.labels: list[str] = []
        self.prompts: list[str] = []
        self.locations: dict[str, list[tuple[int, int]]] = {}
        self.metrics: dict[str, float] = {}
        self.n_adv = self.n_kl = self.n_tok = 0

    def add(self, row: Row) -> None:
        b = len(self.scores)
        key = ("id", row.group) if row.group is not None else ("text", row.prompt)
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = len(self.labels)
            self.labels.append(row.group if row.group is not None else f"p{g}")
            self.prompts.append(row.prompt)
        self.scores.append(row.score)
        self.gidx.append(g)
        n = row.n_tokens
        self.lengths.append(float(n) if n is not None else float(len(row.response)))
        self.n_tok += n is not None
        self.adv.append(math.nan if row.advantage is None else row.advantage)
        self.n_adv += row.advantage is not None
        lp, ref = row.series.get("logprobs"), row.series.get("ref_logprobs")
        if lp is not None and ref is not None and len(lp):
            d = np.asarray(lp, dtype=np.float64) - np.asarray(ref, dtype=np.float64)
            self.k1.append(float(d.mean()))
            self.k3.append(float((np.expm1(-d) + d).mean()))
            self.n_kl += 1
        else:
            self.k1.append(math.nan)
            self.k3.append(math.nan)
        for name in row.columns:
            if name not in self.columns:
                self.columns[name] = array("d", [math.nan] * b)
        for name, column in self.columns.items():
            column.append(row.columns.get(name, math.nan))

    def summary(self, step: int, metrics: dict[str, float]) -> StepSummary:
        f64 = torch.float64

        def vec(a: array) -> torch.Tensor:
            return torch.tensor(np.frombuffer(a, dtype=np.float64).copy(), dtype=f64)

        b = len(self.scores)
        return StepSummary(
            step=step,
            scores=vec(self.scores),
            group_ids=torch.tensor(np.frombuffer(self.gidx, dtype=np.int64).copy()),
            group_labels=tuple(self.labels),
            prompts=tuple(self.prompts),
            lengths=vec(self.lengths),
            length_unit="tokens" if self.n_tok == b and b else "characters",
            advantages=vec(self.adv) if self.n_adv else None,
            kl_k1=vec(self.k1) if self.n_kl else None,
            kl_k3=vec(self.k3) if self.n_kl else None,
            columns=tuple((k, vec(v)) for k, v in sorted(self.columns.items())),
            metrics=tuple(sorted({**metrics, **self.metrics}.items())),
        )


def open_run(
    path: str | Path, metrics_path: str | Path | None = None, jail: RunsJail | None = None
) -> Run:
    """Detect the format and scan a run into per-step summaries (bounded memory).

    Args:
        path: a dump file or a folder of per-step files.
        metrics_path: optional metrics file (TRL ``trainer_state.json`` or verl FileLogger
            JSONL); side files next to the dump are picked up automatically.
        jail: when given (the app's runs or upload folder), every file read must resolve
            inside it; entries leading outside are left out with a note.

    Returns:
        A Run; per-line problems are in ``warnings`` (those rows are skipped).

    Raises:
        RunFormatError: unknown/empty/binary file, or no valid sample in it (the first
            problem found is reported).
    """
    with parse_once():  # a JSON document is parsed once for detect, rows and header
        return _open_run(path, metrics_path, jail)


def _open_run(path: str | Path, metrics_path: str | Path | None, jail: RunsJail | None) -> Run:
    name, files, side, skipped = detect_files(path, jail)
    fmt = FORMATS[name]
    problems = Problems()
    accs: dict[int, _Acc] = {}
    present: set[str] = set()
    notes = list(fmt.notes)
    if skipped:
        notes.append(f"{skipped} entries left out: they lead outside the allowed folder")
    count = 0
    for row in fmt.rows(files, problems):
        acc = accs.get(row.step)
        if acc is None:
            acc = accs[row.step] = _Acc()
        if row.metrics:
            acc.metrics.update(row.metrics)
            present.add("metrics")
        locs = acc.locations.setdefault(row.file, [])
        if row.offset >= 0 and (not locs or locs[-1][1] != row.offset):
            locs.append((row.line, row.offset))
        if row.empty:
            continue
        problems.rows_ok += 1
        _mark_present(row, present)
        acc.add(row)
        count += 1
        if count >= MAX_ROWS:
            notes.append(f"stopped after {MAX_ROWS} rows (MAX_ROWS): later rows not read")
            break
    side_metrics: dict[int, dict[str, float]] = {}
    for extra in [*side, *([Path(metrics_path)] if metrics_path else [])]:
        for step, values in read_metrics(extra, problems).items():
            side_metrics.setdefault(step, {}).update(values)
        notes.append(f"metrics read from {Path(extra).name}")
    if side_metrics:
        present.add("metrics")
    if not any(len(a.scores) for a in accs.values()):
        first = problems.items[0] if problems.items else None
        if first is not None:
            raise RunFormatError(
                first.file,
                first.line,
                first.field,
                f"no valid sample; first problem: {first.message}",
            )
        raise RunFormatError(files[0], None, None, "no samples in the file")
    notes.extend(fmt.scan_notes(present))
    summaries = tuple(
        accs[s].summary(s, side_metrics.get(s, {})) for s in sorted(accs) if len(accs[s].scores)
    )
    all_metrics: dict[int, dict[str, float]] = {s: dict(m) for s, m in side_metrics.items()}
    for s, acc in accs.items():
        if acc.metrics:
            all_metrics.setdefault(s, {}).update(acc.metrics)
    return Run(
        path=str(path),
        format=name,
        label=fmt.label,
        files=tuple(str(f) for f in files),
        score_kind=fmt.score_kind,
        summaries=summaries,
        present=tuple(sorted(present)),
        missing=tuple(f for f in EXPECTED_FIELDS if f not in present),
        warnings=tuple(problems.items),
        warnings_dropped=problems.dropped,
        notes=tuple(notes),
        header=fmt.header(files[0]),
        step_metrics=tuple((s, tuple(sorted(all_metrics[s].items()))) for s in sorted(all_metrics)),
        locations={s: dict(a.locations) for s, a in accs.items()},
    )


def _mark_present(row: Row, present: set[str]) -> None:
    present.add("scores")
    if row.prompt:
        present.add("prompts")
    if row.response:
        present.add("responses")
    if row.group is not None:
        present.add("group_ids")
    if row.advantage is not None:
        present.add("advantages")
    if row.tokens is not None:
        present.add("tokens")
    if row.token_ids is not None:
        present.add("token_ids")
    present.update(row.series)
    if row.columns:
        present.update(f"column:{k}" for k in row.columns)


# ---------------------------------------------------------------------------------------------
# Load one step


def load_step(run: Run, step: int, max_tokens: int = MAX_STEP_TOKENS) -> RunStep:
    """Read one step again and build its tensors (whole prompts up to ``max_tokens`` positions).

    Args:
        run: from ``open_run``.
        step: a step in ``run.steps``.
        max_tokens: cap on token positions kept (whole prompts in file order; at least one).

    Returns:
        RunStep with rows of one prompt contiguous (stable in file order).

    Raises:
        KeyError: unknown step.
    """
    summary = run.summary(step)
    fmt = FORMATS[run.format]
    problems = Problems()
    locations = run.locations.get(step)
    files = [Path(f) for f in run.files if locations is None or f in locations]
    wanted = locations if fmt.kind == "jsonl" else dict.fromkeys(locations or run.files)
    keep_groups = _groups_under_cap(summary, max_tokens)
    if fmt.kind == "jsonl" and locations is not None:
        flat = [(f, loc) for f, locs in locations.items() for loc in locs]
        if len(flat) == summary.samples:  # one row per line: read only the kept prompts' lines
            gids = summary.group_ids.tolist()
            wanted = {}
            for (f, loc), g in zip(flat, gids, strict=True):
                if g in keep_groups:
                    wanted.setdefault(f, []).append(loc)
            files = [p for p in files if str(p) in wanted]
    text_label = {}
    for label, prompt in zip(summary.group_labels, summary.prompts, strict=True):
        text_label.setdefault(prompt, label)
    kept: dict[tuple, list] = {}
    order: list[tuple] = []
    prompts: dict[tuple, str] = {}
    used = 0
    for row in fmt.rows(files, problems, wanted):
        if row.step != step or row.empty:
            continue
        key = ("id", row.group) if row.group is not None else ("text", row.prompt)
        if key not in prompts:
            prompts[key] = row.prompt
            n = row.n_tokens or 0
            if kept and n and used + n > max_tokens:
                continue
            kept[key] = []
            order.append(key)
        if key not in kept:
            continue
        used += row.n_tokens or 0
        kept[key].append(_compact(row))
    rows = [r for key in order for r in kept[key]]
    labels = [key[1] if key[0] == "id" else text_label.get(key[1], key[1]) for key in order]
    total = summary.samples
    notes = list(run.notes)
    if problems.items:  # the file changed since the scan, or a line failed again
        notes.append(
            f"while loading: {len(problems.items) + problems.dropped} problem(s), first: "
            f"{problems.items[0].one_line()}"
        )
    if len(order) < summary.num_prompts:
        notes.append(
            f"token cap: kept {len(order)} of {summary.num_prompts} prompts ({len(rows)} of "
            f"{total} samples, {used} token positions; MAX_STEP_TOKENS={max_tokens})"
        )
    return _build_step(run, step, rows, order, labels, prompts, total, notes)


def _groups_under_cap(summary: StepSummary, max_tokens: int) -> set[int]:
    """Group indices kept under the token cap: whole groups in first-seen order, at least one."""
    if summary.length_unit != "tokens":
        return set(range(summary.num_prompts))
    sizes = torch.zeros(summary.num_prompts, dtype=torch.float64).index_add(
        0, summary.group_ids, summary.lengths
    )
    keep, used = set(), 0.0
    for g, size in enumerate(sizes.tolist()):
        if keep and used + size > max_tokens:
            continue
        keep.add(g)
        used += size
    return keep


def _compact(row: Row) -> Row:
    """Token lists -> numpy arrays (float64 series, int64 ids): a quarter of the list memory."""
    row.series = {k: np.asarray(v, dtype=np.float64) for k, v in row.series.items()}
    if row.token_ids is not None:
        row.token_ids = np.asarray(row.token_ids, dtype=np.int64)
    return row


def _build_step(
    run: Run,
    step: int,
    rows: list[Row],
    order: list[tuple],
    labels: list[str],
    prompts: dict[tuple, str],
    total: int,
    notes: list[str],
) -> RunStep:
    f64 = torch.float64
    B = len(rows)
    index = {key: g for g, key in enumerate(order)}
    gids = [index[("id", r.group) if r.group is not None else ("text", r.prompt)] for r in rows]
    lengths = [r.n_tokens for r in rows]
    has_tokens = B > 0 and all(n is not None for n in lengths)
    T = max([n or 0 for n in lengths] + [1]) if has_tokens else 1
    mask = torch.zeros(B, T, dtype=f64)
    if has_tokens:
        for b, n in enumerate(lengths):
            mask[b, :n] = 1.0
    else:
        mask[:, 0] = 1.0
    series: dict[str, torch.Tensor | None] = dict.fromkeys(TOKEN_SERIES)
    if has_tokens:
        for name in TOKEN_SERIES:
            have = sum(name in r.series for r in rows)
            if have == 0:
                continue
            if have < B:
                notes.append(f"{name}: only {have} of {B} rows have it; not used")
                continue
            dense = torch.zeros(B, T, dtype=f64)
            for b, r in enumerate(rows):
                if lengths[b]:
                    dense[b, : lengths[b]] = torch.from_numpy(r.series[name])
            series[name] = dense
    tokens = None
    token_ids = None
    vocab: dict[int, str] = {}
    if has_tokens and all(r.tokens is not None for r in rows):
        tokens = tuple(tuple(r.tokens) for r in rows)
    if has_tokens and all(r.token_ids is not None for r in rows):
        token_ids = torch.zeros(B, T, dtype=torch.long)
        for b, r in enumerate(rows):
            token_ids[b, : lengths[b]] = torch.from_numpy(r.token_ids)
            if r.tokens is not None:
                vocab.update(zip(r.token_ids.tolist(), r.tokens, strict=True))
    elif tokens is not None:
        local: dict[str, int] = {}
        token_ids = torch.zeros(B, T, dtype=torch.long)
        for b, toks in enumerate(tokens):
            ids = [local.setdefault(t, len(local)) for t in toks]
            if ids:
                token_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        vocab = {i: t for t, i in local.items()}
        notes.append("token ids are local to this import (the file has token strings only)")
    advantages = None
    if B and all(r.advantage is not None for r in rows):
        advantages = torch.tensor([r.advantage for r in rows], dtype=f64)
    names = sorted({k for r in rows for k in r.columns})
    columns = tuple(
        (k, torch.tensor([r.columns.get(k, math.nan) for r in rows], dtype=f64)) for k in names
    )
    reward_names = tuple(names) if FORMATS[run.format].reward_columns else ()
    summary = run.summary(step)
    return RunStep(
        step=step,
        source_format=run.format,
        prompts=tuple(prompts[key] for key in order),
        group_labels=tuple(labels),
        group_ids=torch.tensor(gids, dtype=torch.long),
        responses=tuple(r.response for r in rows),
        scores=torch.tensor([r.score for r in rows], dtype=f64),
        score_kind=run.score_kind,
        response_mask=mask,
        lengths=torch.tensor(
            [n if has_tokens else len(r.response) for n, r in zip(lengths, rows, strict=True)],
            dtype=torch.long,
        ),
        length_unit="tokens" if has_tokens else "characters",
        tokens=tokens,
        token_ids=token_ids,
        vocab=vocab,
        advantages=advantages,
        columns=columns,
        reward_names=reward_names,
        metrics=summary.metrics,
        sources=tuple((r.file, r.line) for r in rows),
        total_samples=total,
        total_prompts=summary.num_prompts,
        notes=tuple(notes),
        **series,
    )
