"""History across steps and the TRL advantage cross-check."""

from __future__ import annotations

import math
import statistics

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from roll_viz.analysis import history
from roll_viz.data.runs import open_run
from tests.data.helpers import fixture, write_jsonl


def _trl_dump(tmp_path, advantage_fn):
    """A one-step TRL dump whose advantage column is ``advantage_fn(rewards of a group)``."""
    groups = [
        ("A", [1.0, 0.0, 0.5, 0.25]),
        ("B", [2.0, 2.0, 2.0, 2.0]),
        ("C", [0.0, 3.0, 1.0, 1.0]),
    ]
    rows = {"step": [], "prompt": [], "completion": [], "reward": [], "advantage": []}
    everything = [r for _, rs in groups for r in rs]
    for prompt, rs in groups:
        for k, (r, a) in enumerate(zip(rs, advantage_fn(rs, everything), strict=True)):
            rows["step"].append(1)
            rows["prompt"].append(prompt)
            rows["completion"].append(f"c{k}")
            rows["reward"].append(r)
            rows["advantage"].append(a)
    folder = tmp_path / "completions"
    folder.mkdir(parents=True)
    pq.write_table(pa.table(rows), folder / "completions_00001.parquet")
    return open_run(tmp_path)


def _grpo(rs, eps=1e-4, ddof=1):
    mu = statistics.fmean(rs)
    sd = math.sqrt(sum((r - mu) ** 2 for r in rs) / (len(rs) - ddof))
    return [(r - mu) / (sd + eps) for r in rs]


def test_trl_fixture_cross_check_passes():
    run = open_run(fixture("trl"))
    table = history.cross_check_run(run)
    assert table["mismatches"].tolist() == [0, 0]
    assert table["max_abs_diff"].max() < 1e-6
    rows = history.cross_check(run.summary(10))
    assert rows["match"].all()
    assert (rows["explained_by"] == "").all()


def test_batch_scaled_dump_is_flagged_with_the_convention():
    run = open_run(fixture("trl_batch_scale"))
    table = history.cross_check_run(run)
    assert table["mismatches"].tolist() == [8, 8]  # the zero-signal group matches (0 either way)
    assert table["explained_by"].str.startswith("scale_rewards=batch").all()
    rows = history.cross_check(run.summary(20))
    assert rows.loc[~rows["match"], "abs_diff"].min() > 1e-3
    assert set(rows.loc[rows["match"], "group"]) == {"g1"}


def test_eps_and_unexplained_mismatches(tmp_path):
    eps_run = _trl_dump(tmp_path / "eps", lambda rs, _: _grpo(rs, eps=1e-6))
    rows = history.cross_check(eps_run.summary(1))
    bad = rows[~rows["match"]]
    assert len(bad) == 8
    assert set(bad["explained_by"]) == {"eps 1e-6 (ROLL/verl) instead of TRL's 1e-4"}
    biased = _trl_dump(tmp_path / "ddof", lambda rs, _: _grpo(rs, ddof=0))
    assert set(history.cross_check(biased.summary(1)).query("not match")["explained_by"]) == {
        "biased std (ddof 0) instead of TRL's unbiased"
    }
    odd = _trl_dump(tmp_path / "odd", lambda rs, _: [2 * a + 0.3 for a in _grpo(rs)])
    assert set(history.cross_check(odd.summary(1))["explained_by"]) == {history.UNEXPLAINED}


def test_history_table_on_verl_matches_a_plain_loop():
    run = open_run(fixture("verl"))
    table = history.history_table(run).set_index("step")
    assert table.loc[1, "advantage_source"] == "recomputed: verl adv_estimator=grpo"
    s = run.summary(1)
    advantages = []
    for g in range(s.num_prompts):
        rs = s.scores[s.group_ids == g].tolist()
        advantages += _grpo(rs, eps=1e-6)  # verl GRPO: unbiased std + 1e-6
    assert table.loc[1, "advantage_max"] == pytest.approx(max(advantages))
    assert table.loc[1, "advantage_min"] == pytest.approx(min(advantages))
    assert table.loc[1, "reward_mean"] == pytest.approx(statistics.fmean(s.scores.tolist()))
    assert table.loc[1, "reward_std"] == pytest.approx(statistics.stdev(s.scores.tolist()))
    assert table.loc[1, "zero_signal_ids"] == ("a0b1c2",)
    assert table.loc[2, "zero_signal_ids"] == ("d3e4f5",)
    assert table.loc[1, "zero_signal_share"] == 0.5
    assert math.isnan(table.loc[1, "kl_k1_mean"])
    assert table.loc[1, "length_unit"] == "characters"


def test_history_table_uses_file_advantages_and_kl_when_present():
    trl = history.history_table(open_run(fixture("trl")))
    assert (trl["advantage_source"] == "file").all()
    assert trl["zero_signal_ids"].tolist() == [("g1",), ("g1",)]
    assert trl["zero_signal_share"].tolist() == pytest.approx([1 / 3, 1 / 3])
    board_run = open_run(fixture("rllb"))
    board = history.history_table(board_run).set_index("step")
    s = board_run.summary(0)
    assert board.loc[0, "kl_k3_mean"] == pytest.approx(float(s.kl_k3.mean()))
    assert board.loc[0, "length_unit"] == "tokens"
    assert board.loc[0, "length_max"] == 5.0
    forced = history.history_table(open_run(fixture("trl")), prefer_file=False)
    assert forced["advantage_source"].str.startswith("recomputed: trl").all()
    assert forced["advantage_std"].tolist() == pytest.approx(
        trl["advantage_std"].tolist(), abs=1e-6
    )


def test_recompute_unavailable_is_reported_not_raised(tmp_path):
    rows = [{"prompt": p, "response": "r", "reward": 1.0} for p in ("a", "b", "b")]
    run = open_run(write_jsonl(tmp_path / "s.jsonl", rows))
    table = history.history_table(run, framework="trl")
    source = table.loc[0, "advantage_source"]
    assert source.startswith("unavailable:")
    assert "'p0'" in source
    assert math.isnan(table.loc[0, "advantage_mean"])


def test_distributions_and_metrics_tables():
    run = open_run(fixture("trl"))
    rewards = history.distributions(run, "reward")
    assert len(rewards) == 24
    assert set(rewards["step"]) == {10, 20}
    assert rewards.loc[rewards["step"] == 10, "value"].tolist()[:4] == [1.5, 0.5, 1.0, 0.0]
    assert history.distributions(run, "kl_k1").empty
    adv = history.distributions(open_run(fixture("verl")), "advantage")
    assert len(adv) == 16
    metrics = history.metrics_table(run)
    assert metrics["reward"].tolist() == [0.9167, 0.6667]
    assert "step" in metrics.columns
    assert metrics["step"].tolist() == [10, 20]
    with pytest.raises(ValueError, match="unknown quantity"):
        history.distributions(run, "entropy")


def test_zero_signal_groups_directly():
    s = open_run(fixture("roll_dump")).summary(1)
    assert history.zero_signal_groups(s) == ("q18",)
    advantages = history.recompute_advantages(s, "roll", {"adv_estimator": "grpo"})
    zero_rows = s.group_ids == s.group_labels.index("q18")
    assert torch.equal(advantages[zero_rows], torch.zeros(3, dtype=torch.float64))
