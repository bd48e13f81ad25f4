"""The reward as a stage of its own: its parts, the four truncation policies, a hackable reward.

Three questions the Rewards page asks of the current batch (``verifier_noise`` asks the fourth):

- **Parts** (``reward_parts``): each sample's score per term of the sidebar's ``RewardSpec``
  (weight x term value) and each part's share of the total. A share is ``|part| / sum |parts|``
  (the sum of magnitudes, so a negative weight cannot push a share past 1); 0 for a sample whose
  parts are all 0. The spec's Gaussian noise is kept apart (``noise``), never in a share.
- **Truncation** (``truncation_policies``): a truncated answer (it hit ``max_new_tokens``
  without EOS: the rollout's finish reason "length") under four policies that ship:
  *zero* (its reward is set to 0; OpenRLHF ``stop_properly_penalty_coef 0``), *keep* (its score
  stands: every framework's default), *soft* (DAPO's soft overlong penalty, verl's DAPO reward
  manager, ``overlong_penalty``) and *mask* (its reward and advantage are computed as usual but
  it gets no gradient: TRL ``mask_truncated_completions``, which zeroes the row's
  ``completion_mask`` after the group statistics). Advantages are GRPO's: group mean and
  unbiased group std, ``(r - mean) / (std + 1e-6)`` (``group_advantages``).
- **Hacking** (``hack_exercise``): the recorded reward-hacking run (``hack_beta0``, trained on
  ``positive_words`` with beta = 0) scored again, step by step, with the student's reward. The
  run was trained on its own reward: nothing here retrains anything.

Each dialect's own name for each policy is ``core.pipeline.dialects.truncation.OPTIONS``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from roll_viz import rewards
from roll_viz.core.pipeline.postprocess import normalize_scores
from roll_viz.core.records import Rollout
from roll_viz.data.recorded_runs import load_recorded

#: GRPO's eps in the group normalisation (ROLL's and verl's 1e-6)
GROUP_EPS = 1e-6
#: the four truncation policies, in the order the page lists them
POLICIES = ("zero", "keep", "soft", "mask")
#: the largest soft overlong penalty factor the page accepts (DAPO's recipe uses 1)
MAX_PENALTY_FACTOR = 10.0
#: the recorded run the hacking exercise reads
HACK_RUN = "hack_beta0"

_WORD = re.compile(r"[A-Za-z']+")


# ------------------------------------------------------------------------------ the parts


@dataclass(frozen=True)
class RewardParts:
    """Each sample's score split into the spec's terms.

    Attributes:
        labels: (K,) one label per term ("1. target_length"): two terms may share a name.
        weights: (K,) each term's weight.
        values: (B, K) float64, each term's raw value fn(prompt, response, **params).
        parts: (B, K) weight x value.
        totals: (B,) the sum of the parts (no noise).
        noise: (B,) the spec's seeded noise: score - totals (0 without noise).
        shares: (B, K) |part| / sum over terms of |part|; 0 where every part is 0.
    """

    labels: tuple[str, ...]
    weights: tuple[float, ...]
    values: Tensor
    parts: Tensor
    totals: Tensor
    noise: Tensor
    shares: Tensor


def reward_parts(rollout: Rollout, spec: rewards.RewardSpec) -> RewardParts:
    """The spec's terms on every sample of the batch (``rewards.score_rollout`` per term).

    Args:
        rollout: the batch.
        spec: the sidebar's reward.

    Returns:
        RewardParts; ``totals + noise`` equals ``rewards.score_rollout(rollout, spec)``.
    """
    columns = [
        rewards.score_rollout(rollout, rewards.RewardSpec(((name, 1.0, params),)))
        for name, _, params in spec.terms
    ]
    values = torch.stack(columns, dim=1)  # (B, K)
    weights = torch.tensor([w for _, w, _ in spec.terms], dtype=torch.float64)
    parts = values * weights
    totals = parts.sum(dim=1)
    magnitude = parts.abs().sum(dim=1, keepdim=True)
    shares = torch.where(magnitude > 0, parts.abs() / magnitude.clamp_min(1e-300), 0.0)
    return RewardParts(
        labels=tuple(f"{i + 1}. {name}" for i, (name, _, _) in enumerate(spec.terms)),
        weights=tuple(float(w) for _, w, _ in spec.terms),
        values=values,
        parts=parts,
        totals=totals,
        # without noise exactly 0 (the two sums may round differently in the last bit)
        noise=rewards.score_rollout(rollout, spec) - totals
        if spec.noise_sigma > 0
        else torch.zeros_like(totals),
        shares=shares,
    )


# ------------------------------------------------------------------------------ advantages


def group_advantages(scores: Tensor, group_ids: Tensor) -> Tensor:
    """GRPO's response-level advantage: (r - group mean) / (unbiased group std + 1e-6).

    Raises:
        ValueError: a group of one sample (its unbiased std does not exist).
    """
    return normalize_scores(scores, group_ids, "group", "group", eps=GROUP_EPS).rewards


# ------------------------------------------------------------------------------ truncation


def overlong_penalty(lengths: Tensor, max_len: int, buffer: int, factor: float) -> Tensor:
    """DAPO's soft overlong penalty, as verl's DAPO reward manager adds it to the score.

    ``expected = max_len - buffer``; ``min(-(L - expected) / buffer * factor, 0)``: 0 up to
    ``expected`` tokens, falling linearly to ``-factor`` at ``max_len`` (verl
    ``reward_manager/dapo.py``; TRL's ``get_soft_overlong_punishment`` is the same with
    factor 1). Every long answer pays it, finished or not.

    Args:
        lengths: (B,) response lengths in tokens (EOS included).
        max_len: the generation cap (max_new_tokens).
        buffer: the overlong buffer, 1 <= buffer <= max_len.
        factor: the largest penalty, 0 <= factor <= MAX_PENALTY_FACTOR.

    Returns:
        (B,) float64 penalties, each in [-factor * max(L - expected, 0) / buffer, 0].

    Raises:
        ValueError: buffer or factor out of range.
    """
    if not 1 <= buffer <= max_len:
        raise ValueError(f"the overlong buffer must be in [1, {max_len}], got {buffer}")
    if not 0.0 <= factor <= MAX_PENALTY_FACTOR:
        raise ValueError(f"the penalty factor must be in [0, {MAX_PENALTY_FACTOR:g}], got {factor}")
    exceed = lengths.to(torch.float64) - (max_len - buffer)
    return torch.clamp(-exceed / buffer * factor, max=0.0)


@dataclass(frozen=True)
class TruncationPolicy:
    """One policy on the batch.

    Attributes:
        policy: one of POLICIES.
        rewards: (B,) the reward each sample carries into the group statistics.
        advantages: (B,) GRPO advantages of those rewards (a masked row's is computed, unused).
        trained: (B,) bool, rows that reach the loss (False: masked).
        reward_mean: the batch mean of ``rewards`` (what a run logs as reward_mean; TRL logs the
            masked rows' rewards too).
        abs_adv_trained: mean |advantage| over the trained rows (0 when none is trained).
    """

    policy: str
    rewards: Tensor
    advantages: Tensor
    trained: Tensor
    reward_mean: float
    abs_adv_trained: float


def truncation_policies(
    scores: Tensor,
    lengths: Tensor,
    truncated: Tensor,
    group_ids: Tensor,
    max_len: int,
    buffer: int,
    factor: float = 1.0,
) -> tuple[TruncationPolicy, ...]:
    """The four truncation policies side by side on one batch.

    Args:
        scores: (B,) the reward function's scores.
        lengths: (B,) response lengths in tokens.
        truncated: (B,) bool, hit max_new_tokens without EOS.
        group_ids: (B,) long prompt index (every group at least 2 samples).
        max_len: max_new_tokens.
        buffer: the soft penalty's buffer (see ``overlong_penalty``).
        factor: the soft penalty's largest penalty.

    Returns:
        One TruncationPolicy per POLICIES entry, in that order.
    """
    scores = scores.to(torch.float64)
    truncated = truncated.to(torch.bool)
    everyone = torch.ones_like(truncated)
    chosen = {
        "zero": (torch.where(truncated, 0.0, scores), everyone),
        "keep": (scores, everyone),
        "soft": (scores + overlong_penalty(lengths, max_len, buffer, factor), everyone),
        "mask": (scores, ~truncated),
    }
    out = []
    for policy in POLICIES:
        values, trained = chosen[policy]
        advantages = group_advantages(values, group_ids)
        n = int(trained.sum())
        out.append(
            TruncationPolicy(
                policy=policy,
                rewards=values,
                advantages=advantages,
                trained=trained,
                reward_mean=float(values.mean()),
                abs_adv_trained=float(advantages[trained].abs().sum()) / n if n else 0.0,
            )
        )
    return tuple(out)


def truncated_rows(rollout: Rollout) -> Tensor:
    """(B,) bool: the rollout's own finish reason is "length" (max_new_tokens, no EOS)."""
    return torch.tensor([reason == "length" for reason in rollout.finish_reasons])


# ------------------------------------------------------------------------------ the hack


@dataclass(frozen=True)
class HackStep:
    """One sampled step of the recorded run, scored by the run's reward and the student's.

    Attributes:
        step: the training step.
        responses: (B,) the recorded samples (untrusted text).
        recorded: (B,) the rewards the run was trained on.
        student: (B,) the student's reward of the same samples.
        distinct: mean over samples of distinct words / words (1 = no word repeated).
        top_word: the most frequent word of the step's samples (ties: alphabetical).
        top_share: its share of all the step's words.
    """

    step: int
    responses: tuple[str, ...]
    recorded: tuple[float, ...]
    student: tuple[float, ...]
    distinct: float
    top_word: str
    top_share: float


def word_stats(responses: tuple[str, ...] | list[str]) -> tuple[float, str, float]:
    """(mean distinct-word ratio, most frequent word, its share of all words), lower-cased.

    A response without words counts as ratio 1; no words at all gives ("", 0.0) for the word.
    """
    ratios, counts = [], Counter()
    for text in responses:
        words = [w.lower() for w in _WORD.findall(text[: rewards.MAX_TEXT_CHARS])]
        ratios.append(len(set(words)) / len(words) if words else 1.0)
        counts.update(words)
    total = sum(counts.values())
    if not total:
        return (sum(ratios) / len(ratios) if ratios else 1.0), "", 0.0
    word, count = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return sum(ratios) / len(ratios), word, count / total


def hack_exercise(spec: rewards.RewardSpec, run: Any | None = None) -> tuple[HackStep, ...]:
    """The recorded run's sampled steps, each sample scored again with ``spec``.

    Args:
        spec: the student's reward (the sidebar's bounded editor).
        run: a ``TrainRun`` (default: the recorded ``HACK_RUN``).

    Returns:
        One HackStep per step that carries samples, in step order.
    """
    run = load_recorded(HACK_RUN) if run is None else run
    out = []
    for record in run.steps:
        samples = record.samples
        if samples is None:
            continue
        prompts = [samples.prompts[g] for g in samples.group_ids]
        student = rewards.score_responses(prompts, samples.responses, spec)
        distinct, word, share = word_stats(samples.responses)
        out.append(
            HackStep(
                step=record.step,
                responses=tuple(samples.responses),
                recorded=tuple(float(r) for r in samples.rewards),
                student=tuple(student.tolist()),
                distinct=distinct,
                top_word=word,
                top_share=share,
            )
        )
    return tuple(out)
