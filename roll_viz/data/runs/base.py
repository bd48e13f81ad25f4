"""Shared machinery of the run readers: errors, caps, the per-row record, streaming, records.

A reader turns its files into ``Row`` objects, one per sample, in file order. ``scan`` (in
``roll_viz.data.runs``) reduces rows to per-step ``StepSummary`` scalars (token arrays are
dropped as soon as a row's length and KL are known), and ``load_step`` reads one step again
and builds a ``RunStep`` with tensors. Nothing read from a file is executed: JSON is parsed with
``json.loads``, CSV with ``csv``, parquet with pyarrow; no pickle, no eval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from roll_viz.core.records import Batch, Rollout

# ---------------------------------------------------------------------------------------------
# Caps (bounded memory and time; every cap that bites leaves a message in the run's notes)

#: Longest line read from a JSONL/CSV file (a longer line is skipped with a warning).
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Largest whole-file JSON document (UNIPO JSON form) parsed in one piece.
MAX_JSON_BYTES = 256 * 1024 * 1024
#: Rows (samples) read from one run; the scan stops there with a note.
MAX_ROWS = 2_000_000
#: Files read from one folder.
MAX_FILES = 10_000
#: Token positions of one response (a longer response is skipped with a warning).
MAX_TOKENS_PER_ROW = 65_536
#: Token positions kept when one step is loaded with its token arrays; whole prompts are kept
#: in file order until the next would pass the cap (the rest of the step keeps its summary).
MAX_STEP_TOKENS = 4_194_304
#: Per-line problems kept in a run's warnings (the rest are only counted).
MAX_WARNINGS = 200
#: Bytes looked at to tell text from binary.
SNIFF_BYTES = 8192


class RunFormatError(ValueError):
    """A problem in a run file, naming the file, the 1-based line (or None) and the field.

    Attributes:
        file: path of the file as given.
        line: 1-based line number (JSONL/CSV line, parquet row + 1), or None for the whole file.
        field: the key or column at fault, or None.
        message: what is wrong.
    """

    def __init__(self, file: str | Path, line: int | None, field: str | None, message: str):
        self.file = str(file)
        self.line = line
        self.field = field
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """``file:line: field: message`` on one line (parts that are unknown are left out)."""
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        head = f"{where}: {self.field}: " if self.field else f"{where}: "
        return head + " ".join(self.message.split())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (file, line, field, message)."""
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message}


@dataclass
class Problems:
    """Per-line problems collected while reading (capped at ``MAX_WARNINGS``)."""

    items: list[RunFormatError] = field(default_factory=list)
    dropped: int = 0

    def add(self, err: RunFormatError) -> None:
        """Keep ``err`` (or count it once the cap is reached)."""
        if len(self.items) < MAX_WARNINGS:
            self.items.append(err)
        else:
            self.dropped += 1


# token series a row may carry, by roll-viz name
TOKEN_SERIES = (
    "logprobs",
    "ref_logprobs",
    "token_rewards",
    "token_advantages",
    "entropy",
    "exact_kl",
    "values",
)


@dataclass
class Row:
    """One sample as a reader normalises it (mutable, short-lived).

    Attributes:
        step: training step it belongs to.
        prompt: prompt text (as the file has it).
        response: response text.
        score: response-level reward (what the file calls score/reward; see ``score_kind``).
        group: explicit group id (uid prefix, TRL run of equal prompts) or None to group by
            identical prompt text.
        advantage: the framework's sequence-level advantage, or None.
        columns: extra per-sample numbers (TRL reward functions, verl reward_extra_info, ...).
        tokens: token display strings of the valid positions, or None.
        token_ids: token ids of the valid positions, or None.
        series: token series over the valid positions (keys from TOKEN_SERIES).
        metrics: the framework's own scalar metrics for the step (one row per entry has them).
        empty: a placeholder for a step that has metrics but no samples (never a sample).
        file: source file; line: 1-based line (or row + 1); offset: byte offset of the line.
    """

    step: int
    prompt: str
    response: str
    score: float
    group: str | None = None
    advantage: float | None = None
    columns: dict[str, float] = field(default_factory=dict)
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    series: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, float] | None = None
    empty: bool = False
    file: str = ""
    line: int = 0
    offset: int = -1

    @property
    def n_tokens(self) -> int | None:
        """Valid token positions, when the row has token data."""
        if self.tokens is not None:
            return len(self.tokens)
        if self.token_ids is not None:
            return len(self.token_ids)
        for values in self.series.values():
            return len(values)
        return None


# ---------------------------------------------------------------------------------------------
# Validation helpers (each raises RunFormatError naming file, line, field)


def is_number(x: Any) -> bool:
    """A JSON number (bools are not numbers here)."""
    return isinstance(x, int | float) and not isinstance(x, bool)


def get_number(
    obj: dict, key: str, file: str, line: int, required: bool = True, finite: bool = True
) -> float | None:
    """``obj[key]`` as a float; None when absent and not required."""
    if key not in obj or obj[key] is None:
        if required:
            raise RunFormatError(file, line, key, "missing (expected a number)")
        return None
    value = obj[key]
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise RunFormatError(file, line, key, f"expected a number, got {value!r:.60}") from None
    if not is_number(value):
        raise RunFormatError(
            file, line, key, f"expected a number, got {type(value).__name__} {value!r:.60}"
        )
    value = float(value)
    if finite and not math.isfinite(value):
        raise RunFormatError(file, line, key, f"non-finite number {value!r}")
    return value


def get_int(obj: dict, key: str, file: str, line: int, default: int | None = None) -> int:
    """``obj[key]`` as an integer (a float with no fraction is accepted)."""
    if key not in obj or obj[key] is None:
        if default is None:
            raise RunFormatError(file, line, key, "missing (expected an integer)")
        return default
    value = obj[key]
    if is_number(value) and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise RunFormatError(file, line, key, f"expected an integer, got {value!r:.60}")


def get_text(obj: dict, key: str, file: str, line: int, required: bool = True) -> str:
    """``obj[key]`` as a string ('' when absent and not required)."""
    if key not in obj or obj[key] is None:
        if required:
            raise RunFormatError(file, line, key, "missing (expected a string)")
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise RunFormatError(file, line, key, f"expected a string, got {type(value).__name__}")
    return value


_NUMBER_TYPES = {int, float}


def _bounded_list(obj: dict, key: str, file: str, line: int, what: str) -> list | None:
    """``obj[key]`` when it is a list of at most ``MAX_TOKENS_PER_ROW`` items; None if absent."""
    if key not in obj or obj[key] is None:
        return None
    value = obj[key]
    if not isinstance(value, list):
        raise RunFormatError(
            file, line, key, f"expected a list of {what}, got {type(value).__name__}"
        )
    if len(value) > MAX_TOKENS_PER_ROW:
        raise RunFormatError(
            file, line, key, f"{len(value)} positions, more than the cap {MAX_TOKENS_PER_ROW}"
        )
    return value


def get_numbers(obj: dict, key: str, file: str, line: int) -> np.ndarray | None:
    """``obj[key]`` as a (n,) float64 array of finite numbers, or None when absent.

    Fast path: the element types are checked with ``map(type, ...)`` (C speed) and the values
    converted by numpy; the slow per-element loop only runs to name a bad element.
    """
    value = _bounded_list(obj, key, file, line, "numbers")
    if value is None:
        return None
    if set(map(type, value)) <= _NUMBER_TYPES:
        out = np.asarray(value, dtype=np.float64)
        if out.ndim == 1 and np.isfinite(out).all():
            return out
    for i, x in enumerate(value):
        if not is_number(x):
            raise RunFormatError(file, line, f"{key}[{i}]", f"expected a number, got {x!r:.40}")
        if not math.isfinite(float(x)):
            raise RunFormatError(file, line, f"{key}[{i}]", f"non-finite number {x!r}")
    raise RunFormatError(file, line, key, "expected a list of numbers")  # pragma: no cover


def get_strings(obj: dict, key: str, file: str, line: int) -> list[str] | None:
    """``obj[key]`` as a list of strings, or None when absent."""
    value = _bounded_list(obj, key, file, line, "strings")
    if value is None:
        return None
    if set(map(type, value)) <= {str}:
        return value
    for i, x in enumerate(value):
        if not isinstance(x, str):
            raise RunFormatError(file, line, f"{key}[{i}]", f"expected a string, got {x!r:.40}")
    return value


# ---------------------------------------------------------------------------------------------
# Streaming


def sniff_text(path: Path) -> bytes:
    """The first bytes of a file; RunFormatError for an empty or binary (non-UTF-8) file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as err:
        raise RunFormatError(path, None, None, f"cannot read: {err.strerror or err}") from None
    if not head.strip():
        raise RunFormatError(path, None, None, "empty file")
    if b"\x00" in head:
        raise RunFormatError(path, None, None, "binary file (NUL bytes), not a text dump")
    text = head.decode("utf-8", errors="replace")
    if text.count("\ufffd") > max(4, len(text) // 10):  # a stray bad byte is a line problem
        raise RunFormatError(path, None, None, "binary file (mostly not UTF-8 text)")
    return head


def iter_jsonl(
    path: Path,
    problems: Problems,
    locations: list[tuple[int, int]] | None = None,
) -> Iterator[tuple[int, int, Any]]:
    """Parsed JSON lines of a file as ``(line, offset, value)``; bad lines go to ``problems``.

    Args:
        path: a JSONL file.
        problems: collects malformed, over-long or non-UTF-8 lines (the rest still loads).
        locations: ``(line, offset)`` pairs to read instead of the whole file (from a scan).
    """
    name = str(path)
    with open(path, "rb") as handle:
        if locations is not None:
            for line_no, offset in locations:
                handle.seek(offset)
                raw = handle.readline(MAX_LINE_BYTES + 1)
                value = _parse_line(raw, name, line_no, problems)
                if value is not None:
                    yield line_no, offset, value
            return
        line_no = 0
        while True:
            offset = handle.tell()
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            line_no += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                problems.add(
                    RunFormatError(
                        name, line_no, None, f"line longer than the cap {MAX_LINE_BYTES} bytes"
                    )
                )
                while raw and not raw.endswith(b"\n"):
                    raw = handle.readline(1 << 20)
                continue
            if not raw.strip():
                continue
            value = _parse_line(raw, name, line_no, problems)
            if value is not None:
                yield line_no, offset, value


def _parse_line(raw: bytes, name: str, line_no: int, problems: Problems) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        problems.add(RunFormatError(name, line_no, None, f"not UTF-8 text (byte {err.start})"))
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        problems.add(
            RunFormatError(
                name, line_no, None, f"invalid JSON at character {err.pos + 1}: {err.msg}"
            )
        )
    except RecursionError:
        problems.add(RunFormatError(name, line_no, None, "JSON nested too deeply"))
    return None


def read_json_document(path: Path) -> Any:
    """A whole-file JSON document (capped at ``MAX_JSON_BYTES``)."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise RunFormatError(
            path, None, None, f"{size} bytes: larger than the JSON cap {MAX_JSON_BYTES}"
        )
    raw = path.read_bytes()
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise RunFormatError(path, None, None, f"not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise RunFormatError(
            path, err.lineno, None, f"invalid JSON at column {err.colno}: {err.msg}"
        ) from None
    except RecursionError:
        raise RunFormatError(path, None, None, "JSON nested too deeply") from None


# ---------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True)
class StepSummary:
    """Per-sample scalars of one step, for history across steps (no token arrays).

    Attributes:
        step: training step.
        scores: (B,) float64 response-level reward as the file gives it.
        group_ids: (B,) long group index of each sample (first-seen order, rows in file order).
        group_labels: (P,) group ids (uid prefix, ``p<k>`` for text-grouped prompts, ...).
        prompts: (P,) prompt text of each group.
        lengths: (B,) float64 response length (tokens, or characters when the file has no tokens).
        length_unit: "tokens" or "characters".
        advantages: (B,) float64 the framework's sequence-level advantage, or None.
        kl_k1: (B,) float64 mean over valid tokens of logp - ref_logp, or None.
        kl_k3: (B,) float64 mean of exp(ref - logp) - (ref - logp) - 1, or None.
        columns: extra per-sample numbers as (name, (B,) tensor) pairs.
        metrics: the framework's own scalar metrics for the step, as (key, value) pairs.
    """

    step: int
    scores: Tensor
    group_ids: Tensor
    group_labels: tuple[str, ...]
    prompts: tuple[str, ...]
    lengths: Tensor
    length_unit: str
    advantages: Tensor | None = None
    kl_k1: Tensor | None = None
    kl_k3: Tensor | None = None
    columns: tuple[tuple[str, Tensor], ...] = ()
    metrics: tuple[tuple[str, float], ...] = ()

    @property
    def samples(self) -> int:
        """B."""
        return int(self.scores.numel())

    @property
    def num_prompts(self) -> int:
        """P."""
        return len(self.group_labels)


@dataclass(frozen=True)
class RunStep:
    """One step of an imported run, as tensors (rows of one prompt contiguous).

    When the file has no token data, ``response_mask`` is (B, 1) of ones: one slot per response,
    enough for the outcome-reward estimators (GRPO, RLOO, ...), and every token field is None.

    Attributes:
        step: training step.
        source_format: the reader's format name ("rllb", "trl", ...).
        prompts: (P,) prompt text of each group.
        group_labels: (P,) group ids as the file names them (or ``p<k>``).
        group_ids: (B,) long prompt index of each sample.
        responses: (B,) response texts (untrusted: escape before display).
        scores: (B,) float64 response-level reward as the file gives it (see ``score_kind``).
        score_kind: what ``scores`` is: "raw score", "normalized reward" (ROLL board), ...
        response_mask: (B, T) float64, 1.0 on valid tokens.
        lengths: (B,) long response length in ``length_unit``.
        length_unit: "tokens" or "characters".
        tokens: (B,) tuples of token strings of the valid positions, or None.
        token_ids: (B, T) long token ids (file ids, or ids local to this import), or None.
        vocab: id -> string for ``token_ids`` (empty when the file gives no strings).
        logprobs: (B, T) policy log-probs of the sampled tokens, or None.
        ref_logprobs: (B, T) reference log-probs, or None.
        token_rewards: (B, T) token-level rewards from the file, or None.
        token_advantages: (B, T) token-level advantages from the file, or None.
        entropy: (B, T) policy entropy per position, or None.
        exact_kl: (B, T) full-vocabulary KL(policy || ref) per position (roll-viz runs), or None.
        values: (B, T) critic values V(s_t) from the file, or None (ROLL's board ``values`` is a
            copy of the token rewards and is not read as values).
        advantages: (B,) the framework's sequence-level advantage, or None.
        columns: extra per-sample numbers as (name, (B,) tensor) pairs.
        reward_names: names in ``columns`` that were summed into ``scores`` (TRL).
        metrics: the framework's own metrics for this step, as (key, value) pairs.
        sources: (B,) (file, line) of each row.
        total_samples: samples of this step in the file (>= B when the token cap dropped prompts).
        total_prompts: prompts of this step in the file.
        notes: what was detected, what is missing, what a cap dropped.
    """

    step: int
    source_format: str
    prompts: tuple[str, ...]
    group_labels: tuple[str, ...]
    group_ids: Tensor
    responses: tuple[str, ...]
    scores: Tensor
    score_kind: str
    response_mask: Tensor
    lengths: Tensor
    length_unit: str
    tokens: tuple[tuple[str, ...], ...] | None = None
    token_ids: Tensor | None = None
    vocab: dict = field(default_factory=dict)
    logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None
    token_rewards: Tensor | None = None
    token_advantages: Tensor | None = None
    entropy: Tensor | None = None
    exact_kl: Tensor | None = None
    values: Tensor | None = None
    advantages: Tensor | None = None
    columns: tuple[tuple[str, Tensor], ...] = ()
    reward_names: tuple[str, ...] = ()
    metrics: tuple[tuple[str, float], ...] = ()
    sources: tuple[tuple[str, int], ...] = ()
    total_samples: int = 0
    total_prompts: int = 0
    notes: tuple[str, ...] = ()

    @property
    def has_tokens(self) -> bool:
        """Whether the step carries per-token data (strings or ids)."""
        return self.tokens is not None or self.token_ids is not None

    def column(self, name: str) -> Tensor:
        """A (B,) extra column by name (KeyError if absent)."""
        return dict(self.columns)[name]

    def to_batch(self) -> Batch:
        """The calculator's input (Batch): scores, mask, groups, log-probs, critic values.

        Log-probs go in only when both series are present; values only when the file has them.
        """
        both = self.logprobs is not None and self.ref_logprobs is not None
        return Batch(
            scores=self.scores,
            response_mask=self.response_mask,
            group_ids=self.group_ids,
            group_labels=self.group_labels,
            logprobs=self.logprobs if both else None,
            ref_logprobs=self.ref_logprobs if both else None,
            values=self.values,
        )

    def to_rollout(self) -> Rollout:
        """The step as a ``Rollout`` every page can show (needs tokens, logprobs, ref_logprobs).

        Fields the dumps never carry are filled so the record is well-formed and marked in
        ``meta``: ``exact_kl`` is the file's (roll-viz runs) or zeros (no framework dump has the
        full-vocabulary distribution),
        ``entropy`` is the file's entropy or zeros, top-k tensors have K = 0, finish reasons are
        "unknown". ``meta`` holds ``("source", format)``, ``("step", k)`` and
        ``("missing", "exact_kl,entropy,topk,...")`` so a page can hide what is not real.

        Raises:
            ValueError: the step has no token strings/ids, or lacks logprobs or ref_logprobs.
        """
        missing = [
            name
            for name, value in (
                ("tokens", self.tokens if self.tokens is not None else self.token_ids),
                ("logprobs", self.logprobs),
                ("ref_logprobs", self.ref_logprobs),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"step {self.step} ({self.source_format}) has no {', '.join(missing)}: "
                "it cannot be shown as a token-level Rollout (use to_batch)"
            )
        mask = self.response_mask.to(torch.float32)
        B, T = mask.shape
        zeros = torch.zeros(B, T)
        lacking = ["topk", "finish_reasons"]
        if self.exact_kl is None:
            lacking.insert(0, "exact_kl")
        if self.entropy is None:
            lacking.insert(1, "entropy")
        tokens = self.tokens
        if tokens is None:
            tokens = tuple(
                tuple(self.vocab.get(int(i), str(int(i))) for i in row[: int(n)].tolist())
                for row, n in zip(self.token_ids, mask.sum(dim=1).long(), strict=True)
            )
        token_ids = self.token_ids
        if token_ids is None:
            token_ids = torch.zeros(B, T, dtype=torch.long)
            lacking.append("token_ids")
        return Rollout(
            prompts=self.prompts,
            group_ids=self.group_ids,
            responses=self.responses,
            token_ids=token_ids,
            tokens=tokens,
            response_mask=mask,
            logprobs=self.logprobs.to(torch.float32) * mask,
            ref_logprobs=self.ref_logprobs.to(torch.float32) * mask,
            exact_kl=zeros if self.exact_kl is None else self.exact_kl.to(torch.float32) * mask,
            entropy=zeros if self.entropy is None else self.entropy.to(torch.float32) * mask,
            topk_ids=torch.zeros(B, T, 0, dtype=torch.long),
            topk_logprobs=torch.zeros(B, T, 0),
            topk_ref_logprobs=torch.zeros(B, T, 0),
            finish_reasons=("unknown",) * B,
            vocab=dict(self.vocab),
            meta=(
                ("missing", ",".join(lacking)),
                ("source", self.source_format),
                ("step", self.step),
            ),
        )


# ---------------------------------------------------------------------------------------------
# Shared reader loop


def rows_from_jsonl(
    files: list[Path],
    problems: Problems,
    convert,
    locations: dict[str, list[tuple[int, int]]] | None = None,
) -> Iterator[Row]:
    """Rows of JSONL files: ``convert(value, file, line)`` -> a Row, a list of Rows or None.

    A RunFormatError raised by ``convert`` is recorded in ``problems`` and the line skipped.

    Args:
        files: JSONL files in read order.
        problems: collects per-line problems.
        convert: turns one parsed line into rows.
        locations: per file, the ``(line, offset)`` pairs to read (None = every line).
    """
    for path in files:
        name = str(path)
        wanted = None
        if locations is not None:
            wanted = locations.get(name)
            if not wanted:
                continue
        for line, offset, value in iter_jsonl(path, problems, wanted):
            try:
                out = convert(value, name, line)
            except RunFormatError as err:
                problems.add(err)
                continue
            if out is None:
                continue
            for row in out if isinstance(out, list) else [out]:
                row.file, row.line, row.offset = name, line, offset
                yield row


def require_object(value: Any, file: str, line: int) -> dict:
    """A JSON line must be an object."""
    if not isinstance(value, dict):
        raise RunFormatError(
            file, line, None, f"expected a JSON object, got {type(value).__name__}"
        )
    return value
