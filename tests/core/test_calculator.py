import io
import json
import math
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


# ---------------------------------------------------------------- policy-update loss fields

LOSS_BATCH = {
    "scores": SEED_SCORES,
    "response_mask": [[1, 1, 1], [1, 1, 0], [1, 1, 1]],
    "group": ["q", "q", "q"],
    "logprobs": [[-1.0, -1.0, -1.0], [-1.0, -1.0, 0.0], [-1.0, -1.0, -1.0]],
    "old_logprobs": [[-1.1, -0.9, -1.0], [-1.0, -1.5, 0.0], [-1.0, -1.0, -2.0]],
    "ref_logprobs": [[-1.2, -1.0, -1.0], [-1.0, -1.0, 0.0], [-1.0, -1.0, -1.0]],
}


def test_cli_loss_fields_match_policy_loss():
    from roll_viz.core.pipeline import policy_loss

    config = {"framework": "verl", "adv_estimator": "grpo", "use_kl_loss": True}
    proc = _cli({"batch": LOSS_BATCH, "config": config})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    f = torch.float64
    batch, framework, cfg = calculator.parse_case({"batch": LOSS_BATCH, "config": config})
    # the pipeline's in-reward KL sees the rollout (old) log-probs
    assert batch.logprobs.tolist() == LOSS_BATCH["old_logprobs"]
    trace = run(batch, framework, cfg)
    res = policy_loss(
        framework,
        cfg,
        logprobs=torch.tensor(LOSS_BATCH["logprobs"], dtype=f),
        old_logprobs=torch.tensor(LOSS_BATCH["old_logprobs"], dtype=f),
        ref_logprobs=torch.tensor(LOSS_BATCH["ref_logprobs"], dtype=f),
        advantages=trace.advantages,
        response_mask=batch.response_mask,
    )
    for key in ("ratio", "pg_loss", "grad_coef", "loss_weight"):
        got = torch.tensor(out[key], dtype=f)
        torch.testing.assert_close(got, res.per_token[key], rtol=0, atol=1e-15, msg=key)
    assert out["ratio"][0][0] == pytest.approx(1.1051709180756477)
    assert out["ratio"][1][2] == 0.0  # padding
    assert out["clipped_high"] == [[0, 0, 0], [0, 0, 0], [0, 0, 1]]  # r = e with A > 0
    assert out["clipped_low"] == [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert out["dual_clipped"] == [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert out["grad_coef"][2][2] == 0.0
    loss = out["loss"]
    assert loss["total"] == pytest.approx(res.total.item())
    assert loss["kl"] == pytest.approx(res.terms["kl"].item())
    assert loss["kl"] > 0  # current logprobs differ from ref at token (0, 0)
    assert loss["entropy"] is None
    assert loss["value"] is None
    assert loss["coefficients"] == {"rl": 1.0, "kl": 0.001, "entropy": 0.0}
    assert set(out["metrics"]) >= {"actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl"}
    assert out["metrics"]["actor/pg_clipfrac"] == pytest.approx(1 / 8)
    assert out["config"]["clip_ratio_c"] == 3.0
    assert out["loss_notes"]


def test_cli_loss_with_entropy_and_without_ref(monkeypatch, capsys):
    batch = {k: v for k, v in LOSS_BATCH.items() if k != "ref_logprobs"}
    batch["entropy"] = [[1.0, 2.0, 3.0], [0.5, 0.5, 9.0], [1.0, 1.0, 1.0]]
    code, out, err = _main(
        monkeypatch,
        capsys,
        {"batch": batch, "config": {"framework": "trl", "entropy_coef": 0.1, "loss_type": "grpo"}},
    )
    assert code == 0, err
    result = json.loads(out)
    assert result["loss"]["entropy"] == pytest.approx(10.0 / 8)  # TRL: token-mean entropy
    assert result["loss"]["kl"] is None
    assert "clip_ratio/region_mean" in result["metrics"]
    assert all(v == 0 for v in result["kl"][0])  # no ref: the pipeline KL is 0
    without = _main(monkeypatch, capsys, {"batch": GOOD, "config": {"framework": "trl"}})[1]
    assert "grad_coef" not in json.loads(without)


def test_cli_loss_runs_on_rolls_sample_level_mask(monkeypatch, capsys):
    """ROLL max_len_mask: the loss runs on final_response_mask, as ROLL's worker does."""
    from roll_viz.core.pipeline import policy_loss

    config = {"framework": "roll", "adv_estimator": "grpo", "max_len_mask": True}
    code, out, err = _main(monkeypatch, capsys, {"batch": LOSS_BATCH, "config": config})
    assert code == 0, err
    result = json.loads(out)
    batch, framework, cfg = calculator.parse_case({"batch": LOSS_BATCH, "config": config})
    trace = run(batch, framework, cfg)
    assert trace.sample_mask.tolist() == [0.0, 1.0, 0.0]  # rows 0 and 2 reach the width T = 3
    f = torch.float64
    inputs = dict(
        logprobs=torch.tensor(LOSS_BATCH["logprobs"], dtype=f),
        old_logprobs=torch.tensor(LOSS_BATCH["old_logprobs"], dtype=f),
        ref_logprobs=torch.tensor(LOSS_BATCH["ref_logprobs"], dtype=f),
        advantages=trace.advantages,
        response_mask=batch.response_mask,
    )
    masked = policy_loss(framework, cfg, sample_mask=trace.sample_mask, **inputs)
    unmasked = policy_loss(framework, cfg, **inputs)
    assert result["loss"]["total"] == pytest.approx(masked.total.item())
    assert masked.total.item() != pytest.approx(unmasked.total.item())
    assert run(batch, "roll", {"adv_estimator": "grpo"}).sample_mask is None  # masks off


LOSS_BAD_INPUTS = [
    ({**LOSS_BATCH, "old_logprobs": [[-1.0, -1.0, -1.0]]}, {}, "batch.old_logprobs"),
    ({**LOSS_BATCH, "old_logprobs": [[-1.0, -1.0]] * 3}, {}, "batch.old_logprobs[0]"),
    ({**LOSS_BATCH, "old_logprobs": [[-1.0, "x", -1.0]] * 3}, {}, "batch.old_logprobs[0][1]"),
    ({k: v for k, v in LOSS_BATCH.items() if k != "logprobs"}, {}, "batch.logprobs"),
    ({**GOOD, "entropy": [[1.0, 1.0], [1.0, 1.0]]}, {}, "batch.entropy"),
    ({**LOSS_BATCH, "entropy": [[1.0, 1.0, 1.0]] * 2}, {}, "batch.entropy"),
    (
        {k: v for k, v in LOSS_BATCH.items() if k != "ref_logprobs"},
        {"framework": "trl", "beta": 0.1},
        "batch.ref_logprobs",
    ),
    (LOSS_BATCH, {"framework": "trl", "entropy_coef": 0.1}, "batch.entropy"),
    (LOSS_BATCH, {"framework": "verl", "adv_estimator": "grpo", "clip_ratio_c": 0.5}, "config"),
    (LOSS_BATCH, {"framework": "trl", "loss_type": "ppo"}, "'loss_type'"),
]


@pytest.mark.parametrize(("batch", "config", "field"), LOSS_BAD_INPUTS)
def test_cli_loss_bad_inputs(monkeypatch, capsys, batch, config, field):
    config = {"framework": "trl", **config}
    code, out, err = _main(monkeypatch, capsys, {"batch": batch, "config": config})
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert field in lines[0], lines[0]


def test_cli_prints_logged_metric_names_with_notes(monkeypatch, capsys):
    code, out, err = _main(
        monkeypatch,
        capsys,
        {
            "batch": LOSS_BATCH,
            "config": {"framework": "roll", "pg_variant": "cispo", "adv_estimator": "grpo"},
        },
    )
    assert code == 0, err
    result = json.loads(out)
    name = "actor/cispo_cispo_total_clipfrac"  # ROLL's doubled prefix, as it logs it
    assert name in result["metrics"]
    assert "padding included" in result["metric_notes"][name]
    code, out, err = _main(
        monkeypatch,
        capsys,
        {
            "batch": LOSS_BATCH,
            "config": {"framework": "verl", "loss_mode": "dppo_tv", "adv_estimator": "grpo"},
        },
    )
    assert code == 0, err
    result = json.loads(out)
    assert len(result["valid"]) == 3
    assert set(result["valid"][0]) <= {0, 1}


def test_cli_reward_components_feed_gdpo(monkeypatch, capsys):
    batch = {
        "scores": [1.0, 1.0, 0.0, 1.0],
        "response_mask": [[1], [1], [1], [1]],
        "group": ["q"] * 4,
        "reward_components": {"format": [1, 1, 0, 0], "accuracy": [0, 0, 0, 1]},
    }
    config = {"framework": "verl", "adv_estimator": "gdpo", "gdpo_reward_keys": ["format"]}
    code, out, err = _main(monkeypatch, capsys, {"batch": batch, "config": config})
    assert code == 0, err
    adv = [row[0] for row in json.loads(out)["advantages"]]
    assert adv[0] == pytest.approx(adv[1])
    assert adv[0] == pytest.approx(-adv[2])  # format alone: +-, whitened
    batch["reward_components"] = {"format": [1, 1]}
    code, out, err = _main(monkeypatch, capsys, {"batch": batch, "config": config})
    assert code == 2
    assert "reward_components.format" in err or "format" in err


def test_cli_rollout_logprobs_feed_the_openrlhf_correction(monkeypatch, capsys):
    batch = dict(LOSS_BATCH)
    batch["rollout_logprobs"] = [[v - 0.3 for v in row] for row in LOSS_BATCH["old_logprobs"]]
    config = {"framework": "openrlhf", "advantage_estimator": "group_norm",
              "is_correction_level": "token"}  # fmt: skip
    code, out, err = _main(monkeypatch, capsys, {"batch": batch, "config": config})
    assert code == 0, err
    result = json.loads(out)
    assert result["metrics"]["vllm_kl"] == pytest.approx(-0.3)
    assert result["is_coef"][0][0] == pytest.approx(math.exp(0.3))
    del batch["old_logprobs"]
    code, out, err = _main(monkeypatch, capsys, {"batch": batch, "config": config})
    assert code == 2
    assert "batch.rollout_logprobs" in err


def test_cli_sum_pi_squared_feeds_the_optimal_token_baseline(monkeypatch, capsys):
    batch = {
        "scores": [1.0, 0.0],
        "response_mask": [[1, 1], [1, 0]],
        "group": ["q", "q"],
        "logprobs": [[math.log(0.5)] * 2] * 2,
        "ref_logprobs": [[math.log(0.5)] * 2] * 2,
        "sum_pi_squared": [[0.5, 0.5], [0.5, 0.5]],
    }
    config = {"framework": "verl", "adv_estimator": "optimal_token_baseline"}
    code, out, err = _main(monkeypatch, capsys, {"batch": batch, "config": config})
    assert code == 0, err
    adv = json.loads(out)["advantages"]
    assert adv[0][1] == pytest.approx(1.0)
    assert adv[1][0] == pytest.approx(-0.5 / (1 + 1e-8))
