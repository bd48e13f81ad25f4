"""Credit per turn: hand-computed numbers for every rule on a 3-turn episode, a plain-loop oracle
on random groups, the per-token layout, and the verl #7244 bias computed exactly.

The group (task "A"), rewards r_t = turn reward + outcome on the last turn:

    e0: 3 turns, turn rewards (1, 0, 0), outcome 2 -> r = (1, 0, 2), R = 3, states (s0, a, b)
    e1: 2 turns, turn rewards (0, 1),    outcome 0 -> r = (0, 1),    R = 1, states (s0, a)
    e2: 3 turns, turn rewards (1, 1, 0), outcome 2 -> r = (1, 1, 2), R = 4, states (s0, c, b)

mean R = 8/3, unbiased var = (1/9 + 25/9 + 16/9) / 2 = 7/3. With gamma = 0.5 the returns are
G(e0) = (1.5, 1, 2), G(e1) = (0.5, 1), G(e2) = (2, 2, 2).

The oracle below is written from the papers' and frameworks' formulas with Python loops and
shares no code with ``roll_viz.core.agentic.credit``.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
import torch

from roll_viz.core.agentic.credit import (
    CREDIT_RULES,
    CreditParams,
    credit,
    turn_index_bias,
    turn_index_demo,
    turn_rewards,
)
from roll_viz.core.agentic.episode import Episode, Segment
from roll_viz.core.agentic.masks import batch_episodes


def make(task, turn_r, outcome, states=None, progress=None) -> Episode:
    segs = [Segment("user", "q", (1, 2), -1)]
    for t in range(len(turn_r)):
        segs.append(Segment("assistant", f"a{t}", (10 + t, 0), t, True, (-0.1, -0.2)))
        if t < len(turn_r) - 1:
            segs.append(Segment("tool", f"o{t}", (30,), t))
    return Episode(task, "env", tuple(segs), outcome, tuple(turn_r), states, progress=progress)


GROUP = (
    make("A", (1, 0, 0), 2.0, ("s0", "a", "b")),
    make("A", (0, 1), 0.0, ("s0", "a")),
    make("A", (1, 1, 0), 2.0, ("s0", "c", "b")),
)
NO_STD = CreditParams(gamma=0.5, lam=0.5, scale_by_std=False)
STD = math.sqrt(7 / 3)


def e0(name, params=NO_STD, episodes=GROUP):
    return credit(name, episodes, params).turn_advantages[0]


def test_turn_rewards_put_the_outcome_on_the_last_turn():
    assert turn_rewards(GROUP[0]) == (1.0, 0.0, 2.0)
    assert turn_rewards(GROUP[1]) == (0.0, 1.0)


def test_outcome_broadcast_by_hand():
    assert e0("outcome_broadcast") == (3.0, 3.0, 3.0)


def test_episode_grpo_by_hand():
    assert e0("episode_grpo") == pytest.approx((1 / 3,) * 3)
    with_std = e0("episode_grpo", CreditParams())
    assert with_std == pytest.approx(((1 / 3) / (STD + 1e-6),) * 3)


def test_turn_returns_by_hand():
    # baseline: mean G_0 = (1.5 + 0.5 + 2) / 3 = 4/3; std G_0 = sqrt(7/12)
    assert e0("turn_returns") == pytest.approx((1 / 6, -1 / 3, 2 / 3))
    scaled = e0("turn_returns", CreditParams(gamma=0.5))
    assert scaled == pytest.approx(
        tuple(x / (math.sqrt(7 / 12) + 1e-6) for x in (1 / 6, -1 / 3, 2 / 3))
    )


def test_turn_gae_by_hand():
    # V = 0: A_t = sum_l (gamma lam)^l r_(t+l) = (1 + 0.25 * 0.5, 0 + 0.25 * 2, 2)
    assert e0("turn_gae") == pytest.approx((1.125, 0.5, 2.0))
    values = ((1.0, 0.5, 1.0), (0.0, 0.0), (0.0, 0.0, 0.0))
    # delta = (1 + 0.25 - 1, 0 + 0.5 - 0.5, 2 - 1) = (0.25, 0, 1)
    got = e0("turn_gae", CreditParams(gamma=0.5, lam=0.5, values=values))
    assert got == pytest.approx((0.3125, 0.25, 1.0))


def test_gigpo_by_hand():
    # A^E: every turn a row: (3*3 + 1*2 + 4*3) / 8 = 23/8 -> 3 - 23/8 = 0.125
    # A^S: s0 -> (1.5, 0.5, 2), mean 4/3 -> e0: 1/6; a -> (1, 1): 0; b -> (2, 2): 0
    assert e0("gigpo") == pytest.approx((0.125 + 1 / 6, 0.125, 0.125))
    half = e0("gigpo", CreditParams(gamma=0.5, scale_by_std=False, omega=0.5))
    assert half == pytest.approx((0.125 + 1 / 12, 0.125, 0.125))


def test_mt_grpo_by_hand():
    # A^O: outcomes (2, 0, 2), mean 4/3 -> 2/3; A^T turn 0: (1, 0, 1) -> 1/3; turn 1: (0, 1, 1)
    # -> -2/3; the last turn: outcome only
    assert e0("mt_grpo") == pytest.approx((1.0, 0.0, 2 / 3))


def test_progress_deltas_by_hand():
    # no progress: deltas = r, c = G; the group's turns (1.5, 1, 2, 0.5, 1, 2, 2, 2) mean 1.5
    assert e0("progress_deltas") == pytest.approx((0.0, -0.5, 0.5))
    scored = (
        make("A", (1, 0, 0), 2.0, progress=(0.25, 0.5, 1.0)),
        make("A", (0, 1), 0.0, progress=(0.0, 0.5)),
    )
    # d(e0) = (0.25, 0.25, 0.5) -> c = (0.25 + 0.5 * 0.5, 0.25 + 0.25, 0.5) = (0.5, 0.5, 0.5)
    # d(e1) = (0, 0.5) -> c = (0.25, 0.5); mean of the five: 2.25 / 5 = 0.45
    assert e0("progress_deltas", NO_STD, scored) == pytest.approx((0.05, 0.05, 0.05))


def test_turn_index_sum_by_hand():
    # b_0 = 2/3, b_1 = 2/3, b_2 = 0 (only e0, e2 reach turn 2); mean O = 4/3
    # e0 terms (1/3, -2/3, 0): A = (1/3 - 2/3 + 0 + 2/3, -2/3 + 0 + 2/3, 0 + 2/3)
    assert e0("turn_index_sum") == pytest.approx((1 / 3, 0.0, 2 / 3))


def test_a_group_of_one_keeps_its_reward_like_verl():
    alone = (make("B", (0, 0), 1.0),)
    assert e0("episode_grpo", CreditParams(), alone) == pytest.approx((1.0, 1.0))


def test_tokens_carry_their_turns_advantage():
    result = credit("turn_returns", GROUP, NO_STD)
    batch = batch_episodes(GROUP)
    for b, adv in enumerate(result.turn_advantages):
        for t in range(batch.token_ids.shape[1]):
            turn = int(batch.turn[b, t])
            want = adv[turn] if turn >= 0 else 0.0
            assert result.token_advantages[b, t].item() == pytest.approx(want)
    assert result.token_advantages.shape == batch.token_ids.shape
    assert result.worked.startswith("gamma = 0.5")


def test_every_rule_names_its_source_and_worked_numbers():
    for name, rule in CREDIT_RULES.items():
        result = credit(name, GROUP, NO_STD)
        assert rule.source
        assert rule.formula
        assert any(ch.isdigit() for ch in result.worked), name


def test_bad_input_is_refused_with_a_message():
    with pytest.raises(KeyError, match="known"):
        credit("nope", GROUP)
    with pytest.raises(ValueError, match="turn rewards"):
        credit("episode_grpo", (replace(make("A", (0, 0), 1.0), turn_rewards=(0.0,)),))
    with pytest.raises(ValueError, match="anchor states"):
        credit("gigpo", (replace(GROUP[0], states=("s0",)),))
    with pytest.raises(ValueError, match="not in"):
        CreditParams(gamma=1.5)


# --------------------------------------------------------------------------- plain-loop oracle


def _mean_std(xs):
    if len(xs) == 1:
        return 0.0, 1.0
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _disc(rs, g):
    out = []
    for t in range(len(rs)):
        out.append(sum(g ** (k - t) * rs[k] for k in range(t, len(rs))))
    return out


def oracle(name, eps_list, p):
    """Every rule with loops, per the module docstring of credit.py and the cited code."""
    r = [
        [(e.turn_rewards or (0,) * 99)[t] + (e.outcome if t == n - 1 else 0) for t in range(n)]
        for e in eps_list
        for n in [len(e.turn_rewards)]
    ]
    inter = [list(e.turn_rewards) for e in eps_list]
    tasks = {}
    for i, e in enumerate(eps_list):
        tasks.setdefault(e.task, []).append(i)

    def norm(x, m, s):
        return (x - m) / (s + p.eps) if p.scale_by_std else x - m

    out = [None] * len(eps_list)
    for g in tasks.values():
        if name == "outcome_broadcast":
            for i in g:
                out[i] = [sum(r[i])] * len(r[i])
        elif name == "episode_grpo":
            m, s = _mean_std([sum(r[i]) for i in g])
            for i in g:
                out[i] = [norm(sum(r[i]), m, s)] * len(r[i])
        elif name == "turn_returns":
            m, s = _mean_std([_disc(r[i], p.gamma)[0] for i in g])
            for i in g:
                out[i] = [norm(x, m, s) for x in _disc(r[i], p.gamma)]
        elif name == "turn_gae":
            for i in g:
                out[i] = _disc(r[i], p.gamma * p.lam)  # V = 0: deltas are the rewards
        elif name == "gigpo":
            m, s = _mean_std([sum(r[i]) for i in g for _ in r[i]])
            groups = {}
            for i in g:
                for t in range(len(r[i])):
                    groups.setdefault(eps_list[i].states[t], []).append(_disc(r[i], p.gamma)[t])
            out_g = {}
            for i in g:
                row = []
                for t in range(len(r[i])):
                    vals = groups[eps_list[i].states[t]]
                    gm = sum(vals) / len(vals)
                    gs = _mean_std(vals)[1] if len(vals) > 1 else 1.0
                    row.append(
                        norm(sum(r[i]), m, s) + p.omega * norm(_disc(r[i], p.gamma)[t], gm, gs)
                    )
                out_g[i] = row
            for i in g:
                out[i] = out_g[i]
        elif name == "mt_grpo":
            mo, so = _mean_std([eps_list[i].outcome for i in g])
            for i in g:
                row = []
                for t in range(len(r[i])):
                    a = norm(eps_list[i].outcome, mo, so)
                    if t < len(r[i]) - 1:
                        m, s = _mean_std([inter[j][t] for j in g if len(inter[j]) > t])
                        a += p.turn_coef * norm(inter[i][t], m, s)
                    row.append(a)
                out[i] = row
        elif name == "progress_deltas":
            m, s = _mean_std([c for i in g for c in _disc(r[i], p.gamma)])
            for i in g:
                out[i] = [norm(c, m, s) for c in _disc(r[i], p.gamma)]
        elif name == "turn_index_sum":
            mo = sum(eps_list[i].outcome for i in g) / len(g)
            for i in g:
                row = []
                for t in range(len(r[i])):
                    a = eps_list[i].outcome - mo
                    for k in range(t, len(r[i])):
                        reached = [inter[j][k] for j in g if len(inter[j]) > k]
                        a += inter[i][k] - sum(reached) / len(reached)
                    row.append(a)
                out[i] = row
    return out


def random_group(rng: random.Random) -> tuple[Episode, ...]:
    out = []
    for task in ("A", "B"):
        for _ in range(rng.randint(1, 4)):
            n = rng.randint(1, 4)
            turn_r = tuple(rng.choice((0.0, 0.5, 1.0, -0.25)) for _ in range(n))
            states = tuple(rng.choice(("x", "y", "z")) for _ in range(n))
            out.append(make(task, turn_r, rng.choice((0.0, 1.0, 2.0)), states))
    return tuple(out)


@pytest.mark.parametrize("name", list(CREDIT_RULES))
def test_every_rule_matches_the_plain_loop_oracle(name):
    rng = random.Random(11)
    for trial in range(25):
        episodes = random_group(rng)
        params = CreditParams(
            gamma=rng.choice((1.0, 0.9, 0.5)),
            lam=rng.choice((1.0, 0.95, 0.0)),
            scale_by_std=bool(trial % 2),
            omega=rng.choice((1.0, 0.3)),
            turn_coef=rng.choice((1.0, 0.5)),
        )
        got = credit(name, episodes, params).turn_advantages
        want = oracle(name, episodes, params)
        for g, w in zip(got, want, strict=True):
            assert list(g) == pytest.approx(w, abs=1e-9), (name, trial)


# --------------------------------------------------------------------------- verl #7244


def test_turn_index_bias_is_minus_the_turn_reward_per_extra_turn():
    result = turn_index_bias([0.5, 0.25, 0.25], [-0.25, -0.5, 0.125], [1.0, 1.0, 0.0])
    assert result.per_extra_turn == pytest.approx((0.5, -0.125))  # -E[r_1], -E[r_2]
    # the fix (all K indices, absent turns 0) is the unbiased reference exactly
    assert result.fixed == pytest.approx(result.reference)
    # by hand: E[G] = 1*(-0.25) + 0.5*(-0.5) + 0.25*0.125 + E[O] (0.75) = 0.28125
    # reference(n=1) = -0.25 + 1 - 0.28125 = 0.46875
    assert result.reference[0] == pytest.approx(0.46875)
    assert result.turn_index[0] == pytest.approx(1.0 - 0.75)
    assert "hidden bonus" in result.text


def test_turn_index_demo_reproduces_the_exact_numbers_on_tokens():
    counts, turn_reward, outcome = (2, 1, 1), (-0.25, -0.5, 0.125), (1.0, 1.0, 0.0)
    exact = turn_index_bias([c / 4 for c in counts], turn_reward, outcome)
    episodes = turn_index_demo(counts, turn_reward, outcome)
    adv = credit("turn_index_sum", episodes).turn_advantages
    for n in (1, 2, 3):
        got = [a[0] for a, e in zip(adv, episodes, strict=True) if e.n_turns == n]
        assert sum(got) / len(got) == pytest.approx(exact.turn_index[n - 1])
    unbiased = credit("episode_grpo", episodes, CreditParams(scale_by_std=False)).turn_advantages
    for n in (1, 2, 3):
        got = [a[0] for a, e in zip(unbiased, episodes, strict=True) if e.n_turns == n]
        assert sum(got) / len(got) == pytest.approx(exact.reference[n - 1])


def test_turn_index_bias_refuses_bad_probabilities():
    with pytest.raises(ValueError, match="sum to 1"):
        turn_index_bias([0.5, 0.4], [0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="need"):
        turn_index_bias([1.0], [0.0, 0.0], [1.0])


def test_token_advantages_are_float64_and_zero_on_the_prompt():
    result = credit("outcome_broadcast", GROUP)
    assert result.token_advantages.dtype == torch.float64
    batch = batch_episodes(GROUP)
    assert not result.token_advantages[batch.turn < 0].any()
