"""A big run digested in pieces on two processes reads to the same records as the plain reader.

``scan_pieces`` cuts JSONL runs into line-aligned pieces, digests some in a forked helper and
merges them in file order. Forcing it on every fixture (one line a piece: ``PIECE_BYTES`` 1,
no size threshold) must give the same ``Run`` (summaries, warnings with their line numbers,
locations, notes) and the same loaded steps as reading every line here.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys

import pytest

from roll_viz.data.runs import FORMATS, RunFormatError, open_run, parse, rllb, scan, scan_pieces
from roll_viz.data.runs.parse import Problems
from tests.data.helpers import FIXTURES, write_jsonl
from tests.data.test_reader_fast_path import FIXTURE_RUNS, _read, _same

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2,
    reason="needs fork and two cores (Linux)",
)


@pytest.fixture
def in_pieces(monkeypatch):
    """Every JSONL run in pieces of one line each, on two processes, however busy the machine."""
    monkeypatch.setattr(scan_pieces, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(scan_pieces, "PIECE_BYTES", 1)
    monkeypatch.setattr(scan_pieces, "IDLE_CORES", float("-inf"))
    monkeypatch.setattr(scan_pieces, "HELPER_PIECES", 3)  # fresh helpers along the way


def _here_only(monkeypatch):
    monkeypatch.setattr(scan_pieces, "SCAN_PROCESSES", 1)


@pytest.mark.parametrize("name", FIXTURE_RUNS)
def test_every_fixture_reads_the_same_in_pieces(name, in_pieces, monkeypatch):
    pieces_run, pieces_steps = _read(FIXTURES / name)
    _here_only(monkeypatch)
    plain_run, plain_steps = _read(FIXTURES / name)
    assert _same(pieces_run, plain_run)
    assert _same(pieces_steps, plain_steps)


def _board(step: int, prompt: str, reward: float, n: int = 3) -> dict:
    return {
        "step": step,
        "prompt": prompt,
        "reward": reward,
        "logprobs": [-0.5] * n,
        "ref_logprobs": [-0.25] * n,
        "new_response_mask": [1] * (n - 1) + [0],
    }


def test_bad_lines_keep_their_file_line_numbers_across_pieces(tmp_path, in_pieces, monkeypatch):
    lines = [_board(0, "a", 1.0), "{not json", _board(0, "a", 0.5), "", "[1, 2]"]
    lines += [_board(1, "b", 0.25), {**_board(1, "b", 1.5), "logprobs": [1.0, "x", 2.0]}]
    path = write_jsonl(tmp_path / "board.jsonl", lines * 3)
    pieces_run = open_run(path)
    assert [w.line for w in pieces_run.warnings] == [2, 5, 7, 9, 12, 14, 16, 19, 21]
    _here_only(monkeypatch)
    assert _same(pieces_run, open_run(path))


def test_the_row_cap_stops_at_the_same_row(tmp_path, in_pieces, monkeypatch):
    path = write_jsonl(tmp_path / "board.jsonl", [_board(k % 3, f"p{k}", k) for k in range(40)])
    monkeypatch.setattr(scan, "MAX_ROWS", 7)
    pieces_run = open_run(path)
    assert sum(s.samples for s in pieces_run.summaries) == 7
    _here_only(monkeypatch)
    assert _same(pieces_run, open_run(path))


def test_a_file_of_garbage_is_refused_with_the_same_message(tmp_path, in_pieces, monkeypatch):
    monkeypatch.setattr(parse, "MAX_BAD_PREFIX", 5)
    path = write_jsonl(tmp_path / "board.jsonl", [_board(0, "a", 1.0)] + ["{bad"] * 9)
    path.write_text("{bad\n" * 9 + path.read_text())  # garbage first, then a board row
    with pytest.raises(RunFormatError) as pieces_err:
        open_run(path)
    _here_only(monkeypatch)
    with pytest.raises(RunFormatError) as plain_err:
        open_run(path)
    assert pieces_err.value.as_dict() == plain_err.value.as_dict()
    assert "no valid sample in the first 5 rows" in pieces_err.value.message


def test_pieces_cover_the_file_at_line_starts(tmp_path):
    path = write_jsonl(tmp_path / "board.jsonl", [_board(0, "x" * k, 1.0) for k in range(50)])
    data = path.read_bytes()
    for size in (1, 100, 1000, len(data), 10 * len(data)):
        pieces = scan_pieces.line_pieces(path, size)
        assert pieces[0][0] == 0
        assert pieces[-1][1] == len(data)
        for (_, end), (start, _) in itertools.pairwise(pieces):
            assert end == start
            assert data[start - 1 : start] == b"\n"


def test_an_over_long_line_is_reported_the_same_in_pieces(tmp_path, in_pieces, monkeypatch):
    monkeypatch.setattr(parse, "MAX_LINE_BYTES", 1000)
    long = {**_board(0, "x" * 3000, 1.0)}
    path = write_jsonl(tmp_path / "board.jsonl", [_board(0, "a", 1.0), long, _board(0, "b", 2.0)])
    pieces_run = open_run(path)
    assert [(w.line, w.message) for w in pieces_run.warnings] == [
        (2, "line longer than the cap 1000 bytes")
    ]
    _here_only(monkeypatch)
    assert _same(pieces_run, open_run(path))


PARENT = os.getpid()


def _dies_in_the_helper(value, file, line):
    """The board reader, except that a helper process dies on its first line."""
    if os.getpid() != PARENT:
        os._exit(1)
    return rllb.convert(value, file, line)


def test_a_dead_helper_leaves_its_pieces_to_this_process(tmp_path, in_pieces):
    path = write_jsonl(tmp_path / "board.jsonl", [_board(0, f"p{k % 4}", k) for k in range(12)])
    fmt = dataclasses.replace(FORMATS["rllb"], convert=_dies_in_the_helper)
    got = list(scan_pieces.row_digests(fmt, [path], Problems()))
    want = [scan_pieces.digest(row) for row in rllb.rows([path], Problems())]
    assert _same(got, want)


def test_a_busy_machine_reads_here_only(monkeypatch):
    monkeypatch.setattr(scan_pieces, "IDLE_CORES", 1.0)
    monkeypatch.setattr(scan_pieces.os, "getloadavg", lambda: (2.0, 2.0, 2.0))
    monkeypatch.setattr(scan_pieces.os, "sched_getaffinity", lambda pid: {0, 1})
    assert not scan_pieces._use_processes()
    monkeypatch.setattr(scan_pieces.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert scan_pieces._use_processes()
