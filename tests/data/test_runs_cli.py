"""``runs inspect`` / ``runs export``: one JSON object, conversions, exit 2 on bad files."""

from __future__ import annotations

import json

import pytest
import torch

from roll_viz.cli.calculator import compute
from roll_viz.cli.runs import main
from roll_viz.data.runs import load_step, open_run
from tests.data.helpers import fixture


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect_describes_format_steps_and_missing_fields(capsys):
    code, out, err = _run(capsys, ["inspect", str(fixture("verl"))])
    assert code == 0
    assert err == ""
    info = json.loads(out)
    assert info["format"] == "verl"
    assert info["steps"] == [1, 2]
    assert info["per_step"][0] | {"reward_mean": None} == {
        "step": 1,
        "prompts": 2,
        "samples": 8,
        "samples_per_prompt": {"min": 4, "max": 4},
        "reward_mean": None,
        "has_advantages": False,
        "has_kl": False,
        "metrics": 0,
    }
    assert {"logprobs", "ref_logprobs", "advantages", "tokens"} <= set(info["missing"])
    assert "group_ids" in info["present"]
    assert any("uid" in n for n in info["notes"])


def test_inspect_lists_warnings(capsys):
    code, out, _ = _run(capsys, ["inspect", str(fixture("bad/mixed.jsonl"))])
    assert code == 0
    info = json.loads(out)
    assert [(w["line"], w["field"]) for w in info["warnings"]][:2] == [(2, None), (3, "reward")]


@pytest.mark.parametrize("target", ["unipo", "rllb", "compute"])
def test_export_writes_a_step_in_another_format(capsys, tmp_path, target):
    code, out, err = _run(capsys, ["export", str(fixture("rllb")), "--step", "1", "--to", target])
    assert code == 0
    assert err == ""
    original = load_step(open_run(fixture("rllb")), 1)
    if target == "compute":
        case = json.loads(out)
        assert case["config"] == {"framework": "roll", "adv_estimator": "grpo"}
        result = compute(case)
        assert len(result["advantages"]) == 6
        return
    path = tmp_path / "out.jsonl"
    path.write_text(out, encoding="utf-8")
    again = load_step(open_run(path), 1)
    assert torch.equal(again.scores, original.scores)
    assert again.tokens == original.tokens


def test_export_to_a_file_and_default_step_and_framework(capsys, tmp_path):
    target = tmp_path / "case.json"
    code, out, _ = _run(
        capsys,
        ["export", str(fixture("trl")), "--to", "compute", "--out", str(target)],
    )
    assert code == 0
    assert out == ""
    case = json.loads(target.read_text(encoding="utf-8"))
    assert case["config"] == {"framework": "trl", "scale_rewards": "group"}
    assert case["batch"]["scores"][:4] == [1.5, 1.5, 1.0, 0.5]  # step 20, the last
    code, out, _ = _run(
        capsys, ["export", str(fixture("trl")), "--to", "compute", "--framework", "verl"]
    )
    assert json.loads(out)["config"] == {"framework": "verl"}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["inspect", "bad/all_bad.jsonl"], "all_bad.jsonl:1: reward: no valid sample"),
        (["inspect", "bad/empty.jsonl"], "empty.jsonl: empty file"),
        (["inspect", "bad/rollout_dump_data.step_1.jsonl"], "step_1.jsonl:1: scores:"),
        (["inspect", "bad/mixed.jsonl", "--strict"], "mixed.jsonl:2: invalid JSON"),
        (["export", "rllb", "--step", "9", "--to", "rllb"], "step 9 is not in"),
        (["inspect", "nope.jsonl"], "nope.jsonl: no such file or folder"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, expected):
    argv = [argv[0], str(fixture(argv[1])), *argv[2:]]
    code, out, err = _run(capsys, argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert expected in err


def test_inspect_reads_an_explicit_metrics_file(capsys, tmp_path):
    metrics = tmp_path / "m.jsonl"
    metrics.write_text('{"step": 1, "data": {"actor/ppo_kl": 0.002}}\n', encoding="utf-8")
    code, out, _ = _run(capsys, ["inspect", str(fixture("verl")), "--metrics", str(metrics)])
    assert code == 0
    info = json.loads(out)
    assert [s["metrics"] for s in info["per_step"]] == [1, 0]
    assert "metrics" not in info["missing"]


def test_usage_errors(capsys):
    code, _, err = _run(capsys, ["export", str(fixture("rllb")), "--to", "csv"])
    assert code == 2
    assert "invalid choice" in err
    code, out, _ = _run(capsys, ["--help"])
    assert code == 0
    assert "inspect" in out
