"""The calculator and ``runs`` CLI: exit 2 with one line naming the field, never a traceback.

Figures of the defect: ``compute`` on 100k-deep JSON and on a 400-digit integer exited 1 with a
RecursionError / OverflowError (``runs inspect`` too); the calculator took 1e6 rows with no cap
(exit 0 after 16 s at 1.57 GB, 90x its input).
"""

from __future__ import annotations

import io
import json

import pytest

from roll_viz.cli import calculator
from roll_viz.cli import runs as runs_cli

HUGE = "1" + "0" * 400


def _case(scores: str = "[1.0, 2.0]", rows: int = 2) -> str:
    mask = json.dumps([[1, 1]] * rows)
    group = json.dumps(["q"] * rows)
    return (
        f'{{"batch": {{"scores": {scores}, "response_mask": {mask}, "group": {group}}}, '
        '"config": {"framework": "roll", "adv_estimator": "grpo"}}'
    )


def _compute(monkeypatch, capsys, text: str) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = calculator.main(["-"])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_100k_deep_json_exits_2_naming_the_input(monkeypatch, capsys):
    code, out, err = _compute(monkeypatch, capsys, "[" * 100_000 + "]" * 100_000)
    assert code == 2
    assert out == ""
    assert "input: JSON nested too deeply" in _one_line(err)


def test_deep_but_parsable_json_is_refused_too(monkeypatch, capsys):
    code, _, err = _compute(monkeypatch, capsys, "[" * 500 + "]" * 500)
    assert code == 2
    assert "nested too deeply" in _one_line(err)


@pytest.mark.parametrize(
    ("scores", "field"),
    [(f"[{HUGE}, 1.0]", "batch.scores[0]"), (f"[1.0, -{HUGE}]", "batch.scores[1]")],
)
def test_a_400_digit_integer_exits_2_naming_the_field(monkeypatch, capsys, scores, field):
    code, out, err = _compute(monkeypatch, capsys, _case(scores))
    assert code == 2
    assert out == ""
    line = _one_line(err)
    assert f"{field}: integer too large for a float" in line
    assert HUGE not in line


def test_a_400_digit_integer_in_the_config_exits_2(monkeypatch, capsys):
    text = _case().replace('"adv_estimator": "grpo"', f'"adv_estimator": "grpo", "kl_coef": {HUGE}')
    code, _, err = _compute(monkeypatch, capsys, text)
    assert code == 2
    line = _one_line(err)
    assert "config" in line or "kl_coef" in line


def test_the_row_cap_refuses_1e6_rows_before_any_work(monkeypatch, capsys):
    rows = calculator.MAX_ROWS + 1
    scores = json.dumps([1.0] * rows)
    code, out, err = _compute(monkeypatch, capsys, _case(scores, rows))
    assert code == 2
    assert out == ""
    assert f"batch.scores: more than {calculator.MAX_ROWS} rows" in _one_line(err)


def test_the_byte_cap(monkeypatch, capsys):
    monkeypatch.setattr(calculator, "MAX_INPUT_BYTES", 1000)
    code, _, err = _compute(monkeypatch, capsys, _case() + " " * 2000)
    assert code == 2
    assert "input: larger than" in _one_line(err)


def test_a_good_case_still_computes(monkeypatch, capsys):
    code, out, err = _compute(monkeypatch, capsys, _case())
    assert code == 0, err
    assert json.loads(out)["advantages"]


@pytest.mark.parametrize(
    "line",
    [
        f'{{"prompt": "p", "response": "r", "reward": {HUGE}}}',
        '{"prompt": "p", "response": "r", "reward": 1.0, "metrics": {"a": ' + HUGE + "}}",
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_runs_inspect_exits_2_or_skips_the_row(tmp_path, capsys, line):
    path = tmp_path / "run.jsonl"
    good = '{"prompt": "p", "response": "ok", "reward": 1.0}'
    path.write_text(f"{line}\n{good}\n{good}\n")
    code = runs_cli.main(["inspect", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code in (0, 2)
    if code == 0:  # the bad row skipped, the rest loaded
        info = json.loads(out)
        assert info["per_step"][0]["samples"] >= 2
    else:
        _one_line(err)


def test_runs_inspect_of_a_file_of_only_huge_integers_exits_2(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    path.write_text(f'{{"prompt": "p", "response": "r", "reward": {HUGE}}}\n')
    code = runs_cli.main(["inspect", str(path)])
    _, err = capsys.readouterr()
    assert code == 2
    line = _one_line(err)
    assert ":1: reward: " in line
    assert "integer too large for a float" in line


FIVE_K = "9" * 5000  # past Python's int-string digit limit (4300): json.loads raised


@pytest.mark.parametrize(
    ("scores", "field", "why"),
    [
        (f"[{FIVE_K}, 1, 2]", "batch.scores[0]", "integer too large for a float (5000 digits)"),
        (f"[1, 2, -{FIVE_K}]", "batch.scores[2]", "integer too large for a float (5000 digits)"),
        ("[1, 1e400, 2]", "batch.scores[1]", "number beyond the float range"),
        (f"[1, 2, {'9' * 400}.5]", "batch.scores[2]", "number beyond the float range"),
    ],
)
def test_issue_33_unreadable_numbers_exit_2_naming_the_field(
    monkeypatch, capsys, scores, field, why
):
    code, out, err = _compute(monkeypatch, capsys, _case(scores, rows=3))
    assert code == 2
    assert out == ""
    line = _one_line(err)
    assert line.startswith(f"error: {field}: {why}")
    assert "9" * 50 not in line


def test_a_5000_digit_number_in_a_list_of_cases_names_the_case_and_field(monkeypatch, capsys):
    text = f"[{_case()}, {_case().replace('[1, 1]]', f'[1, {FIVE_K}]]')}]"
    code, _, err = _compute(monkeypatch, capsys, text)
    assert code == 2
    assert _one_line(err).startswith("error: case 1: batch.response_mask[1][1]: integer too large")


def test_a_5000_digit_config_value_names_it(monkeypatch, capsys):
    text = _case().replace(
        '"adv_estimator": "grpo"', f'"adv_estimator": "grpo", "kl_coef": {FIVE_K}'
    )
    code, _, err = _compute(monkeypatch, capsys, text)
    assert code == 2
    assert _one_line(err).startswith("error: config.kl_coef: integer too large for a float")


def test_runs_inspect_skips_a_5000_digit_row_and_names_it(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    good = '{"prompt": "p", "response": "ok", "reward": 1.0}'
    path.write_text(f'{good}\n{{"prompt": "p", "response": "r", "reward": {FIVE_K}}}\n{good}\n')
    code = runs_cli.main(["inspect", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    info = json.loads(out)
    assert info["per_step"][0]["samples"] == 2
    assert [(w["line"], w["field"]) for w in info["warnings"]] == [(2, "reward")]
    assert FIVE_K not in out
