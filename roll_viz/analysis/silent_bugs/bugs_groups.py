"""Silent bugs of the group statistics: seven of field-2026.md section 2.3.

Leave-one-out with a std, the std of centred rewards, uneven groups over the batch, a one-token
unbiased variance, TRL's batch scale with a group std, phantom advantages of shaped rewards, and
ROLL's mean grouped per trajectory. Each: its batch, the ``wrong_*`` formula written plainly the
way its thread describes it, the ``right_*`` call into roll-viz's pipeline, and its record.
"""

from __future__ import annotations

import math
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
from roll_viz.core.pipeline import run

# ----------------------------------------------------- 3. leave-one-out + std: -2075

LOO_SCORES = (0.0,) + (0.95,) * 7


def _f32(x: float) -> float:
    """``x`` rounded to float32 (one IEEE operation's result, as a float32 kernel stores it)."""
    return float(torch.tensor(x, dtype=torch.float32))


def _one_pass_var(xs: Sequence[float]) -> float:
    """(E[x^2] - E[x]^2) * k / (k - 1) in float32, summed left to right, one rounding per step.

    The order is fixed on purpose: a BLAS product or a vectorised sum rounds in an order that
    depends on the CPU (AVX-512 against AVX2 gave -2075 on one machine and -0.95 on another),
    and the lesson is the cancellation, not the CPU.
    """
    k = len(xs)
    total, squares = 0.0, 0.0
    for x in xs:
        total = _f32(total + x)
        squares = _f32(squares + _f32(x * x))
    mean, mean_sq = _f32(total / k), _f32(squares / k)
    return _f32(_f32(_f32(mean_sq - _f32(mean * mean)) * k) / (k - 1))


def wrong_loo_std(scores: Sequence[float] = LOO_SCORES, eps: float = 1e-6) -> list[float]:
    """NeMo RL before PR #4158: leave-one-out mean and std, the std one-pass in float32.

    ``var = (E[x^2] - E[x]^2) * k / (k - 1)`` over the k = n - 1 other answers, in float32
    (summed in a fixed order: ``_one_pass_var``); ``A_i = (r_i - mean_-i) / (std_-i + eps)``
    wherever ``std_-i > 0``.
    """
    r = [_f32(x) for x in scores]
    out = []
    for i, ri in enumerate(r):
        others = r[:i] + r[i + 1 :]
        total = 0.0
        for x in others:
            total = _f32(total + x)
        mean = _f32(total / len(others))
        std = _f32(math.sqrt(max(_one_pass_var(others), 0.0)))
        centred = _f32(ri - mean)
        out.append(_f32(centred / _f32(std + eps)) if std > 0 else centred)
    return out


def right_loo_std(scores: Sequence[float] = LOO_SCORES) -> Tensor:
    """(B,) RLOO advantages of roll-viz's verl dialect.

    Two-pass float64: the other seven answers' std is exactly 0, so the ``std > 0`` guard
    leaves ``r - baseline`` undivided, as NeMo RL does after its fix.
    """
    batch = make_batch(scores, [1] * len(scores), ["q"] * len(scores))
    return run(batch, "verl", {"adv_estimator": "rloo"}).advantages[:, 0]


def _loo_std() -> Outcome:
    wrong = wrong_loo_std()
    right = right_loo_std()
    one_pass = _one_pass_var([_f32(0.95)] * 7)
    return Outcome(
        wrong=wrong[0],
        right=right[0].item(),
        labels=tuple(f"answer {i + 1}" for i in range(8)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each answer",
        formula=(
            "answer 1 scored 0; the other seven scored 0.95 (their true std is 0)\n"
            f"float32 one-pass: (E[x^2] - E[x]^2) * 7/6 = {num(one_pass)}  ->  std = "
            f"{num(math.sqrt(one_pass))}\n"
            f"A_1 = (0 - 0.95) / ({num(math.sqrt(one_pass))} + 1e-6) = {num(wrong[0])}\n"
            f"two-pass: std = 0 exactly  ->  guard std > 0 skips it  ->  A_1 = 0 - 0.95 = "
            f"{num(right[0].item())}"
        ),
    )


# ------------------------------------------------------- 4. std of already-centred rewards

CENTRED_SCORES = (0.7, 0.2, 0.2, 0.2, 0.9, 0.9, 0.1, 0.3)
CENTRED_GROUPS = ("q1",) * 4 + ("q2",) * 4


def wrong_centred_std(scores: Sequence[float] = CENTRED_SCORES, n: int = 4) -> float:
    """The number the thread read as "rewards ~1e-9": slime's normalised rewards, averaged.

    slime (float32): ``r -= group mean``; ``r /= std(r) + 1e-6`` (the std of the already
    centred rewards); the logged batch mean of the result is round-off around 0.
    """
    r = torch.tensor(list(scores), dtype=torch.float32).reshape(-1, n)
    centred = r - r.mean(dim=-1, keepdim=True)
    normalised = centred / (centred.std(dim=-1, keepdim=True) + 1e-6)
    return float(normalised.mean())


def slime_divisors(scores: Sequence[float] = CENTRED_SCORES, n: int = 4) -> list[float]:
    """The divisor slime uses per group, float32: std of the CENTRED rewards + 1e-6."""
    r = torch.tensor(list(scores), dtype=torch.float32).reshape(-1, n)
    centred = r - r.mean(dim=-1, keepdim=True)
    return [float(v) for v in centred.std(dim=-1) + 1e-6]


def right_centred_std() -> tuple[Tensor, Tensor]:
    """((B,) group-normalised rewards, (B,) divisors) of roll-viz's ROLL grpo.

    The divisor is the std of the raw rewards + 1e-6.
    """
    batch = make_batch(CENTRED_SCORES, [1] * 8, CENTRED_GROUPS)
    trace = run(batch, "roll", {"adv_estimator": "grpo"})
    return trace.rewards, trace.scale


def _centred_std() -> Outcome:
    wrong = wrong_centred_std()
    rewards, scale = right_centred_std()
    group1 = rewards[:4]
    raw, centred = CENTRED_SCORES[:4], [x - avg(CENTRED_SCORES[:4]) for x in CENTRED_SCORES[:4]]
    return Outcome(
        wrong=wrong,
        right=group1.std().item(),
        labels=("q1", "q2"),
        wrong_series=series(slime_divisors()),
        right_series=series(scale[[0, 4]]),
        series_title="the divisor: std of the centred rewards (slime) vs of the raw ones + 1e-6",
        formula=(
            f"q1 rewards 0.7, 0.2, 0.2, 0.2: std(raw) = {num(sd(raw))}, std(centred) = "
            f"{num(sd(centred))}  (std ignores a shift)\n"
            f"logged mean of the normalised rewards (float32) = {num(wrong)}  (0 by construction)\n"
            f"their size: std of q1's normalised rewards = 0.25 / (0.25 + 1e-6) = "
            f"{num(group1.std().item(), 7)}"
        ),
    )


# ------------------------------------------------ 5. uneven groups normalised over the batch

UNEVEN_SCORES = (6.0, 6.0, 7.0, 7.0, 5.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0)
UNEVEN_GROUPS = ("A",) * 4 + ("B",) * 3 + ("C",) * 4


def wrong_uneven(scores: Sequence[float] = UNEVEN_SCORES) -> list[float]:
    """The slime fallback when groups differ in size: ``rewards.view(1, -1)``, one mean."""
    m = avg(scores)
    return [x - m for x in scores]


def right_uneven() -> Tensor:
    """(B,) rewards minus their own group's mean: roll-viz's ROLL ``norm_mean_type: group``.

    Groups come from explicit prompt ids, so any group sizes work.
    """
    batch = make_batch(UNEVEN_SCORES, [1] * 11, UNEVEN_GROUPS)
    return run(batch, "roll", {"adv_estimator": "reinforce", "norm_mean_type": "group"}).rewards


def _uneven() -> Outcome:
    wrong = wrong_uneven()
    right = right_uneven()
    return Outcome(
        wrong=wrong[4],
        right=right[4].item(),
        labels=tuple(f"{g}{i + 1}" for i, g in enumerate(UNEVEN_GROUPS)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each answer (mean-centred)",
        formula=(
            "group sizes 4, 3, 4 (not n * G): the reshape fails, slime falls back to one row\n"
            f"batch mean = 67 / 11 = {num(67 / 11, 6)}  ->  B's answers (all 5.0): 5 - 6.0909 = "
            f"{num(wrong[4], 6)}\n"
            f"per group: mean(B) = 5.0  ->  5 - 5 = {num(right[4].item())}  (no signal, as it "
            "should be)"
        ),
    )


# -------------------------------------------------------- 6. one-token unbiased variance

ONE_TOKEN_SCORE = 0.7


def wrong_one_token(x: float = ONE_TOKEN_SCORE, eps: float = 1e-8) -> float:
    """ROLL's masked_whiten before PR #476: unbiased variance of one token.

    ``var = sum((x - mean)^2) / n * n / (n - 1)`` with n = 1 divides by zero: ROLL raises, and
    the eps in ``rsqrt(var + eps)`` comes too late to help. NaN stands for "no number".
    """
    n = 1
    mean = x
    biased = (x - mean) ** 2 / n
    try:
        var = biased * n / (n - 1)
    except ZeroDivisionError:
        return math.nan
    return (x - mean) / math.sqrt(var + eps)


def right_one_token() -> float:
    """The advantage of roll-viz's ROLL dialect (reinforce, whiten_advantages on, one token)."""
    batch = make_batch([ONE_TOKEN_SCORE], [1], ["q"])
    trace = run(batch, "roll", {"adv_estimator": "reinforce", "whiten_advantages": True})
    return trace.advantages[0, 0].item()


def _one_token() -> Outcome:
    wrong = wrong_one_token()
    right = right_one_token()
    return Outcome(
        wrong=wrong,
        right=right,
        labels=("the one token",),
        wrong_series=(wrong,),
        right_series=(right,),
        series_title="the token's advantage after whitening",
        formula=(
            "one valid token, advantage 0.7\n"
            "var = sum((x - mean)^2) / n * n / (n - 1) = 0 * 1/0  ->  NaN (ROLL raises)\n"
            "(x - mean) * rsqrt(var + 1e-8): the eps comes too late\n"
            f"ROLL after PR #476: whitening skipped with <= 1 valid token  ->  A = {num(right)}"
        ),
    )


# ---------------------------------------------------- 7. scale_rewards="batch" with group std

TRL_BATCH_SCORES = (8.2, 6.5, 9.1, 5.0, 5.1, 4.9)
TRL_BATCH_GROUPS = ("quantum",) * 3 + ("flat",) * 3


def wrong_trl_batch(scores: Sequence[float] = TRL_BATCH_SCORES, n: int = 3) -> list[float]:
    """TRL before the fix of #3991: ``scale_rewards="batch"`` divided by the GROUP std."""
    out = []
    for start in range(0, len(scores), n):
        group = scores[start : start + n]
        m, s = avg(group), sd(group)
        out += [(x - m) / (s + 1e-4) for x in group]
    return out


def right_trl_batch() -> Tensor:
    """(B,) advantages of roll-viz's TRL dialect with ``scale_rewards="batch"``."""
    batch = make_batch(TRL_BATCH_SCORES, [1] * 6, TRL_BATCH_GROUPS)
    return run(batch, "trl", {"scale_rewards": "batch"}).advantages[:, 0]


def _trl_batch() -> Outcome:
    wrong = wrong_trl_batch()
    right = right_trl_batch()
    return Outcome(
        wrong=wrong[4],
        right=right[4].item(),
        labels=tuple(f"{g} {x:g}" for g, x in zip(TRL_BATCH_GROUPS, TRL_BATCH_SCORES, strict=True)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each answer",
        formula=(
            "answer 5.1 of prompt 'flat' (rewards 5.0, 5.1, 4.9; group mean 5.0)\n"
            f"group std 0.1: (5.1 - 5.0) / (0.1 + 1e-4) = {num(wrong[4])}   (the bug)\n"
            f"batch std of all six = {num(sd(TRL_BATCH_SCORES))}: (5.1 - 5.0) / "
            f"({num(sd(TRL_BATCH_SCORES))} + 1e-4) = {num(right[4].item())}"
        ),
    )


# -------------------------------------------------- 10. phantom advantages of shaped rewards

PHANTOM_OUTCOMES = (0.0, 0.0, 0.0, 0.0)
PHANTOM_LENGTHS = (10, 12, 8, 11)
PHANTOM_SHAPING = 0.001


def phantom_scores() -> list[float]:
    """All four answers failed; the shaped reward adds -0.001 per token."""
    return [o - PHANTOM_SHAPING * n for o, n in zip(PHANTOM_OUTCOMES, PHANTOM_LENGTHS, strict=True)]


def wrong_phantom(scores: Sequence[float] | None = None, eps: float = 1e-6) -> list[float]:
    """Plain GRPO on the shaped reward: ``(r - mean) / (std + eps)``.

    The group's std is the shaping noise (> 0, so a zero-std filter keeps the group).
    """
    scores = phantom_scores() if scores is None else scores
    m, s = avg(scores), sd(scores)
    return [(x - m) / (s + eps) for x in scores]


def right_phantom() -> Tensor:
    """(B,) ROLL grpo advantages of the OUTCOME only (verl-recipe #125's binary-outcome gate).

    An all-fail group has no outcome spread, so roll-viz gives exactly 0.
    """
    batch = make_batch(PHANTOM_OUTCOMES, [1] * 4, ["q"] * 4)
    return run(batch, "roll", {"adv_estimator": "grpo"}).advantages[:, 0]


def _phantom() -> Outcome:
    wrong = wrong_phantom()
    right = right_phantom()
    scores = phantom_scores()
    return Outcome(
        wrong=wrong[2],
        right=right[2].item(),
        labels=tuple(f"{n} tokens" for n in PHANTOM_LENGTHS),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each answer",
        formula=(
            "all four answers wrong (outcome 0); shaped reward = outcome - 0.001 * length = "
            + ", ".join(num(s) for s in scores)
            + f"\nstd = {num(sd(scores))} > 0, so a std filter keeps the group\n"
            f"shortest answer: ({num(scores[2])} - ({num(avg(scores))})) / ({num(sd(scores))} + "
            f"1e-6) = {num(wrong[2])}   (a full-size 'phantom' advantage)\n"
            f"outcome gate: outcomes 0, 0, 0, 0 have no spread  ->  A = {num(right[2].item())}"
        ),
    )


# ------------------------------------------ 13. ROLL method: mean grouped per trajectory

TRAJ_STEPS = 3
TRAJ_RETURNS = (1.0,) * TRAJ_STEPS + (0.0,) * TRAJ_STEPS  # terminal reward 1 / 0, gamma = 1
TRAJ_IDS = ("traj 1",) * TRAJ_STEPS + ("traj 2",) * TRAJ_STEPS


def wrong_per_trajectory(
    returns: Sequence[float] = TRAJ_RETURNS, groups: Sequence[str] = TRAJ_IDS
) -> list[float]:
    """ROLL agentic ``grouping: traj_group_id, method: mean`` with ``group_size: 1``.

    ``method: mean`` is (group mean, no std); each group holds the steps of ONE trajectory, and
    with a terminal reward propagated by gamma = 1 every step of it has the same return R:
    ``R - mean = R - R = 0``.
    """
    out = []
    for value, group in zip(returns, groups, strict=True):
        members = [r for r, g in zip(returns, groups, strict=True) if g == group]
        out.append(value - avg(members))
    return out


def right_per_trajectory() -> Tensor:
    """(B,) step rewards minus the mean over both trajectories of the prompt.

    roll-viz's ROLL ``norm_mean_type: group`` with the prompt as the group (what a group of
    several trajectories per prompt gives).
    """
    batch = make_batch(TRAJ_RETURNS, [1] * len(TRAJ_RETURNS), ["q"] * len(TRAJ_RETURNS))
    return run(batch, "roll", {"adv_estimator": "reinforce", "norm_mean_type": "group"}).rewards


def _per_trajectory() -> Outcome:
    wrong = wrong_per_trajectory()
    right = right_per_trajectory()
    return Outcome(
        wrong=wrong[0],
        right=right[0].item(),
        labels=tuple(f"{g}, step {i % TRAJ_STEPS + 1}" for i, g in enumerate(TRAJ_IDS)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each step",
        formula=(
            "two trajectories of one prompt, 3 steps each; terminal reward 1 and 0, gamma = 1  "
            "->  step returns 1, 1, 1 and 0, 0, 0\n"
            f"grouped per trajectory (group_size 1): 1 - mean(1, 1, 1) = {num(wrong[0])}, "
            f"0 - mean(0, 0, 0) = {num(wrong[3])}  (every advantage 0)\n"
            f"grouped per prompt: mean 0.5  ->  1 - 0.5 = {num(right[0].item())}, 0 - 0.5 = "
            f"{num(right[3].item())}"
        ),
    )


# ----------------------------------------------------------------------------- the registry

BUGS: tuple[SilentBug, ...] = (
    SilentBug(
        id="loo-std",
        short="LOO + std: -2075",
        title="Leave-one-out + std turns a 0 reward into -2075",
        thread="NVIDIA-NeMo/RL#4158",
        question="Eight answers: one scored 0, seven scored 0.95. With a leave-one-out baseline "
        "and std normalisation, what is the first answer's advantage?",
        # the wrong options are the misconceptions (a z-score over the group; the bug's number),
        # none near -0.95: "about -1" was one and read as right
        choices=("about -2.5 (a z-score over the group)", "-0.95", "about -2075"),
        answer=1,
        quantity="advantage of the answer that scored 0",
        batch=(("rewards", "0, 0.95 x 7 (one prompt)"),),
        wrong_label="float32 sqrt(E[x^2] - E[x]^2), divided",
        right_label="roll-viz: run('verl', rloo), exact std 0, not divided",
        explanation="The other seven are identical, so their std is 0; a float32 one-pass "
        "variance leaves a 2e-7 residue, and dividing by its square root multiplies by ~2000.",
        compute=_loo_std,
    ),
    SilentBug(
        id="centred-std",
        short="std of centred rewards",
        title="The std of already-centred rewards",
        thread="THUDM/slime#233",
        question="slime subtracts the group mean first and then divides by the std of the "
        "centred rewards; the logged rewards read ~1e-9. Is that std too small?",
        choices=(
            "Yes: centring shrinks the std, so the rewards end up ~1e-9",
            "No: a shift leaves the std unchanged; ~1e-9 is the mean, 0 by construction",
            "Yes: it should be the batch std",
        ),
        answer=1,
        quantity="size of the normalised rewards: the logged mean (left) vs their std (right)",
        batch=(("rewards", "q1: 0.7, 0.2, 0.2, 0.2; q2: 0.9, 0.9, 0.1, 0.3"),),
        wrong_label="logged mean of the normalised rewards",
        right_label="roll-viz: run('roll', grpo), std of q1's rewards",
        explanation="std(r - mean) = std(r): the fix the thread proposed computes the same "
        "number; the tiny value is the batch mean of normalised rewards, which is 0 by design.",
        compute=_centred_std,
    ),
    SilentBug(
        id="uneven-groups",
        short="Uneven groups",
        title="Uneven groups normalised over the batch",
        thread="THUDM/slime#1414, areal-project/AReaL#1673",
        question="Groups of 4, 3 and 4 answers; group B's three answers all scored 5.0. What is "
        "their advantage after mean-centring?",
        choices=("0", "about -1.09", "undefined"),
        answer=0,
        quantity="advantage of each of group B's answers",
        batch=(
            ("rewards", "A: 6, 6, 7, 7; B: 5, 5, 5; C: 6, 6, 7, 7"),
            ("config", "mean-centring per group (no std)"),
        ),
        wrong_label="one batch-wide mean (view(1, -1))",
        right_label="roll-viz: run('roll', norm_mean_type=group)",
        explanation="When the rewards cannot be reshaped into n x G, slime's fallback treats the "
        "whole batch as one group: B is compared with other prompts' answers (AReaL #1673: "
        "remainder items become a group of one and are divided by eps).",
        compute=_uneven,
    ),
    SilentBug(
        id="one-token-var",
        short="One-token variance",
        title="Unbiased variance of a single token",
        thread="alibaba/ROLL#475",
        question="A batch with one valid token (advantage 0.7) goes through ROLL's advantage "
        "whitening, rsqrt(var + 1e-8). What comes out?",
        choices=(
            "0.7: with one token there is nothing to whiten",
            "0: (x - mean) is 0",
            "1e8 * 0: the eps saves it",
        ),
        answer=0,
        quantity="the token's advantage after whitening",
        batch=(("batch", "one answer, one token, score 0.7"), ("config", "ROLL whiten_advantages")),
        wrong_label="unbiased var: 0 * n / (n - 1), n = 1",
        right_label="roll-viz: run('roll', whiten_advantages) (skipped, PR #476)",
        explanation="Bessel's n / (n - 1) divides by zero before the eps is added, so the eps "
        "cannot help; ROLL now skips whitening with at most one valid token.",
        compute=_one_token,
    ),
    SilentBug(
        id="trl-batch-std",
        short='scale_rewards="batch"',
        title='scale_rewards="batch" computed the group std',
        thread="huggingface/trl#3991",
        question="Prompt 'flat' scored 5.0, 5.1, 4.9; 'quantum' 8.2, 6.5, 9.1. With "
        'scale_rewards="batch", what is the advantage of the 5.1 answer?',
        choices=("about 1.0", "about 0.055", "0.1"),
        answer=1,
        quantity="advantage of the 5.1 answer",
        batch=(("rewards", "quantum: 8.2, 6.5, 9.1; flat: 5.0, 5.1, 4.9"),),
        wrong_label="group std in the batch branch",
        right_label="roll-viz: run('trl', scale_rewards=batch)",
        explanation="The batch branch divided by the group std, so a flat prompt's 0.1 "
        "difference still became a full-size advantage (exactly what 'batch' should prevent).",
        compute=_trl_batch,
    ),
    SilentBug(
        id="phantom-adv",
        short="Phantom advantages",
        title="Phantom advantages under a shaped reward",
        thread="verl-project/verl-recipe#125",
        question="All four answers are wrong; a small length term (-0.001 per token) is added. "
        "What GRPO advantage should the shortest wrong answer get?",
        choices=(
            "0: nobody solved it, there is nothing to learn",
            "about +1.3: it is the 'best' of the group",
            "a zero-std filter drops the group anyway",
        ),
        answer=0,
        quantity="advantage of the shortest (8-token) wrong answer",
        batch=(("outcomes", "0, 0, 0, 0"), ("lengths", "10, 12, 8, 11 tokens")),
        wrong_label="GRPO on outcome + shaping",
        right_label="roll-viz: run('roll', grpo) on the outcome (gate)",
        explanation="Dividing by the group std blows the shaping noise up to full-size "
        "advantages; the std is > 0, so a std filter never fires.",
        compute=_phantom,
    ),
    SilentBug(
        id="per-trajectory-mean",
        short="Mean per trajectory",
        title="ROLL method: mean grouped per trajectory",
        thread="alibaba/ROLL#397",
        question="Two agentic trajectories of one prompt, 3 steps each, terminal reward 1 and 0 "
        "(gamma = 1). Normalised with grouping: traj_group_id, method: mean and group_size 1: "
        "what advantage does a step of the successful trajectory get?",
        choices=("+0.5", "0", "+1"),
        answer=0,
        quantity="advantage of a step of the successful trajectory",
        batch=(
            ("step returns", "traj 1: 1, 1, 1; traj 2: 0, 0, 0"),
            ("config", "reward_normalization grouping traj_group_id, method mean, group_size 1"),
        ),
        wrong_label="each trajectory its own group",
        right_label="roll-viz: run('roll', norm_mean_type=group) over the prompt",
        explanation="A group holding one trajectory's steps has mean R, and every step's return "
        "is R, so r - mean = 0 everywhere: the whole batch trains on nothing.",
        compute=_per_trajectory,
    ),
)
