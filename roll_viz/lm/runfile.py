"""What defines a training run and what it leaves behind: settings, step records, the run file.

``TrainSettings`` (with its ``RewardChoice``) is everything that defines a run; ``StepRecord``
(with ``StepSamples``) is one step; ``TrainRun`` is a whole run. ``lm.train`` produces them; the
CLI writes them; ``roll_viz.data`` reads them back (``data.runs.rollviz``, the recorded runs).

Run file (JSONL, schema ``SCHEMA``; the CLI writes it, the app reads it back, an importer for
runs made elsewhere reads the same lines). UTF-8, one JSON object per line:

- line 1, the header::

    {"type": "header", "schema": "roll-viz.train/1", "settings": {...TrainSettings.to_json()},
     "model": "SmolLM2-135M-Instruct ...", "label": "...", "recorded": false}

  ``settings`` keys: prompts [str], group_size, max_new_tokens, temperature, top_p, seed, steps,
  reward {"terms": [[name, weight, {param: value}]], "noise_sigma", "noise_seed"}, framework,
  config {dialect key: value}, beta_mode ("fixed" | "adaptive"), beta, target_kl, horizon, lr,
  lora_rank, lora_alpha, clip_eps, ppo_epochs, minibatches, sample_every, model, label, pods_m,
  loss_option, sampler, filter_zero_variance, staleness, old_policy (a file without one of these
  reads its default).

- then one line per step, in order, ``step`` counting from 0::

    {"type": "step", "step": 0, "metrics": {...}, "samples": {...}}   ("samples" optional)

  ``metrics`` (all plain numbers; ``null`` where a value does not exist):
  reward_mean, reward_std (population std over the B samples), reward_per_prompt [P],
  kl_exact (full-vocabulary KL(policy || ref): mean over samples of each sample's token mean),
  kl_est (the dialect's estimator at the sampled tokens, with its clamps, same aggregation:
  exactly what the adaptive controller sees),
  kl_estimator (its canonical name), beta (the coefficient used this step), next_beta,
  entropy (token mean over valid tokens), response_length (mean tokens incl. EOS),
  eos_share (share of samples that ended with EOS), clip_frac (share of tokens whose ratio was
  clipped in the update, as the update reports it), zero_spread_share (share of groups whose
  rewards are all equal: advantages 0, no signal), adv_std (population std of the advantages over
  valid tokens), adv_abs_mean, loss, grad_norm, update (dict of every number the update
  reported), seconds {"sample", "score", "advantage", "update", "total"}. With
  ``filter_zero_variance``: filtered_share (share of samples in dropped groups; a step where
  all are dropped has loss, grad_norm null and update {}). With a sampler other than fp32 or a
  loss that reads mu (``lm.train_batch.mismatch_metrics``): sampler, delta_abs_mean, delta_mean
  (delta = log pi_old - log mu per token), is_ess, correction, correction_frac. With a sampler
  lag or another pi_old (``lm.lagged.lag_metrics``): staleness (the lag this step had),
  old_policy, drift_abs_mean (mean |log pi_theta - log pi_old|), mu_gap_abs_mean
  (mean |log pi_old - log mu|), anchor_ratio_mean.

  ``samples`` (a few steps only, every ``sample_every`` and the last): prompts [P], group_ids
  [B], responses [B] (untrusted model text), rewards [B], finish [B] ("eos" | "length"),
  tokens [B][n_b] display strings, token_ids [B][n_b], and per-token lists [B][n_b] rounded to
  4 decimals: logprobs, ref_logprobs, exact_kl, entropy, advantages.

- optionally a last line ``{"type": "end", "status": "done" | "stopped" | "error",
  "message": "..."}``.

Readers ignore unknown keys; a missing optional metric reads as ``None``.

Where a framework keeps the in-reward KL coefficient, its estimator, the adaptive controller's
keys and the clip range is its dialect's business (``core.pipeline.dialects``: ``train_config``,
``kl_estimator``, ``CLIP_KEYS``, ``ADAPTIVE_BETA``); the settings only ask it.

Size: the whole run-file schema (settings, reward, samples, step, run) and its field list stay
in one module, the one ``roll_viz.data`` reads back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor

from roll_viz.core import pipeline
from roll_viz.core.pipeline import dialects
from roll_viz.core.pipeline.dialects.entropy_keys import entropy_overrides
from roll_viz.core.pipeline.entropy_control import EntropyTarget
from roll_viz.core.records import Rollout, RolloutMeta, build_rollout
from roll_viz.lm.loss_options import DEFAULT_OPTION, SAMPLERS, option_keys, options_for
from roll_viz.lm.loss_options import OPTION_IDS as OPTION_IDS
from roll_viz.lm.loss_options import SAMPLER_LABELS as SAMPLER_LABELS
from roll_viz.lm.request import SamplingConfig
from roll_viz.rewards import (
    EXTRA_PARAMS,
    EXTRA_REWARDS,
    REWARD_FNS,
    REWARD_PARAMS,
    RewardSpec,
    score_responses,
)

SCHEMA = "roll-viz.train/1"

BETA_MODES = ("fixed", "adaptive")
#: the sampler's lag k in steps (async training: the adapter of step s - k samples step s); each
#: lag keeps k copies of the LoRA weights (``lm.lagged``), so it is bounded
MAX_LAG = 2
#: what the loss uses as pi_old (``lm.lagged``): the trainer recomputed at the sampler's
#: weights, the current policy (ratio = 1: miles #1829, SkyRL #1315) or the sampler's mu
OLD_POLICIES = ("recomputed", "current", "mu")


@dataclass(frozen=True)
class RewardChoice:
    """The run's reward: a weighted sum of named rewards (roll_viz.rewards or EXTRA_REWARDS).

    Attributes:
        terms: ((name, weight, ((param, value), ...)), ...).
        noise_sigma: Gaussian noise std (seeded per step from noise_seed + step).
        noise_seed: base seed of the noise.
    """

    terms: tuple[tuple[str, float, tuple], ...] = (("target_length", 1.0, ()),)
    noise_sigma: float = 0.0
    noise_seed: int = 0

    def __post_init__(self) -> None:
        terms = []
        for name, weight, params in self.terms:
            if name not in REWARD_FNS and name not in EXTRA_REWARDS:
                known = sorted([*REWARD_FNS, *EXTRA_REWARDS])
                raise ValueError(f"unknown reward {name!r}; choose from {known}")
            allowed = REWARD_PARAMS.get(name) or EXTRA_PARAMS.get(name) or {}
            pairs = tuple(sorted(dict(params).items()))
            unknown = {k for k, _ in pairs} - set(allowed)
            if unknown:
                raise ValueError(f"reward {name} has no parameter(s) {sorted(unknown)}")
            weight = float(weight)
            if not math.isfinite(weight):
                raise ValueError(f"weight of {name} must be finite")
            terms.append((name, weight, pairs))
        object.__setattr__(self, "terms", tuple(terms))
        if name_set := [t for t in terms if t[0] in REWARD_FNS]:
            RewardSpec(terms=tuple(name_set))  # validates patterns etc.

    @classmethod
    def single(cls, name: str, **params: Any) -> RewardChoice:
        """One reward with weight 1."""
        return cls(terms=((name, 1.0, tuple(sorted(params.items()))),))

    def score(self, prompts: Sequence[str], responses: Sequence[str], step: int = 0) -> Tensor:
        """(B,) float64 scores of (prompt, response) pairs; noise seeded with noise_seed + step."""
        totals = torch.zeros(len(responses), dtype=torch.float64)
        core_terms = tuple(t for t in self.terms if t[0] in REWARD_FNS)
        if core_terms:
            totals = totals + score_responses(prompts, responses, RewardSpec(terms=core_terms))
        for name, weight, params in self.terms:
            if name in EXTRA_REWARDS:
                fn = EXTRA_REWARDS[name]
                kwargs = {k: v for k, (v, _) in EXTRA_PARAMS[name].items()} | dict(params)
                values = [fn(p, r, **kwargs) for p, r in zip(prompts, responses, strict=True)]
                totals = totals + weight * torch.tensor(values, dtype=torch.float64)
        if self.noise_sigma > 0:
            gen = torch.Generator().manual_seed(self.noise_seed + step)
            totals = totals + self.noise_sigma * torch.randn(
                len(responses), generator=gen, dtype=torch.float64
            )
        return totals

    def to_json(self) -> dict:
        """Plain JSON form."""
        return {
            "terms": [[n, w, dict(p)] for n, w, p in self.terms],
            "noise_sigma": self.noise_sigma,
            "noise_seed": self.noise_seed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RewardChoice:
        """Inverse of ``to_json``."""
        terms = tuple(
            (str(n), float(w), tuple(sorted(dict(p).items()))) for n, w, p in data["terms"]
        )
        return cls(
            terms=terms,
            noise_sigma=float(data.get("noise_sigma", 0.0)),
            noise_seed=int(data.get("noise_seed", 0)),
        )

    def label(self) -> str:
        """Short human-readable name, e.g. "positive_words(per_word=0.2)"."""
        parts = []
        for name, weight, params in self.terms:
            args = ", ".join(f"{k}={v}" for k, v in params)
            text = f"{name}({args})" if args else name
            parts.append(text if weight == 1.0 else f"{weight:g} x {text}")
        return " + ".join(parts)


# ---------------------------------------------------------------------------------------------
# Settings


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


#: the sampling fields a run file stores flat in its settings (``TrainSettings.sampling``)
SAMPLING_KEYS = ("prompts", "group_size", "max_new_tokens", "temperature", "top_p", "seed")
#: a run file's response length when its settings lack one (the run files' default before the
#: sampling fields moved into ``SamplingConfig``, whose own default is 48)
FILE_MAX_NEW_TOKENS = 32


@dataclass(frozen=True)
class TrainSettings:
    """Everything that defines a training run. Frozen, hashable, JSON round-trip.

    Attributes:
        sampling: what every step samples, the one declaration of the sampling fields
            (``lm.request.SamplingConfig``): prompts (P,), group_size G, max_new_tokens,
            temperature (> 0 for training), top_p, and seed, the run seed: the adapter's init and
            step k's sampling seed (``sampling_seed``). The run file stores these six flat
            (``SAMPLING_KEYS``), as before.
        steps: N training steps.
        reward: the reward.
        framework: dialect ("roll", "verl", "openrlhf", "trl").
        config: the dialect's own keys as sorted (key, value) pairs (pipeline.config); the
            beta and controller keys are set from beta / beta_mode / target_kl / horizon.
        beta_mode: "fixed" or "adaptive" (the dialect's adaptive controller; not in TRL).
        beta: initial KL coefficient (in the reward for ROLL/verl/OpenRLHF, in the loss for TRL).
        target_kl: the adaptive controller's target.
        horizon: the adaptive controller's horizon (frameworks ship 10000; with B = 16 samples
            a step, a horizon of 100 lets beta move up to 3.2 % a step).
        lr: LoRA learning rate.
        lora_rank: LoRA rank r.
        lora_alpha: LoRA alpha.
        clip_eps: PPO clip range epsilon.
        ppo_epochs: passes over each rollout (PPO epochs).
        minibatches: optimizer steps per epoch (the batch split in this many parts; from the
            second one on the ratio is no longer 1, so clipping can bite).
        sample_every: keep full samples every k steps (and the last) in the run file.
        model: model spec the run used ("tiny", "smollm2", ...).
        label: a short name for charts.
        pods_m: PODS: sample ``group_size`` = n per prompt, train on the m with the largest
            reward variance (0 = train on all n). Advantages are then normalized over the kept m.
        loss_option: a loss option of ``lm.loss_options.LOSS_OPTIONS`` for this framework (its
            keys are set on the loss config; ``DEFAULT_OPTION``: the shipped defaults).
        sampler: who draws the tokens (``lm.loss_options.SAMPLERS``): "fp32" is the trainer
            itself (mu = pi_old); the others are the behaviour policy mu whose log-probs reach
            the update as ``rollout_logprobs``.
        filter_zero_variance: drop the groups whose rewards are all exactly equal before the
            advantages (dynamic sampling without the refill); a step where every group is flat
            makes no update.
        entropy_target: the adaptive entropy target (``core.pipeline.entropy_control``, TRL PR
            #6140's rule on any dialect) in nats, or 0 (off): the entropy bonus's coefficient
            starts at ``entropy_coef`` and moves by ``entropy_delta`` per step toward keeping
            the mean token entropy at the target; it applies only once the entropy reached it.
        entropy_coef: the controller's initial coefficient.
        entropy_delta: its step per optimizer step.
        staleness: the sampler's lag k in 0..``MAX_LAG``: step s samples with the adapter of step
            s - k (async training, ``lm.lagged``); 0 is synchronous.
        old_policy: what the loss uses as pi_old (``OLD_POLICIES``): "recomputed" (the trainer
            at the sampler's weights), "current" (pi_theta itself: ratio 1, nothing clipped) or
            "mu" (the sampler's log-probs).
    """

    sampling: SamplingConfig
    steps: int = 20
    reward: RewardChoice = field(default_factory=RewardChoice)
    framework: str = "roll"
    config: tuple = (("adv_estimator", "grpo"),)
    beta_mode: str = "fixed"
    beta: float = 0.0
    target_kl: float = 0.05
    horizon: float = 100.0
    lr: float = 5e-4
    lora_rank: int = 8
    lora_alpha: float = 16.0
    clip_eps: float = 0.2
    ppo_epochs: int = 1
    minibatches: int = 1
    sample_every: int = 5
    model: str = "smollm2"
    label: str = ""
    pods_m: int = 0
    loss_option: str = DEFAULT_OPTION
    sampler: str = "fp32"
    filter_zero_variance: bool = False
    entropy_target: float = 0.0
    entropy_coef: float = 0.0
    entropy_delta: float = 0.005
    staleness: int = 0
    old_policy: str = "recomputed"

    def __post_init__(self) -> None:
        if not isinstance(self.sampling, SamplingConfig):
            raise ValueError("sampling must be a SamplingConfig (lm.request)")
        if isinstance(self.config, Mapping):
            object.__setattr__(self, "config", tuple(sorted(self.config.items())))
        else:
            object.__setattr__(
                self, "config", tuple(sorted((k, _freeze(v)) for k, v in self.config))
            )
        problems = []  # the sampling fields' own rules are SamplingConfig's
        group_size = self.sampling.group_size
        if not 1 <= self.steps <= 100_000:
            problems.append("steps must be at least 1")
        if self.pods_m and not 2 <= self.pods_m < group_size:
            problems.append(f"pods_m must be 0 (off) or in 2..{group_size - 1} (below G)")
        if self.beta_mode not in BETA_MODES:
            problems.append(f"beta_mode must be one of {BETA_MODES}")
        dialect = dialects.DIALECTS.get(self.framework)
        if self.beta_mode == "adaptive" and dialect is not None and not dialect.ADAPTIVE_BETA:
            problems.append(f"{dialect.LABEL} has no adaptive KL controller")
        if not (math.isfinite(self.beta) and self.beta >= 0):
            problems.append("beta must be >= 0")
        if self.beta_mode == "adaptive" and not (self.target_kl > 0 and self.horizon > 0):
            problems.append("the adaptive controller needs target_kl > 0 and horizon > 0")
        if not (math.isfinite(self.lr) and self.lr > 0):
            problems.append("lr must be > 0")
        if not self.sampling.temperature > 0:
            problems.append("training samples need temperature > 0")
        unsaved = [
            f.name
            for f in fields(SamplingConfig)
            if f.name not in SAMPLING_KEYS and getattr(self.sampling, f.name) != f.default
        ]
        if unsaved:  # each step sets its own (lm.train); a run file keeps only SAMPLING_KEYS
            problems.append(f"sampling: {', '.join(unsaved)} must keep SamplingConfig's defaults")
        if self.sample_every < 1:
            problems.append("sample_every must be >= 1")
        if self.ppo_epochs < 1:
            problems.append("ppo_epochs must be >= 1")
        if self.sampler not in SAMPLERS:
            problems.append(f"sampler must be one of {SAMPLERS}")
        if not (isinstance(self.staleness, int) and 0 <= self.staleness <= MAX_LAG):
            problems.append(f"staleness must be a whole number of steps in 0..{MAX_LAG}")
        if self.old_policy not in OLD_POLICIES:
            problems.append(f"old_policy must be one of {OLD_POLICIES}")
        if dialect is not None and self.loss_option not in options_for(self.framework):
            problems.append(
                f"loss_option must be one of {sorted(options_for(self.framework))} "
                f"for {dialect.LABEL}"
            )
        if self.entropy_target:
            try:
                self.entropy_controller()
            except ValueError as err:
                problems.append(str(err).removeprefix("invalid EntropyTarget: "))
        if problems:
            raise ValueError("invalid TrainSettings: " + "; ".join(problems))
        pipeline.resolve_config(self.framework, self.dialect_config())  # raises on a bad key
        pipeline.resolve_config(self.framework, loss_config(self, self.beta))

    def dialect_config(self, beta: float | None = None) -> dict[str, Any]:
        """The dialect config of one step: ``config`` plus beta and the controller keys.

        Args:
            beta: this step's KL coefficient (None: the initial ``beta``).

        Returns:
            A new dict of the framework's own keys.
        """
        return dialects.get(self.framework).train_config(
            dict(self.config),
            self.beta if beta is None else beta,
            self.beta_mode == "adaptive",
            self.target_kl,
            self.horizon,
        )

    def entropy_controller(self) -> EntropyTarget | None:
        """The adaptive entropy target's initial state, or None when it is off."""
        if not self.entropy_target:
            return None
        return EntropyTarget(
            target=self.entropy_target, coef=self.entropy_coef, delta=self.entropy_delta
        )

    @property
    def kl_estimator(self) -> str:
        """Canonical name (k1/abs/k2/k3) of the dialect's in-reward (or TRL loss) estimator."""
        resolved = pipeline.resolve_config(self.framework, self.dialect_config())
        return dialects.get(self.framework).kl_estimator(resolved)

    @property
    def estimator(self) -> str:
        """The advantage estimator's value in the dialect's config."""
        resolved = pipeline.resolve_config(self.framework, dict(self.config))
        return str(resolved[pipeline.ESTIMATOR_KEY[self.framework]])

    def sampling_seed(self, step: int) -> int:
        """Seed of step ``step``'s sampling."""
        return (self.sampling.seed * 1_000_003 + step) % (2**62)

    def to_json(self) -> dict:
        """Plain JSON form (lists, dicts, numbers, strings); the sampling fields flat, first."""
        out: dict[str, Any] = {k: getattr(self.sampling, k) for k in SAMPLING_KEYS}
        out["prompts"] = list(self.sampling.prompts)
        out.update({f.name: getattr(self, f.name) for f in fields(self) if f.name != "sampling"})
        out["reward"] = self.reward.to_json()
        out["config"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.config}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainSettings:
        """Inverse of ``to_json``; unknown keys are ignored, missing ones take defaults."""
        known = set(SAMPLING_KEYS) | set(cls.__dataclass_fields__) - {"sampling"}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["prompts"] = tuple(data["prompts"])
        if "reward" in data:
            kwargs["reward"] = RewardChoice.from_json(data["reward"])
        if "config" in data:
            kwargs["config"] = tuple(sorted((k, _freeze(v)) for k, v in data["config"].items()))
        return cls.flat(**kwargs)

    @classmethod
    def flat(cls, **values: Any) -> TrainSettings:
        """Settings from one flat set of values, as a run file stores them.

        The ``SAMPLING_KEYS`` (prompts, group_size, ...) go into ``sampling`` (their defaults
        and rules are ``SamplingConfig``'s; a missing max_new_tokens is the run files' 32), the
        rest are this record's fields: ``TrainSettings.flat(prompts=("Hi",), steps=2)``.
        """
        sampling = {k: values.pop(k) for k in SAMPLING_KEYS if k in values}
        sampling.setdefault("max_new_tokens", FILE_MAX_NEW_TOKENS)
        return cls(sampling=SamplingConfig(**sampling), **values)

    def describe(self) -> str:
        """One line: framework, estimator, beta, reward, lr (for captions)."""
        beta = (
            f"adaptive beta from {self.beta:g} "
            f"(target {self.target_kl:g}, horizon {self.horizon:g})"
            if self.beta_mode == "adaptive"
            else f"beta {self.beta:g}"
        )
        extras = []
        if self.loss_option != DEFAULT_OPTION:
            extras.append(f", {self.loss_option}")
        if self.sampler != "fp32":
            extras.append(f", sampler {self.sampler}")
        if self.filter_zero_variance:
            extras.append(", zero-variance groups dropped")
        if self.entropy_target:
            extras.append(f", entropy target {self.entropy_target:g}")
        if self.staleness:
            extras.append(
                f", sampler {self.staleness} step{'s' if self.staleness > 1 else ''} behind"
            )
        if self.old_policy != "recomputed":
            extras.append(f", pi_old := {'pi_theta' if self.old_policy == 'current' else 'mu'}")
        return (
            f"{self.framework} / {self.estimator}, {beta}, reward {self.reward.label()}, "
            f"lr {self.lr:g}, LoRA r{self.lora_rank}, {len(self.sampling.prompts)} prompts x "
            f"{self.sampling.group_size} x {self.sampling.max_new_tokens} tokens" + "".join(extras)
        )


def loss_config(
    settings: TrainSettings, beta: float, entropy: EntropyTarget | None = None
) -> dict[str, Any]:
    """The dialect keys the loss reads (``core.pipeline.losses``) for one update.

    The step's dialect config (beta included: TRL's loss KL, OpenRLHF's KL loss when
    ``use_loss``), the keys of the run's ``loss_option``, plus the clip range ``clip_eps`` under
    the framework's own key(s) (unless the config sets them); every other loss key keeps the
    framework's shipped default. With the adaptive entropy target ``entropy``, the coefficient
    it applies this step goes under the framework's entropy key.
    """
    cfg = settings.dialect_config(beta)
    cfg.update(option_keys(settings.framework, settings.loss_option))
    if entropy is not None:
        cfg.update(entropy_overrides(settings.framework, entropy.applied()))
    for key in dialects.get(settings.framework).CLIP_KEYS:
        cfg.setdefault(key, settings.clip_eps)
    return cfg


# ---------------------------------------------------------------------------------------------
# Step record


def _r4(values: Iterable[float]) -> list[float]:
    return [round(float(v), 4) for v in values]


@dataclass(frozen=True)
class StepSamples:
    """Texts and per-token data of one step's samples (compact, JSON-ready lists).

    Attributes:
        prompts: (P,) prompts.
        group_ids: (B,) prompt index of each sample.
        responses: (B,) decoded texts (untrusted: escape before display).
        rewards: (B,) raw rewards.
        finish: (B,) "eos" or "length".
        tokens: (B, n_b) display strings.
        token_ids: (B, n_b) ids.
        logprobs: (B, n_b) policy log-probs.
        ref_logprobs: (B, n_b) reference log-probs.
        exact_kl: (B, n_b) full-vocabulary KL per position.
        entropy: (B, n_b) policy entropy per position.
        advantages: (B, n_b) advantages used by the update.
    """

    prompts: tuple[str, ...]
    group_ids: tuple[int, ...]
    responses: tuple[str, ...]
    rewards: tuple[float, ...]
    finish: tuple[str, ...]
    tokens: tuple[tuple[str, ...], ...]
    token_ids: tuple[tuple[int, ...], ...]
    logprobs: tuple[tuple[float, ...], ...]
    ref_logprobs: tuple[tuple[float, ...], ...]
    exact_kl: tuple[tuple[float, ...], ...]
    entropy: tuple[tuple[float, ...], ...]
    advantages: tuple[tuple[float, ...], ...]

    @classmethod
    def from_rollout(cls, rollout: Rollout, scores: Tensor, advantages: Tensor) -> StepSamples:
        """Compact copy of a rollout, its (B,) scores and (B, T) advantages."""
        lengths = rollout.response_mask.sum(-1).long().tolist()

        def rows(x: Tensor) -> tuple:
            return tuple(tuple(_r4(x[b, :n].tolist())) for b, n in enumerate(lengths))

        return cls(
            prompts=tuple(rollout.prompts),
            group_ids=tuple(int(g) for g in rollout.group_ids),
            responses=tuple(rollout.responses),
            rewards=tuple(_r4(scores.tolist())),
            finish=tuple(rollout.finish_reasons),
            tokens=tuple(tuple(t) for t in rollout.tokens),
            token_ids=tuple(
                tuple(rollout.token_ids[b, :n].tolist()) for b, n in enumerate(lengths)
            ),
            logprobs=rows(rollout.logprobs),
            ref_logprobs=rows(rollout.ref_logprobs),
            exact_kl=rows(rollout.exact_kl),
            entropy=rows(rollout.entropy),
            advantages=rows(advantages),
        )

    def to_json(self) -> dict:
        """JSON form: every field a list."""
        return {k: _listify(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepSamples:
        """Inverse of ``to_json``."""
        kwargs = {name: _tuplify(data.get(name, [])) for name in cls.__dataclass_fields__}
        return cls(**kwargs)

    def to_rollout(self) -> Rollout:
        """A Rollout for the token heatmaps of the other pages.

        Top-K holds only the sampled token (K = 1); there are no probe features.
        """
        lengths = [len(t) for t in self.token_ids]
        B, T = len(lengths), max([*lengths, 1])

        def grid(rows: Sequence[Sequence[float]], dtype=torch.float32) -> Tensor:
            out = torch.zeros(B, T, dtype=dtype)
            for b, row in enumerate(rows):
                if row:
                    out[b, : len(row)] = torch.tensor(row, dtype=dtype)
            return out

        mask = torch.zeros(B, T)
        for b, n in enumerate(lengths):
            mask[b, :n] = 1.0
        ids = grid(self.token_ids, torch.long)
        vocab: dict[int, str] = {}
        for row_ids, row_tokens in zip(self.token_ids, self.tokens, strict=True):
            for i, tok in zip(row_ids, row_tokens, strict=False):
                vocab[int(i)] = tok
        logprobs = grid(self.logprobs)
        return build_rollout(
            prompts=self.prompts,
            group_ids=torch.tensor(self.group_ids, dtype=torch.long),
            responses=self.responses,
            token_ids=ids,
            tokens=self.tokens,
            response_mask=mask,
            logprobs=logprobs,
            ref_logprobs=grid(self.ref_logprobs),
            exact_kl=grid(self.exact_kl),
            entropy=grid(self.entropy),
            topk_ids=ids[..., None].clone(),
            topk_logprobs=logprobs[..., None].clone(),
            topk_ref_logprobs=grid(self.ref_logprobs)[..., None],
            finish_reasons=self.finish,
            vocab=vocab,
            meta=RolloutMeta(policy_mode="trained"),
        )


def _listify(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_listify(v) for v in value]
    return value


def _tuplify(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_tuplify(v) for v in value)
    return value


@dataclass(frozen=True)
class StepRecord:
    """One training step: its metrics (plain JSON numbers) and, for a few steps, its samples.

    Attributes:
        step: 0-based step index.
        metrics: the metric dict (see the module docstring for the keys).
        samples: the step's samples, or None when not kept.
    """

    step: int
    metrics: dict
    samples: StepSamples | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """``metrics[key]`` or default."""
        return self.metrics.get(key, default)

    def to_json(self) -> dict:
        """The JSONL step line as a dict."""
        out: dict[str, Any] = {"type": "step", "step": self.step, "metrics": self.metrics}
        if self.samples is not None:
            out["samples"] = self.samples.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        """Inverse of ``to_json``."""
        samples = data.get("samples")
        return cls(
            step=int(data["step"]),
            metrics=dict(data.get("metrics", {})),
            samples=None if samples is None else StepSamples.from_json(samples),
        )

    def without_samples(self) -> StepRecord:
        """The same record with samples dropped."""
        return replace(self, samples=None)


@dataclass(frozen=True)
class TrainRun:
    """A whole run: settings, step records, status. What the app charts and the CLI writes.

    Attributes:
        settings: the run's settings.
        steps: records in step order.
        model: model name.
        label: chart label.
        recorded: True for a run shipped with the app (not trained in this session).
        status: "done", "stopped", "error", "running", "paused", "idle".
        message: error or status message.
    """

    settings: TrainSettings
    steps: tuple[StepRecord, ...] = ()
    model: str = ""
    label: str = ""
    recorded: bool = False
    status: str = "done"
    message: str = ""

    def series(self, key: str) -> list[float | None]:
        """One metric over the steps (None where missing)."""
        return [r.metrics.get(key) for r in self.steps]

    def sampled_steps(self) -> list[int]:
        """Steps that carry samples."""
        return [r.step for r in self.steps if r.samples is not None]

    def header_json(self) -> dict:
        """The JSONL header line as a dict."""
        return {
            "type": "header",
            "schema": SCHEMA,
            "settings": self.settings.to_json(),
            "model": self.model,
            "label": self.label or self.settings.label,
            "recorded": self.recorded,
        }

    def to_jsonl(self) -> str:
        """The whole run as JSONL text (header, steps, end)."""
        lines = [json.dumps(self.header_json(), ensure_ascii=False)]
        lines += [json.dumps(r.to_json(), ensure_ascii=False) for r in self.steps]
        end = {"type": "end", "status": self.status, "message": self.message}
        lines.append(json.dumps(end, ensure_ascii=False))
        return "\n".join(lines) + "\n"

    @classmethod
    def from_jsonl(cls, text: str, recorded: bool | None = None) -> TrainRun:
        """Parse JSONL text written by ``to_jsonl`` or the CLI.

        Args:
            text: the file's text.
            recorded: override the header's ``recorded`` flag.

        Raises:
            ValueError: no header, a wrong schema, or a malformed line (the message names it).
        """
        header, steps, status, message = None, [], "done", ""
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"line {number}: not JSON ({err})") from err
            kind = data.get("type") if isinstance(data, dict) else None
            if kind == "header":
                if data.get("schema") != SCHEMA:
                    raise ValueError(f"line {number}: schema {data.get('schema')!r}, not {SCHEMA}")
                header = data
            elif kind == "step":
                steps.append(StepRecord.from_json(data))
            elif kind == "end":
                status, message = str(data.get("status", "done")), str(data.get("message", ""))
            else:
                raise ValueError(f"line {number}: unknown line type {kind!r}")
        if header is None:
            raise ValueError("no header line (type 'header')")
        settings = TrainSettings.from_json(header["settings"])
        return cls(
            settings=settings,
            steps=tuple(steps),
            model=str(header.get("model", "")),
            label=str(header.get("label", "")),
            recorded=bool(header.get("recorded", False)) if recorded is None else recorded,
            status=status,
            message=message,
        )
