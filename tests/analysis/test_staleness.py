"""Async staleness, pure arithmetic: the three-policy ratio under each anchor, and discard vs pace.

Every number below is worked out by hand; ``_oracle_clip`` is a plain loop that shares no code
with the package.
"""

import math

import pytest
import torch

from roll_viz.analysis import staleness as st

# one row of three tokens and one of two (the third is padding)
MU = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.0, 0.0]], dtype=torch.float64)
OLD = torch.tensor([[-1.0, -1.9, -0.5], [-0.3, -1.0, 0.0]], dtype=torch.float64)
THETA = torch.tensor([[-0.5, -1.9, -1.0], [-0.3, -1.5, 9.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]]).bool()
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)


def _oracle_clip(theta, anchor, adv, mask, eps):
    """Plain loops: the count of tokens whose clipped PPO term wins (verl pg_clipfrac)."""
    hits = total = 0
    for b in range(len(mask)):
        for t in range(len(mask[b])):
            if not mask[b][t]:
                continue
            total += 1
            r = math.exp(theta[b][t] - anchor[b][t])
            a = adv[b]
            unclipped = -a * r
            clipped = -a * min(max(r, 1 - eps), 1 + eps)
            hits += clipped > unclipped
    return hits / total


def test_three_columns_and_the_two_gaps_by_hand():
    three = st.three_policies(MU, OLD, THETA, ADV, MASK, eps=0.2)
    assert three.delta[0].tolist() == pytest.approx([0.0, 0.1, 0.0])
    assert three.drift[0].tolist() == pytest.approx([0.5, 0.0, -0.5])
    assert three.drift[1].tolist() == pytest.approx([0.0, -0.5, 0.0])  # padding is 0
    # recomputed anchor: r = exp(0.5) = 1.6487 (A > 0: clipped), 1, exp(-0.5) (A > 0: not)
    r = three.ratio["recomputed"]
    assert r[0].tolist() == pytest.approx([math.exp(0.5), 1.0, math.exp(-0.5)])
    assert three.clipped["recomputed"].tolist() == [[True, False, False], [False, True, False]]
    table = three.table.set_index("anchor")
    assert table.loc["recomputed", "clip fraction"] == pytest.approx(2 / 5)
    # mu anchor: token (0, 1) has r = exp(-1.9 + 2.0) = exp(0.1) < 1.2: the same two clip
    assert float(three.ratio["mu"][0, 1]) == pytest.approx(math.exp(0.1))
    assert table.loc["mu", "ratio max"] == pytest.approx(math.exp(0.5))


def test_current_anchor_is_ratio_one_and_clips_nothing():
    three = st.three_policies(MU, OLD, THETA, ADV, MASK, eps=0.2)
    assert torch.equal(three.ratio["current"], torch.ones_like(MU))
    assert not bool(three.clipped["current"].any())
    row = three.table.set_index("anchor").loc["current"]
    assert (row["ratio min"], row["ratio max"], row["clip fraction"]) == (1.0, 1.0, 0.0)


@pytest.mark.parametrize("eps", [0.05, 0.2, 0.4])
def test_clip_fraction_against_a_plain_loop(eps):
    gen = torch.Generator().manual_seed(3)
    mu, old, theta = (-torch.rand(4, 6, generator=gen, dtype=torch.float64) for _ in range(3))
    adv = torch.randn(4, generator=gen, dtype=torch.float64)
    mask = torch.rand(4, 6, generator=gen) > 0.3
    three = st.three_policies(mu, old, theta, adv, mask, eps=eps)
    table = three.table.set_index("anchor")
    lists = (theta.tolist(), adv.tolist(), mask.tolist(), eps)
    assert table.loc["recomputed", "clip fraction"] == pytest.approx(
        _oracle_clip(lists[0], old.tolist(), *lists[1:])
    )
    assert table.loc["mu", "clip fraction"] == pytest.approx(
        _oracle_clip(lists[0], mu.tolist(), *lists[1:])
    )


def test_token_rows_lists_the_valid_tokens_only():
    three = st.three_policies(MU, OLD, THETA, ADV, MASK)
    frame = st.token_rows(three, 1, tokens=("a", "<b>"))
    assert frame["token"].tolist() == ["a", "<b>"]  # untrusted text kept as typed
    assert frame["log π_θ"].tolist() == pytest.approx([-0.3, -1.5])
    assert frame["ratio (π_old := π_θ)"].tolist() == [1.0, 1.0]


def test_three_policies_refuses_bad_input():
    with pytest.raises(ValueError, match="shape"):
        st.three_policies(MU, OLD, THETA[:, :2], ADV, MASK)
    with pytest.raises(ValueError, match="eps"):
        st.three_policies(MU, OLD, THETA, ADV, MASK, eps=0.0)


# ---------------------------------------------------------------------------------------------
# discard vs pace


def test_staleness_of_a_length():
    # 16 tokens per trainer step: 1..16 tokens finish within the step, 17..32 one step late
    assert [st.staleness_of(n, 16) for n in (1, 16, 17, 32, 33, 50)] == [0, 0, 1, 1, 2, 3]


def test_discard_requeues_and_starves_the_slow_group():
    # K = 1 at 16 tokens a step: an attempt of more than 32 tokens is too stale
    lengths = [[10], [30], [50, 20], [60, 70]]
    discard, pace = st.discard_vs_pace(lengths, tokens_per_step=16, max_staleness=1)
    assert discard.lengths == (10, 30, 20)  # group 2 trained on its shorter second attempt
    assert discard.groups == (0, 1, 2)
    assert discard.never == (3,)  # every attempt of group 3 is too slow: never trained
    assert discard.attempts_used == (1, 1, 2)
    assert discard.wasted_tokens == 50 + 60 + 70
    assert discard.mean_length == pytest.approx(20.0)
    # pacing trains the data as it is; the slowest (70 is not tried: 60 -> staleness 3) waits 2
    assert pace.lengths == (10, 30, 50, 60)
    assert pace.never == ()
    assert pace.wasted_tokens == 0
    assert pace.wait_steps == 3 - 1
    frame = st.summary([10, 30, 50, 60], discard, pace).set_index("what")
    assert frame.loc["the data (first attempts)", "mean length"] == pytest.approx(37.5)
    assert frame.loc["discard and requeue", "never trained"] == 1
    assert frame.loc["pace the sampler", "mean length"] == pytest.approx(37.5)


def test_a_loose_bound_discards_nothing():
    discard, pace = st.discard_vs_pace([[10], [30]], tokens_per_step=16, max_staleness=2)
    assert discard.lengths == pace.lengths == (10, 30)
    assert discard.wasted_tokens == 0
    assert pace.wait_steps == 0


def test_discard_vs_pace_bounds():
    with pytest.raises(ValueError, match="tokens_per_step"):
        st.discard_vs_pace([[1]], 0, 1)
    with pytest.raises(ValueError, match="at least 1 token"):
        st.discard_vs_pace([[0]], 4, 1)
    with pytest.raises(ValueError, match="max_staleness"):
        st.discard_vs_pace([[1]], 4, st.MAX_STALENESS + 1)
    with pytest.raises(ValueError, match="groups"):
        st.discard_vs_pace([], 4, 1)


def test_attempts_of_answers_and_of_groups():
    steps = [([0, 0, 1, 1], [3, 7, 2, 0]), ([0, 0, 1, 1], [5, 4, 9, 1])]
    # the j-th answer of each prompt across the steps (an empty answer still took a step)
    assert st.attempts_of(steps) == [[3, 5], [7, 4], [2, 9], [1, 1]]
    # a group is as long as its longest answer
    assert st.attempts_of(steps, unit="group") == [[7, 5], [2, 9]]
    with pytest.raises(ValueError, match="unit"):
        st.attempts_of(steps, unit="token")


def test_synthetic_attempts_are_seeded_bounded_and_starve_the_long_prompts():
    a = st.synthetic_attempts(prompts=50, attempts=6, seed=1, max_len=100)
    assert a == st.synthetic_attempts(prompts=50, attempts=6, seed=1, max_len=100)
    assert a != st.synthetic_attempts(prompts=50, attempts=6, seed=2, max_len=100)
    assert len(a) == 50
    assert all(len(t) == 6 and all(1 <= n <= 100 for n in t) for t in a)
    discard, pace = st.discard_vs_pace(a, tokens_per_step=32, max_staleness=1)
    assert discard.never  # a hard prompt is long every time: never trained
    assert discard.mean_length < pace.mean_length  # the length bias of discarding
    with pytest.raises(ValueError, match="prompts"):
        st.synthetic_attempts(prompts=0)
