"""Toy rewards: hand-computed cases, the safe arithmetic parser, regex guards, specs and noise."""

from fractions import Fraction

import pytest
import torch

from roll_viz.lm.sampling import sample
from roll_viz.rewards import (
    REWARD_FNS,
    REWARD_HELP,
    REWARD_PARAMS,
    RewardSpec,
    arithmetic,
    arithmetic_answer,
    keyword,
    last_number,
    one_sentence,
    positive_words,
    score_greedy,
    score_responses,
    score_rollout,
    target_length,
)
from tests.lm.helpers import identical_config, tiny_model


@pytest.fixture(scope="module")
def identical():
    return sample(tiny_model(), identical_config())


def test_registry_is_consistent():
    assert set(REWARD_FNS) == set(REWARD_PARAMS) == set(REWARD_HELP)
    for name, fn in REWARD_FNS.items():
        defaults = {k: v for k, (v, _) in REWARD_PARAMS[name].items()}
        assert isinstance(fn("What is 1 + 1?", "It is 2.", **defaults), float)


@pytest.mark.parametrize(
    ("words", "expected"), [(20, 1.0), (30, 0.5), (10, 0.5), (40, 0.0), (0, 0.0), (45, 0.0)]
)
def test_target_length(words, expected):
    assert target_length("p", " ".join(["w"] * words)) == pytest.approx(expected)


def test_target_length_params():
    assert target_length("p", "a b c d", target=4, tolerance=2) == 1.0
    assert target_length("p", "a b c", target=4, tolerance=2) == 0.5
    with pytest.raises(ValueError, match="tolerance"):
        target_length("p", "a", tolerance=0)


def test_keyword_literal_and_regex():
    assert keyword("p", "Ahoy PIRATE!") == 1.0
    assert keyword("p", "Ahoy PIRATE!", case_sensitive=True) == 0.0
    assert keyword("p", "cost: 3.50", pattern="3.5") == 1.0
    assert keyword("p", "cost: 3x50", pattern="3.5") == 0.0  # literal: the dot is a dot
    assert keyword("p", "arrr matey", pattern=r"\barr+\b", regex=True) == 1.0
    assert keyword("p", "barrel", pattern=r"\barr+\b", regex=True) == 0.0


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(unclosed", "invalid regular expression"),
        (r"(a)\1", "invalid escape sequence"),  # back-references need backtracking
        ("(?=a)", "invalid perl operator"),  # so do look-arounds
        ("x" * 101, "longer than"),
        ("", "empty"),
    ],
)
def test_keyword_bad_patterns_raise_clear_errors(pattern, message):
    with pytest.raises(ValueError, match=message):
        keyword("p", "aaaa", pattern=pattern, regex=True)
    with pytest.raises(ValueError, match=message):
        RewardSpec.single("keyword", pattern=pattern, regex=True)


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        ("What is 17 + 25?", 42),
        ("What is 12 + 30 - 5?", 37),
        ("What is 6 * 7?", 42),
        ("What is 6 x 7?", 42),
        ("Compute (2 + 3) × 4.", 20),
        ("What is 2 + 3 * 4?", 14),
        ("What is 7 / 2?", Fraction(7, 2)),
        ("In 2024, what is 100 - 37?", 63),
        ("What is 10 - -3?", 13),
    ],
)
def test_arithmetic_parser(prompt, answer):
    assert arithmetic_answer(prompt) == answer


@pytest.mark.parametrize(
    "prompt",
    ["Explain entanglement.", "Year 2024", "What is 5 / 0?", "__import__('os') + 1", "1 +"],
)
def test_arithmetic_parser_rejects(prompt):
    assert arithmetic_answer(prompt) is None


def test_arithmetic_reward_uses_last_number():
    assert arithmetic("What is 17 + 25?", "17 + 25 = 42.") == 1.0
    assert arithmetic("What is 17 + 25?", "It is 42, not 41.") == 0.0
    assert arithmetic("What is 17 + 25?", "no idea") == 0.0
    assert arithmetic("Tell me a joke", "42") == 0.0
    assert arithmetic("What is 1000 + 234?", "That makes 1,234") == 1.0
    assert arithmetic("What is 7 / 2?", "3.5") == 1.0
    assert last_number("a -5 and 2.50") == Fraction(5, 2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It is one sentence.", 1.0),
        ("It is 3.5 metres long!", 1.0),
        ("Two. Sentences.", 0.0),
        ("No full stop", 0.0),
        ("", 0.0),
        ("Really?!", 1.0),
    ],
)
def test_one_sentence(text, expected):
    assert one_sentence("p", text) == expected


def test_positive_words():
    assert positive_words("p", "a great, happy day") == 0.5
    assert positive_words("p", "Great great GREAT great great") == 1.0  # capped
    assert positive_words("p", "nothing here") == 0.0
    assert positive_words("p", "good", per_word=0.1, cap=5.0) == pytest.approx(0.1)


def test_spec_weighted_sum_and_defaults():
    spec = RewardSpec(terms=(("one_sentence", 2.0, ()), ("positive_words", 0.5, {"per_word": 1.0})))
    assert spec.terms[1][2] == (("per_word", 1.0),)
    scores = score_responses(["p", "p"], ["A great day.", "Bad. Day."], spec)
    assert scores.dtype == torch.float64
    assert scores.tolist() == [2.0 + 0.5, 0.0]
    assert hash(spec) == hash(RewardSpec(terms=spec.terms))


def test_spec_validation():
    with pytest.raises(ValueError, match="unknown reward"):
        RewardSpec.single("exec")
    with pytest.raises(ValueError, match="no parameter"):
        RewardSpec.single("target_length", code="1")
    with pytest.raises(ValueError, match="noise_sigma"):
        RewardSpec(noise_sigma=-1.0)
    with pytest.raises(ValueError, match="at least one"):
        RewardSpec(terms=())


def test_noise_is_seeded():
    spec = RewardSpec(terms=(("one_sentence", 1.0, ()),), noise_sigma=0.5, noise_seed=3)
    a = score_responses(["p"] * 4, ["Hi."] * 4, spec)
    b = score_responses(["p"] * 4, ["Hi."] * 4, spec)
    assert torch.equal(a, b)
    assert not torch.equal(a, torch.ones(4, dtype=torch.float64))
    other = score_responses(["p"] * 4, ["Hi."] * 4, RewardSpec(spec.terms, 0.5, 4))
    assert not torch.equal(a, other)


def test_score_rollout_and_greedy(identical):
    spec = RewardSpec.single("target_length", target=5, tolerance=10)
    scores = score_rollout(identical, spec)
    assert scores.shape == (len(identical.responses),)
    expected = [target_length("", r, target=5, tolerance=10) for r in identical.responses]
    assert scores.tolist() == pytest.approx(expected)
    greedy = score_greedy(identical, spec)
    per_prompt = [target_length("", r, target=5, tolerance=10) for r in identical.greedy_responses]
    assert greedy.tolist() == pytest.approx([per_prompt[int(g)] for g in identical.group_ids])


@pytest.mark.parametrize("pattern", [".*.*.*.*.*#", "(a+)+$", "(a|aa)*b", "(x+x+)+y"])
def test_catastrophic_patterns_finish_in_linear_time(pattern):
    # These patterns backtrack exponentially under Python's re (the first one froze the shared
    # server from one URL); RE2 matches them in one pass over the capped text.
    import time

    text = "a" * 4000 + "x" * 1000
    start = time.perf_counter()
    for response in (text, text + "!", "a" * 30):
        keyword("p", response, pattern=pattern, regex=True)
    assert time.perf_counter() - start < 2.0  # a bound on a hang, not a benchmark


def test_param_problems_name_each_bad_field():
    from roll_viz.rewards import param_problems

    assert param_problems("target_length", {"target": 20, "tolerance": 5}) == {}
    for bad in (0, -1, float("inf"), float("nan"), "abc"):
        problems = param_problems("target_length", {"tolerance": bad})
        assert set(problems) == {"tolerance"}, bad
        assert "tolerance must" in problems["tolerance"]
    assert set(param_problems("target_length", {"target": float("nan")})) == {"target"}
    assert set(param_problems("keyword", {"pattern": "(pirate", "regex": True})) == {"pattern"}
    assert param_problems("keyword", {"pattern": "(pirate", "regex": False}) == {}  # literal
    with pytest.raises(ValueError, match="tolerance must be in"):
        RewardSpec.single("target_length", tolerance=0)
