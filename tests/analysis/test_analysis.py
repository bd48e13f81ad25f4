"""Unit tests of roll_viz.analysis against hand-computed values (algorithms.md T1, T14)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from roll_viz.analysis import common, compare, local_global, reward_table, sweep
from roll_viz.core.records import Batch
from roll_viz.views import text
from tests.synthetic import batch_of, consistent_rollout

T1_LOCAL = (0.201965964, -1.085567055, 0.883601091)


# --- editable reward table -------------------------------------------------------------------
def test_default_table_is_the_seed_example_plus_a_low_variance_prompt():
    table = reward_table.default_reward_table()
    assert list(table.columns) == ["prompt", "reward"]
    assert table["reward"].tolist()[:3] == ["8.2", "6.5", "9.1"]  # cells as typed (text)
    assert table["prompt"].tolist()[:3] == ["quantum"] * 3
    assert table["reward"].iloc[3:].astype(float).std() < 0.2


def test_parse_groups_by_first_appearance_and_drops_blank_rows():
    df = pd.DataFrame(
        {
            "prompt": ["b", "a", "b", None, " a ", ""],
            "reward": [1, "2.5", 3, None, 4.0, float("nan")],
        }
    )
    t = reward_table.parse_reward_table(df)
    assert t.prompts == ("b", "a")
    assert t.group_ids.tolist() == [0, 1, 0, 1]
    assert t.scores.tolist() == [1.0, 2.5, 3.0, 4.0]
    assert t.rows == (1, 2, 3, 5)
    assert t.singletons == ()


@pytest.mark.parametrize(
    ("prompt", "reward", "needle"),
    [
        ("q", "abc", "row 2: the reward 'abc' is not a number"),
        ("q", float("nan"), "row 2: the reward is empty"),
        ("q", None, "row 2: the reward is empty"),
        (None, 3.0, "row 2: the prompt is empty"),
        ("q", float("inf"), "row 2: the reward 'inf' is not a finite number"),
    ],
)
def test_parse_names_the_bad_row(prompt, reward, needle):
    df = pd.DataFrame({"prompt": ["q", prompt], "reward": [1.0, reward]}, dtype=object)
    with pytest.raises(reward_table.RewardTableError, match="row 2") as err:
        reward_table.parse_reward_table(df)
    assert needle in str(err.value)


def test_parse_rejects_missing_columns_and_empty_tables():
    with pytest.raises(reward_table.RewardTableError, match="column"):
        reward_table.parse_reward_table(pd.DataFrame({"reward": [1.0]}))
    with pytest.raises(reward_table.RewardTableError, match="empty"):
        reward_table.parse_reward_table(pd.DataFrame({"prompt": [None], "reward": [None]}))


def test_singleton_and_constant_groups_are_explained_per_dialect():
    df = pd.DataFrame({"prompt": ["a", "b", "b"], "reward": [1.0, 2.0, 2.0]})
    t = reward_table.parse_reward_table(df)
    assert t.singletons == ("a",)
    text = " ".join(t.messages)
    for fw in ("roll", "verl", "openrlhf", "trl"):
        assert f"{fw}:" in text
    assert "exactly 0" in text


# --- local vs global -------------------------------------------------------------------------
def test_local_vs_global_seed_example_matches_t1():
    t = reward_table.parse_reward_table(reward_table.default_reward_table())
    lg = local_global.local_vs_global(t.scores, t.group_ids, t.prompts)
    torch.testing.assert_close(
        lg.local[:3], torch.tensor(T1_LOCAL, dtype=torch.float64), atol=1e-8, rtol=0
    )
    # global: one batch mean / unbiased std over all six rewards, + 1e-6
    r = t.scores
    expected = (r - r.mean()) / (r.std() + 1e-6)
    torch.testing.assert_close(lg.global_, expected)
    # the low-variance group: std 0.1, so local = +-(0.1 / (0.1 + 1e-6))
    assert lg.local[4].item() == pytest.approx(0.1 / (0.1 + 1e-6))
    assert lg.groups["local / global scale"].iloc[1] == pytest.approx(
        (r.std().item() + 1e-6) / (0.1 + 1e-6)
    )
    assert list(lg.samples.columns)[:3] == ["prompt", "sample", "reward"]
    assert lg.samples["sample"].tolist() == [0, 1, 2, 0, 1, 2]


def test_local_is_nan_for_a_singleton_and_global_still_defined():
    scores = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    ids = torch.tensor([0, 1, 1])
    lg = local_global.local_vs_global(scores, ids)
    assert math.isnan(lg.local[0].item())
    # group (2, 4): mean 3, unbiased std sqrt(2)
    assert lg.local[1:].tolist() == pytest.approx([-1 / (2**0.5 + 1e-6), 1 / (2**0.5 + 1e-6)])
    assert torch.isfinite(lg.global_).all()
    assert math.isnan(lg.group_std[0].item())


def test_local_vs_global_handles_interleaved_unequal_groups():
    scores = torch.tensor([1.0, 10.0, 3.0, 20.0, 5.0], dtype=torch.float64)
    ids = torch.tensor([0, 1, 0, 1, 0])
    lg = local_global.local_vs_global(scores, ids)
    g0 = scores[[0, 2, 4]]
    torch.testing.assert_close(lg.local[[0, 2, 4]], (g0 - g0.mean()) / (g0.std() + 1e-6))
    assert lg.samples["sample"].tolist() == [0, 0, 1, 1, 2]


# --- subsampling and sweeps ------------------------------------------------------------------
def test_subsample_groups_keeps_the_first_g_of_every_prompt():
    ids = torch.tensor([0, 1, 0, 1, 0, 1])
    batch = Batch(
        scores=torch.arange(6.0, dtype=torch.float64),
        response_mask=torch.ones(6, 2, dtype=torch.float64),
        group_ids=ids,
        group_labels=(0, 1),
    )
    sub, keep = sweep.subsample_groups(batch, 2)
    assert keep.tolist() == [0, 1, 2, 3]
    assert sub.scores.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match=">= 1"):
        sweep.subsample_groups(batch, 0)


def test_default_grids():
    assert sweep.default_grid("G", 4) == (2.0, 3.0, 4.0)
    assert sweep.default_grid("lam", 8, points=5) == (0.0, 0.25, 0.5, 0.75, 1.0)
    with pytest.raises(ValueError, match="sweep parameter"):
        sweep.default_grid("eps", 4)


def test_advantage_stats_hand_values():
    adv = torch.tensor([[1.0, -1.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    ref = torch.tensor([[1.0, 1.0, 5.0]], dtype=torch.float64)
    other = torch.tensor([[2.0, -2.0, 9.0]], dtype=torch.float64)
    s = sweep.advantage_stats(adv, mask, ref, other)
    assert s["spread"] == pytest.approx(2**0.5)
    assert s["sign_flips"] == 0.5
    assert s["agreement"] == pytest.approx(1.0)
    assert s["sign_agreement"] == 1.0


def test_a_token_that_becomes_zero_is_not_a_sign_flip():
    mask = torch.ones(1, 4, dtype=torch.float64)
    ref = torch.tensor([[1.0, -1.0, 0.0, 2.0]], dtype=torch.float64)
    adv = torch.tensor([[0.0, 0.0, 3.0, -2.0]], dtype=torch.float64)  # only the last one flips
    assert sweep.advantage_stats(adv, mask, ref, None)["sign_flips"] == 0.25


@pytest.fixture(scope="module")
def batch():
    return batch_of(consistent_rollout(prompts=3, group_size=4, width=7))


def test_sweep_lambda_moves_gae_and_is_zero_flip_at_the_current_value(batch):
    cfg = {"adv_estimator": "gae", "lambd": 0.5, "add_token_level_kl": True}
    grid = (0.0, 0.5, 1.0)
    df = sweep.sweep(
        batch, "roll", cfg, "lam", grid, compare_config={**cfg, "adv_estimator": "grpo"}
    )
    assert df["lam"].tolist() == list(grid)
    assert set(df.columns) >= {"spread", "sign_flips", "agreement", "sign_agreement", "error"}
    assert df.loc[df["lam"] == 0.5, "sign_flips"].item() == 0.0
    assert df["spread"].nunique() == 3  # lambda changes GAE
    assert df["agreement"].between(-1, 1).all()


def test_sweep_lambda_leaves_grpo_flat(batch):
    df = sweep.sweep(batch, "roll", {"adv_estimator": "grpo"}, "lam", (0.0, 0.5, 1.0))
    assert df["spread"].max() - df["spread"].min() < 1e-12
    assert df["agreement"].isna().all()


def test_sweep_two_dimensional_with_g_reports_invalid_points(batch):
    cfg = {"adv_estimator": "grpo", "add_token_level_kl": True}
    df = sweep.sweep(batch, "roll", cfg, "G", (1.0, 2.0, 4.0), "beta", (0.0, 0.2))
    assert len(df) == 6
    assert set(df.columns) >= {"G", "beta"}
    bad = df[df["G"] == 1.0]
    assert (bad["error"] != "").all()
    assert bad["spread"].isna().all()
    good = df[df["G"] == 4.0]
    assert (good["error"] == "").all()
    assert (
        good.loc[good["beta"] == 0.0, "spread"].item()
        != good.loc[good["beta"] == 0.2, "spread"].item()
    )


def test_sweep_rejects_bad_parameters(batch):
    with pytest.raises(ValueError, match="sweep parameter"):
        sweep.sweep(batch, "roll", {}, "eps", (1.0,))
    with pytest.raises(ValueError, match="differ"):
        sweep.sweep(batch, "roll", {}, "lam", (1.0,), "lam", (1.0,))


def test_sweep_calls_the_pipeline_once_per_point_and_estimator(batch):
    from roll_viz.core.pipeline import run

    calls = []

    def counting(*args, **kwargs):
        calls.append(args[1])
        return run(*args, **kwargs)

    sweep.sweep(
        batch,
        "verl",
        {"adv_estimator": "gae"},
        "gamma",
        (0.9, 1.0),
        compare_config={"adv_estimator": "grpo"},
        run_fn=counting,
    )
    assert len(calls) == 1 + 2 * 2


# --- frameworks ------------------------------------------------------------------------------
def test_canonical_generic_and_dialect_settings():
    gen = compare.canonical_generic(
        "roll",
        {
            "estimator": "gae",
            "beta": 0.2,
            "kl_estimator": "mse",
            "kl_in_reward": True,
            "gamma": 1.0,
            "lam": 0.95,
            "clip": 0.0,
            "whiten": False,
        },
    )
    assert gen == {
        "beta": 0.2,
        "gamma": 1.0,
        "lam": 0.95,
        "kl_in_reward": True,
        "whiten": False,
        "kl_estimator": "k2",
        "clip": None,
    }
    cfg, ignored = compare.dialect_settings("openrlhf", {**gen, "clip": 5.0})
    assert cfg["use_loss"] is False
    assert cfg["kl_estimator"] == "k2"
    assert cfg["clip_range"] == (-5.0, 5.0)
    assert cfg["init_coef"] == 0.2
    cfg, ignored = compare.dialect_settings("verl", gen)
    assert cfg["kl_penalty"] == "mse"
    assert cfg["use_kl_in_reward"] is True
    cfg, ignored = compare.dialect_settings("trl", gen)
    assert cfg == {"beta": 0.2}
    assert "lam" in ignored
    assert compare.canonical_kl("verl", "low_var_kl") == "k3"


def test_generic_estimator_reverse_lookup():
    assert compare.generic_estimator("openrlhf", {"advantage_estimator": "group_norm"}) == "grpo"
    assert (
        compare.generic_estimator("verl", {"adv_estimator": "reinforce_plus_plus"}) == "reinforce++"
    )
    assert compare.generic_estimator("roll", {"adv_estimator": "gae"}) == "gae"


def test_compare_frameworks_seed_example_differs_only_by_epsilon():
    batch = Batch(
        scores=torch.tensor((8.2, 6.5, 9.1), dtype=torch.float64),
        response_mask=torch.ones(3, 1, dtype=torch.float64),
        group_ids=torch.zeros(3, dtype=torch.long),
        group_labels=(0,),
    )
    gen = {"beta": 0.0, "gamma": 1.0, "kl_in_reward": False, "clip": None}
    cmp = compare.compare_frameworks(batch, gen, "grpo", reference="roll", prompts=["quantum"])
    assert list(cmp.traces) == ["roll", "verl", "openrlhf", "trl"]
    adv = cmp.samples.set_index("sample")
    assert adv["advantage trl"].tolist() == pytest.approx(
        (0.201950822, -1.085485666, 0.883534844), abs=1e-8
    )
    summary = cmp.summary.set_index("dialect")
    assert summary.loc["roll", "max |diff| advantage"] == 0.0
    assert summary.loc["verl", "max |diff| advantage"] < 1e-12
    assert 1e-5 < summary.loc["trl", "max |diff| advantage"] < 1e-3  # eps 1e-4 vs 1e-6
    assert any("0.0001" in n for n in cmp.note_diffs["trl"])


def test_compare_frameworks_skips_dialects_without_the_estimator():
    b = batch_of(consistent_rollout())
    cmp = compare.compare_frameworks(b, {"beta": 0.1, "kl_in_reward": True}, "rloo")
    assert set(cmp.traces) == {"verl", "openrlhf"}
    assert "roll" in cmp.skipped
    assert "trl" in cmp.skipped
    assert cmp.reference == "verl"
    assert {"advantage verl", "advantage openrlhf", "reward verl"} <= set(cmp.samples.columns)
    with pytest.raises(ValueError, match="estimator"):
        compare.compare_frameworks(b, {}, "ppo")


def test_single_threaded_restores_the_thread_count_even_when_nested():
    before = torch.get_num_threads()
    with common.single_threaded():
        assert torch.get_num_threads() == 1
        with common.single_threaded():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), common.single_threaded():
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_md_escape_shows_typed_text_literally():
    assert text.md_escape("r_t -= 0.2 * k1") == r"r\_t \-\= 0.2 \* k1"
    assert text.md_escape("$x$ <b>[a](b)") == r"\$x\$ \<b\>\[a\]\(b\)"
    # Streamlit's own directives and images lose their meaning too
    assert text.md_escape(":red[x] :material/home:") == r"\:red\[x\] \:material/home\:"
    assert text.md_escape("![](http://h/x.png)") == r"\!\[\]\(http\://h/x.png\)"
    # separators a user did not mean to type are made visible, newlines kept
    assert text.md_escape("a\u2028b\x07c\nd") == "a\\<U\\+2028\\>b\\<U\\+0007\\>c\nd"
    assert text.md_line("**a**\nb") == "\\*\\*a\\*\\* \u21b5 b"


def test_kl_is_zero_and_sweep_is_flat():
    assert sweep.kl_is_zero(consistent_rollout(identical=True))
    assert not sweep.kl_is_zero(consistent_rollout())
    flat = pd.DataFrame({"spread": [1.0, 1.0, float("nan")]})
    assert sweep.sweep_is_flat(flat)
    assert not sweep.sweep_is_flat(pd.DataFrame({"spread": [1.0, 2.0]}))
    assert not sweep.sweep_is_flat(pd.DataFrame({"spread": [1.0]}))
