"""Silent bugs of async training, dynamic sampling and the loss: six of field-2026-b.md.

An async pi_old recomputed with the current actor (miles PR #1829, SkyRL #1315), AsyncGRPO's
ratio against top-p processed log-probs (TRL #6945), dynamic sampling that misaligns rewards and
rows (NeMo RL PR #3794) or keeps only identical winners (the NeMo RL PR #4158 review), a staleness
discard that favours short rollouts (tinker-cookbook PR #822) and dead groups in the loss
denominator (TRL #6367). Each: its batch, the ``wrong_*`` code written plainly the way its thread
describes it, the ``right_*`` call into roll-viz's pipeline wherever roll-viz computes that
quantity, and its record.

The section headings number them as field-2026-b.md does (2.n: section 2's list; row n:
section 1's table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from roll_viz.analysis.silent_bugs.bug_record import (
    F64,
    Outcome,
    SilentBug,
    avg,
    make_batch,
    num,
    series,
)
from roll_viz.analysis.silent_bugs.bugs_loss import top_p_mass
from roll_viz.core.pipeline import ESTIMATOR_KEY, policy_loss, run

VERL_RLOO = {ESTIMATOR_KEY["verl"]: "rloo"}
CLIP_EPS = 0.2  # verl's and TRL's default clip range, both sides

# -------------------------------------------------------- 2.5 async pi_old from the current actor

STALE_ADVANTAGES = (1.0, -1.0)  # answer 1 right, answer 2 wrong; 2 tokens each
STALE_CURRENT = ((-0.6, -1.0), (-1.2, -0.5))  # log pi_theta now, two updates after sampling
STALE_ROLLOUT = ((-1.0, -1.1), (-0.7, -0.45))  # log mu: the policy that sampled the tokens


def wrong_stale_ratio(current: Sequence[Sequence[float]] = STALE_CURRENT) -> list[float]:
    """The miles ratio before PR #1829 (SkyRL fully async): pi_old from the CURRENT actor.

    ``old_log_probs = log pi_theta(y)`` of the trained weights, so every ratio is
    ``exp(logp - logp) = 1`` and no token can be clipped.
    """
    return [math.exp(lp - lp) for row in current for lp in row]


def clip_fraction(ratios: Sequence[float], advantages: Sequence[float]) -> float:
    """Share of tokens the PPO clip binds: A > 0 and r > 1 + eps, or A < 0 and r < 1 - eps."""
    bound = [
        (a > 0 and r > 1 + CLIP_EPS) or (a < 0 and r < 1 - CLIP_EPS)
        for r, a in zip(ratios, advantages, strict=True)
    ]
    return sum(bound) / len(bound)


def right_stale() -> tuple[Tensor, Tensor]:
    """((B, T) ratio, (B, T) clipped) of roll-viz's verl ``policy_loss`` against the rollout mu."""
    mask = torch.ones(2, 2, dtype=F64)
    result = policy_loss(
        "verl",
        {},
        logprobs=torch.tensor(STALE_CURRENT, dtype=F64),
        old_logprobs=torch.tensor(STALE_ROLLOUT, dtype=F64),
        advantages=torch.tensor(STALE_ADVANTAGES, dtype=F64),
        response_mask=mask,
    )
    clipped = result.per_token["clipped_high"] | result.per_token["clipped_low"]
    return result.per_token["ratio"], clipped


def _stale() -> Outcome:
    wrong = wrong_stale_ratio()
    ratio, clipped = right_stale()
    frac = clipped.double().mean().item()
    per_token_adv = [a for a in STALE_ADVANTAGES for _ in range(2)]
    return Outcome(
        wrong=clip_fraction(wrong, per_token_adv),
        right=frac,
        labels=("answer 1 (A=+1), t1", "answer 1, t2", "answer 2 (A=-1), t1", "answer 2, t2"),
        wrong_series=tuple(wrong),
        right_series=series(ratio),
        series_title="importance ratio of each token (clip range 0.8 .. 1.2)",
        formula=(
            "pi_old = the current actor: r = exp(logp - logp) = 1 on every token  ->  clip "
            "fraction 0\n"
            "pi_old = the rollout's mu: r = "
            + ", ".join(num(x) for x in ratio.flatten().tolist())
            + "\nA = +1 and r = "
            f"{num(ratio[0, 0].item())} > 1.2: clipped; A = -1 and r = {num(ratio[1, 0].item())} "
            f"< 0.8: clipped  ->  clip fraction {num(frac)}"
        ),
    )


# ------------------------------------------------ 2.6 AsyncGRPO against top-p processed log-probs

ASYNC_TOP_P = 0.65
ASYNC_DISTRIBUTIONS = ((0.5, 0.2, 0.2, 0.1), (0.9, 0.06, 0.04))  # the sampled token first
ASYNC_ADVANTAGE = -1.0  # one wrong answer, the two tokens above


def wrong_async_top_p(advantage: float = ASYNC_ADVANTAGE) -> list[float]:
    """Per token, d loss / d log pi of AsyncGRPO's loss with top-p processed old log-probs.

    ``coef_1 = exp(log_probs - old_log_probs)`` with ``old = log(p / S)`` and the trainer's
    ``log p``: an UNCHANGED policy reads ``coef_1 = S``. ``loss = -min(coef_1 * A,
    clamp(coef_1, 0.8, 1.2) * A)`` token-mean: where the clamped term wins, the gradient is 0.
    """
    n = len(ASYNC_DISTRIBUTIONS)
    out = []
    for probs in ASYNC_DISTRIBUTIONS:
        coef_1 = math.exp(math.log(probs[0]) - math.log(probs[0] / top_p_mass(probs, ASYNC_TOP_P)))
        coef_2 = min(max(coef_1, 1 - CLIP_EPS), 1 + CLIP_EPS)
        clipped = coef_2 * advantage < coef_1 * advantage
        out.append(0.0 if clipped else -coef_1 * advantage / n)
    return out


def right_async_top_p() -> Tensor:
    """(T,) roll-viz's TRL ``grad_coef`` with raw log-probs on both sides (ratio 1)."""
    raw = torch.tensor([[math.log(p[0]) for p in ASYNC_DISTRIBUTIONS]], dtype=F64)
    result = policy_loss(
        "trl",
        {},
        logprobs=raw,
        old_logprobs=raw.clone(),
        advantages=torch.tensor([ASYNC_ADVANTAGE], dtype=F64),
        response_mask=torch.ones_like(raw),
    )
    return result.per_token["grad_coef"][0]


def _async_top_p() -> Outcome:
    wrong = wrong_async_top_p()
    right = right_async_top_p()
    s1, s2 = (top_p_mass(p, ASYNC_TOP_P) for p in ASYNC_DISTRIBUTIONS)
    return Outcome(
        wrong=wrong[0],
        right=right[0].item(),
        labels=("token 1 (S = 0.7)", "token 2 (S = 0.9)"),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="gradient coefficient dL/dlog pi of each token",
        formula=(
            f"top-p {ASYNC_TOP_P}: token 1 keeps 0.5 + 0.2, S = {num(s1)}; token 2 keeps 0.9, "
            f"S = {num(s2)}; policy unchanged, A = -1\n"
            f"processed old log-prob log(p / S)  ->  ratio = S: {num(s1)} and {num(s2)}\n"
            f"token 1: min({num(s1)} * -1, clamp({num(s1)}, 0.8, 1.2) * -1) = -0.8, the clamp  "
            f"->  gradient {num(wrong[0])}; token 2: {num(s2)} / 2 = {num(wrong[1])}\n"
            f"raw log-probs: ratio 1, -A / 2 = {num(right[0].item())} on both"
        ),
    )


# ----------------------------------------------- 2.10 dynamic sampling misaligns rewards and rows

DS_ROWS = ("p0g0", "p0g1", "p1g0", "p1g1", "p2g0", "p2g1")
DS_REWARDS = (10.0, 11.0, 20.0, 21.0, 30.0, 31.0)  # prompt * 10 + generation: a marker
DS_STD = (1.0, 1.0, 0.0, 0.0, 2.0, 2.0)  # prompt 1 has zero std: DAPO drops its rows


def kept_rows(std: Sequence[float] = DS_STD) -> list[int]:
    """The rows of the non-zero-std filter."""
    return [i for i, s in enumerate(std) if s != 0.0]


def wrong_ds_rewards(rewards: Sequence[float] = DS_REWARDS) -> list[float]:
    """NeMo RL before PR #3794: the rows are selected, ``total_reward`` is not.

    The unfiltered vector is written back, and the kept rows read it positionally (6 rewards
    for a batch of 4).
    """
    overwritten = list(rewards)
    return [overwritten[i] for i in range(len(kept_rows()))]


def right_ds_rewards(rewards: Sequence[float] = DS_REWARDS) -> list[float]:
    """The rewards selected with the same indices as the rows."""
    return [rewards[i] for i in kept_rows()]


def _ds_rows() -> Outcome:
    wrong = wrong_ds_rewards()
    right = right_ds_rewards()
    kept = [DS_ROWS[i] for i in kept_rows()]
    return Outcome(
        wrong=wrong[2],
        right=right[2],
        labels=tuple(f"row {i}: {name}" for i, name in enumerate(kept)),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="total_reward each kept row carries",
        formula=(
            "rewards = prompt * 10 + generation: 10, 11, 20, 21, 30, 31; prompt 1's std is 0\n"
            "kept rows [0, 1, 4, 5]: p0g0, p0g1, p2g0, p2g1 (batch of 4)\n"
            f"overwrite with the unfiltered total_reward (length 6): row 2 (p2g0) reads "
            f"{num(wrong[2])}, row 3 reads {num(wrong[3])}\n"
            f"select the rewards with the rows: row 2 = {num(right[2])}, row 3 = {num(right[3])}"
        ),
    )


# ---------------------------------- 2.11 leave-one-out + dynamic sampling keeps identical winners

LOO_DS_SCORES = (0.0,) + (0.95,) * 7


def peers_trivial(scores: Sequence[float] = LOO_DS_SCORES) -> list[bool]:
    """The review's reading of ``is_trivial_distribution`` with a leave-one-out baseline.

    Per rollout: its PEERS (the other seven) all have one reward.
    """
    return [len(set(scores[:i] + scores[i + 1 :])) == 1 for i in range(len(scores))]


def wrong_loo_ds(scores: Sequence[float] = LOO_DS_SCORES) -> list[float]:
    """Dynamic sampling on the per-rollout mask, then the leave-one-out baseline recomputed.

    The mask drops only rollout 1 (its peers all scored 0.95); the seven identical winners
    stay, and roll-viz's verl RLOO on them gives ``r - mean(others) = 0`` each. A dropped
    rollout trains on nothing (0).
    """
    keep = [i for i, trivial in enumerate(peers_trivial(scores)) if not trivial]
    batch = make_batch([scores[i] for i in keep], [1] * len(keep), ["q"] * len(keep))
    kept = run(batch, "verl", VERL_RLOO).advantages[:, 0].tolist()
    out = [0.0] * len(scores)
    for i, a in zip(keep, kept, strict=True):
        out[i] = a
    return out


def right_loo_ds() -> Tensor:
    """(B,) roll-viz's verl RLOO on the whole group (full-group equality keeps it: not a tie)."""
    batch = make_batch(LOO_DS_SCORES, [1] * 8, ["q"] * 8)
    return run(batch, "verl", VERL_RLOO).advantages[:, 0]


def _loo_ds() -> Outcome:
    wrong = wrong_loo_ds()
    right = right_loo_ds()
    return Outcome(
        wrong=wrong[1],
        right=right[1].item(),
        labels=("rollout 1 (0)", *(f"rollout {i + 2} (0.95)" for i in range(7))),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="advantage of each rollout (0 = dropped or no signal)",
        formula=(
            "rewards 0, 0.95 x 7; leave-one-out: each rollout's peers are the other seven\n"
            "per-rollout 'trivial' mask: True, False x 7  ->  only the losing rollout is dropped\n"
            "recomputed on seven identical winners: 0.95 - 0.95 = 0 for each "
            "(the whole group trains on nothing)\n"
            f"full-group equality keeps all 8: winner 0.95 - 0.95 * 6/7 = {num(right[1].item())},"
            f" loser 0 - 0.95 = {num(right[0].item())}"
        ),
    )


# -------------------------------------------- 2.15 discarding stale groups favours short rollouts

DISCARD_LENGTHS = (300, 500, 800, 1200, 1500, 2500, 3500, 6000)  # tokens, one per problem
TOKENS_PER_STEP = 1000  # a rollout of L tokens spans ceil(L / 1000) trainer steps
MAX_STEPS_OFF_POLICY = 2


def rollout_steps(length: int) -> int:
    """Trainer steps a rollout of ``length`` tokens spans while it is generated."""
    return math.ceil(length / TOKENS_PER_STEP)


def wrong_discard(lengths: Sequence[int] = DISCARD_LENGTHS) -> list[float]:
    """The tinker-cookbook async loop before PR #822: discard a stale group, requeue it.

    A group staler than ``max_steps_off_policy`` is discarded and its problem requeued, so a
    rollout that always takes longer is regenerated forever.

    Returns 1 per problem trained on in one pass over the data, 0 for one never trained on.
    """
    return [1.0 if rollout_steps(n) <= MAX_STEPS_OFF_POLICY else 0.0 for n in lengths]


def right_discard(lengths: Sequence[int] = DISCARD_LENGTHS) -> list[float]:
    """Paced sampling (AReaL; PR #822): staleness bounded by when sampling starts.

    Every problem is trained on once and the trained lengths are the data's (Magistral's
    invariant).
    """
    return [1.0 for _ in lengths]


def trained_mean_length(
    trained: Sequence[float], lengths: Sequence[int] = DISCARD_LENGTHS
) -> float:
    """Mean length of the rollouts trained on."""
    kept = [n for n, t in zip(lengths, trained, strict=True) if t > 0]
    return avg(kept)


def _discard() -> Outcome:
    wrong = wrong_discard()
    right = right_discard()
    never = [n for n, t in zip(DISCARD_LENGTHS, wrong, strict=True) if t == 0]
    return Outcome(
        wrong=trained_mean_length(wrong),
        right=trained_mean_length(right),
        labels=tuple(f"{n} tokens" for n in DISCARD_LENGTHS),
        wrong_series=tuple(wrong),
        right_series=tuple(right),
        series_title="trained on in one pass over the data (1 = yes, 0 = never)",
        formula=(
            f"8 problems, rollout lengths {', '.join(str(n) for n in DISCARD_LENGTHS)} tokens; "
            f"{TOKENS_PER_STEP} tokens per trainer step; max_steps_off_policy = "
            f"{MAX_STEPS_OFF_POLICY}\n"
            f"discard + requeue: {', '.join(str(n) for n in never)} span more than "
            f"{MAX_STEPS_OFF_POLICY} steps every time  ->  never trained\n"
            f"trained mean length {num(trained_mean_length(wrong))} tokens vs the data's "
            f"{num(trained_mean_length(right))}"
        ),
    )


# ---------------------------------------------------- row 19: dead groups in the loss denominator

DEAD_SCORES = (1.0, 0.0, 1.0, 1.0, 0.0, 0.0)
DEAD_GROUPS = ("q1", "q1", "q2", "q2", "q3", "q3")
DEAD_LENGTH = 2
DEAD_LOGPROBS = ((-0.5, -1.0), (-0.8, -0.6), (-1.0, -0.5), (-2.0, -0.3), (-0.7, -0.9), (-1.1, -0.4))


def dead_advantages() -> Tensor:
    """(B, T) roll-viz's TRL advantages (group mean and std): q2 and q3 are exactly 0."""
    batch = make_batch(DEAD_SCORES, [DEAD_LENGTH] * 6, DEAD_GROUPS)
    return run(batch, "trl", {}).advantages


def wrong_dead(advantages: Sequence[float], length: int = DEAD_LENGTH) -> list[float]:
    """TRL ``loss_type="dapo"``: token-mean over ALL tokens of the batch, dead groups included.

    d loss / d log pi = -A / (tokens in the batch) on each of q1's tokens at r = 1.
    """
    total = length * len(DEAD_SCORES)
    return [-a / total for a in advantages for _ in range(length)]


def right_dead() -> Tensor:
    """(2, T) roll-viz's TRL ``grad_coef`` with the dead groups out of the denominator.

    ``policy_loss('trl')`` on the live group's rows (the PR's ``dapo_zv``: the numerator is
    unchanged, dead rows add 0 to it).
    """
    advantages = dead_advantages()
    live = [i for i in range(len(DEAD_SCORES)) if bool(advantages[i].abs().sum() > 0)]
    lp = torch.tensor(DEAD_LOGPROBS, dtype=F64)[live]
    result = policy_loss(
        "trl",
        {},
        logprobs=lp,
        old_logprobs=lp.clone(),
        advantages=advantages[live],
        response_mask=torch.ones_like(lp),
    )
    return result.per_token["grad_coef"]


def _dead() -> Outcome:
    adv = dead_advantages()
    wrong = wrong_dead(adv[:2, 0].tolist())
    right = right_dead()
    return Outcome(
        wrong=wrong[0],
        right=right[0, 0].item(),
        labels=("q1 r=1, t1", "q1 r=1, t2", "q1 r=0, t1", "q1 r=0, t2"),
        wrong_series=series(wrong),
        right_series=series(right),
        series_title="gradient coefficient dL/dlog pi on q1's tokens",
        formula=(
            "q1 rewards 1, 0 (live); q2 1, 1 and q3 0, 0 (dead: A = 0); 2 tokens each\n"
            f"A(q1) = +-0.5 / (0.7071 + 1e-4) = {num(adv[0, 0].item())}\n"
            f"dapo: -A / 12 tokens = {num(wrong[0])}  (2 of 3 groups dead: a third of the step)\n"
            f"dead groups out of the denominator: -A / 4 = {num(right[0, 0].item())}"
        ),
    )


# ----------------------------------------------------------------------------- the registry

BUGS: tuple[SilentBug, ...] = (
    SilentBug(
        id="async-old-actor",
        short="Async pi_old = actor",
        title="Async pi_old recomputed with the current actor: clipping is off",
        thread="radixark/miles#1829, NovaSky-AI/SkyRL#1315",
        question="Async training: the tokens were sampled two updates ago. The trainer "
        "recomputes pi_old with the current actor. What share of these four tokens should the "
        "0.8 .. 1.2 clip catch?",
        choices=("0: the ratio is 1, nothing to clip", "0.5: two tokens moved too far", "1"),
        answer=1,
        quantity="clip fraction of the four tokens",
        batch=(
            ("answers", "A = +1 and A = -1, 2 tokens each"),
            ("log pi now", "(-0.6, -1.0), (-1.2, -0.5)"),
            ("log mu (sampler)", "(-1.0, -1.1), (-0.7, -0.45)"),
        ),
        wrong_label="pi_old = the current actor (ratio 1)",
        right_label="roll-viz: policy_loss('verl') against the rollout mu",
        explanation="pi_old from the weights being trained makes every ratio exactly 1: "
        "clipping is anchored to a policy that never generated the trajectory, so it never "
        "fires (miles now requires rollout log-probs, TIS or the old actor).",
        compute=_stale,
    ),
    SilentBug(
        id="async-top-p",
        short="Async top-p clips A<0",
        title="AsyncGRPO's ratio against top-p processed log-probs",
        thread="huggingface/trl#6945",
        question="AsyncGRPO, top-p 0.65, policy unchanged since sampling. A wrong answer "
        "(A = -1): its first token had p = 0.5 among 0.5, 0.2, 0.2, 0.1. What gradient "
        "coefficient should that token get?",
        choices=("+0.5 (r = 1, -A / 2)", "0: clipped", "+0.35 (scaled by S)"),
        answer=0,
        quantity="gradient coefficient dL/dlog pi of the first token",
        batch=(
            ("token 1", "probs 0.5, 0.2, 0.2, 0.1 (S = 0.7)"),
            ("token 2", "probs 0.9, 0.06, 0.04 (S = 0.9)"),
            ("config", "top-p 0.65, clip 0.8 .. 1.2, A = -1, token-mean"),
        ),
        wrong_label="old = vLLM processed log-probs",
        right_label="roll-viz: policy_loss('trl') on raw log-probs",
        explanation="With processed log-probs an unchanged policy reads ratio S; S < 0.8 on an "
        "A < 0 token lands on the clamp, so the wrong answer is not pushed down at all (and "
        "for r > 1.2 the A < 0 branch is unbounded: one ratio carries drift and mismatch).",
        compute=_async_top_p,
    ),
    SilentBug(
        id="ds-reward-rows",
        short="DS rows misaligned",
        title="Dynamic sampling misaligns total_reward and rows",
        thread="NVIDIA-NeMo/RL#3794",
        question="Rewards are prompt * 10 + generation; prompt 1's group has zero std and is "
        "dropped. After dynamic sampling, what total_reward should row 2 (p2g0) carry?",
        choices=("30", "20", "21"),
        answer=0,
        quantity="total_reward of row 2 (p2g0) after filtering",
        batch=(
            ("rows", "p0g0, p0g1, p1g0, p1g1, p2g0, p2g1"),
            ("total_reward", "10, 11, 20, 21, 30, 31"),
            ("std per prompt", "1, 0, 2 (prompt 1 dropped)"),
        ),
        wrong_label="unfiltered total_reward written back",
        right_label="rewards selected with the rows",
        explanation="The rows were filtered but the reward vector was written back unfiltered: "
        "6 rewards for 4 rows, so every row after the dropped prompt reads another row's reward.",
        compute=_ds_rows,
    ),
    SilentBug(
        id="loo-ds-winners",
        short="LOO + DS: 7 winners",
        title="Leave-one-out plus dynamic sampling keeps only identical winners",
        thread="NVIDIA-NeMo/RL#4158 (review)",
        question="One rollout scored 0, seven scored 0.95; leave-one-out baseline with dynamic "
        "sampling. What advantage should a 0.95 rollout get?",
        choices=("about +0.136", "0: they are all equal", "the group is dropped"),
        answer=0,
        quantity="advantage of a winning (0.95) rollout",
        batch=(("rewards", "0, 0.95 x 7 (one prompt)"),),
        wrong_label="per-rollout 'trivial' mask, then LOO",
        right_label="roll-viz: run('verl', rloo), full group kept",
        explanation="The tie test looked at each rollout's peers, not the group: it dropped "
        "only the loser, and seven identical winners have zero advantage, so a useful mixed "
        "group trains on nothing.",
        compute=_loo_ds,
    ),
    SilentBug(
        id="stale-discard",
        short="Staleness discard",
        title="Discarding stale groups trains on short rollouts only",
        thread="thinking-machines-lab/tinker-cookbook#822",
        question="Rollouts of 300 to 6000 tokens; a group staler than 2 steps is discarded and "
        "requeued. What mean length should the trained rollouts have?",
        choices=(
            "the data's, about 2038 tokens",
            "about 860: the long ones come back later",
            "longer: long rollouts are retried more often",
        ),
        answer=0,
        quantity="mean length (tokens) of the rollouts trained on",
        batch=(
            ("lengths", ", ".join(str(n) for n in DISCARD_LENGTHS) + " tokens"),
            ("async", f"{TOKENS_PER_STEP} tokens per step, max_steps_off_policy 2"),
        ),
        wrong_label="discard and requeue",
        right_label="paced sampling (staleness bounded at admission)",
        explanation="A problem whose rollout always spans more steps than the bound is "
        "regenerated forever and never trained on: the trained length distribution is silently "
        "cut to the fast (usually easier) problems.",
        compute=_discard,
    ),
    SilentBug(
        id="dead-denominator",
        short="Dead groups counted",
        title="Dead groups still count in the loss denominator",
        thread="huggingface/trl#6367",
        question="Three groups, two of them dead (all rewards equal, A = 0). Does the live "
        "group's gradient depend on how many groups are dead?",
        choices=(
            "No: dead groups add 0 to the loss",
            "Yes: divided by every token, it is 3x smaller than over the live tokens",
            "Only with beta > 0",
        ),
        answer=1,
        quantity="gradient coefficient on the winning token of the live group",
        batch=(
            ("rewards", "q1: 1, 0; q2: 1, 1; q3: 0, 0 (2 tokens each)"),
            ("config", "TRL loss_type dapo, beta 0, r = 1"),
        ),
        wrong_label="dapo: -A / all 12 tokens",
        right_label="roll-viz: policy_loss('trl') over the live rows",
        explanation="Dead rows add 0 to the numerator but their tokens count in the "
        "denominator, so the live groups' step shrinks with the share of dead groups (the "
        "thread: +2.4 pp GSM8K from the denominator alone).",
        compute=_dead,
    ),
)
