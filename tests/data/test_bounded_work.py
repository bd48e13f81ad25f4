"""Work bounded by what a user can send; a bad row is skipped while the rest loads.

Figures of the defect: an 8 MB UNIPO ``.json`` of empty entries peaked at +334 MB (50 MB: 2.8 GB)
because the document was parsed three times per open; an integer too large for a float, a NaN
or list ``step`` in parquet, or a NUL byte in the first 8 KB of a crash-truncated file refused
the whole file.
"""

from __future__ import annotations

import json
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roll_viz.data.runs import RunFormatError, json_document, open_run, parse
from tests.data.helpers import fixture, write_jsonl

EMPTY_DOC_BYTES = 8 * 2**20


def _plain_rows(n: int, start: int = 0) -> list[dict]:
    return [
        {"prompt": f"p{i // 4}", "response": f"r{i}", "reward": float(i % 3), "step": 0}
        for i in range(start, start + n)
    ]


def test_an_8mb_document_of_empty_entries_is_refused_unparsed_and_small(tmp_path):
    # no time limit (a loaded machine is slow, and the suite asserts no times): the memory
    # bound below shows the document was refused before any parse
    path = tmp_path / "run.json"
    entries = ",".join(["{}"] * (EMPTY_DOC_BYTES // 3))
    path.write_text('{"header": {}, "entries": [' + entries + "]}")
    tracemalloc.start()
    with pytest.raises(RunFormatError, match="save it as JSONL") as err:
        open_run(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2.5 * path.stat().st_size  # the bytes once (plus counting), no parse
    assert str(path) in str(err.value)  # the reader names the file; the page shows its name


def test_a_document_is_parsed_once_per_open_and_memory_is_bounded(monkeypatch):
    path = fixture("unipo/run.json")
    calls = []
    real = json_document._read_json_document

    def counting(p, size):
        calls.append(p)
        return real(p, size)

    monkeypatch.setattr(json_document, "_read_json_document", counting)
    tracemalloc.start()
    run = open_run(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert run.steps
    assert len(calls) == 1  # detect, rows and header share one parse (was 3)
    assert peak < parse.JSON_MEMORY_MULTIPLE * path.stat().st_size + 2 * 2**20


def test_a_garbage_jsonl_stops_after_the_bad_prefix(tmp_path, monkeypatch):
    monkeypatch.setattr(parse, "MAX_BAD_PREFIX", 1000)
    bad = {"prompt": "p", "response": "r", "reward": "not a number"}
    path = write_jsonl(tmp_path / "junk.jsonl", [bad] * 5000)
    with pytest.raises(RunFormatError, match="no valid sample in the first 1000 rows"):
        open_run(path)


@pytest.mark.parametrize(
    "bad",
    [
        '{"prompt": "p", "response": "x", "reward": 1' + "0" * 400 + ', "step": 0}',
        '{"prompt": "p", "response": "x", "reward": 1.0, "step": 1' + "0" * 400 + "}",
        '{"prompt": "p", "response": "x", "reward": NaN, "step": 0}',
        '{"prompt": "p", "response": "x", "reward": 1.0, "step": [1, 2]}',
        '{"prompt": "p", "response": "x", "reward": 1.0, "step": 1.5}',
    ],
)
def test_an_out_of_range_number_skips_only_its_row(tmp_path, bad):
    rows = [json.dumps(r) for r in _plain_rows(8)]
    path = write_jsonl(tmp_path / "run.jsonl", [*rows[:4], bad, *rows[4:]])
    run = open_run(path)
    assert run.summaries[0].samples == 8
    assert len(run.warnings) == 1
    assert run.warnings[0].line == 5


def _completions(path, steps):
    n = len(steps)
    table = pa.table(
        {
            "step": steps,
            "prompt": [f"p{i // 2}" for i in range(n)],
            "completion": [f"c{i}" for i in range(n)],
            "reward_fn": [float(i) for i in range(n)],
        }
    )
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize(
    ("steps", "kind"),
    [
        ([1.0, 1.0, float("nan"), 1.0, 1.0, 1.0], pa.float64()),
        ([[1], [1], [1, 2], [1], [1], [1]], pa.list_(pa.int64())),
        ([1.0, 1.0, 1e300, 1.0, 1.0, 1.0], pa.float64()),
    ],
)
def test_a_nan_list_or_huge_step_in_parquet_skips_only_its_row(tmp_path, steps, kind):
    values = pa.array(steps, type=kind)  # a list column: [k] is step k, [1, 2] is no step
    path = _completions(tmp_path / "completions_00001.parquet", values)
    run = open_run(path)
    assert sum(s.samples for s in run.summaries) == 5
    assert len(run.warnings) == 1
    assert run.warnings[0].field == "step"


def test_a_truncated_file_with_nuls_in_the_first_8kb_loads_the_rest(tmp_path):
    rows = [json.dumps(r) for r in _plain_rows(8)]
    path = tmp_path / "run.jsonl"
    # a crash-truncated write: a line of NUL bytes (zero-filled block) in the middle
    path.write_bytes(("\n".join(rows[:4]) + "\n").encode() + b"\x00" * 300 + b"\n" +
                     ("\n".join(rows[4:]) + "\n").encode())  # fmt: skip
    run = open_run(path)
    assert run.summaries[0].samples == 8
    assert len(run.warnings) == 1


def test_a_mostly_binary_file_is_still_refused(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\x00\x01" * 4000)
    with pytest.raises(RunFormatError, match="binary"):
        open_run(path)


def test_orjson_and_json_agree_on_lines():
    lines = (b'{"a": 1.5, "b": [1, 2], "c": "\\u00e9", "d": -3}', b'{"a": NaN, "b": Infinity}')
    for raw in lines:
        problems = parse.Problems()
        got = parse._parse_line(raw, "f", 1, problems)
        assert json.dumps(got) == json.dumps(json.loads(raw.decode()))
        assert not problems.items
    huge = parse._parse_line(b'{"a": 1' + b"0" * 30 + b"}", "f", 1, parse.Problems())
    assert huge["a"] == pytest.approx(1e30)  # beyond 64 bits: a number still (a float)
