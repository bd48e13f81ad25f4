"""Export: the app's batches and imported steps as UNIPO JSONL, RL Logging Board JSONL, compute."""

from __future__ import annotations

import json

import pytest
import torch

from roll_viz.cli.calculator import compute
from roll_viz.core.pipeline import run as run_pipeline
from roll_viz.core.records import batch_from_rollout
from roll_viz.data.presets import load_preset
from roll_viz.data.runs import load_step, open_run
from roll_viz.data.runs.export import (
    step_to_compute,
    step_to_rllb,
    step_to_unipo,
    trace_to_compute,
    trace_to_rllb,
    trace_to_unipo,
)
from roll_viz.rewards import score_rollout
from tests.data.helpers import fixture

CONFIG = {"adv_estimator": "grpo", "add_token_level_kl": True, "init_kl_coef": 0.1}


@pytest.fixture(scope="module")
def app_batch():
    _, spec, rollout = load_preset("arithmetic")
    scores = score_rollout(rollout, spec)
    trace = run_pipeline(batch_from_rollout(rollout, scores), "roll", CONFIG)
    return rollout, scores, trace


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_app_batch_as_compute_reproduces_the_trace(app_batch):
    rollout, scores, trace = app_batch
    case = trace_to_compute(rollout, scores, trace)
    assert case["config"]["framework"] == "roll"
    out = compute(json.loads(json.dumps(case)))
    assert torch.allclose(torch.tensor(out["advantages"], dtype=torch.float64), trace.advantages)
    assert torch.allclose(torch.tensor(out["kl"], dtype=torch.float64), trace.kl)


def test_app_batch_as_unipo_reads_back(app_batch, tmp_path):
    rollout, scores, trace = app_batch
    lines = trace_to_unipo(rollout, scores, trace, step=3)
    header, body = json.loads(lines[0]), json.loads(lines[1])
    assert header["type"] == "header"
    assert header["algorithm"] == "roll"
    mask = rollout.response_mask.to(torch.float64)
    expected = float((trace.advantages * mask).sum() / mask.sum())
    assert body["metrics"]["policy_objective"] == pytest.approx(expected, abs=1e-12)
    assert body["batch"]["promptsInBatch"] == len(rollout.prompts)
    step = load_step(open_run(_write(tmp_path, "app.jsonl", lines)), 3)
    assert step.scores.tolist() == pytest.approx(scores.tolist())
    assert torch.equal(step.token_ids, rollout.token_ids * rollout.response_mask.long())
    assert step.tokens == rollout.tokens
    assert torch.allclose(step.logprobs, rollout.logprobs.to(torch.float64) * mask)
    assert torch.allclose(step.token_advantages, trace.advantages)
    assert torch.allclose(step.token_rewards, trace.token_rewards)
    first = trace.advantages[torch.arange(len(scores)), 0]
    assert torch.allclose(step.advantages, first)


def test_app_batch_as_rllb_reads_back_in_rolls_writer_shape(app_batch, tmp_path):
    rollout, scores, trace = app_batch
    lines = trace_to_rllb(rollout, scores, trace, step=7)
    first = json.loads(lines[0])
    assert first["values"] == first["token_rewards"]  # ROLL writes token_level_rewards twice
    assert first["reward"] == pytest.approx(float(trace.rewards[0]))
    step = load_step(open_run(_write(tmp_path, "board.jsonl", lines)), 7)
    assert torch.allclose(step.scores, trace.rewards)
    assert torch.allclose(step.token_rewards, trace.token_rewards)
    assert step.tokens == rollout.tokens
    assert step.group_ids.tolist() == rollout.group_ids.tolist()


def test_imported_step_round_trips_through_rllb_and_unipo(tmp_path):
    original = load_step(open_run(fixture("rllb")), 1)
    again = load_step(open_run(_write(tmp_path, "b.jsonl", step_to_rllb(original))), 1)
    assert torch.equal(again.scores, original.scores)
    assert torch.equal(again.logprobs, original.logprobs)
    assert torch.equal(again.token_rewards, original.token_rewards)
    assert again.tokens == original.tokens
    unipo = load_step(open_run(_write(tmp_path, "u.jsonl", step_to_unipo(original))), 1)
    assert torch.equal(unipo.scores, original.scores)
    assert torch.equal(unipo.ref_logprobs, original.ref_logprobs)
    assert unipo.tokens == original.tokens
    assert unipo.group_ids.tolist() == original.group_ids.tolist()


def test_text_only_step_exports_without_token_fields(tmp_path):
    step = load_step(open_run(fixture("trl")), 20)
    line = json.loads(step_to_unipo(step)[1])
    response = line["prompts"][0]["responses"][0]
    assert "tokens" not in response
    assert response["advantage"] == pytest.approx(float(step.advantages[0]))
    board = [json.loads(x) for x in step_to_rllb(step)]
    assert "response_tokens" not in board[0]
    assert board[0]["reward"] == float(step.scores[0])


@pytest.mark.parametrize(
    ("name", "framework"), [("trl", "trl"), ("rllb", "roll"), ("verl", "verl")]
)
def test_step_as_compute_matches_the_pipeline(name, framework):
    run = open_run(fixture(name))
    step = load_step(run, run.steps[0])
    config = {"scale_rewards": "group"} if framework == "trl" else {"adv_estimator": "grpo"}
    case = step_to_compute(step, framework, config)
    assert ("logprobs" in case["batch"]) == (step.logprobs is not None)
    out = compute(json.loads(json.dumps(case)))
    trace = run_pipeline(step.to_batch(), framework, config)
    assert torch.allclose(torch.tensor(out["advantages"], dtype=torch.float64), trace.advantages)
    if name == "trl":  # TRL's own advantage column, produced by TRL's formula
        ours = torch.tensor(out["advantages"], dtype=torch.float64)[:, 0]
        assert torch.allclose(ours, step.advantages, atol=1e-6)
