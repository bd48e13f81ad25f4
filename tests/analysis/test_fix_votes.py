"""The class's top choices on a fix gate, by hand and against a plain-loop oracle."""

from __future__ import annotations

import random
from collections import Counter

from roll_viz.analysis.fix_votes import TOP_CHOICES, top_choices


def test_top_three_by_hand():
    # option 4: 5 votes, options 1 and 2 tie at 3 (1 is listed first), option 0: 1 vote
    rounds = {1: Counter({4.0: 5, 2.0: 3, 1.0: 3, 0.0: 1})}
    assert top_choices(rounds, 6) == (4, 1, 2)
    assert top_choices(rounds, 6, k=2) == (4, 1)


def test_the_revote_wins_over_the_first_vote():
    rounds = {1: Counter({0.0: 4}), 2: Counter({3.0: 2, 5.0: 2})}
    assert top_choices(rounds, 6) == (3, 5)  # the re-vote's: a tie broken by option order


def test_an_empty_revote_falls_back_to_the_first_vote_and_no_votes_give_none():
    assert top_choices({1: Counter({2.0: 1}), 2: Counter()}, 3) == (2,)
    assert top_choices({1: Counter(), 2: Counter()}, 3) == ()
    assert top_choices({}, 3) == ()


def test_answers_that_are_not_options_are_left_out():
    rounds = {1: Counter({7.0: 9, -1.0: 9, 1.5: 9, 0.0: 1, 1.0: 0})}
    assert top_choices(rounds, 3) == (0,)


def _oracle(rounds: dict, n: int, k: int) -> tuple[int, ...]:
    for rnd in (2, 1):
        votes = [0] * n
        for value, count in rounds.get(rnd, {}).items():
            if value in range(n):
                votes[int(value)] += count
        if sum(votes):
            picked = []
            for _ in range(k):
                best = -1
                for i in range(n):  # strictly more votes replaces: the lower index wins a tie
                    if i not in picked and votes[i] > 0 and (best < 0 or votes[i] > votes[best]):
                        best = i
                if best < 0:
                    break
                picked.append(best)
            return tuple(picked)
    return ()


def test_against_a_plain_loop_oracle():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(2, 6)
        rounds = {
            rnd: Counter(
                {float(rng.randrange(n)): rng.randint(0, 3) for _ in range(rng.randint(0, 5))}
            )
            for rnd in (1, 2)
        }
        assert top_choices(rounds, n) == _oracle(rounds, n, TOP_CHOICES)
