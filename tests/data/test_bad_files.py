"""Bad files: one clear RunFormatError naming file, line and field; the rest still loads."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roll_viz.data.runs import RunFormatError, load_step, open_run, parse, scan
from tests.data.helpers import fixture, write_jsonl

GOOD = {"prompt": "p", "response": "r", "reward": 1.0, "group": "g", "step": 0}


def test_mixed_file_collects_per_line_problems_and_loads_the_rest():
    run = open_run(fixture("bad/mixed.jsonl"))
    problems = {(w.line, w.field) for w in run.warnings}
    assert problems == {(2, None), (3, "reward"), (4, "reward"), (6, None)}
    by_line = {w.line: w for w in run.warnings}
    assert "invalid JSON" in by_line[2].message
    assert "expected a number, got 'lots'" in by_line[3].message
    assert "missing" in by_line[4].message
    assert "JSON object" in by_line[6].message
    assert all(w.file.endswith("mixed.jsonl") for w in run.warnings)
    step = load_step(run, 0)
    assert step.scores.tolist() == [1.0, 0.0]
    assert [line for _, line in step.sources] == [1, 5]
    assert by_line[3].one_line().endswith("mixed.jsonl:3: reward: expected a number, got 'lots'")


def test_ragged_token_arrays_name_the_field_and_skip_the_row():
    run = open_run(fixture("bad/ragged_rllb.jsonl"))
    (warning,) = run.warnings
    assert (warning.line, warning.field) == (2, "ref_logprobs")
    assert "ragged" in warning.message
    assert run.summary(0).samples == 2


@pytest.mark.parametrize("name", ["bad/empty.jsonl", "bad/whitespace.jsonl"])
def test_empty_file_is_one_error(name):
    with pytest.raises(RunFormatError) as info:
        open_run(fixture(name))
    assert info.value.message == "empty file"
    assert info.value.file.endswith(name.split("/")[1])
    assert info.value.line is None


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "dump.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(RunFormatError, match="binary file"):
        open_run(path)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "caf\xe9"}\n' * 3)
    with pytest.raises(RunFormatError, match="not UTF-8") as info:
        open_run(latin)
    assert info.value.line == 1


def test_non_utf8_line_inside_a_good_file_is_a_warning(tmp_path):
    path = tmp_path / "x.jsonl"
    good = json.dumps(GOOD).encode()
    path.write_bytes(good + b"\n" + b'{"prompt": "\xff"}\n' + good + b"\n")
    run = open_run(path)
    assert [(w.line, "UTF-8" in w.message) for w in run.warnings] == [(2, True)]
    assert run.summary(0).samples == 2


def test_unknown_format_names_the_keys():
    with pytest.raises(RunFormatError, match="not a known run format") as info:
        open_run(fixture("bad/unknown.jsonl"))
    assert "bar" in info.value.message
    assert info.value.line == 1


def test_column_dump_with_a_short_column_names_it():
    with pytest.raises(RunFormatError) as info:
        open_run(fixture("bad/rollout_dump_data.step_1.jsonl"))
    err = info.value
    assert (err.line, err.field) == (1, "scores")
    assert "1 entries" in err.message


def test_file_without_a_valid_row_reports_the_first_problem():
    with pytest.raises(RunFormatError) as info:
        open_run(fixture("bad/all_bad.jsonl"))
    assert (info.value.line, info.value.field) == (1, "reward")
    assert "no valid sample" in str(info.value)


def test_wrong_types_and_non_finite_numbers(tmp_path):
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            GOOD,
            {**GOOD, "step": "abc"},
            '{"prompt": "p", "response": "r", "reward": NaN}',
            {**GOOD, "prompt": 5},
            {**GOOD, "group": [1]},
            {**GOOD, "reward": True},
        ],
    )
    run = open_run(path)
    fields = [(w.line, w.field) for w in run.warnings]
    assert fields == [(2, "step"), (3, "reward"), (4, "prompt"), (5, "group"), (6, "reward")]
    assert "non-finite" in run.warnings[1].message
    assert run.summary(0).samples == 1


def test_over_long_line_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(parse, "MAX_LINE_BYTES", 200)
    path = write_jsonl(tmp_path / "long.jsonl", [GOOD, {**GOOD, "response": "x" * 5000}, GOOD])
    run = open_run(path)
    (warning,) = run.warnings
    assert warning.line == 2
    assert "longer than the cap 200" in warning.message
    assert [line for _, line in load_step(run, 0).sources] == [1, 3]


def test_row_cap_stops_the_scan_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "MAX_ROWS", 5)
    path = write_jsonl(tmp_path / "many.jsonl", [{**GOOD, "reward": float(i)} for i in range(50)])
    run = open_run(path)
    assert run.summary(0).samples == 5
    assert any("stopped after 5 rows" in n for n in run.notes)


def test_huge_json_document_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(parse, "MAX_JSON_BYTES", 100)
    doc = {"header": {"algorithm": "grpo"}, "entries": [{"step": 0, "metrics": {}}] * 20}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    with pytest.raises(RunFormatError, match="larger than the JSON cap 100"):
        open_run(path)


def test_deeply_nested_line_is_a_warning_not_a_crash(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + "[" * 200_000 + "]" * 200_000 + "\n")
    run = open_run(path)
    assert run.warnings[0].line == 2
    assert run.summary(0).samples == 1


def test_token_series_longer_than_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(parse, "MAX_TOKENS_PER_ROW", 3)
    row = {"step": 0, "prompt": "p", "response": "r", "reward": 1.0, "logprobs": [0.0] * 4}
    path = write_jsonl(tmp_path / "b.jsonl", [row, {**row, "logprobs": [0.0] * 2}])
    run = open_run(path)
    assert (run.warnings[0].line, run.warnings[0].field) == (1, "logprobs")
    assert run.summary(0).samples == 1


def test_missing_path_mixed_folder_and_bad_parquet(tmp_path):
    with pytest.raises(RunFormatError, match="no such file"):
        open_run(tmp_path / "nope")
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(RunFormatError, match=r"no \.jsonl"):
        open_run(empty)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    write_jsonl(mixed / "1.jsonl", [{"input": "q", "output": "o", "score": 1.0, "step": 1}])
    write_jsonl(mixed / "a.jsonl", [GOOD])
    with pytest.raises(RunFormatError, match="mixes formats"):
        open_run(mixed)
    broken = tmp_path / "completions_00001.parquet"
    broken.write_bytes(b"PAR1" + b"\x00garbage" * 10)
    with pytest.raises(RunFormatError, match="not a readable parquet"):
        open_run(broken)
    no_completion = tmp_path / "c.parquet"
    pq.write_table(pa.table({"prompt": ["a"], "reward": [1.0]}), no_completion)
    with pytest.raises(RunFormatError) as info:
        open_run(no_completion)
    assert info.value.field == "prompt"
    assert "completion" in info.value.message


def test_csv_row_with_wrong_field_count(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("prompt,response,reward\na,b,1\na,c\na,d,0\n", encoding="utf-8")
    run = open_run(path)
    (warning,) = run.warnings
    assert warning.line == 3
    assert "2 fields" in warning.message
    assert run.summary(0).scores.tolist() == [1.0, 0.0]


def test_unipo_entry_problems_name_the_nested_field(tmp_path):
    entry = {
        "type": "step",
        "step": 0,
        "metrics": {"policy_objective": 0, "reward": 0},
        "prompts": [
            {
                "prompt": "x",
                "responses": [
                    {"id": "a", "reward": 1.0, "tokens": {"ids": [1, 2], "log_probs": [0.0]}}
                ],
            }
        ],
    }
    good = {**entry, "step": 1, "prompts": [{"prompt": "x", "responses": [{"reward": 1.0}]}]}
    path = write_jsonl(tmp_path / "u.jsonl", [{"type": "header"}, entry, good])
    run = open_run(path)
    (warning,) = run.warnings
    assert warning.line == 2
    assert warning.field == "prompts[0].responses[0].tokens.log_probs (or prob)"
    assert run.steps == (1,)
