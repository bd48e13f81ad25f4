"""Silent bugs of the rewards and their group statistics: six of field-2026-b.md.

A zero-token sibling's reward in its group's mean (OpenRLHF PR #1239), an empty verifier parse
that appends a second score (NeMo RL PR #3635), an unparseable gold answer scored 1.0
(huggingface/cookbook #335), a second batch whitening after GRPO (reskill PR #12), near-tie
rewards blown up by the std (twinkle PR #288) and a noisy verifier that breaks group ties
(asuzukosi #15). Each: its batch, the ``wrong_*`` code written plainly the way its thread
describes it, the ``right_*`` side (roll-viz's reward and pipeline wherever roll-viz computes
that quantity), and its record.

The section headings number them as field-2026-b.md does (2.n: section 2's list; row n:
section 1's table).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence

import torch
from torch import Tensor

from roll_viz.analysis.silent_bugs.bug_record import (
    Outcome,
    SilentBug,
    avg,
    make_batch,
    num,
    sd,
    series,
)
from roll_viz.core.pipeline import ESTIMATOR_KEY, run
from roll_viz.rewards import RewardSpec, score_responses

#: verl's GRPO and REINFORCE++, named through the dialect's own estimator key
VERL_GRPO = {ESTIMATOR_KEY["verl"]: "grpo"}
VERL_RPP = {ESTIMATOR_KEY["verl"]: "reinforce_plus_plus"}

# ----------------------------------------------------- 2.2 a zero-token sibling in the group mean

ZERO_SIBLING_SCORES = (100.0, 1.0)
ZERO_SIBLING_TOKENS = (0, 2)  # the first sibling lost every trainable token to truncation


def wrong_zero_sibling(
    scores: Sequence[float] = ZERO_SIBLING_SCORES, tokens: Sequence[int] = ZERO_SIBLING_TOKENS
) -> list[float]:
    """OpenRLHF ``dr_grpo`` before PR #1239: ``r - mean(r)`` over every sibling of the prompt.

    ``tokens`` is not read: a sibling with ``action_mask.sum() == 0`` still carries its reward
    into the mean.
    """
    m = avg(scores)
    return [x - m for x in scores]


def right_zero_sibling(
    scores: Sequence[float] = ZERO_SIBLING_SCORES, tokens: Sequence[int] = ZERO_SIBLING_TOKENS
) -> list[float]:
    """PR #1239's rule: the mean runs over siblings with at least one token; the others get 0.

    Written out because roll-viz's pipeline builds a group from its group ids and counts every
    row, tokens or not, as OpenRLHF's main branch does while the PR is open (and ``dr_grpo``
    needs two rows per group, where this group has one valid sibling).
    """
    valid = [x for x, n in zip(scores, tokens, strict=True) if n > 0]
    m = avg(valid)
    return [x - m if n > 0 else 0.0 for x, n in zip(scores, tokens, strict=True)]


def _zero_sibling() -> Outcome:
    wrong = wrong_zero_sibling()
    right = right_zero_sibling()
    return Outcome(
        wrong=wrong[1],
        right=right[1],
        labels=("sibling 1 (0 tokens)", "sibling 2 (2 tokens)"),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each sibling (r - group mean)",
        formula=(
            "dr_grpo, 2 samples per prompt: rewards 100 and 1; action_mask.sum() = 0 and 2\n"
            f"every sibling in the mean: (100 + 1) / 2 = 50.5  ->  1 - 50.5 = {num(wrong[1])} "
            "on each of sibling 2's tokens\n"
            "siblings with tokens only: mean = 1  ->  1 - 1 = "
            f"{num(right[1])}; sibling 1 trains on nothing and gets 0"
        ),
    )


# ------------------------------------------------------ 2.3 an empty parse appends a second score

SHIFT_PROMPTS = ("What is 5 + 7?",) * 3 + ("What is 9 - 2?",) * 3
SHIFT_GOLDS = ("12",) * 3 + ("7",) * 3
SHIFT_RESPONSES = (
    "5 + 7 = 12",
    "I don't know.",
    "It is 13",
    "9 - 2 = 7",
    "I think 5",
    "The answer is 7",
)
SHIFT_GROUPS = ("q1",) * 3 + ("q2",) * 3


def wrong_verify(
    responses: Sequence[str] = SHIFT_RESPONSES, golds: Sequence[str] = SHIFT_GOLDS
) -> list[float]:
    """NeMo RL's ``HFVerifyWorker.verify`` before PR #3635, with a numeric parse.

    The score is appended before the answer is extracted; a parse that finds nothing returns
    ``[]``, so ``parsed[0][0]`` raises inside the ``try`` and the ``except`` appends a SECOND
    score for the same sample (the list grows by one per empty parse). ``[0][0]`` is also the
    answer's first character, the PR's second bug.
    """
    results: list[float] = []
    for response, gold in zip(responses, golds, strict=True):
        try:
            parsed = re.findall(r"-?\d+", response)  # [] when it parses nothing
            results.append(1.0 if parsed and parsed[-1] == gold else 0.0)
            parsed[0][0]  # the extracted answer: raises on []
        except IndexError:
            results.append(0.0)
    return results


def right_verify() -> Tensor:
    """(B,) roll-viz's ``arithmetic`` reward: one score per response, 0 when none parses."""
    return score_responses(SHIFT_PROMPTS, SHIFT_RESPONSES, RewardSpec.single("arithmetic"))


def shift_advantages(scores: Sequence[float]) -> Tensor:
    """(B,) verl GRPO advantages of the first B scores, read positionally."""
    batch = make_batch(list(scores)[: len(SHIFT_GROUPS)], [1] * len(SHIFT_GROUPS), SHIFT_GROUPS)
    return run(batch, "verl", VERL_GRPO).advantages[:, 0]


def _reward_shift() -> Outcome:
    scores = wrong_verify()
    right_scores = right_verify()
    wrong = shift_advantages(scores)
    right = shift_advantages(right_scores.tolist())
    return Outcome(
        wrong=wrong[4].item(),
        right=right[4].item(),
        labels=tuple(f"{g}: {r}" for g, r in zip(SHIFT_GROUPS, SHIFT_RESPONSES, strict=True)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="GRPO advantage of each answer",
        formula=(
            "one score per answer: " + ", ".join(num(x) for x in right_scores.tolist()) + "\n"
            "'I don't know.' parses to []: its score 0, then [0][0] raises and except appends "
            f"0 again  ->  {len(scores)} scores: " + ", ".join(num(x) for x in scores) + "\n"
            "read positionally, q2 = "
            + ", ".join(num(x) for x in scores[3:6])
            + "  (was "
            + ", ".join(num(x) for x in right_scores[3:6].tolist())
            + ")\n"
            f"'I think 5' (wrong): A = {num(wrong[4].item())} instead of {num(right[4].item())}"
        ),
    )


# ------------------------------------------------------ 2.4 an unparseable gold answer scores 1.0

GOLD_SOLUTIONS = ("see the figure",) * 4 + ("12",) * 4
GOLD_ANSWERS = ("1/2", "1/2", "3", "5", "12", "13", "11", "10")
GOLD_GROUPS = ("q1",) * 4 + ("q2",) * 4
GOLD_WRONG_ROW = 2  # q1's answer "3": wrong by anyone's reading of the figure (1/2)


def _parse(text: str) -> list[str]:
    """A stand-in for math-verify's ``parse``: the numbers written in the text, [] if none."""
    return re.findall(r"-?\d+(?:/\d+)?", text)


def wrong_gold(
    answers: Sequence[str] = GOLD_ANSWERS, solutions: Sequence[str] = GOLD_SOLUTIONS
) -> list[float]:
    """The GRPO cookbook's ``accuracy_reward``: 1.0 whenever the GOLD answer cannot be parsed."""
    rewards = []
    for content, solution in zip(answers, solutions, strict=True):
        gold_parsed = _parse(solution)
        answer_parsed = _parse(content)
        if len(gold_parsed) != 0:
            rewards.append(float(answer_parsed[-1:] == gold_parsed[-1:]))
        else:
            rewards.append(1.0)
    return rewards


def gradable_rows(solutions: Sequence[str] = GOLD_SOLUTIONS) -> list[int]:
    """Rows whose gold answer parses: an ungradable prompt is left out of the batch."""
    return [i for i, s in enumerate(solutions) if _parse(s)]


def gold_advantages(scores: Sequence[float], rows: Sequence[int]) -> list[float]:
    """(B,) verl REINFORCE++ advantages of ``rows`` (a batch baseline); 0 for rows left out."""
    keep = list(rows)
    batch = make_batch([scores[i] for i in keep], [1] * len(keep), [GOLD_GROUPS[i] for i in keep])
    adv = run(batch, "verl", VERL_RPP).advantages[:, 0].tolist()
    out = [0.0] * len(scores)
    for i, a in zip(keep, adv, strict=True):
        out[i] = a
    return out


def _gold() -> Outcome:
    scores = wrong_gold()
    wrong = gold_advantages(scores, range(len(scores)))
    right = gold_advantages(scores, gradable_rows())
    return Outcome(
        wrong=wrong[GOLD_WRONG_ROW],
        right=right[GOLD_WRONG_ROW],
        labels=tuple(f"{g}: {a}" for g, a in zip(GOLD_GROUPS, GOLD_ANSWERS, strict=True)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="REINFORCE++ advantage of each answer (0 = not trained)",
        formula=(
            "q1's gold 'see the figure' parses to []  ->  reward 1.0 for all four answers\n"
            "rewards: " + ", ".join(num(x) for x in scores) + f"  (batch mean {num(avg(scores))},"
            f" std {num(sd(scores))})\n"
            f"REINFORCE++ whitens over the batch: q1's wrong '3' gets (1 - {num(avg(scores))}) / "
            f"{num(sd(scores))} = {num(wrong[GOLD_WRONG_ROW])}\n"
            "leave the ungradable prompt out: q1 is not trained (0); q2 alone: "
            + ", ".join(num(x) for x in right[4:])
        ),
    )


# ---------------------------------------------------------- 2.9 a second whitening over the batch

DOUBLE_SCORES = (1.0, 0.0, 1.0, 1.0)
DOUBLE_LENGTHS = (2, 6, 3, 3)
DOUBLE_GROUPS = ("q1", "q1", "q2", "q2")


def wrong_double_whiten(
    scores: Sequence[float] = DOUBLE_SCORES, lengths: Sequence[int] = DOUBLE_LENGTHS
) -> list[float]:
    """The reskill ``compute_grpo_outcome_advantage``: GRPO, then verl's ``masked_whiten``.

    Group step: ``(r - mean) / (std + 1e-6)`` per prompt (std unbiased), broadcast to every
    token. Tail: over all valid tokens of the batch, ``(a - mean) * rsqrt(var + 1e-8)`` with
    the unbiased token variance. Returns each answer's (per-token) advantage.
    """
    group = []
    for start in range(0, len(scores), 2):
        pair = scores[start : start + 2]
        m = avg(pair)
        s = math.sqrt(sum((x - m) ** 2 for x in pair) / (len(pair) - 1))
        group += [(x - m) / (s + 1e-6) for x in pair]
    tokens = [a for a, n in zip(group, lengths, strict=True) for _ in range(n)]
    mean = avg(tokens)
    var = sum((t - mean) ** 2 for t in tokens) / (len(tokens) - 1)
    return [(a - mean) / math.sqrt(var + 1e-8) for a in group]


def right_double_whiten() -> Tensor:
    """(B,) roll-viz's verl GRPO advantages: the group normalisation alone."""
    batch = make_batch(DOUBLE_SCORES, DOUBLE_LENGTHS, DOUBLE_GROUPS)
    return run(batch, "verl", VERL_GRPO).advantages[:, 0]


def _double_whiten() -> Outcome:
    wrong = wrong_double_whiten()
    right = right_double_whiten()
    token_mean = (2 - 6) * right[0].item() / 14
    return Outcome(
        wrong=wrong[2],
        right=right[2].item(),
        labels=("q1 r=1, 2 tokens", "q1 r=0, 6 tokens", "q2 r=1, 3 tokens", "q2 r=1, 3 tokens"),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each answer (on each of its tokens)",
        formula=(
            f"GRPO: q1 -> {num(right[0].item())}, {num(right[1].item())}; q2 (both 1) -> 0, 0\n"
            "token mean over 14 tokens = (2 * 0.7071 - 6 * 0.7071) / 14 = "
            f"{num(token_mean)}  (not 0: the answers differ in length)\n"
            f"second whitening: q2's tokens (0 - ({num(token_mean)})) / "
            f"{num(-token_mean / wrong[2])} = {num(wrong[2])}  (a dead group trains)\n"
            "GRPO alone (the opt-out): q2 stays 0"
        ),
    )


# ------------------------------------------------------- row 21: near-tie rewards blown up by std

NEAR_TIE_SCORES = (0.7012, 0.7003, 0.6998, 0.7007, 0.9, 0.3, 0.6, 0.2)
NEAR_TIE_GROUPS = ("q1",) * 4 + ("q2",) * 4
MIN_REWARD_RANGE = 0.02  # the reward model's resolution (twinkle's example value)


def wrong_near_tie(scores: Sequence[float] = NEAR_TIE_SCORES, n: int = 4) -> list[float]:
    """Plain GRPO: ``(r - mean) / (std + 1e-6)`` per group, admitted when ``std > 0``."""
    out = []
    for start in range(0, len(scores), n):
        group = scores[start : start + n]
        m, s = avg(group), sd(group)
        out += [(x - m) / (s + 1e-6) for x in group]
    return out


def admitted(scores: Sequence[float], n: int = 4) -> list[bool]:
    """Per answer: its group's reward range reaches ``MIN_REWARD_RANGE`` (twinkle's gate)."""
    out = []
    for start in range(0, len(scores), n):
        group = scores[start : start + n]
        out += [max(group) - min(group) >= MIN_REWARD_RANGE] * len(group)
    return out


def right_near_tie() -> Tensor:
    """(B,) roll-viz's verl GRPO advantages, zero for a group below the reward's resolution."""
    batch = make_batch(NEAR_TIE_SCORES, [1] * 8, NEAR_TIE_GROUPS)
    gate = torch.tensor(admitted(NEAR_TIE_SCORES), dtype=torch.float64)
    return run(batch, "verl", VERL_GRPO).advantages[:, 0] * gate


def _near_tie() -> Outcome:
    wrong = wrong_near_tie()
    right = right_near_tie()
    q1 = NEAR_TIE_SCORES[:4]
    return Outcome(
        wrong=wrong[0],
        right=right[0].item(),
        labels=tuple(f"{g} {x:g}" for g, x in zip(NEAR_TIE_GROUPS, NEAR_TIE_SCORES, strict=True)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each answer",
        formula=(
            "q1 rewards 0.7012, 0.7003, 0.6998, 0.7007: range "
            f"{num(max(q1) - min(q1))}, below the reward's resolution {MIN_REWARD_RANGE}\n"
            f"std = {num(sd(q1))} > 0, so a std > 0 filter keeps the group\n"
            f"(0.7012 - {num(avg(q1), 6)}) / ({num(sd(q1))} + 1e-6) = {num(wrong[0])}  "
            "(a full-size advantage for noise)\n"
            f"range gate: q1 not admitted  ->  A = {num(right[0].item())}; q2 (range 0.7) keeps "
            f"its GRPO advantages ({num(right[4].item())}, ...)"
        ),
    )


# ----------------------------------------------------- row 23: a noisy verifier breaks group ties

#: the true verdicts: 8 prompts x 4 answers, mostly all-fail (a hard batch)
TRUE_VERDICTS = (
    (0, 0, 0, 0),
    (0, 0, 0, 0),
    (0, 0, 0, 0),
    (0, 0, 0, 0),
    (0, 0, 0, 0),
    (1, 1, 1, 1),
    (1, 0, 0, 0),
    (1, 1, 0, 0),
)
ACCURACIES = (1.0, 0.95, 0.9, 0.8, 0.7)
NOISE_ACCURACY = 0.9  # the headline verifier
NOISE_SEED = 3


def noisy_verdicts(accuracy: float, seed: int = NOISE_SEED) -> list[list[int]]:
    """The verdicts a verifier right with probability ``accuracy`` gives, answer by answer.

    One ``random.Random(seed)`` draw per answer in row order; the verdict flips when the draw is
    ``>= accuracy``. Every accuracy uses the same draws, so a worse verifier flips a superset.
    """
    rng = random.Random(seed)
    return [[1 - v if rng.random() >= accuracy else v for v in group] for group in TRUE_VERDICTS]


def wrong_zero_fraction(verdicts: Sequence[Sequence[int]]) -> float:
    """Share of answers whose group has ``max |r - mean| < 1e-8`` (asuzukosi #21's sketch)."""
    zero = 0
    for group in verdicts:
        m = avg(group)
        if max(abs(v - m) for v in group) < 1e-8:
            zero += len(group)
    return zero / sum(len(g) for g in verdicts)


def right_zero_fraction() -> float:
    """Share of zero advantages of roll-viz's verl GRPO on the TRUE verdicts."""
    scores = [float(v) for group in TRUE_VERDICTS for v in group]
    groups = [f"p{i}" for i, group in enumerate(TRUE_VERDICTS) for _ in group]
    adv = run(make_batch(scores, [1] * len(scores), groups), "verl", VERL_GRPO).advantages[:, 0]
    return float((adv.abs() < 1e-8).double().mean())


def noise_flips(accuracy: float) -> int:
    """How many verdicts the verifier of ``accuracy`` flipped."""
    noisy = noisy_verdicts(accuracy)
    return sum(
        a != b for t, n in zip(TRUE_VERDICTS, noisy, strict=True) for a, b in zip(t, n, strict=True)
    )


def _noisy_verifier() -> Outcome:
    wrong_series = [wrong_zero_fraction(noisy_verdicts(a)) for a in ACCURACIES]
    right = right_zero_fraction()
    wrong = wrong_zero_fraction(noisy_verdicts(NOISE_ACCURACY))
    return Outcome(
        wrong=wrong,
        right=right,
        labels=tuple(f"verifier {a:.0%}" for a in ACCURACIES),
        wrong_series=tuple(wrong_series),
        right_series=(right,) * len(ACCURACIES),
        series_title="share of answers with zero advantage (noisy verifier vs the truth)",
        formula=(
            "8 prompts x 4 answers; truly: 5 all-fail, 1 all-pass, 2 mixed  ->  6 of 8 groups "
            f"tied: zero-advantage share {num(right)}\n"
            f"a 90%-accurate verifier (random.Random({NOISE_SEED})) flips "
            f"{noise_flips(NOISE_ACCURACY)} of 32 verdicts\n"
            f"zero-advantage share with its verdicts: {num(wrong)}: each broken tie is a group of "
            "non-zero advantages that point at noise"
        ),
    )


# ----------------------------------------------------------------------------- the registry

BUGS: tuple[SilentBug, ...] = (
    SilentBug(
        id="zero-token-sibling",
        short="Zero-token sibling",
        title="A sibling with no trainable tokens still shifts the group mean",
        thread="OpenRLHF/OpenRLHF#1239",
        question="dr_grpo, two samples of one prompt: rewards 100 and 1, but the first lost "
        "every trainable token to truncation. What advantage should the valid sibling get?",
        choices=("0: it is the only sibling that trains", "-49.5", "-99 (leave-one-out)"),
        answer=0,
        quantity="advantage of the valid sibling (reward 1)",
        batch=(
            ("rewards", "100 (0 trainable tokens), 1 (2 tokens)"),
            ("config", "OpenRLHF dr_grpo, n_samples_per_prompt 2"),
        ),
        wrong_label="mean over every sibling",
        right_label="mean over siblings with tokens (PR #1239)",
        explanation="A sibling that trains on nothing still carried its reward into the mean: "
        "the valid sibling is pushed down by 49.5 for a reward nobody will learn from.",
        compute=_zero_sibling,
    ),
    SilentBug(
        id="reward-shift",
        short="Empty parse: 2 scores",
        title="An empty verifier parse appends a second score",
        thread="NVIDIA-NeMo/RL#3635",
        question="Six answers to two prompts; 'I don't know.' parses to nothing. The verifier "
        "appends a score, then fails to extract the answer and appends 0 in the except. What "
        "advantage does q2's wrong answer 'I think 5' get?",
        choices=(
            "about -1.15: it is wrong",
            "about +1.15: it inherits its neighbour's score",
            "the verifier raises, so the batch is skipped",
        ),
        answer=0,
        quantity="GRPO advantage of q2's wrong answer 'I think 5'",
        batch=(
            ("q1: 5 + 7", "'5 + 7 = 12', 'I don't know.', 'It is 13'"),
            ("q2: 9 - 2", "'9 - 2 = 7', 'I think 5', 'The answer is 7'"),
            ("config", "verl grpo on the scores, read positionally"),
        ),
        wrong_label="score appended before extraction (7 scores)",
        right_label="roll-viz: arithmetic reward, run('verl', grpo)",
        explanation="The empty parse gave one sample two scores, so every later score moved one "
        "slot: q2's wrong answer is rewarded and its right ones are not, with no error "
        "(the same line took the answer's first character: 137 became '1').",
        compute=_reward_shift,
    ),
    SilentBug(
        id="gold-unparseable",
        short="Unparseable gold = 1.0",
        title="An unparseable gold answer gives reward 1.0",
        thread="huggingface/cookbook#335",
        question="q1's gold answer cannot be parsed, so every q1 answer scores 1.0. Under "
        "REINFORCE++ (a batch baseline), what advantage should q1's wrong answer '3' get?",
        choices=(
            "0: an ungradable prompt should not train",
            "about +0.72: it scored 1.0 like the others",
            "about -1.21: like q2's wrong answers",
        ),
        answer=0,
        quantity="advantage of q1's wrong answer '3'",
        batch=(
            ("q1", "gold 'see the figure' (parses to []); answers 1/2, 1/2, 3, 5"),
            ("q2", "gold 12; answers 12, 13, 11, 10"),
            ("config", "verl reinforce_plus_plus (batch whitening)"),
        ),
        wrong_label="accuracy_reward: 1.0 when gold_parsed is empty",
        right_label="roll-viz: run('verl', reinforce_plus_plus) without q1",
        explanation="'All equal, so the group's advantages are 0' holds only for a group "
        "baseline; against a batch baseline every answer of the ungradable prompt, wrong ones "
        "included, is reinforced, and the logged accuracy is inflated either way.",
        compute=_gold,
    ),
    SilentBug(
        id="double-whiten",
        short="Double whitening",
        title="A second batch whitening after group normalisation",
        thread="amazon-science/reskill#12",
        question="q2's two answers both scored 1, so GRPO gives them 0. The advantages are then "
        "whitened again over the batch's tokens. What advantage should q2's answers get?",
        choices=(
            "0: the group has no signal",
            "about +0.39",
            "+1: whitening makes every advantage unit size",
        ),
        answer=0,
        quantity="advantage of q2's answers (a dead group)",
        batch=(
            ("q1", "rewards 1, 0; 2 and 6 tokens"),
            ("q2", "rewards 1, 1; 3 and 3 tokens"),
            ("config", "verl grpo, then masked_whiten over the batch"),
        ),
        wrong_label="GRPO + masked_whiten over all tokens",
        right_label="roll-viz: run('verl', grpo)",
        explanation="GRPO advantages are zero-mean per answer, not per token: with unequal "
        "lengths the token mean is not 0, and subtracting it hands a dead group a non-zero "
        "advantage (and couples every prompt to the rest of the batch).",
        compute=_double_whiten,
    ),
    SilentBug(
        id="near-tie",
        short="Near-ties blown up",
        title="Rewards that differ below their resolution get full-size advantages",
        thread="modelscope/twinkle#288",
        question="q1's rewards are 0.7012, 0.7003, 0.6998, 0.7007; the reward model resolves "
        "about 0.02. What advantage should the 0.7012 answer get?",
        choices=(
            "0: the four are a tie at the reward's resolution",
            "about +1.18: it is the best of its group",
            "about +0.0007: its raw difference from the mean",
        ),
        answer=0,
        quantity="advantage of q1's 0.7012 answer",
        batch=(
            ("rewards", "q1: 0.7012, 0.7003, 0.6998, 0.7007; q2: 0.9, 0.3, 0.6, 0.2"),
            ("resolution", f"min_reward_range {MIN_REWARD_RANGE}"),
        ),
        wrong_label="(r - mean) / (std + 1e-6), std > 0 admits",
        right_label="roll-viz: run('verl', grpo), range gate",
        explanation="Dividing by the group std scales any spread to size 1, so differences "
        "below the reward's resolution become full-size advantages; std > 0 cannot tell them "
        "from real ones, a range gate can.",
        compute=_near_tie,
    ),
    SilentBug(
        id="noisy-verifier",
        short="Noisy verifier ties",
        title="A noisy verifier breaks group ties",
        thread="asuzukosi/post-training-experiments#15",
        question="A hard batch: 6 of 8 groups truly tie (all fail or all pass). A verifier right "
        "90% of the time scores it. What happens to the share of zero advantages?",
        choices=(
            "It stays: noise only mis-reports the score",
            "It drops: broken ties become advantages that point at noise",
            "It rises: noise makes more ties",
        ),
        answer=1,
        quantity="share of answers with zero advantage at 90% verifier accuracy",
        batch=(
            ("true verdicts", "5 groups 0000, one 1111, one 1000, one 1100"),
            ("verifier", f"flips each verdict with probability 1 - accuracy (seed {NOISE_SEED})"),
        ),
        wrong_label="the noisy verifier's verdicts",
        right_label="roll-viz: run('verl', grpo) on the true verdicts",
        explanation="A verifier bug is a corrupted gradient, not a mis-reported score: every "
        "flipped verdict in a tied group creates advantages with no signal behind them; track "
        "the zero-advantage share against verifier accuracy.",
        compute=_noisy_verifier,
    ),
)
