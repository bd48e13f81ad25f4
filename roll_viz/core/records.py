"""Frozen records passed between the stages of roll-viz.

Dimension letters used everywhere: P prompts, G samples per prompt (group size), B = P*G sequences,
T response tokens (right-padded), K top-k alternatives, F probe features.

Stage functions never modify a tensor in place; a record is built once and then only read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor


@dataclass(frozen=True)
class RunningMoments:
    """Running mean/variance of response-level scores, carried from batch to batch.

    ROLL's ``RunningMoments``, adapted from Stable-Baselines3. Starts at mean 0, var 1,
    count 1e-24. ``var`` is the biased (population) variance of all values
    seen; ``std`` applies Bessel's correction with the total count.
    """

    mean: float = 0.0
    var: float = 1.0
    count: float = 1e-24

    @property
    def std(self) -> float:
        """Bessel-corrected running std, sqrt(var * N / (N - 1)); NaN while N <= 1."""
        if self.count <= 1.0:
            return math.nan
        return math.sqrt(self.var * self.count / (self.count - 1.0))


@dataclass(frozen=True)
class Batch:
    """Input of the reward -> advantage calculator (one training batch, after sampling and scoring).

    Attributes:
        scores: (B,) raw response-level scores from the reward function.
        response_mask: (B, T) float, 1.0 on response tokens (incl. EOS), 0.0 on padding.
        group_ids: (B,) long, index of the prompt each sample answers (0..P-1).
        group_labels: (P,) the caller's original prompt ids, in index order.
        logprobs: (B, T) log-prob of each sampled token under the (rollout) policy, or None.
        ref_logprobs: (B, T) log-prob of the same tokens under the reference model, or None.
        values: (B, T) critic values V(s_t), needed by GAE, or None.
        baseline_scores: (B,) score of the greedy response of each sample's prompt (ReMax), or None.
        reward_components: name -> (B,) score of each reward function before they are combined
            (GDPO normalises each; group health shows each one's std), or None.
        sum_pi_squared: (B, T) sum over the vocabulary of the policy's squared next-token
            probabilities at each position (verl's optimal token baseline), or None.
    """

    scores: Tensor
    response_mask: Tensor
    group_ids: Tensor
    group_labels: tuple = ()
    logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None
    values: Tensor | None = None
    baseline_scores: Tensor | None = None
    reward_components: dict | None = None
    sum_pi_squared: Tensor | None = None


@dataclass(frozen=True)
class Trace:
    """Every intermediate of one pipeline run in one framework dialect, for charts, CLI and tests.

    Masked positions are exactly 0 in every (B, T) tensor.

    Attributes:
        framework: dialect that produced it: "roll", "verl", "openrlhf" or "trl".
        config: the resolved config (framework keys, shipped defaults filled in), as sorted pairs.
        scores: (B,) raw response-level scores.
        rewards: (B,) response-level rewards after the framework's response-level processing.
        baseline: (B,) the response-level baseline subtracted from the score (group mean,
            leave-one-out mean, greedy score, ...; 0 where the estimator has none).
        scale: (B,) the divisor applied after the baseline (group/batch std + eps; 1 where none).
        clip_frac: fraction of response-level rewards changed by clipping (0.0 when no clip).
        kl: (B, T) per-token KL estimate (the estimator the config selects).
        beta: KL coefficient used for this batch (the dialect's ``BETA_KEY``).
        next_beta: beta after the controller's update (equals beta for a fixed controller).
        kl_in_reward: whether -beta * kl was added to the token rewards.
        kl_loss: masked mean of the KL loss term (k3 etc.) when KL goes into the loss, else None.
        token_rewards: (B, T) token-level rewards fed to the estimator.
        advantages: (B, T) final advantages.
        returns: (B, T) returns (value targets / reward-to-go as the framework defines them).
        running: running reward statistics after this batch (None when not used).
        notes: human-readable conventions applied, in order ("group std: unbiased, eps 1e-6", ...).
        sample_mask: (B,) 0/1 sample-level keep mask when the dialect has one switched on (ROLL
            ``max_len_mask`` / ``difficulty_mask`` / ``error_max_len_clip``), else None; the loss
            then runs on ``response_mask * sample_mask[:, None]`` (``policy_loss(sample_mask=)``).
        resample: (B,) long, the rows verl PF-PPO drew (``use_pf_ppo``), else None; what the
            update trains on is ``policy_loss(resample=)``'s (``dialects.verl_pf_ppo``).
    """

    framework: str
    config: tuple
    scores: Tensor
    rewards: Tensor
    baseline: Tensor
    scale: Tensor
    clip_frac: float
    kl: Tensor
    beta: float
    next_beta: float
    kl_in_reward: bool
    kl_loss: float | None
    token_rewards: Tensor
    advantages: Tensor
    returns: Tensor
    running: RunningMoments | None = None
    notes: tuple[str, ...] = ()
    sample_mask: Tensor | None = None
    resample: Tensor | None = None


@dataclass(frozen=True)
class RolloutMeta:
    """How a Rollout was made: one typed field per fact, None where its maker said nothing.

    Iterating gives the sorted (key, value) pairs of the facts said (so ``dict(meta)`` is the
    flat dict a preset's JSON and the trace JSON store); ``RolloutMeta.of(pairs)`` reads such
    pairs back, keeping keys it does not name in ``extra``.

    Attributes:
        model: the model's display name (an imported run: "imported run (<format>)").
        model_spec: the app's spec of the model ("smollm2", "tiny", a folder).
        device: where it ran (an engine's label for an engine's batch).
        dtype: the scoring weights' dtype.
        engine: the rollout engine that drew the batch ("vLLM at <url>"); None in-process.
        seed: the sampling seed.
        group_size: G.
        temperature: the sampling temperature.
        top_p: the nucleus mass.
        max_new_tokens: the response cap.
        topk: K of the top-K alternatives.
        policy_mode: "identical", "steered", "lora" (a session's adapter) or "trained".
        instruction: the steered policy's hidden instruction ("" otherwise).
        decode_weights: which weights drew the tokens ("float32", "int8-dynamic", ...).
        decode_note: that, in words.
        logprob_temperature: the temperature the log-probs are taken at.
        logprob_note: how the log-probs were taken, in words.
        kl_note: what the KL columns are (exact, lower bound, exactly 0), in words.
        entropy_note: what the entropy column is when it is not exact.
        feature_dim: F of the probe features.
        feature_note: how the probe features were made.
        ref_topk_filled: policy top-K tokens outside the reference's top-K (an engine's batch).
        missing: an imported run: the comma-separated fields its file lacks.
        source: an imported run's file format.
        step: an imported run's step.
        extra: (key, value) pairs of any other fact, sorted.
    """

    model: str | None = None
    model_spec: str | None = None
    device: str | None = None
    dtype: str | None = None
    engine: str | None = None
    seed: int | None = None
    group_size: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    topk: int | None = None
    policy_mode: str | None = None
    instruction: str | None = None
    decode_weights: str | None = None
    decode_note: str | None = None
    logprob_temperature: float | None = None
    logprob_note: str | None = None
    kl_note: str | None = None
    entropy_note: str | None = None
    feature_dim: int | None = None
    feature_note: str | None = None
    ref_topk_filled: int | None = None
    missing: str | None = None
    source: str | None = None
    step: int | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        said = [
            (f.name, getattr(self, f.name))
            for f in fields(self)
            if f.name != "extra" and getattr(self, f.name) is not None
        ]
        return iter(sorted([*said, *self.extra], key=lambda pair: pair[0]))

    @classmethod
    def of(cls, pairs: RolloutMeta | Mapping[str, Any] | Iterable[Any]) -> RolloutMeta:
        """The typed meta of (key, value) pairs or a dict (a RolloutMeta is returned as is)."""
        if isinstance(pairs, RolloutMeta):
            return pairs
        items = list(pairs.items() if isinstance(pairs, Mapping) else (tuple(p) for p in pairs))
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in items if k in names}
        extra = tuple(sorted(((k, v) for k, v in items if k not in names), key=lambda p: p[0]))
        return cls(**known, extra=extra)


@dataclass(frozen=True)
class Rollout:
    """One sampled batch from the policy, scored token by token under policy and reference.

    Row b answers prompt ``group_ids[b]``; rows of one prompt are contiguous.

    Attributes:
        prompts: (P,) the user's prompts (before the chat template).
        group_ids: (B,) long, prompt index of each sample.
        responses: (B,) decoded response texts (untrusted model output: escape before display).
        token_ids: (B, T) long, sampled token ids, 0 on padding.
        tokens: (B,) tuples of display strings of each sampled token, one per valid position.
        response_mask: (B, T) float, 1.0 on generated tokens incl. EOS.
        logprobs: (B, T) log pi(y_t | x, y_<t) under the policy (at the stated temperature).
        ref_logprobs: (B, T) same tokens under the reference model.
        exact_kl: (B, T) KL(policy || ref) over the full vocabulary at each position.
        entropy: (B, T) entropy of the policy's next-token distribution.
        topk_ids: (B, T, K) long, the policy's top-K next tokens.
        topk_logprobs: (B, T, K) their log-probs under the policy.
        topk_ref_logprobs: (B, T, K) log-probs of the same K tokens under the reference.
        finish_reasons: (B,) "eos" or "length".
        greedy_responses: (P,) greedy (temperature 0) answer per prompt, for ReMax's baseline.
        features: (B, T, F) reference-model features per position for a value probe, or None.
        sum_pi_squared: (B, T) sum over the vocabulary of the policy's squared next-token
            probabilities (verl's optimal token baseline reads it), or None where the maker
            saw only the top-K (an engine, a run file, a preset).
        vocab: id -> display string for every id in token_ids and topk_ids.
        meta: how it was made (``RolloutMeta``: model, seed, temperature, policy mode, decode
            weights, KL note ...); (key, value) pairs given here are read into one.
    """

    prompts: tuple[str, ...]
    group_ids: Tensor
    responses: tuple[str, ...]
    token_ids: Tensor
    tokens: tuple[tuple[str, ...], ...]
    response_mask: Tensor
    logprobs: Tensor
    ref_logprobs: Tensor
    exact_kl: Tensor
    entropy: Tensor
    topk_ids: Tensor
    topk_logprobs: Tensor
    topk_ref_logprobs: Tensor
    finish_reasons: tuple[str, ...]
    greedy_responses: tuple[str, ...] = ()
    features: Tensor | None = None
    vocab: dict = field(default_factory=dict)
    meta: RolloutMeta = field(default_factory=RolloutMeta)
    sum_pi_squared: Tensor | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.meta, RolloutMeta):
            object.__setattr__(self, "meta", RolloutMeta.of(self.meta))

    @property
    def group_size(self) -> int:
        """Samples per prompt G (rows of one prompt are contiguous)."""
        return len(self.responses) // max(len(self.prompts), 1)


def build_rollout(
    *,
    prompts: tuple[str, ...],
    group_ids: Tensor,
    responses: tuple[str, ...],
    token_ids: Tensor,
    tokens: tuple[tuple[str, ...], ...],
    response_mask: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    exact_kl: Tensor,
    entropy: Tensor,
    topk_ids: Tensor,
    topk_logprobs: Tensor,
    topk_ref_logprobs: Tensor,
    finish_reasons: tuple[str, ...],
    meta: RolloutMeta,
    greedy_responses: tuple[str, ...] = (),
    features: Tensor | None = None,
    vocab: dict | None = None,
    sum_pi_squared: Tensor | None = None,
) -> Rollout:
    """The one place a Rollout is made: the sampler's, an engine's, a run file's, a preset's.

    Every maker (``lm.sampling``, ``lm.engine_rollout``, ``lm.runfile``, ``data.presets``,
    ``data.runs``, an imported run's scores-only step) calls this, so the shapes are checked at
    the boundary once and ``meta`` is typed (a ``RolloutMeta``, never a bag of pairs).

    Args:
        prompts: (P,) the prompts.
        group_ids: (B,) long, prompt index of each row.
        responses: (B,) response texts.
        token_ids: (B, T) long, sampled ids, 0 on padding.
        tokens: (B,) display strings of each row's tokens.
        response_mask: (B, T) 1.0 on response tokens.
        logprobs: (B, T) log-probs of the tokens under the policy.
        ref_logprobs: (B, T) the same under the reference.
        exact_kl: (B, T) KL(policy || ref) per position.
        entropy: (B, T) the policy's entropy per position.
        topk_ids: (B, T, K) long, the policy's top-K tokens (K may be 0).
        topk_logprobs: (B, T, K) their log-probs under the policy.
        topk_ref_logprobs: (B, T, K) their log-probs under the reference.
        finish_reasons: (B,) "eos", "length" or "unknown".
        meta: how it was made.
        greedy_responses: (P,) greedy answers, or ().
        features: (B, T, F) probe features, or None.
        vocab: id -> display string ({} when None).
        sum_pi_squared: (B, T) sum of the policy's squared next-token probabilities, or None.
    """
    shape = tuple(token_ids.shape)
    per_token = {
        "response_mask": response_mask,
        "logprobs": logprobs,
        "ref_logprobs": ref_logprobs,
        "exact_kl": exact_kl,
        "entropy": entropy,
    }
    if sum_pi_squared is not None:
        per_token["sum_pi_squared"] = sum_pi_squared
    for name, value in per_token.items():
        assert tuple(value.shape) == shape, f"{name} {tuple(value.shape)} != token_ids {shape}"
    for name, value in (("topk_logprobs", topk_logprobs), ("topk_ref_logprobs", topk_ref_logprobs)):
        assert value.shape == topk_ids.shape, f"{name} {tuple(value.shape)} != topk_ids"
    assert tuple(topk_ids.shape[:2]) == shape, f"topk_ids {tuple(topk_ids.shape)} vs {shape}"
    assert len(responses) == group_ids.numel() == shape[0], "one response and group id per row"
    assert isinstance(meta, RolloutMeta), "meta is a RolloutMeta (RolloutMeta.of(pairs))"
    return Rollout(
        prompts=prompts,
        group_ids=group_ids,
        responses=responses,
        token_ids=token_ids,
        tokens=tokens,
        response_mask=response_mask,
        logprobs=logprobs,
        ref_logprobs=ref_logprobs,
        exact_kl=exact_kl,
        entropy=entropy,
        topk_ids=topk_ids,
        topk_logprobs=topk_logprobs,
        topk_ref_logprobs=topk_ref_logprobs,
        finish_reasons=finish_reasons,
        greedy_responses=greedy_responses,
        features=features,
        vocab={} if vocab is None else vocab,
        meta=meta,
        sum_pi_squared=sum_pi_squared,
    )


def select_rows(rollout: Rollout, rows: Tensor) -> Rollout:
    """The rollout restricted to ``rows`` (B',) long: tensors, texts and group ids follow.

    Prompts, greedy answers, vocab and meta are per batch and stay as they are.
    """
    idx = rows.tolist()
    tensor_fields = (
        "group_ids",
        "token_ids",
        "response_mask",
        "logprobs",
        "ref_logprobs",
        "exact_kl",
        "entropy",
        "topk_ids",
        "topk_logprobs",
        "topk_ref_logprobs",
        "features",
        "sum_pi_squared",
    )
    changes: dict[str, Any] = {
        name: getattr(rollout, name)[rows]
        for name in tensor_fields
        if getattr(rollout, name) is not None
    }
    for name in ("responses", "tokens", "finish_reasons"):
        values = getattr(rollout, name)
        changes[name] = tuple(values[i] for i in idx)
    return replace(rollout, **changes)


def meta_dict(record: Rollout | Trace) -> dict:
    """The (key, value) pairs of ``Rollout.meta`` or ``Trace.config`` as a dict."""
    pairs = record.meta if isinstance(record, Rollout) else record.config
    return dict(pairs)


def batch_from_rollout(
    rollout: Rollout,
    scores: Tensor,
    values: Tensor | None = None,
    baseline_scores: Tensor | None = None,
) -> Batch:
    """The calculator's input for a sampled rollout and its (B,) raw scores."""
    return Batch(
        scores=scores,
        response_mask=rollout.response_mask,
        group_ids=rollout.group_ids,
        group_labels=tuple(range(len(rollout.prompts))),
        logprobs=rollout.logprobs,
        ref_logprobs=rollout.ref_logprobs,
        values=values,
        baseline_scores=baseline_scores,
        sum_pi_squared=rollout.sum_pi_squared,
    )


def subsample_rollout(rollout: Rollout, group_size: int) -> Rollout:
    """Keep the first ``group_size`` samples of every prompt (emulates a smaller G).

    Args:
        rollout: the full batch; rows of one prompt are contiguous.
        group_size: samples to keep per prompt, 1 <= group_size <= rollout.group_size.

    Returns:
        A new Rollout with P * group_size rows (trailing all-padding columns kept).
    """
    full = rollout.group_size
    if not 1 <= group_size <= full:
        raise ValueError(f"group_size must be in [1, {full}], got {group_size}")
    if group_size == full:
        return rollout
    keep: list[int] = []
    seen: dict[int, int] = {}
    for b, gid in enumerate(rollout.group_ids.tolist()):
        if seen.get(gid, 0) < group_size:
            keep.append(b)
        seen[gid] = seen.get(gid, 0) + 1
    return select_rows(rollout, torch.tensor(keep, dtype=torch.long))


# ------------------------------------------------------------------------------------- JSON


def to_plain(value: Any) -> Any:
    """A JSON-ready value: a tensor as nested float lists (-0.0 as 0.0), a tuple as a list."""
    if isinstance(value, Tensor):
        return (value.detach().to(torch.float64) + 0.0).tolist()  # + 0.0 turns -0.0 into 0.0
    if isinstance(value, tuple):
        return [to_plain(v) for v in value]
    return value


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """A JSON-ready dict of a Trace (tensors as nested lists, config as an object).

    The one serializer of a Trace: the calculator CLI prints it, the pages download it.

    Args:
        trace: a pipeline Trace.

    Returns:
        dict with framework, config, scores, rewards, baseline, scale, clip_frac, kl, kl_coef,
        next_kl_coef, kl_in_reward, kl_loss, token_rewards, advantages, returns, running, notes;
        resample (the rows verl PF-PPO drew) only when there is one.
    """
    running = trace.running
    return {
        "framework": trace.framework,
        "config": {k: to_plain(v) for k, v in trace.config},
        "scores": to_plain(trace.scores),
        "rewards": to_plain(trace.rewards),
        "baseline": to_plain(trace.baseline),
        "scale": to_plain(trace.scale),
        "clip_frac": trace.clip_frac,
        "kl": to_plain(trace.kl),
        # the published JSON names (the calculator prints them; pipeline.js returns the same)
        "kl_coef": trace.beta,
        "next_kl_coef": trace.next_beta,
        "kl_in_reward": trace.kl_in_reward,
        "kl_loss": trace.kl_loss,
        "token_rewards": to_plain(trace.token_rewards),
        "advantages": to_plain(trace.advantages),
        "returns": to_plain(trace.returns),
        "running": None
        if running is None
        else {"mean": running.mean, "var": running.var, "count": running.count},
        "notes": list(trace.notes),
    } | ({} if trace.resample is None else {"resample": trace.resample.tolist()})


def _round(values: list[float], digits: int = 6) -> list[float]:
    return [round(float(v), digits) for v in values]


def rollout_to_dict(
    rollout: Rollout, rewards: Tensor | None = None, reward_name: str = ""
) -> dict[str, Any]:
    """A JSON-ready dict of a Rollout: one entry per sample with its per-token numbers.

    The one serializer of a Rollout (the sampling CLI prints it). Per-token numbers are rounded
    to 6 digits and cut at the response's length.

    Args:
        rollout: the sampled batch.
        rewards: (B,) rewards, or None.
        reward_name: the reward's name ("" = none).

    Returns:
        dict with meta, reward, greedy_responses and samples (prompt, group, response,
        token_ids, tokens, logprobs, ref_logprobs, kl, entropy, finish_reason, reward).
    """
    samples = []
    for b, response in enumerate(rollout.responses):
        n = int(rollout.response_mask[b].sum())
        samples.append(
            {
                "prompt": rollout.prompts[int(rollout.group_ids[b])],
                "group": int(rollout.group_ids[b]),
                "response": response,
                "token_ids": rollout.token_ids[b, :n].tolist(),
                "tokens": list(rollout.tokens[b]),
                "logprobs": _round(rollout.logprobs[b, :n].tolist()),
                "ref_logprobs": _round(rollout.ref_logprobs[b, :n].tolist()),
                "kl": _round(rollout.exact_kl[b, :n].tolist()),
                "entropy": _round(rollout.entropy[b, :n].tolist()),
                "finish_reason": rollout.finish_reasons[b],
                "reward": None if rewards is None else float(rewards[b]),
            }
        )
    return {
        "meta": dict(rollout.meta),
        "reward": reward_name or None,
        "greedy_responses": list(rollout.greedy_responses),
        "samples": samples,
    }
