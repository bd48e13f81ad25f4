"""Readers: each fixture format detected, scanned and loaded into the numbers its file holds."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from roll_viz.data.runs import detect, load_step, open_run
from roll_viz.data.runs.rllb import board_kl
from roll_viz.data.runs.rollviz import SCHEMA
from tests.data.helpers import fixture, write_jsonl


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    ("name", "fmt", "steps", "sizes"),
    [
        ("rllb", "rllb", (0, 1), [(6, 2), (6, 2)]),
        ("trl", "trl", (10, 20), [(12, 3), (12, 3)]),
        ("verl", "verl", (1, 2), [(8, 2), (8, 2)]),
        ("verl_legacy", "verl", (3,), [(8, 2)]),
        ("roll_dump", "roll-dump", (1, 2), [(6, 2), (6, 2)]),
        ("unipo/run.json", "unipo", (0, 1), [(4, 2), (4, 2)]),
        ("unipo/run.jsonl", "unipo-jsonl", (0, 1), [(4, 2), (4, 2)]),
        ("plain/samples.csv", "plain-csv", (0, 1), [(6, 2), (3, 1)]),
        ("plain/samples.jsonl", "plain", (0,), [(6, 2)]),
        ("rollviz/run.jsonl", "rollviz", (0, 2), [(4, 2), (4, 2)]),
    ],
)
def test_every_fixture_is_detected_and_scanned(name, fmt, steps, sizes):
    run = open_run(fixture(name))
    assert run.format == fmt
    assert run.steps == steps
    assert [(s.samples, s.num_prompts) for s in run.summaries] == sizes
    assert run.warnings == ()
    for step in run.steps:
        loaded = load_step(run, step)
        summary = run.summary(step)
        assert loaded.total_samples == summary.samples
        # same multiset of scores per group label in the scan and the load
        for g, label in enumerate(loaded.group_labels):
            ours = sorted(loaded.scores[loaded.group_ids == g].tolist())
            k = summary.group_labels.index(label)
            assert ours == sorted(summary.scores[summary.group_ids == k].tolist())
        # rows of one prompt contiguous (what Rollout requires)
        ids = loaded.group_ids.tolist()
        assert ids == sorted(ids)


def test_rllb_strips_trailing_pads_and_aligns_every_series():
    path = fixture("rllb/data_20260101_120000_000.jsonl")
    raw = _rows(path)
    step = load_step(open_run(path), 0)
    assert step.source_format == "rllb"
    assert step.lengths.tolist() == [len(r["response_tokens"]) for r in raw[:6]]
    assert step.response_mask.shape == (6, 5)
    for b, r in enumerate(raw[:6]):
        n = sum(r["new_response_mask"])
        assert step.tokens[b] == tuple(r["response_tokens"])
        assert step.logprobs[b, :n].tolist() == r["logprobs"][:n]
        assert step.ref_logprobs[b, :n].tolist() == r["ref_logprobs"][:n]
        # token_rewards is wider than the log-prob lists; aligned at the first response token
        assert step.token_rewards[b, :n].tolist() == r["token_rewards"][:n]
        assert step.token_rewards[b, n - 1].item() == r["reward"]
        assert float(step.response_mask[b].sum()) == n
        assert step.response_mask[b, n:].sum() == 0
        assert step.logprobs[b, n:].abs().sum() == 0
    assert step.scores.tolist() == [r["reward"] for r in raw[:6]]
    assert "normalized" in step.score_kind


def test_rllb_values_copy_is_not_a_critic_and_kl_has_the_usual_sign():
    path = fixture("rllb/data_20260101_120000_000.jsonl")
    run = open_run(path)
    step = load_step(run, 0)
    assert step.to_batch().values is None
    assert any("not a critic" in n for n in run.notes)
    assert any("sign flipped" in n for n in run.notes)
    raw = _rows(path)[0]
    n = len(raw["response_tokens"])
    lp = torch.tensor(raw["logprobs"][:n], dtype=torch.float64)
    ref = torch.tensor(raw["ref_logprobs"][:n], dtype=torch.float64)
    usual_k3 = float((torch.exp(ref - lp) - (ref - lp) - 1).mean())
    board = float(board_kl(lp, ref).mean())
    summary = run.summary(0)
    assert summary.kl_k3[0].item() == pytest.approx(usual_k3, rel=1e-12)
    assert summary.kl_k1[0].item() == pytest.approx(float((lp - ref).mean()), rel=1e-12)
    assert abs(board - usual_k3) > 1e-4  # the trap: the board's kl is a different number
    d = 0.3
    f64 = torch.float64
    assert board_kl(
        torch.tensor([d], dtype=f64), torch.zeros(1, dtype=f64)
    ).item() == pytest.approx(math.exp(d) - 1 - d)


def test_rllb_values_that_differ_from_token_rewards_are_critic_values(tmp_path):
    raw = _rows(fixture("rllb/data_20260101_120000_000.jsonl"))[:3]
    for r in raw:
        r["values"] = [0.5] * len(r["token_rewards"])
    step = load_step(open_run(write_jsonl(tmp_path / "c.jsonl", raw)), 0)
    assert step.values is not None
    assert step.values[0, :5].tolist() == [0.5] * 5
    assert step.values[2, 2:].abs().sum() == 0  # masked positions are 0
    assert torch.equal(step.to_batch().values, step.values)


def test_rllb_step_becomes_a_rollout():
    step = load_step(open_run(fixture("rllb")), 1)
    rollout = step.to_rollout()
    assert rollout.group_size == 3
    assert rollout.prompts == step.prompts
    assert rollout.tokens == step.tokens
    for b, toks in enumerate(step.tokens):
        ids = rollout.token_ids[b, : len(toks)].tolist()
        assert [rollout.vocab[i] for i in ids] == list(toks)
    assert torch.equal(rollout.logprobs, step.logprobs.float())
    meta = dict(rollout.meta)
    assert meta["source"] == "rllb"
    assert meta["step"] == 1
    assert "exact_kl" in meta["missing"]
    assert "topk" in meta["missing"]
    assert rollout.topk_ids.shape == (6, step.response_mask.shape[1], 0)


def test_rollout_needs_token_log_probs():
    step = load_step(open_run(fixture("verl")), 1)
    assert not step.has_tokens
    assert step.response_mask.shape == (8, 1)
    with pytest.raises(ValueError, match="tokens, logprobs, ref_logprobs"):
        step.to_rollout()


def test_trl_groups_are_runs_of_consecutive_equal_prompts(tmp_path):
    folder = tmp_path / "completions"
    folder.mkdir()
    table = pa.table(
        {
            "step": [5] * 6,
            "prompt": ["A", "A", "B", "B", "A", "A"],
            "completion": ["a1", "a2", "b1", "b2", "a3", "a4"],
            "acc": [1.0, 0.0, 1.0, 1.0, None, 0.5],
            "fmt": [0.5, 0.5, 0.0, None, 0.25, 0.25],
            "advantage": [0.7, -0.7, 0.0, 0.0, -0.7, 0.7],
        }
    )
    pq.write_table(table, folder / "completions_00005.parquet")
    run = open_run(tmp_path)
    assert run.format == "trl"
    step = load_step(run, 5)
    assert step.group_labels == ("g0", "g1", "g2")
    assert step.prompts == ("A", "B", "A")
    assert step.group_ids.tolist() == [0, 0, 1, 1, 2, 2]
    # nansum over the reward functions (None = the function returned None)
    assert step.scores.tolist() == [1.5, 0.5, 1.0, 1.0, 0.25, 0.75]
    assert step.reward_names == ("acc", "fmt")
    assert step.advantages.tolist() == [0.7, -0.7, 0.0, 0.0, -0.7, 0.7]
    assert math.isnan(step.column("acc")[4].item())


def test_trl_fixture_reads_rewards_advantages_and_trainer_state():
    run = open_run(fixture("trl"))
    step = load_step(run, 10)
    assert step.column("accuracy_reward").tolist()[:4] == [1.0, 0.0, 1.0, 0.0]
    assert step.scores.tolist()[:4] == [1.5, 0.5, 1.0, 0.0]
    assert step.advantages is not None
    assert dict(step.metrics)["frac_reward_zero_std"] == 0.3333
    assert "logprobs" in run.missing
    assert "advantages" in run.present


def test_verl_v1_groups_by_uid_prefix_and_legacy_by_input():
    v1 = load_step(open_run(fixture("verl")), 2)
    assert v1.group_labels == ("9f1c2e", "d3e4f5")
    assert v1.column("acc").tolist() == v1.scores.tolist()
    legacy_run = open_run(fixture("verl_legacy"))
    assert any("identical input" in n for n in legacy_run.notes)
    legacy = load_step(legacy_run, 3)
    raw = _rows(fixture("verl_legacy/3.jsonl"))
    # rows interleaved in the file (balance_batch), contiguous after loading
    assert [r["input"] for r in raw[:2]] != [raw[0]["input"]] * 2
    assert legacy.group_ids.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert legacy.scores.tolist() == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert [line for _, line in legacy.sources] == [1, 3, 5, 7, 2, 4, 6, 8]


def test_roll_dump_is_transposed_and_grouped_by_id():
    step = load_step(open_run(fixture("roll_dump")), 2)
    assert step.group_labels == ("q17", "q19")
    assert step.scores.tolist() == [1.0, 1.0, 1.0, 0.0, 1.0, 0.5]
    assert step.responses[0] == "The answer is 0."
    assert "raw score" in step.score_kind


def test_unipo_json_and_jsonl_read_the_same_and_keep_metrics_only_steps():
    a = open_run(fixture("unipo/run.json"))
    b = open_run(fixture("unipo/run.jsonl"))
    sa, sb = load_step(a, 1), load_step(b, 1)
    assert torch.equal(sa.scores, sb.scores)
    assert torch.equal(sa.token_ids, sb.token_ids)
    assert torch.equal(sa.logprobs, sb.logprobs)
    assert sa.tokens == sb.tokens
    assert sa.advantages.tolist() == [-0.35, 0.35, -0.5, 0.5]
    assert dict(a.header)["algorithm"] == "grpo"
    assert [s for s, _ in a.step_metrics] == [0, 1, 2]  # step 2 has metrics, no prompts
    assert dict(dict(a.step_metrics)[2])["policy_objective"] == 0.3
    assert a.steps == (0, 1)


def test_unipo_prob_becomes_log_probs(tmp_path):
    entry = {
        "type": "step",
        "step": 0,
        "metrics": {"policy_objective": 0.0, "reward": 1.0},
        "prompts": [
            {
                "prompt": "x",
                "responses": [
                    {"id": "a", "reward": 1.0, "tokens": {"ids": [1, 2], "prob": [0.5, 0.25]}},
                    {"id": "b", "reward": 0.0, "tokens": {"ids": [3], "prob": [1.0]}},
                ],
            }
        ],
    }
    path = write_jsonl(tmp_path / "u.jsonl", [{"type": "header", "algorithm": "ppo"}, entry])
    step = load_step(open_run(path), 0)
    assert step.logprobs[0].tolist() == pytest.approx([math.log(0.5), math.log(0.25)])
    assert step.logprobs[1, 0].item() == 0.0


def test_plain_csv_and_jsonl_group_by_column_or_prompt():
    csv_run = open_run(fixture("plain/samples.csv"))
    assert load_step(csv_run, 0).group_labels == ("a", "b")
    jsonl = load_step(open_run(fixture("plain/samples.jsonl")), 0)
    assert jsonl.group_labels == ("p0", "p1")
    assert jsonl.prompts == ("What is 2+3?", "Say hi")
    assert jsonl.length_unit == "characters"
    assert jsonl.lengths.tolist() == [1, 1, 4, 2, 5, 3]


def test_rollviz_run_file_written_by_the_trainer_reads_back(tmp_path):
    from roll_viz.lm import runfile

    assert SCHEMA == runfile.SCHEMA
    samples = runfile.StepSamples(
        prompts=("What is 2 + 3?",),
        group_ids=(0, 0),
        responses=("5", "6!"),
        rewards=(1.0, 0.0),
        finish=("eos", "length"),
        tokens=(("5",), ("6", "!")),
        token_ids=((7,), (8, 9)),
        logprobs=((-0.5,), (-0.7, -0.2)),
        ref_logprobs=((-0.6,), (-0.9, -0.1)),
        exact_kl=((0.01,), (0.02, 0.03)),
        entropy=((1.0,), (1.1, 1.2)),
        advantages=((0.7,), (-0.7, -0.7)),
    )
    record = runfile.StepRecord(step=0, metrics={"reward_mean": 0.5, "loss": 0.1}, samples=samples)
    settings = runfile.TrainSettings.flat(prompts=("What is 2 + 3?",), group_size=2, model="tiny")
    text = runfile.TrainRun(settings=settings, steps=(record,), model="tiny").to_jsonl()
    path = tmp_path / "run.jsonl"
    path.write_text(text, encoding="utf-8")
    run = open_run(path)
    assert run.format == "rollviz"
    step = load_step(run, 0)
    assert step.scores.tolist() == [1.0, 0.0]
    assert step.token_ids.tolist() == [[7, 0], [8, 9]]
    assert step.token_advantages[1].tolist() == [-0.7, -0.7]
    assert step.exact_kl[1].tolist() == [0.02, 0.03]
    rollout = step.to_rollout()
    assert torch.equal(rollout.exact_kl, step.exact_kl.float())
    assert "exact_kl" not in dict(rollout.meta)["missing"]
    assert dict(step.metrics)["reward_mean"] == 0.5


def test_token_cap_keeps_whole_prompts_and_says_so():
    run = open_run(fixture("rllb"))
    step = load_step(run, 0, max_tokens=10)
    assert step.total_prompts == 2
    assert step.total_samples == 6
    assert step.group_labels == ("p0",)  # p0 has 5 + 4 + 2 = 11 tokens: kept (first prompt)
    assert step.scores.numel() == 3
    assert any("token cap: kept 1 of 2 prompts" in n for n in step.notes)
    full = load_step(run, 0)
    assert full.group_labels == ("p0", "p1")


def test_capped_load_reads_only_the_kept_prompts_lines(tmp_path):
    path = tmp_path / "board.jsonl"
    path.write_bytes(fixture("rllb/data_20260101_120000_000.jsonl").read_bytes())
    run = open_run(path)
    lines = path.read_bytes().split(b"\n")
    lines[-2] = b"#" * len(lines[-2])  # step 1, prompt p1: same length, no longer JSON
    path.write_bytes(b"\n".join(lines))
    capped = load_step(run, 1, max_tokens=7)
    assert capped.group_labels == ("p0",)
    assert not any("while loading" in n for n in capped.notes)
    full = load_step(run, 1)
    assert any("while loading: 1 problem(s)" in n and ":12:" in n for n in full.notes)
    assert full.total_samples == 6
    assert full.scores.numel() == 5


def test_detect_reports_folder_files_and_side_metrics():
    name, files, side = detect(fixture("trl"))
    assert name == "trl"
    assert [f.name for f in files] == ["completions_00010.parquet", "completions_00020.parquet"]
    assert [f.name for f in side] == ["trainer_state.json"]


def test_verl_metrics_log_next_to_the_dump_is_read(tmp_path):
    write_jsonl(
        tmp_path / "1.jsonl",
        [{"input": "q", "output": f"o{k}", "score": float(k), "step": 1} for k in range(2)],
    )
    write_jsonl(
        tmp_path / "exp.jsonl",
        [{"step": 1, "data": {"critic/score/mean": 0.5, "actor/pg_clipfrac": 0.01}}],
    )
    run = open_run(tmp_path)
    assert run.format == "verl"
    assert dict(run.summary(1).metrics) == {"actor/pg_clipfrac": 0.01, "critic/score/mean": 0.5}
