"""Numbers a float cannot hold (#33): the row is skipped naming row and field, nothing else lost.

Before: a 5,000-digit number anywhere refused the whole file ("Exceeds the limit (4300 digits)
for integer string conversion"); verl ``acc`` of 400 nines opened with no warning and a NaN in
the table; ``1e400`` in an extra column was kept as inf; one bad sample of a ROLL dump (one line
= the whole step) lost the step.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from roll_viz.data.runs import json_numbers, load_step, open_run
from tests.data.helpers import fixture

FIVE_K = "9" * 5000  # past sys.get_int_max_str_digits() (4300)
FOUR_H = "9" * 400  # an integer Python reads, beyond the float range
FLOAT_OUT = "1e400"  # a decimal beyond the float range (float() gives inf)
BAD = (FIVE_K, FOUR_H, FLOAT_OUT, "-" + FIVE_K, FOUR_H + ".5")
_MARK = "__unreadable__"


def _with_number(obj, path: tuple, raw: str) -> str:
    """``obj`` as one JSON line with the value at ``path`` replaced by the digits ``raw``."""
    obj = json.loads(json.dumps(obj))
    inner = obj
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = _MARK
    return json.dumps(obj).replace(json.dumps(_MARK), raw)


def _copy(tmp_path: Path, name: str) -> Path:
    """A copy of a fixture file (or folder)."""
    src = fixture(name)
    dst = tmp_path / src.name
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy(src, dst)
    return dst


def _rewrite(file: Path, line: int, path: tuple, raw: str) -> None:
    lines = file.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = _with_number(json.loads(lines[line - 1]), path, raw)
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _all_finite(run) -> None:
    for step in run.steps:
        loaded = load_step(run, step)
        assert loaded.scores.isfinite().all(), step
        for name, column in loaded.columns:
            assert not column.isinf().any(), name
            assert not column.isnan().any(), name  # no silent NaN for a skipped value


# (fixture, file inside it, line, path to the value, field named, step, samples lost)
CASES = [
    ("plain/samples.jsonl", None, 2, ("reward",), "reward", 0, 1),
    ("verl", "1.jsonl", 3, ("score",), "score", 1, 1),
    ("verl", "1.jsonl", 3, ("acc",), "acc", 1, 1),  # the issue's silent NaN
    ("verl", "2.jsonl", 1, ("step",), "step", 2, 1),
    ("roll_dump", "rollout_dump_data.step_1.jsonl", 1, ("scores", 4), "scores[4]", 1, 1),
    ("rllb", "data_20260101_120000_000.jsonl", 2, ("logprobs", 1), "logprobs[1]", 0, 1),
    ("rllb", "data_20260101_120000_000.jsonl", 2, ("reward",), "reward", 0, 1),
    (
        "unipo/run.jsonl",
        None,
        2,
        ("prompts", 0, "responses", 1, "reward"),
        "prompts[0].responses[1].reward",
        0,
        4,  # a UNIPO line is one step entry: its row
    ),
    ("rollviz/run.jsonl", None, 2, ("samples", "rewards", 2), "samples.rewards[2]", 0, 4),
]


@pytest.mark.parametrize("raw", BAD, ids=["5000-digits", "400-digits", "1e400", "-5000", "400.5"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}:{c[4]}" for c in CASES])
def test_an_unreadable_number_skips_its_row_naming_row_and_field(tmp_path, case, raw):
    name, inner, line, path, field, step, lost = case
    clean = open_run(fixture(name))
    before = clean.summary(step).samples
    copy = _copy(tmp_path, name)
    _rewrite(copy / inner if inner else copy, line, path, raw)
    run = open_run(copy)
    (warning,) = run.warnings
    assert (warning.line, warning.field) == (line, field)
    assert "float" in warning.message  # "too large for a float" / "beyond the float range"
    assert raw.lstrip("-")[:50] not in warning.one_line()  # the digits are never echoed
    if step in run.steps:
        assert run.summary(step).samples == before - lost
    else:
        assert lost == before  # the step's only row was the bad one
    assert run.steps == clean.steps or step not in run.steps
    _all_finite(run)


def test_the_issue_upload_nine_good_lines_and_one_5000_digit_reward(tmp_path):
    path = tmp_path / "run.jsonl"
    good = [{"prompt": "p", "response": f"r{i}", "reward": float(i % 2)} for i in range(9)]
    lines = [json.dumps(g) for g in good]
    lines.append(_with_number({"prompt": "p", "response": "x", "reward": 0}, ("reward",), FIVE_K))
    path.write_text("\n".join(lines) + "\n")
    run = open_run(path)
    assert [(w.line, w.field) for w in run.warnings] == [(10, "reward")]
    assert "integer too large for a float (5000 digits)" in run.warnings[0].message
    assert load_step(run, 0).scores.tolist() == [float(i % 2) for i in range(9)]


def test_the_issue_verl_acc_of_400_nines_is_a_warning_not_a_nan(tmp_path):
    path = tmp_path / "1.jsonl"
    row = {"input": "q", "output": "o", "score": 1.0, "step": 1, "uid": "a_0_0", "acc": 1.0}
    lines = [json.dumps({**row, "uid": f"a_{i}_0", "output": f"o{i}"}) for i in range(9)]
    lines.append(_with_number({**row, "uid": "a_9_0"}, ("acc",), FOUR_H))
    path.write_text("\n".join(lines) + "\n")
    run = open_run(path)
    assert [(w.line, w.field) for w in run.warnings] == [(10, "acc")]
    acc = dict(load_step(run, 1).columns)["acc"]
    assert acc.tolist() == [1.0] * 9


def test_a_nan_extra_column_stays_what_the_file_says(tmp_path):
    """A literal NaN in a verl extra column is the file's own value: kept as missing, no skip."""
    path = tmp_path / "1.jsonl"
    row = {"input": "q", "output": "o", "score": 1.0, "step": 1, "uid": "a_0_0"}
    path.write_text(
        json.dumps({**row, "acc": 1.0})
        + "\n"
        + json.dumps({**row, "uid": "a_1_0"})[:-1]
        + ', "acc": NaN}\n'
    )
    run = open_run(path)
    assert run.warnings == ()
    acc = dict(load_step(run, 1).columns)["acc"].tolist()
    assert acc[0] == 1.0
    assert math.isnan(acc[1])


def test_an_unreadable_number_in_a_field_nobody_reads_costs_nothing(tmp_path):
    """verl ``gts`` (a ground-truth answer) of 5,000 digits: not a number the app reads."""
    path = tmp_path / "1.jsonl"
    row = {"input": "q", "output": "o", "score": 1.0, "step": 1, "uid": "a_0_0", "gts": 0}
    path.write_text(_with_number(row, ("gts",), FIVE_K) + "\n")
    run = open_run(path)
    assert run.warnings == ()
    assert run.summary(1).samples == 1


def test_unipo_document_and_metrics_name_the_entry(tmp_path):
    doc = json.loads(fixture("unipo/run.json").read_text())
    path = tmp_path / "run.json"
    text = json.dumps(doc)
    first = json.dumps(doc["entries"][0]["metrics"])
    assert text.count(first) == 1
    bad = json.loads(first)
    bad["policy_objective"] = _MARK
    path.write_text(text.replace(first, json.dumps(bad).replace(json.dumps(_MARK), FIVE_K)))
    run = open_run(path)
    assert [(w.line, w.field) for w in run.warnings] == [
        (None, "entries[0].metrics.policy_objective")
    ]
    assert run.steps == (1,)


def test_plain_csv_reward_of_5000_digits_is_beyond_the_float_range(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text(f"prompt,response,reward\np,a,1\np,b,{FIVE_K}\np,c,0\np,d,inf\n")
    run = open_run(path)
    fields = [(w.line, w.field, w.message) for w in run.warnings]
    assert fields[0] == (3, "reward", "number beyond the float range (magnitude over 1.8e308)")
    assert fields[1][:2] == (5, "reward")
    assert "non-finite" in fields[1][2]
    assert load_step(run, 0).scores.tolist() == [1.0, 0.0]


def test_trainer_state_metrics_entry_with_an_unreadable_number_is_skipped(tmp_path):
    folder = tmp_path / "trl"
    shutil.copytree(fixture("trl"), folder)
    state = folder / "trainer_state.json"
    doc = json.loads(state.read_text())
    entry = doc["log_history"][0]
    key = next(k for k in entry if k != "step")
    entry[key] = _MARK
    state.write_text(json.dumps(doc).replace(json.dumps(_MARK), FIVE_K))
    run = open_run(folder)
    assert [w.field for w in run.warnings] == [f"log_history[0].{key}"]
    assert run.steps == open_run(fixture("trl")).steps


def test_json_numbers_loads_marks_only_what_a_float_cannot_hold():
    value = json_numbers.loads(
        f'{{"a": [1, {FIVE_K}, 2.5, NaN], "b": {{"c": 1e400}}, "d": 1e-400}}'
    )
    assert value["a"][0] == 1
    assert value["a"][2] == 2.5
    assert math.isnan(value["a"][3])
    assert isinstance(value["a"][1], json_numbers.Unreadable)
    assert isinstance(value["b"]["c"], json_numbers.Unreadable)
    assert value["d"] == 0.0  # underflow rounds to zero: a readable number
    assert json_numbers.first_unreadable(value)[0] == "a[1]"
    assert json_numbers.first_unreadable({"x": [[1], {"y": value["b"]}]})[0] == "x[1].y.c"
    assert json_numbers.first_unreadable({"x": [1.0, math.inf]}) is None
    # the largest integer a float holds is still a number
    biggest = str(int(1.7976931348623157e308))
    assert json_numbers.loads(biggest) == int(biggest)
