"""What the scan keeps of each row (``RowDigest``), and big JSONL runs digested on two processes.

``open_run`` reduces every row to a ``RowDigest`` (step, where the line is, group, score, length,
mean KL, extra columns, which fields it has) and drops the token arrays at once. ``row_digests``
yields the digests of a run in file order, calling ``problems.add`` for each bad line in the
same order as the plain reader does. For a JSONL format read one line at a time (its ``Format``
has ``convert``) and files of at least ``PARALLEL_MIN_BYTES`` on a Linux machine with two cores,
the files are cut into line-aligned pieces of about ``PIECE_BYTES`` when a core is idle
(``IDLE_CORES``); a forked helper process
digests pieces while this process digests others, and the pieces are merged in file order
(line numbers counted on from the pieces before). Bounded memory: a piece's digests are small
(no token arrays), at most ``LOOKAHEAD`` pieces are done ahead of the merge, and each process
holds one parsed line at a time. Records, warnings and their order are the same on both paths
(tests/data/test_scan_pieces.py).

The helper is forked (no second import of torch, its pages shared with this process): it only
parses JSON and runs numpy on small arrays, never torch or a thread pool. Where fork is not
available, or ``SCAN_PROCESSES`` is 1, every piece is read here.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roll_viz.data.runs.parse import Problems, RunFormatError, rows_from_span
from roll_viz.data.runs.run_records import Row

#: Processes that digest a big run (this one and forked helpers); 1 reads it here only.
SCAN_PROCESSES = 2
#: Cores idle by the 1-minute load average needed to fork a helper: on a busy machine a helper
#: only takes CPU from the rest (measured: no faster there, and more CPU time in all).
IDLE_CORES = 1.0
#: Runs (JSONL files together) smaller than this are read here only (a fork is not worth it).
PARALLEL_MIN_BYTES = 64 << 20
#: A piece: whole lines from a byte offset until the first line end after this many bytes.
PIECE_BYTES = 8 << 20
#: Pieces digested ahead of the merge (bounds the memory of finished, unmerged pieces).
LOOKAHEAD = 4
#: Pieces a helper digests before a fresh one is forked (bounds the pages held twice).
HELPER_PIECES = 8


@dataclass(slots=True)
class RowDigest:
    """One row as the scan keeps it: scalars, where its line is, and the fields it has.

    Attributes:
        step, file, line, offset, empty, metrics, group, prompt, score, advantage, columns: as
            in ``Row``.
        length: valid tokens, or response characters when the row has no token data.
        has_tokens: ``length`` counts tokens.
        k1: mean of logp - ref over the valid tokens (NaN without both series).
        k3: mean of exp(ref - logp) - (ref - logp) - 1 (NaN without both series).
        has_kl: both log-prob series were there.
        present: the roll-viz fields the row provides (``Run.present``).
    """

    step: int
    file: str
    line: int
    offset: int
    empty: bool
    metrics: dict[str, float] | None
    group: str | None
    prompt: str
    score: float
    length: float
    has_tokens: bool
    advantage: float | None
    k1: float
    k3: float
    has_kl: bool
    columns: dict[str, float]
    present: tuple[str, ...]


def digest(row: Row) -> RowDigest:
    """The scan's scalars of one row (its token arrays are not kept)."""
    n = row.n_tokens
    lp, ref = row.series.get("logprobs"), row.series.get("ref_logprobs")
    k1 = k3 = math.nan
    has_kl = lp is not None and ref is not None and len(lp) > 0
    if has_kl:
        d = np.asarray(lp, dtype=np.float64) - np.asarray(ref, dtype=np.float64)
        k1 = float(d.mean())
        k3 = float((np.expm1(-d) + d).mean())
    return RowDigest(
        step=row.step,
        file=row.file,
        line=row.line,
        offset=row.offset,
        empty=row.empty,
        metrics=row.metrics,
        group=row.group,
        prompt=row.prompt,
        score=row.score,
        length=float(n) if n is not None else float(len(row.response)),
        has_tokens=n is not None,
        advantage=row.advantage,
        k1=k1,
        k3=k3,
        has_kl=has_kl,
        columns=row.columns,
        present=() if row.empty else _present(row),
    )


def _present(row: Row) -> tuple[str, ...]:
    present = ["scores"]
    if row.prompt:
        present.append("prompts")
    if row.response:
        present.append("responses")
    if row.group is not None:
        present.append("group_ids")
    if row.advantage is not None:
        present.append("advantages")
    if row.tokens is not None:
        present.append("tokens")
    if row.token_ids is not None:
        present.append("token_ids")
    present.extend(row.series)
    present.extend(f"column:{k}" for k in row.columns)
    return tuple(present)


# ---------------------------------------------------------------------------------------------
# Pieces


def line_pieces(path: Path, size: int) -> list[tuple[int, int]]:
    """Line-aligned ``(start, end)`` byte spans of about ``size`` bytes covering the file.

    Each cut moves on to the next line end (read 64 KB at a time), so a piece holds whole lines
    and an over-long line is reported by its piece as the plain reader reports it.
    """
    total = path.stat().st_size
    pieces, start = [], 0
    with open(path, "rb") as handle:
        while start < total:
            cut = start + max(size, 1)
            if cut >= total:
                pieces.append((start, total))
                break
            handle.seek(cut - 1)
            at, end = cut - 1, total
            while block := handle.read(1 << 16):
                found = block.find(b"\n")
                if found >= 0:
                    end = at + found + 1
                    break
                at += len(block)
            pieces.append((start, end))
            start = end
    return pieces


class _Recorder:
    """A piece's problems, in order among its digests (replayed into ``Problems`` later)."""

    def __init__(self, events: list) -> None:
        self.events = events

    def add(self, err: RunFormatError) -> None:
        self.events.append(err)


def digest_piece(
    convert: Callable, path: str, span: tuple[int, int]
) -> tuple[list[RowDigest | RunFormatError], int]:
    """Digests and problems of the lines in ``span`` (numbered from 1), and its line count."""
    events: list[RowDigest | RunFormatError] = []
    counted: list[int] = []
    recorder = _Recorder(events)
    for row in rows_from_span(Path(path), span, recorder, convert, counted):
        events.append(digest(row))
    return events, counted[0]


def _moved(event: RowDigest | RunFormatError, base: int) -> RowDigest | RunFormatError:
    """``event`` with its line number counted from the file's start (``base`` lines before)."""
    if isinstance(event, RowDigest):
        event.line += base
        return event
    if event.line is None or base == 0:
        return event
    return type(event)(event.file, event.line + base, event.field, event.message)


def _use_processes() -> bool:
    """Fork is there, two cores are, and at least ``IDLE_CORES`` of them are idle."""
    if SCAN_PROCESSES < 2 or sys.platform != "linux":
        return False
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    cores = len(os.sched_getaffinity(0))
    return cores >= 2 and cores - os.getloadavg()[0] >= IDLE_CORES


def row_digests(fmt, files: list[Path], problems: Problems) -> Iterator[RowDigest]:
    """The run's row digests in file order; bad lines go to ``problems`` in the same order.

    Args:
        fmt: the run's ``detect.Format``.
        files: its files in read order.
        problems: collects per-line problems (``add`` may refuse the file, as when reading).
    """
    if (
        fmt.convert is None
        or not _use_processes()
        or sum(p.stat().st_size for p in files) < PARALLEL_MIN_BYTES
    ):
        for row in fmt.rows(files, problems):
            yield digest(row)
        return
    yield from _merged(fmt.convert, _plan(files), problems)


def _plan(files: list[Path]) -> list[tuple[str, tuple[int, int], bool]]:
    """Each file's pieces as ``(file, span, first of its file)``."""
    return [
        (str(path), span, i == 0)
        for path in files
        for i, span in enumerate(line_pieces(path, PIECE_BYTES))
    ]


class _Helpers:
    """Forked helper processes, forked afresh every ``HELPER_PIECES`` pieces.

    A helper and this process share their pages until one writes to a page, which then exists
    twice; forking afresh drops the helper's copies, so the pages held twice stay bounded.
    Frozen (``gc.freeze``): a helper's collector never walks, and so never copies, the objects
    it was forked with.
    """

    def __init__(self, count: int) -> None:
        self.count = count
        self.pools: list[ProcessPoolExecutor] = []  # the newest last; older ones finish and exit
        self.given = 0
        self.broken = False

    def submit(self, convert: Callable, piece: tuple) -> Future | None:
        """``digest_piece`` of ``piece`` in a helper; None once the helpers died."""
        if self.broken:
            return None
        if not self.pools or self.given >= HELPER_PIECES:
            if self.pools:
                self.pools[-1].shutdown(wait=False)
            fork = multiprocessing.get_context("fork")
            self.pools.append(ProcessPoolExecutor(self.count, fork, initializer=gc.freeze))
            self.given = 0
        try:
            future = self.pools[-1].submit(digest_piece, convert, *piece[:2])
        except BrokenProcessPool:
            self.broken = True
            return None
        self.given += 1
        return future

    def close(self) -> None:
        """Stop every helper (pieces not started are dropped)."""
        for pool in self.pools:
            pool.shutdown(wait=True, cancel_futures=True)


def _merged(convert: Callable, plan: list, problems: Problems) -> Iterator[RowDigest]:
    """Digest the pieces here and in forked helpers; yield them merged in file order."""
    done: dict[int, tuple[list, int]] = {}
    pending: dict[int, Future] = {}
    helpers = _Helpers(SCAN_PROCESSES - 1)
    base = 0
    assigned = 0
    try:
        for merging, (_, _, first) in enumerate(plan):
            while merging not in done:
                ahead = min(len(plan), merging + LOOKAHEAD)
                here = None
                if assigned == merging:  # the next piece to merge is done here, at once
                    here, assigned = assigned, assigned + 1
                while len(pending) < 2 * helpers.count and assigned < ahead:
                    future = helpers.submit(convert, plan[assigned])
                    if future is None:
                        break
                    pending[assigned] = future
                    assigned += 1
                if here is not None:
                    done[here] = digest_piece(convert, *plan[here][:2])
                elif pending[merging].done() or assigned >= ahead:
                    done[merging] = _result(pending.pop(merging), convert, plan[merging])
                else:  # while the helper works on it, the next free piece is done here
                    done[assigned] = digest_piece(convert, *plan[assigned][:2])
                    assigned += 1
            events, lines = done.pop(merging)
            if first:
                base = 0
            for event in events:
                event = _moved(event, base)
                if isinstance(event, RowDigest):
                    yield event
                else:
                    problems.add(event)
            base += lines
    finally:
        helpers.close()


def _result(future: Future, convert: Callable, piece: tuple) -> tuple[list, int]:
    """A helper's piece, or the piece digested here when the helper died (killed, out of memory)."""
    try:
        return future.result()
    except BrokenProcessPool:
        return digest_piece(convert, *piece[:2])
