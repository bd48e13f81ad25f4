import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.cases import SEED_SCORES
from core.test_dialects import SEED_CASES
from roll_viz.cli import calculator
from roll_viz.core.pipeline import run

ROOT = Path(__file__).resolve().parents[2]


def _mask(lengths):
    T = max(lengths)
    return [[1 if t < n else 0 for t in range(T)] for n in lengths]


def _case(framework, config, lengths=(1, 1, 1), **batch):
    return {
        "batch": {
            "scores": SEED_SCORES,
            "response_mask": _mask(lengths),
            "group": ["q"] * 3,
            **batch,
        },
        "config": {"framework": framework, **config},
    }


def _cli(payload, *args):
    return subprocess.run(
        [sys.executable, "-m", "roll_viz", "compute", *(args or ("-",))],
        input=payload if isinstance(payload, str) else json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_cli_seed_example_every_dialect():
    cases = [_case(fw, cfg, lengths) for fw, cfg, lengths, _ in SEED_CASES]
    proc = _cli(cases)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert isinstance(out, list)
    assert len(out) == len(SEED_CASES)
    for result, (fw, _cfg, lengths, expected) in zip(out, SEED_CASES, strict=True):
        assert result["framework"] == fw
        adv = result["advantages"]
        assert [row[0] for row in adv] == pytest.approx(expected, abs=1e-8)
        for b, n in enumerate(lengths):
            assert all(v == 0 for v in adv[b][n:])
        for key in ("rewards", "kl", "token_rewards", "returns", "notes"):
            assert key in result
        assert len(result["rewards"]) == 3
        assert len(result["kl"][0]) == max(lengths)


def test_cli_single_object_and_file(tmp_path):
    path = tmp_path / "case.json"
    path.write_text(json.dumps(_case("verl", {"adv_estimator": "rloo"})))
    proc = _cli("", str(path))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert isinstance(out, dict)
    assert [row[0] for row in out["advantages"]] == pytest.approx([0.4, -2.15, 1.75])


def test_cli_bad_input_subprocess():
    proc = _cli({"batch": {"scores": [1, 2], "response_mask": [[1], [1, 0]], "group": [0, 0]}})
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "batch.response_mask[1]" in lines[0]


def _main(monkeypatch, capsys, payload):
    text = payload if isinstance(payload, str) else json.dumps(payload)
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code = calculator.main(["-"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


GOOD = {"scores": [1.0, 2.0], "response_mask": [[1, 1], [1, 0]], "group": ["a", "a"]}
BAD_INPUTS = [
    ({"batch": {**GOOD, "scores": [1.0]}}, "batch.response_mask"),
    ({"batch": {**GOOD, "response_mask": [[1, 1], [1]]}}, "batch.response_mask[1]"),
    ({"batch": {**GOOD, "response_mask": [[1, 2], [1, 0]]}}, "batch.response_mask[0][1]"),
    ({"batch": {**GOOD, "group": ["a"]}}, "batch.group"),
    ({"batch": {**GOOD, "group": ["a", 1.5]}}, "batch.group[1]"),
    ({"batch": {**GOOD, "scores": [1.0, "x"]}}, "batch.scores[1]"),
    (
        '{"batch": {"scores": [1.0, NaN], "response_mask": [[1], [1]], "group": [0, 0]}}',
        "batch.scores[1]",
    ),
    (
        '{"batch": {"scores": [1.0, Infinity], "response_mask": [[1], [1]], "group": [0, 0]}}',
        "batch.scores[1]",
    ),
    ({"batch": {**GOOD, "values": [[0, 0], [0]]}}, "batch.values[1]"),
    ({"batch": {**GOOD, "logprobs": [[0, 0], [0, 0]]}}, "batch.ref_logprobs"),
    ({"batch": {**GOOD, "rewardz": [1, 2]}}, "batch.rewardz"),
    ({"batch": GOOD, "config": {"framework": "roll", "bogus": 1}}, "'bogus'"),
    ({"batch": GOOD, "config": {"framework": "verl", "adv_estimator": "ppo"}}, "'adv_estimator'"),
    ({"batch": GOOD, "config": {"framework": "megatron"}}, "config.framework"),
    ({"batch": GOOD, "config": {"framework": "roll"}}, "values"),  # gae needs values
    ({"batch": GOOD, "config": {"framework": "verl", "adv_estimator": "remax"}}, "baseline_scores"),
    ({"batch": GOOD, "config": {"framework": "verl", "gamma": float("nan")}}, "'gamma'"),
    ({"batch": GOOD, "extra": 1}, "'extra'"),
    ({"config": {}}, "batch"),
    ([], "input"),
    ("{not json", "invalid JSON"),
    (
        [{"batch": GOOD, "config": {"framework": "trl"}}, {"batch": {**GOOD, "scores": [1]}}],
        "case 1",
    ),
]


@pytest.mark.parametrize(("payload", "field"), BAD_INPUTS)
def test_cli_bad_inputs_one_line_naming_the_field(monkeypatch, capsys, payload, field):
    code, out, err = _main(monkeypatch, capsys, payload)
    assert code != 0
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    assert field in lines[0], lines[0]


def test_cli_missing_file_and_usage(capsys):
    assert calculator.main(["/nonexistent/cases.json"]) == 2
    assert "input file" in capsys.readouterr().err
    assert calculator.main([]) == 2
    assert calculator.main(["--help"]) == 0


def test_parse_case_and_trace_to_dict_round_trip():
    batch, framework, config = calculator.parse_case(
        {"batch": {**GOOD, "group": [7, "7"]}, "config": {"framework": "trl", "beta": 0.1}}
    )
    assert framework == "trl"
    assert config == {"beta": 0.1}
    assert batch.scores.dtype == torch.float64
    assert batch.group_ids.tolist() == [0, 1]
    assert batch.group_labels == (7, "7")
    with pytest.raises(ValueError, match="at least 2 samples"):
        run(batch, framework, config)
    batch, framework, config = calculator.parse_case({"batch": {**GOOD, "group": [7, 7]}})
    assert framework == "roll"
    assert config == {}
    d = calculator.trace_to_dict(run(batch, "trl"))
    json.dumps(d, allow_nan=False)
    assert d["advantages"][1][1] == 0.0
    assert d["config"]["scale_rewards"] == "group"
    assert set(d) >= {"rewards", "kl", "token_rewards", "advantages", "returns", "notes", "running"}
