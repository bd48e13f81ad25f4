import pytest
import torch

from core import oracles
from core.cases import SEED_SCORES, close, random_case
from roll_viz.core.pipeline import ADVANTAGE_ESTIMATORS, EstimatorParams, token_rewards

F = torch.float64


def t(x):
    return torch.tensor(x, dtype=F)


def est(name, rewards, mask=None, gids=None, **params):
    rewards = t(rewards)
    mask = torch.ones_like(rewards) if mask is None else t(mask)
    gids = torch.zeros(rewards.shape[0], dtype=torch.long) if gids is None else torch.tensor(gids)
    return ADVANTAGE_ESTIMATORS[name](rewards, mask, gids, EstimatorParams(**params))


@pytest.mark.parametrize(
    ("gamma", "lam", "v", "expected"),
    [
        (1.0, 1.0, 0.0, [[1, 1, 1]]),
        (1.0, 0.0, 0.0, [[0, 0, 1]]),
        (1.0, 1.0, 0.5, [[0.5, 0.5, 0.5]]),
        (1.0, 0.0, 0.5, [[0, 0, 0.5]]),
        (0.9, 0.95, 0.0, [[0.731025, 0.855, 1.0]]),
    ],
)
@pytest.mark.parametrize("carry", [True, False])
def test_style_table_gae(gamma, lam, v, expected, carry):
    out = est("gae", [[0, 0, 1]], gamma=gamma, lam=lam, values=t([[v] * 3]), carry_through=carry)
    close(out.advantages, expected)


def test_style_table_grpo_pinned_unbiased():
    out = est("grpo", [[1.0], [0.0], [0.0], [1.0]], std_eps=0.0)
    close(out.advantages[:, 0], [0.8660254, -0.8660254, -0.8660254, 0.8660254], 1e-7)
    biased = est("grpo", [[1.0], [0.0], [0.0], [1.0]], std_eps=0.0, std_ddof=0)
    close(biased.advantages[:, 0], [1.0, -1.0, -1.0, 1.0])


def test_style_table_reinforce_pp():
    out = est("reinforce_pp", [[0, 0, 1], [0, 0, 0]], gids=[0, 1])
    close(out.returns, [[1, 1, 1], [0, 0, 0]])
    close(out.advantages, [[0.9128709] * 3, [-0.9128709] * 3], 1e-6)


def _seq(xs):
    return [[x] for x in xs]


def test_t1_grpo_variants():
    close(
        est("grpo", _seq(SEED_SCORES)).advantages[:, 0],
        [0.201965964, -1.085567055, 0.883601091],
        1e-9,
    )
    close(
        est("grpo", _seq(SEED_SCORES), std_ddof=0).advantages[:, 0],
        [0.247356736, -1.329542457, 1.082185721],
        1e-9,
    )
    close(
        est("grpo", _seq(SEED_SCORES), std_eps=1e-4).advantages[:, 0],
        [0.201950822, -1.085485666, 0.883534844],
        1e-9,
    )
    close(
        est("grpo", _seq(SEED_SCORES), std_eps=1e-9).advantages[:, 0],
        [0.201966117, -1.085567877, 0.883601760],
        1e-9,
    )
    close(
        est("dr_grpo", _seq(SEED_SCORES)).advantages[:, 0],
        [0.266666667, -1.433333333, 1.166666667],
        1e-9,
    )
    remax = est("remax", _seq(SEED_SCORES), baseline_scores=t([7.0] * 3))
    close(remax.advantages[:, 0], [1.2, -0.5, 2.1])


def test_t2_rloo():
    out = est("rloo", _seq(SEED_SCORES))
    close(out.baseline, [7.80, 8.65, 7.35])
    close(out.advantages[:, 0], [0.40, -2.15, 1.75])


def test_t3_edge_groups():
    close(
        est("grpo", _seq([1, 0, 0, 0])).advantages[:, 0], [1.499997000] + [-0.499999000] * 3, 1e-9
    )
    close(
        est("grpo", _seq([1, 0, 0, 0]), std_ddof=0).advantages[:, 0],
        [1.732046808] + [-0.577348936] * 3,
        1e-9,
    )
    assert bool((est("grpo", _seq([1, 1, 1, 1])).advantages == 0).all())
    close(est("grpo", [[5.0]]).advantages, [[4.999995000]], 1e-9)
    close(est("rloo", [[5.0]]).advantages, [[5.0]])
    close(est("rloo", [[5.0]], singleton="zero").advantages, [[0.0]])
    close(est("grpo", [[5.0]], singleton="zero").advantages, [[0.0]])
    with pytest.raises(ValueError, match="at least 2 samples per prompt"):
        est("grpo", [[5.0]], singleton="raise")


def _lengths_mask(lengths):
    T = max(lengths)
    return [[1.0 if i < n else 0.0 for i in range(T)] for n in lengths]


def test_t4_reinforce_pp_baseline_token_weighted():
    mask = _lengths_mask([3, 2, 4])
    rewards = token_rewards(t(SEED_SCORES), t(mask))
    out = ADVANTAGE_ESTIMATORS["reinforce_pp_baseline"](
        rewards, t(mask), torch.zeros(3, dtype=torch.long), EstimatorParams()
    )
    close(out.advantages[:, 0], [-0.020933229, -1.622325271, 0.826862558], 1e-8)
    biased = ADVANTAGE_ESTIMATORS["reinforce_pp_baseline"](
        rewards,
        t(mask),
        torch.zeros(3, dtype=torch.long),
        EstimatorParams(whiten_ddof=0, whiten_eps_mode="floor"),
    )
    close(biased.advantages[:, 0], [-0.022203043, -1.720735809, 0.877020186], 1e-8)
    plain = ADVANTAGE_ESTIMATORS["reinforce_pp"](
        rewards, t(mask), torch.zeros(3, dtype=torch.long), EstimatorParams()
    )
    close(plain.advantages[:, 0], [-0.020933229, -1.622325271, 0.826862558], 1e-8)


R8 = [[0, 0, 0, 0, 1.0]]
V8 = [[0.5, 0.6, 0.7, 0.8, 0.9]]


def test_t8_gae():
    out = est("gae", R8, values=t(V8), gamma=1.0, lam=0.95)
    close(out.advantages, [[0.452438125, 0.370987500, 0.285250000, 0.195000000, 0.1]], 1e-9)
    close(out.returns, [[0.952438125, 0.970987500, 0.985250000, 0.995, 1.0]], 1e-9)
    out = est("gae", R8, values=t(V8), gamma=0.99, lam=0.95)
    close(out.advantages, [[0.416789168, 0.343210173, 0.266039525, 0.185050000, 0.1]], 1e-9)
    out = est("gae", R8, values=t(V8), gamma=1.0, lam=1.0)
    close(out.advantages, [[0.5, 0.4, 0.3, 0.2, 0.1]])
    close(out.returns, [[1, 1, 1, 1, 1]])
    close(est("gae", R8, values=t(V8), lam=0.0).advantages, [[0.1] * 5])


def test_t8_kl_in_reward():
    lp = t([[-0.5, -1.2, -0.3, -2.0, -0.1]])
    ref = t([[-0.6, -1.0, -0.5, -2.0, -0.3]])
    rewards = token_rewards(t([1.0]), torch.ones_like(lp), lp - ref, beta=0.1)
    close(rewards, [[-0.01, 0.02, -0.02, 0, 0.98]], 1e-12)
    g = torch.zeros(1, dtype=torch.long)
    mask = torch.ones_like(lp)
    gae = ADVANTAGE_ESTIMATORS["gae"](rewards, mask, g, EstimatorParams(lam=0.95, values=t(V8)))
    close(gae.advantages, [[0.427098, 0.354840, 0.247200, 0.176000, 0.080000]], 1e-6)
    rtg = ADVANTAGE_ESTIMATORS["reinforce"](rewards, mask, g, EstimatorParams())
    close(rtg.advantages, [[0.97, 0.98, 0.96, 0.98, 0.98]], 1e-12)


def test_t8_mid_sequence_mask_and_trailing_padding():
    m = [[1, 1, 0, 1, 1]]
    carry = est("gae", R8, m, values=t(V8), lam=0.95, carry_through=True)
    close(carry.advantages, [[0.4659875, 0.38525, 0, 0.195, 0.1]], 1e-9)
    zeroed = est("gae", R8, m, values=t(V8) * t(m), lam=0.95, carry_through=False)
    close(zeroed.advantages, [[0.419188125, 0.3359875, 0, 0.195, 0.1]], 1e-9)
    leak = est("gae", R8, m, values=t(V8), lam=0.95, carry_through=False)
    close(leak.advantages, [[0.452438125, 0.3709875, 0, 0.195, 0.1]], 1e-9)
    r = [[0, 0, 0, 1.0, 0]]
    m = [[1, 1, 1, 1, 0]]
    for v_pad in (0.0, 0.85):
        v = t([[0.5, 0.6, 0.7, 0.8, v_pad]])
        out = est("gae", r, m, values=v, lam=0.95, carry_through=True)
        close(out.advantages, [[0.456725, 0.3755, 0.29, 0.2, 0]], 1e-9)
    leak = est("gae", r, m, values=t([[0.5, 0.6, 0.7, 0.8, 0.85]]), lam=0.95, carry_through=False)
    close(leak.advantages, [[0.49316344, 0.41385625, 0.330375, 0.2425, 0]], 1e-8)


def test_t11_discounted_reward_to_go():
    out = est("reinforce", [[0, 0, 0, 1.0]], gamma=0.99, carry_through=False)
    close(out.advantages, [[0.970299, 0.9801, 0.99, 1.0]], 1e-12)


def test_token_rewards_placement_and_zero_length():
    mask = t([[1, 1, 0], [1, 0, 1], [0, 0, 0]])
    out = token_rewards(t([1.0, 2.0, 3.0]), mask, kl=t([[1.0] * 3] * 3), beta=0.5)
    close(out, [[-0.5, 0.5, 0], [-0.5, 0, 1.5], [0, 0, 0]])


def test_missing_inputs_raise():
    with pytest.raises(ValueError, match="values"):
        est("gae", [[1.0]])
    with pytest.raises(ValueError, match="baseline_scores"):
        est("remax", [[1.0]])


GRID = [
    (P, G, T, seed)
    for P, G, T in [(1, 2, 1), (1, 4, 5), (3, 3, 9), (4, 8, 70)]
    for seed in range(2)
]


@pytest.mark.parametrize("name", list(ADVANTAGE_ESTIMATORS))
@pytest.mark.parametrize(("P", "G", "T", "seed"), GRID)
@pytest.mark.parametrize("carry", [True, False])
def test_estimators_match_loop_oracle(name, P, G, T, seed, carry):
    case = random_case(P, G, T, seed, singleton=seed == 1)
    mask = t(case["mask"])
    if mask.sum() < 2 and name.startswith("reinforce_pp"):
        pytest.skip("whitening needs two valid tokens")
    lp, ref = t(case["lp"]), t(case["ref"])
    rewards = token_rewards(t(case["scores"]), mask, lp - ref, beta=0.1)
    params = EstimatorParams(
        gamma=0.97,
        lam=0.9,
        values=t(case["values"]),
        baseline_scores=t(case["baseline"]),
        carry_through=carry,
    )
    out = ADVANTAGE_ESTIMATORS[name](rewards, mask, torch.tensor(case["gids"]), params)
    adv, ret = oracles.estimator(
        name,
        rewards.tolist(),
        case["mask"],
        case["gids"],
        0.97,
        0.9,
        case["values"],
        case["baseline"],
        carry=carry,
    )
    close(out.advantages, adv, 1e-10)
    close(out.returns, ret, 1e-10)
    assert bool((out.advantages[mask == 0] == 0).all())
    assert bool((out.returns[mask == 0] == 0).all())


def test_registry_names_match_literal_types():
    from typing import get_args

    from roll_viz.core.pipeline import KL_ESTIMATORS
    from roll_viz.core.pipeline.advantages import EstimatorName
    from roll_viz.core.pipeline.kl import KLName

    assert set(get_args(EstimatorName)) == set(ADVANTAGE_ESTIMATORS)
    assert set(get_args(KLName)) == set(KL_ESTIMATORS)
