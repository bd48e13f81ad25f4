import pytest
import torch

from core import oracles
from core.cases import SEED_SCORES, close, random_case, seed_batch, to_batch
from roll_viz.core.pipeline import (
    ALIASES,
    CHOICES,
    DEFAULTS,
    ESTIMATOR_KEY,
    FRAMEWORKS,
    HELP,
    run,
)
from roll_viz.core.records import Batch

F = torch.float64
T1 = [0.201965964, -1.085567055, 0.883601091]
T1_TRL = [0.201950822, -1.085485666, 0.883534844]
T1_OPENRLHF = [0.201966117, -1.085567877, 0.883601760]
CENTRED = [0.266666667, -1.433333333, 1.166666667]
T2 = [0.40, -2.15, 1.75]
T4_VERL = [-0.020933229, -1.622325271, 0.826862558]
T4_OPENRLHF = [-0.022203043, -1.720735809, 0.877020186]
T5 = [-0.020933229, -1.622325266, 0.826862555]

# (framework, config, lengths, expected per-sequence advantage) for 8.2 / 6.5 / 9.1
SEED_CASES = [
    ("roll", {"adv_estimator": "grpo"}, [1, 1, 1], T1),
    ("roll", {"adv_estimator": "grpo"}, [3, 2, 4], T1),
    (
        "roll",
        {"adv_estimator": "grpo", "whiten_advantages": True, "advantage_clip": 2.0},
        [3, 2, 4],
        T5,
    ),
    (
        "roll",
        {"adv_estimator": "reinforce", "norm_mean_type": "batch", "norm_std_type": "batch"},
        [2, 2, 2],
        T1,
    ),
    ("roll", {"adv_estimator": "reinforce", "norm_mean_type": "group"}, [1, 1, 1], CENTRED),
    ("verl", {"adv_estimator": "grpo"}, [1, 1, 1], T1),
    ("verl", {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False}, [2, 1, 3], CENTRED),
    ("verl", {"adv_estimator": "rloo"}, [1, 1, 1], T2),
    ("verl", {"adv_estimator": "reinforce_plus_plus_baseline"}, [3, 2, 4], T4_VERL),
    ("verl", {"adv_estimator": "reinforce_plus_plus"}, [3, 2, 4], T4_VERL),
    ("openrlhf", {"advantage_estimator": "group_norm"}, [1, 1, 1], T1_OPENRLHF),
    ("openrlhf", {"advantage_estimator": "rloo"}, [2, 2, 2], T2),
    ("openrlhf", {"advantage_estimator": "dr_grpo"}, [1, 1, 1], CENTRED),
    ("openrlhf", {"advantage_estimator": "reinforce_baseline"}, [3, 2, 4], T4_OPENRLHF),
    ("openrlhf", {"advantage_estimator": "reinforce"}, [3, 2, 4], T4_OPENRLHF),
    ("trl", {}, [1, 1, 1], T1_TRL),
    ("trl", {"scale_rewards": "batch"}, [2, 3, 1], T1_TRL),
    ("trl", {"scale_rewards": "none"}, [1, 1, 1], CENTRED),
    ("trl", {"scale_rewards": False}, [1, 1, 1], CENTRED),
]


@pytest.mark.parametrize(("framework", "config", "lengths", "expected"), SEED_CASES)
def test_seed_example_every_dialect(framework, config, lengths, expected):
    batch = seed_batch(lengths=lengths)
    trace = run(batch, framework, config)
    assert trace.framework == framework
    close(trace.advantages[:, 0], expected, 1e-8)
    mask = batch.response_mask
    first = trace.advantages[:, :1].expand_as(mask)
    if framework in ("trl",) or config.get("adv_estimator") in ("grpo", "rloo"):
        close(trace.advantages, first * mask)  # same value on every valid token
    assert bool((trace.advantages[mask == 0] == 0).all())
    assert trace.notes


def test_seed_remax_and_gae_dialects():
    batch = seed_batch(lengths=[2, 2, 2])
    remax = Batch(**{**batch.__dict__, "baseline_scores": torch.full((3,), 7.0, dtype=F)})
    close(run(remax, "verl", {"adv_estimator": "remax"}).advantages[:, 0], [1.2, -0.5, 2.1])
    values = Batch(**{**batch.__dict__, "values": torch.zeros(3, 2, dtype=F)})
    roll_gae = run(values, "roll", {"adv_estimator": "gae", "lambd": 1.0})
    close(roll_gae.advantages, [[8.2, 8.2], [6.5, 6.5], [9.1, 9.1]])


def test_roll_response_level_rewards_are_normalized():
    trace = run(seed_batch(), "roll", {"adv_estimator": "grpo", "reward_clip": 1.0})
    close(trace.rewards, [T1[0], -1.0, T1[2]], 1e-8)
    assert trace.clip_frac == pytest.approx(1 / 3)
    close(trace.baseline, [7.933333333333333] * 3)
    close(trace.scale, [1.3203534880225571 + 1e-6] * 3)


def _t8_batch(mask=(1, 1, 1, 1, 1), values=(0.5, 0.6, 0.7, 0.8, 0.9)):
    return Batch(
        scores=torch.tensor([1.0], dtype=F),
        response_mask=torch.tensor([mask], dtype=F),
        group_ids=torch.zeros(1, dtype=torch.long),
        values=torch.tensor([values], dtype=F),
    )


def test_t8_through_dialects():
    roll = run(_t8_batch(), "roll", {"adv_estimator": "gae"})
    close(roll.advantages, [[0.452438125, 0.370987500, 0.285250000, 0.195, 0.1]], 1e-9)
    close(roll.returns, [[0.952438125, 0.970987500, 0.985250000, 0.995, 1.0]], 1e-9)
    verl = run(_t8_batch(), "verl", {"adv_estimator": "gae", "lam": 0.95})
    close(
        verl.advantages, [[1.232251367, 0.647709198, 0.032401652, -0.615290501, -1.297071716]], 1e-8
    )
    close(verl.returns, roll.returns)
    openrlhf = run(_t8_batch(), "openrlhf", {"advantage_estimator": "gae", "lambd": 0.95})
    # T8's "OpenRLHF-style biased" row divides by sqrt(var + 1e-8); OpenRLHF itself uses
    # rsqrt(max(var, 1e-8)) (section 1.3), which differs here by 3e-7 relative (var = 0.0154)
    close(
        openrlhf.advantages,
        [[1.377698822, 0.724160852, 0.036226146, -0.687915649, -1.450170171]],
        1e-6,
    )
    a = torch.tensor([0.452438125, 0.3709875, 0.28525, 0.195, 0.1], dtype=F)
    close(openrlhf.advantages[0], (a - a.mean()) / a.var(correction=0).sqrt(), 1e-12)


def test_t8_pad_slot_leakage_roll_only():
    batch = _t8_batch(mask=(1, 1, 1, 1, 0), values=(0.5, 0.6, 0.7, 0.8, 0.85))
    roll = run(batch, "roll", {"adv_estimator": "gae"})
    close(roll.advantages, [[0.49316344, 0.41385625, 0.330375, 0.2425, 0]], 1e-8)
    expected_returns = [[0.956725, 0.9755, 0.99, 1.0, 0.0]]  # A + V without leakage
    close(run(batch, "verl", {"adv_estimator": "gae", "lam": 0.95}).returns, expected_returns, 1e-9)
    close(run(batch, "openrlhf", {"lambd": 0.95}).returns, expected_returns, 1e-9)


def test_t14_two_groups():
    batch = Batch(
        scores=torch.tensor([8.2, 6.5, 9.1, 1, 2, 3], dtype=F),
        response_mask=torch.ones(6, 2, dtype=F),
        group_ids=torch.tensor([0, 0, 0, 1, 1, 1]),
    )
    trl_batch = run(batch, "trl", {"scale_rewards": "batch"}).advantages[:, 0]
    close(trl_batch, [0.078096500, -0.419768687, 0.341672187, -0.292861875, 0, 0.292861875], 1e-9)
    lite = run(
        batch,
        "roll",
        {"adv_estimator": "reinforce", "norm_mean_type": "group", "norm_std_type": "batch"},
    )
    close(
        lite.advantages[:, 0],
        [0.078098764, -0.419780858, 0.341682094, -0.292870366, 0, 0.292870366],
        1e-9,
    )
    group = run(batch, "trl").advantages[:, 0]
    close(group, [0.201950822, -1.085485666, 0.883534844, -0.999900010, 0, 0.999900010], 1e-9)


def test_t9_running_normalization_carries_across_calls():
    config = {"adv_estimator": "reinforce", "norm_mean_type": "running", "norm_std_type": "running"}
    first = run(seed_batch(), "roll", config)
    close(first.rewards, T1, 1e-9)
    assert first.running.count == pytest.approx(3.0)
    second_batch = Batch(
        scores=torch.tensor([7.0, 5.0], dtype=F),
        response_mask=torch.ones(2, 1, dtype=F),
        group_ids=torch.tensor([0, 0]),
    )
    second = run(second_batch, "roll", config, running=first.running)
    close(second.rewards, [-0.101334789, -1.368019654], 1e-9)
    assert second.running.mean == pytest.approx(7.16)
    assert any("KeyError" in n for n in second.notes)
    # running not used: the statistics pass through untouched
    assert (
        run(seed_batch(), "roll", {"adv_estimator": "grpo"}, running=first.running).running
        == first.running
    )


def _kl_batch(B=4, T=3, d=9.0):
    return Batch(
        scores=torch.ones(B, dtype=F),
        response_mask=torch.ones(B, T, dtype=F),
        group_ids=torch.arange(B) // 2,
        logprobs=torch.full((B, T), -1.0, dtype=F),
        ref_logprobs=torch.full((B, T), -1.0 - d, dtype=F),
        values=torch.zeros(B, T, dtype=F),
    )


def test_t10_controller_through_dialects():
    batch = _kl_batch()
    roll = run(
        batch, "roll", {"adv_estimator": "grpo", "target_kl": 6.0, "add_token_level_kl": True}
    )
    assert roll.beta == 0.2
    assert roll.next_beta == pytest.approx(oracles.ziegler(0.2, 9.0, 6.0, 10000, 4), abs=1e-15)
    assert roll.kl_in_reward
    verl = run(
        batch,
        "verl",
        {
            "adv_estimator": "grpo",
            "use_kl_in_reward": True,
            "kl_ctrl_type": "adaptive",
            "target_kl": 6.0,
        },
    )
    assert verl.next_beta == pytest.approx(oracles.ziegler(0.001, 9.0, 6.0, 10000, 4))
    fixed = run(batch, "verl", {"adv_estimator": "grpo", "use_kl_in_reward": True})
    assert fixed.next_beta == fixed.beta == 0.001
    openrlhf = run(batch, "openrlhf", {"target": 6.0})
    assert openrlhf.next_beta == pytest.approx(oracles.ziegler(0.01, 9.0, 6.0, 10000, 4))
    for fw, cfg in [
        ("roll", {"target_kl": 0.0}),
        ("roll", {"kl_horizon": 0}),
        ("verl", {"target_kl": -1.0}),
        ("openrlhf", {"horizon": 0}),
    ]:
        with pytest.raises(ValueError, match="> 0"):
            run(batch, fw, cfg)


def test_kl_loss_modes():
    batch = _kl_batch(d=0.5)
    k3 = oracles.kl_value(-1.0, -1.5, "k3")
    roll = run(batch, "roll", {"adv_estimator": "grpo", "use_kl_loss": True, "kl_penalty": "kl"})
    assert not roll.kl_in_reward
    assert roll.kl_loss == pytest.approx(k3)
    close(roll.kl, torch.full((4, 3), 0.5))  # the reward-KL estimator is still shown
    verl = run(batch, "verl", {"adv_estimator": "grpo", "use_kl_loss": True})
    assert verl.kl_loss == pytest.approx(k3)
    assert not verl.kl_in_reward
    openrlhf = run(batch, "openrlhf", {"use_loss": True, "kl_estimator": "k2"})
    assert openrlhf.kl_loss == pytest.approx(0.125)
    assert not openrlhf.kl_in_reward
    close(openrlhf.token_rewards[:, -1], torch.ones(4))  # KL not in the reward
    trl = run(batch, "trl", {"beta": 0.04})
    assert trl.kl_loss == pytest.approx(k3)
    assert not trl.kl_in_reward
    assert trl.beta == 0.04
    assert run(batch, "verl", {"adv_estimator": "grpo"}).kl_loss is None


def test_trl_k3_unclamped_others_clamped():
    batch = _kl_batch(d=14.0)  # logp -1, ref -15 -> log_r = 14: k3 = exp(-14) - 1 + 14
    assert run(batch, "trl").kl[0, 0].item() == pytest.approx(13.0000008, abs=1e-6)
    batch = _kl_batch(d=-24.0)  # log_r = -24: raw k3 = exp(24) - 25
    assert run(batch, "trl").kl[0, 0].item() == pytest.approx(2.648912212984347e10)
    verl = run(batch, "verl", {"adv_estimator": "grpo", "kl_penalty": "low_var_kl"})
    assert verl.kl[0, 0].item() == 10.0
    assert run(batch, "openrlhf", {"kl_estimator": "k1"}).kl[0, 0].item() == -10.0
    roll = run(batch, "roll", {"adv_estimator": "grpo", "kl_penalty": "kl"})
    assert roll.kl[0, 0].item() == -24.0
    assert run(batch, "roll", {"adv_estimator": "grpo", "kl_penalty": "k3"}).kl[0, 0].item() == 10


# ----------------------------------------------------------------- edge cases


def _singleton_batch():
    return Batch(
        scores=torch.tensor([5.0], dtype=F),
        response_mask=torch.ones(1, 2, dtype=F),
        group_ids=torch.zeros(1, dtype=torch.long),
        group_labels=("x",),
    )


def test_singleton_groups_per_dialect():
    b = _singleton_batch()
    close(run(b, "verl", {"adv_estimator": "grpo"}).advantages, [[4.999995] * 2], 1e-9)
    assert any("singleton" in n for n in run(b, "verl", {"adv_estimator": "grpo"}).notes)
    close(run(b, "verl", {"adv_estimator": "rloo"}).advantages, [[5.0, 5.0]])
    with pytest.raises(
        ValueError,
        match=r"openrlhf group_norm needs at least 2 samples per prompt \(group 'x' has 1\)",
    ):
        run(b, "openrlhf", {"advantage_estimator": "group_norm"})
    with pytest.raises(ValueError, match=r"trl GRPO .*\(group 'x' has 1\)"):
        run(b, "trl")
    with pytest.raises(ValueError, match=r"roll grpo .*\(group 'x' has 1\).*NaN"):
        run(b, "roll", {"adv_estimator": "grpo"})
    # mean-only normalization of a singleton is defined: r - r = 0
    close(
        run(b, "roll", {"adv_estimator": "reinforce", "norm_mean_type": "group"}).advantages,
        [[0, 0]],
    )
    # biased std (viz override) of a singleton is 0 -> 0 / eps = 0
    close(run(b, "roll", {"adv_estimator": "grpo", "viz_std_ddof": 0}).advantages, [[0, 0]])


def test_all_equal_group_gives_zero():
    b = Batch(
        scores=torch.full((4,), 0.7, dtype=F),
        response_mask=torch.ones(4, 3, dtype=F),
        group_ids=torch.zeros(4, dtype=torch.long),
    )
    for fw, cfg in [
        ("roll", {"adv_estimator": "grpo"}),
        ("verl", {"adv_estimator": "grpo"}),
        ("verl", {"adv_estimator": "rloo"}),
        ("trl", {}),
        ("openrlhf", {"advantage_estimator": "group_norm"}),
        ("openrlhf", {"advantage_estimator": "rloo"}),
    ]:
        assert bool((run(b, fw, cfg).advantages == 0).all()), fw


def test_zero_length_rows_defined_everywhere():
    b = Batch(
        scores=torch.tensor([1.0, 2.0, 4.0], dtype=F),
        response_mask=torch.tensor([[1, 1], [0, 0], [1, 0]], dtype=F),
        group_ids=torch.zeros(3, dtype=torch.long),
        values=torch.ones(3, 2, dtype=F),
        baseline_scores=torch.zeros(3, dtype=F),
        logprobs=torch.full((3, 2), -1.0, dtype=F),
        ref_logprobs=torch.full((3, 2), -1.0, dtype=F),
        sum_pi_squared=torch.full((3, 2), 0.5, dtype=F),  # verl optimal_token_baseline
    )
    for fw in FRAMEWORKS:
        for est in CHOICES[fw][ESTIMATOR_KEY[fw]]:
            trace = run(b, fw, {ESTIMATOR_KEY[fw]: est})
            assert bool(torch.isfinite(trace.advantages).all())
            assert bool((trace.advantages[1] == 0).all()), (fw, est)
            assert any("zero-length" in n for n in trace.notes)
    # verl still counts the empty row's score in its group (its reward sits at index -1 there)
    close(run(b, "verl", {"adv_estimator": "rloo"}).baseline, [3.0, 2.5, 1.5])


def test_whitening_with_one_valid_token():
    b = Batch(
        scores=torch.tensor([1.0, 2.0], dtype=F),
        response_mask=torch.tensor([[1, 0], [0, 0]], dtype=F),
        group_ids=torch.tensor([0, 0]),
        values=torch.zeros(2, 2, dtype=F),
    )
    roll = run(b, "roll", {"adv_estimator": "grpo", "whiten_advantages": True})
    assert any("whitening skipped" in n for n in roll.notes)
    with pytest.raises(ValueError, match=r"verl gae: .*at least 2 valid tokens"):
        run(b, "verl", {"adv_estimator": "gae"})
    with pytest.raises(ValueError, match="verl reinforce_plus_plus"):
        run(b, "verl", {"adv_estimator": "reinforce_plus_plus"})
    assert run(b, "openrlhf", {}).advantages.abs().sum().item() == 0.0  # biased var 0 -> 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scores_name_the_sample(bad):
    b = Batch(
        scores=torch.tensor([1.0, bad, 0.0], dtype=F),
        response_mask=torch.ones(3, 1, dtype=F),
        group_ids=torch.zeros(3, dtype=torch.long),
    )
    for fw in FRAMEWORKS:
        with pytest.raises(ValueError, match=r"scores\[1\].*sample 1"):
            run(b, fw, {ESTIMATOR_KEY[fw]: CHOICES[fw][ESTIMATOR_KEY[fw]][1]})


def test_batch_validation():
    good = seed_batch()
    bad_cases = [
        ({"response_mask": torch.ones(2, 1)}, "response_mask"),
        ({"response_mask": torch.full((3, 1), 0.5)}, "only 0 and 1"),
        ({"group_ids": torch.tensor([0, -1, 0])}, "group_ids"),
        ({"logprobs": torch.zeros(3, 1)}, "together"),
        ({"values": torch.zeros(3, 2)}, "values must have shape"),
        ({"values": torch.tensor([[0.0], [float("nan")], [0.0]])}, r"values\[1, 0\]"),
    ]
    for change, match in bad_cases:
        with pytest.raises(ValueError, match=match):
            run(Batch(**{**good.__dict__, **change}), "verl", {"adv_estimator": "grpo"})


def test_config_validation():
    b = seed_batch()
    with pytest.raises(ValueError, match="unknown roll config key 'lam'"):
        run(b, "roll", {"lam": 0.9})
    with pytest.raises(ValueError, match=r"'adv_estimator'.*'ppo'"):
        run(b, "verl", {"adv_estimator": "ppo"})
    with pytest.raises(ValueError, match=r"'gamma'.*\[0, 1\]"):
        run(b, "openrlhf", {"gamma": 1.5})
    with pytest.raises(ValueError, match=r"'use_kl_in_reward'.*true/false"):
        run(b, "verl", {"use_kl_in_reward": 1})
    with pytest.raises(ValueError, match="'clip_range'"):
        run(b, "openrlhf", {"clip_range": [3, -3]})
    with pytest.raises(ValueError, match="framework"):
        run(b, "deepspeed")
    with pytest.raises(ValueError, match="'viz_std_ddof'"):
        run(b, "trl", {"viz_std_ddof": 2})
    cfg = {"clip_range": 2, "advantage_estimator": "reinforce"}
    assert dict(run(b, "openrlhf", cfg).config)["clip_range"] == (-2.0, 2.0)


def test_viz_overrides_are_noted_and_change_numbers():
    b = seed_batch()
    biased = run(b, "verl", {"adv_estimator": "grpo", "viz_std_ddof": 0})
    close(biased.advantages[:, 0], [0.247356736, -1.329542457, 1.082185721], 1e-9)
    assert any("viz_std_ddof=0" in n for n in biased.notes)
    eps = run(b, "roll", {"adv_estimator": "grpo", "viz_eps": 1e-4})
    close(eps.advantages[:, 0], T1_TRL, 1e-9)
    lengths = seed_batch(lengths=[3, 2, 4])
    wd = run(
        lengths, "verl", {"adv_estimator": "reinforce_plus_plus_baseline", "viz_whiten_ddof": 0}
    )
    close(wd.advantages[:, 0], T4_OPENRLHF, 1e-8)
    assert any("no effect" in n for n in run(b, "trl", {"viz_whiten_ddof": 0}).notes)


def test_notes_are_ordered_conventions():
    notes = run(
        seed_batch(lengths=[3, 2, 4]), "roll", {"adv_estimator": "grpo", "whiten_advantages": True}
    ).notes
    order = [
        next(i for i, n in enumerate(notes) if key in n)
        for key in ("GRPO forces", "reward_norm", "reward-to-go", "whitened")
    ]
    assert order == sorted(order)
    assert "unbiased (n-1), eps 1e-6 added to std" in " ".join(notes)


def test_api_contract_tables_are_consistent():
    assert FRAMEWORKS == ("roll", "verl", "openrlhf", "trl")
    generic = {
        "estimator",
        "gamma",
        "lam",
        "beta",
        "kl_estimator",
        "kl_in_reward",
        "clip",
        "whiten",
    }
    for fw in FRAMEWORKS:
        assert set(HELP[fw]) == set(DEFAULTS[fw]), fw
        assert all(k in DEFAULTS[fw] for k in CHOICES[fw]), fw
        assert all(DEFAULTS[fw][k] in CHOICES[fw][k] for k in CHOICES[fw]), fw
        assert ESTIMATOR_KEY[fw] in CHOICES[fw]
        assert set(ALIASES[fw]) == generic
        assert all(v is None or v in DEFAULTS[fw] for v in ALIASES[fw].values())
        for key in ("viz_std_ddof", "viz_whiten_ddof", "viz_eps"):
            assert DEFAULTS[fw][key] is None
            assert "not a framework option" in HELP[fw][key]
        assert all(h.strip() and "\n" not in h for h in HELP[fw].values())
    assert DEFAULTS["roll"]["init_kl_coef"] == 0.2
    assert DEFAULTS["roll"]["lambd"] == 0.95
    assert DEFAULTS["verl"]["kl_coef"] == 0.001
    assert DEFAULTS["verl"]["lam"] == 1.0
    assert DEFAULTS["openrlhf"]["clip_range"] == (-10.0, 10.0)
    assert DEFAULTS["trl"] == {
        "scale_rewards": "group",
        "beta": 0.0,
        "multi_objective_aggregation": "sum_then_normalize",
        "reward_weights": None,
        "viz_std_ddof": None,
        "viz_whiten_ddof": None,
        "viz_eps": None,
    }


# ----------------------------------------------------------------- dialects vs loop oracles

ROLL_CONFIGS = [
    ({"adv_estimator": "grpo"}, {"est": "grpo"}),
    (
        {
            "adv_estimator": "grpo",
            "add_token_level_kl": True,
            "kl_penalty": "k3",
            "reward_clip": 1.5,
            "whiten_advantages": True,
            "advantage_clip": 1.0,
            "gamma": 0.95,
        },
        {
            "est": "grpo",
            "kl_in_reward": True,
            "kl": "k3",
            "reward_clip": 1.5,
            "whiten_adv": True,
            "adv_clip": 1.0,
            "gamma": 0.95,
        },
    ),
    (
        {
            "adv_estimator": "reinforce",
            "norm_mean_type": "batch",
            "norm_std_type": "batch",
            "add_token_level_kl": True,
            "kl_penalty": "abs",
            "init_kl_coef": 0.05,
        },
        {
            "est": "reinforce",
            "mean_type": "batch",
            "std_type": "batch",
            "kl_in_reward": True,
            "kl": "abs",
            "beta": 0.05,
        },
    ),
    (
        {
            "adv_estimator": "gae",
            "add_token_level_kl": True,
            "kl_penalty": "mse",
            "lambd": 0.9,
            "gamma": 0.99,
            "norm_mean_type": "group",
            "norm_std_type": "batch",
        },
        {
            "est": "gae",
            "kl_in_reward": True,
            "kl": "mse",
            "lambd": 0.9,
            "gamma": 0.99,
            "mean_type": "group",
            "std_type": "batch",
        },
    ),
]
VERL_CONFIGS = [
    (
        {
            "adv_estimator": est,
            "use_kl_in_reward": kl_in,
            "kl_penalty": pen,
            "gamma": 0.98,
            "lam": 0.93,
            "norm_adv_by_std_in_grpo": by_std,
        },
        {
            "est": est,
            "use_kl_in_reward": kl_in,
            "kl": pen,
            "gamma": 0.98,
            "lam": 0.93,
            "kl_coef": 0.001,
            "norm_by_std": by_std,
        },
    )
    for est in CHOICES["verl"]["adv_estimator"]
    for kl_in, pen, by_std in [(False, "kl", True), (True, "low_var_kl", False)]
]
OPENRLHF_CONFIGS = [
    (
        {
            "advantage_estimator": est,
            "kl_estimator": kle,
            "use_loss": loss,
            "gamma": 0.97,
            "lambd": 0.9,
            "no_std_norm": nsn,
            "clip_range": [-1.0, 2.0],
            "init_coef": 0.05,
        },
        {
            "est": est,
            "kl": kle,
            "use_loss": loss,
            "gamma": 0.97,
            "lambd": 0.9,
            "no_std_norm": nsn,
            "clip": (-1.0, 2.0),
            "init_coef": 0.05,
        },
    )
    for est in CHOICES["openrlhf"]["advantage_estimator"]
    for kle, loss, nsn in [("k1", False, False), ("k3", True, True), ("k2", False, True)]
]
GRID = [(2, 4, 6, 0), (3, 2, 17, 1), (4, 8, 70, 2)]


def _check(trace, expected, mask):
    for key, value in expected.items():
        close(getattr(trace, key), value, 1e-10)
    for key in ("kl", "token_rewards", "advantages", "returns"):
        assert bool((getattr(trace, key)[mask == 0] == 0).all()), key


@pytest.mark.parametrize(("P", "G", "T", "seed"), GRID)
@pytest.mark.parametrize(("config", "oracle_kwargs"), ROLL_CONFIGS)
def test_roll_matches_loop_oracle(P, G, T, seed, config, oracle_kwargs):
    c = random_case(P, G, T, seed)
    trace = run(to_batch(c), "roll", config)
    expected = oracles.roll(
        c["scores"], c["mask"], c["gids"], c["lp"], c["ref"], c["values"], **oracle_kwargs
    )
    _check(trace, expected, torch.tensor(c["mask"]))


@pytest.mark.parametrize(("P", "G", "T", "seed"), GRID)
@pytest.mark.parametrize(("config", "oracle_kwargs"), VERL_CONFIGS)
def test_verl_matches_loop_oracle(P, G, T, seed, config, oracle_kwargs):
    c = random_case(P, G, T, seed, singleton=True)
    if config["adv_estimator"] == "grpo_passk":  # verl raises for a group of one
        with pytest.raises(ValueError, match="at least 2 samples"):
            run(to_batch(c), "verl", config)
        c = random_case(P, G, T, seed, singleton=False)
    trace = run(to_batch(c), "verl", config)
    expected = oracles.verl(
        c["scores"],
        c["mask"],
        c["gids"],
        c["lp"],
        c["ref"],
        c["values"],
        c["baseline"],
        sum_pi2=c["sum_pi_squared"],
        **oracle_kwargs,
    )
    _check(trace, expected, torch.tensor(c["mask"]))


@pytest.mark.parametrize(("P", "G", "T", "seed"), GRID)
@pytest.mark.parametrize(("config", "oracle_kwargs"), OPENRLHF_CONFIGS)
def test_openrlhf_matches_loop_oracle(P, G, T, seed, config, oracle_kwargs):
    c = random_case(P, G, T, seed)
    trace = run(to_batch(c), "openrlhf", config)
    expected = oracles.openrlhf(
        c["scores"], c["mask"], c["gids"], c["lp"], c["ref"], c["values"], **oracle_kwargs
    )
    _check(trace, expected, torch.tensor(c["mask"]))


@pytest.mark.parametrize(("P", "G", "T", "seed"), GRID)
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_trl_matches_loop_oracle(P, G, T, seed, scale):
    c = random_case(P, G, T, seed)
    trace = run(to_batch(c), "trl", {"scale_rewards": scale})
    expected = oracles.trl(c["scores"], c["mask"], c["gids"], c["lp"], c["ref"], scale=scale)
    _check(trace, expected, torch.tensor(c["mask"]))


def test_seed_scores_constant():
    assert SEED_SCORES == [8.2, 6.5, 9.1]
