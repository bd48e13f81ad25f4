"""Live RL training on the user's prompts: sample -> reward -> KL -> advantages -> update, N steps.

One step (``train_step``), in order:

1. sample G responses per prompt from the trained policy (a per-user LoRA adapter over the shared
   base, ``roll_viz.lm.update``), scored token by token under the policy and the reference (the
   base with the adapter off). ``lm.sampling.sample`` holds ``bundle.lock`` for that call only;
2. score them with the run's reward (``roll_viz.rewards`` or one of ``EXTRA_REWARDS``);
3. run the chosen framework's reward -> advantage pipeline (``core.pipeline.run``) with the current
   beta put into the dialect's in-reward KL coefficient; the dialect's own adaptive controller
   (``core.pipeline.kl.next_kl_coef``, n_steps = batch size) gives next step's beta from this
   step's real KL;
4. one policy update (``lm.update.update_step``) on those advantages, under ``bundle.lock``.

The model lock is held per phase of a step, never for a whole run, so other users' sampling and
slider work interleave with a training run.

``TrainRunner`` runs the loop in a background thread per user (start, pause, resume, stop,
reset), keeps every step's ``StepRecord`` (compact: plain floats and short lists, token data
rounded), and stops with a message on an error, keeping the steps done so far.

Run file (JSONL, schema ``SCHEMA``; the CLI writes it, the app reads it back, an importer for
runs made elsewhere reads the same lines). UTF-8, one JSON object per line:

- line 1, the header::

    {"type": "header", "schema": "roll-viz.train/1", "settings": {...TrainSettings.to_json()},
     "model": "SmolLM2-135M-Instruct ...", "label": "...", "recorded": false}

  ``settings`` keys: prompts [str], group_size, max_new_tokens, temperature, top_p, seed, steps,
  reward {"terms": [[name, weight, {param: value}]], "noise_sigma", "noise_seed"}, framework,
  config {dialect key: value}, beta_mode ("fixed" | "adaptive"), beta, target_kl, horizon, lr,
  lora_rank, lora_alpha, clip_eps, ppo_epochs, sample_every, model, label.

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
  reported), seconds {"sample", "score", "advantage", "update", "total"}.

  ``samples`` (a few steps only, every ``sample_every`` and the last): prompts [P], group_ids
  [B], responses [B] (untrusted model text), rewards [B], finish [B] ("eos" | "length"),
  tokens [B][n_b] display strings, token_ids [B][n_b], and per-token lists [B][n_b] rounded to
  4 decimals: logprobs, ref_logprobs, exact_kl, entropy, advantages.

- optionally a last line ``{"type": "end", "status": "done" | "stopped" | "error",
  "message": "..."}``.

Readers ignore unknown keys; a missing optional metric reads as ``None``.

Simplifications against ROLL / verl / OpenRLHF: one process, one LoRA adapter instead of a full
actor, a zero critic for GAE (V = 0), the reference is the base model, one optimizer step per
rollout by default, rewards computed on the text (no reward model).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from roll_viz.core import pipeline
from roll_viz.core.ops import masked_mean
from roll_viz.core.pods import max_variance_subset
from roll_viz.core.records import Rollout, Trace, batch_from_rollout, select_rows
from roll_viz.rewards import REWARD_FNS, REWARD_PARAMS, RewardSpec, score_responses

SCHEMA = "roll-viz.train/1"

# Caps on a run started from the UI (the CLI may go higher, up to the sampler's own limits).
MAX_STEPS = 200
MAX_PROMPTS = 8
MAX_GROUP_SIZE = 16
MAX_NEW_TOKENS = 128
MAX_HISTORY_SAMPLES = 40  # steps whose full samples the runner keeps in memory (plus step 0)

BETA_MODES = ("fixed", "adaptive")

# Where each dialect keeps the in-reward KL coefficient, the switch that turns the in-reward KL
# on, and the adaptive controller's keys (pipeline.config).
_BETA_KEY = {"roll": "init_kl_coef", "verl": "kl_coef", "openrlhf": "init_coef", "trl": "beta"}
_KL_EST_KEY = {"roll": "kl_penalty", "verl": "kl_penalty", "openrlhf": "kl_estimator"}
_KL_CANON = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3",
             "k3": "k3"}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Extra rewards (train-only; same signature as roll_viz.rewards)


def letter_share(prompt: str, response: str) -> float:
    """Share of the response's characters that are ASCII letters (0 for an empty response).

    A dense reward even a random byte-level model can climb (the tiny test model), and a gameable
    one on a real model (it ignores meaning entirely).
    """
    text = response[:5000]
    if not text:
        return 0.0
    return sum(1 for c in text if c.isascii() and c.isalpha()) / len(text)


def char_length(prompt: str, response: str, *, per_char: float = 0.01) -> float:
    """``per_char`` times the number of characters: raw length, the classic gameable reward."""
    return per_char * len(response[:5000])


EXTRA_REWARDS: dict[str, Callable[..., float]] = {
    "letter_share": letter_share,
    "char_length": char_length,
}
EXTRA_PARAMS: dict[str, dict[str, tuple[Any, str]]] = {
    "letter_share": {},
    "char_length": {"per_char": (0.01, "reward per character")},
}
EXTRA_HELP: dict[str, str] = {
    "letter_share": "share of the response's characters that are ASCII letters",
    "char_length": "per_char x number of characters (raw length)",
}


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


@dataclass(frozen=True)
class TrainSettings:
    """Everything that defines a training run. Frozen, hashable, JSON round-trip.

    Attributes:
        prompts: (P,) user prompts.
        group_size: G samples per prompt.
        max_new_tokens: response length cap.
        temperature: sampling temperature (> 0).
        top_p: nucleus mass.
        seed: run seed: the adapter's init and step k's sampling seed (seed * 1_000_003 + k).
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
    """

    prompts: tuple[str, ...]
    group_size: int = 4
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
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

    def __post_init__(self) -> None:
        if isinstance(self.prompts, str):
            raise ValueError("prompts must be a tuple of strings")
        object.__setattr__(self, "prompts", tuple(self.prompts))
        if isinstance(self.config, Mapping):
            object.__setattr__(self, "config", tuple(sorted(self.config.items())))
        else:
            object.__setattr__(
                self, "config", tuple(sorted((k, _freeze(v)) for k, v in self.config))
            )
        problems = []
        if not self.prompts or not all(isinstance(p, str) and p.strip() for p in self.prompts):
            problems.append("give at least one non-empty prompt")
        if not 1 <= self.steps <= 100_000:
            problems.append("steps must be at least 1")
        if not self.group_size >= 1:
            problems.append("group_size must be at least 1")
        if self.pods_m and not 2 <= self.pods_m < self.group_size:
            problems.append(f"pods_m must be 0 (off) or in 2..{self.group_size - 1} (below G)")
        if self.beta_mode not in BETA_MODES:
            problems.append(f"beta_mode must be one of {BETA_MODES}")
        if self.beta_mode == "adaptive" and self.framework == "trl":
            problems.append("TRL has no adaptive KL controller (removed in PR #2174)")
        if not (math.isfinite(self.beta) and self.beta >= 0):
            problems.append("beta must be >= 0")
        if self.beta_mode == "adaptive" and not (self.target_kl > 0 and self.horizon > 0):
            problems.append("the adaptive controller needs target_kl > 0 and horizon > 0")
        if not (math.isfinite(self.lr) and self.lr > 0):
            problems.append("lr must be > 0")
        if not self.temperature > 0:
            problems.append("training samples need temperature > 0")
        if self.sample_every < 1:
            problems.append("sample_every must be >= 1")
        if self.ppo_epochs < 1:
            problems.append("ppo_epochs must be >= 1")
        if problems:
            raise ValueError("invalid TrainSettings: " + "; ".join(problems))
        pipeline.resolve_config(self.framework, self.dialect_config())  # raises on a bad key

    def dialect_config(self, beta: float | None = None) -> dict[str, Any]:
        """The dialect config of one step: ``config`` plus beta and the controller keys.

        Args:
            beta: this step's KL coefficient (None: the initial ``beta``).

        Returns:
            A new dict of the framework's own keys.
        """
        cfg = dict(self.config)
        value = self.beta if beta is None else beta
        fw = self.framework
        cfg[_BETA_KEY[fw]] = value
        adaptive = self.beta_mode == "adaptive"
        if fw == "roll":
            cfg["add_token_level_kl"] = cfg.get("add_token_level_kl", True)
            cfg["target_kl"] = self.target_kl if adaptive else None
            cfg["kl_horizon"] = self.horizon
        elif fw == "verl":
            cfg["use_kl_in_reward"] = cfg.get("use_kl_in_reward", True)
            cfg["kl_ctrl_type"] = "adaptive" if adaptive else "fixed"
            cfg["target_kl"] = self.target_kl
            cfg["horizon"] = self.horizon
        elif fw == "openrlhf":
            cfg["target"] = self.target_kl if adaptive else None
            cfg["horizon"] = self.horizon
        return cfg

    @property
    def kl_estimator(self) -> str:
        """Canonical name (k1/abs/k2/k3) of the dialect's in-reward (or TRL loss) estimator."""
        resolved = pipeline.resolve_config(self.framework, self.dialect_config())
        key = _KL_EST_KEY.get(self.framework)
        return "k3" if key is None else _KL_CANON[resolved[key]]

    @property
    def estimator(self) -> str:
        """The advantage estimator's value in the dialect's config."""
        resolved = pipeline.resolve_config(self.framework, dict(self.config))
        return str(resolved[pipeline.ESTIMATOR_KEY[self.framework]])

    def sampling_seed(self, step: int) -> int:
        """Seed of step ``step``'s sampling."""
        return (self.seed * 1_000_003 + step) % (2**62)

    def to_json(self) -> dict:
        """Plain JSON form (lists, dicts, numbers, strings)."""
        out = asdict(self)
        out["prompts"] = list(self.prompts)
        out["reward"] = self.reward.to_json()
        out["config"] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.config}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainSettings:
        """Inverse of ``to_json``; unknown keys are ignored, missing ones take defaults."""
        known = set(cls.__dataclass_fields__)
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["prompts"] = tuple(data["prompts"])
        if "reward" in data:
            kwargs["reward"] = RewardChoice.from_json(data["reward"])
        if "config" in data:
            kwargs["config"] = tuple(sorted((k, _freeze(v)) for k, v in data["config"].items()))
        return cls(**kwargs)

    def describe(self) -> str:
        """One line: framework, estimator, beta, reward, lr (for captions)."""
        beta = (
            f"adaptive beta from {self.beta:g} "
            f"(target {self.target_kl:g}, horizon {self.horizon:g})"
            if self.beta_mode == "adaptive"
            else f"beta {self.beta:g}"
        )
        return (
            f"{self.framework} / {self.estimator}, {beta}, reward {self.reward.label()}, "
            f"lr {self.lr:g}, LoRA r{self.lora_rank}, {len(self.prompts)} prompts x "
            f"{self.group_size} x {self.max_new_tokens} tokens"
        )


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
        return Rollout(
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
            meta=(("policy_mode", "trained"),),
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


# ---------------------------------------------------------------------------------------------
# One step


def _seq_mean(x: Tensor, mask: Tensor) -> float:
    """Mean over samples of each sample's token mean (empty rows count 0)."""
    if x.shape[0] == 0:
        return 0.0
    return float(masked_mean(x.double(), mask.double(), dim=-1).mean())


def step_metrics(
    settings: TrainSettings,
    rollout: Rollout,
    scores: Tensor,
    trace: Trace,
    update_metrics: Mapping[str, Any],
) -> dict:
    """The metric dict of one step (see the module docstring).

    Args:
        settings: the run's settings.
        rollout: the step's samples (B rows).
        scores: (B,) raw rewards.
        trace: the pipeline's trace of this step.
        update_metrics: numbers the update reported (clip_frac, loss, grad_norm, ...).

    Returns:
        Plain-number dict.
    """
    mask = rollout.response_mask.double()
    valid = mask.bool()
    P = len(rollout.prompts)
    gids = rollout.group_ids
    per_prompt = [float(scores[gids == p].mean()) for p in range(P)]
    spread = [
        float(scores[gids == p].max() - scores[gids == p].min()) if bool((gids == p).any()) else 0
        for p in range(P)
    ]
    est = settings.kl_estimator
    # the trace's KL is the dialect's own estimator with its clamps: what its controller saw
    kl_est = trace.kl.double()
    adv = trace.advantages[valid].double()
    upd = {k: float(v) for k, v in update_metrics.items() if isinstance(v, int | float)}
    return {
        "reward_mean": float(scores.mean()),
        "reward_std": float(scores.std(unbiased=False)) if scores.numel() > 1 else 0.0,
        "reward_per_prompt": [round(v, 6) for v in per_prompt],
        "kl_exact": _seq_mean(rollout.exact_kl, mask),
        "kl_est": _seq_mean(kl_est, mask),
        "kl_estimator": est,
        "beta": float(trace.kl_coef),
        "next_beta": float(trace.next_kl_coef),
        "entropy": float(rollout.entropy.double()[valid].mean()) if bool(valid.any()) else 0.0,
        "response_length": float(mask.sum(-1).mean()),
        "eos_share": sum(f == "eos" for f in rollout.finish_reasons) / len(rollout.finish_reasons),
        "clip_frac": upd.get("clip_frac"),
        "zero_spread_share": sum(s <= 1e-12 for s in spread) / max(P, 1),
        "adv_std": float(adv.std(unbiased=False)) if adv.numel() > 1 else 0.0,
        "adv_abs_mean": float(adv.abs().mean()) if adv.numel() else 0.0,
        "loss": upd.get("loss"),
        "grad_norm": upd.get("grad_norm"),
        "update": upd,
    }


def _round_metrics(metrics: dict) -> dict:
    def rnd(v: Any) -> Any:
        if isinstance(v, float):
            return float(f"{v:.6g}") if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: rnd(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rnd(x) for x in v]
        return v

    return {k: rnd(v) for k, v in metrics.items()}


_CLIP_KEYS = {
    "roll": ("pg_clip", "pg_clip_low", "pg_clip_high"),
    "verl": ("clip_ratio", "clip_ratio_low", "clip_ratio_high"),
    "openrlhf": ("eps_clip",),
    "trl": ("epsilon",),
}


def loss_config(settings: TrainSettings, beta: float) -> dict[str, Any]:
    """The dialect keys the loss reads (``core.pipeline.losses``) for one update.

    The step's dialect config (beta included: TRL's loss KL, OpenRLHF's KL loss when
    ``use_loss``) plus the clip range ``clip_eps`` under the framework's own key(s) (unless the
    config sets them); every other loss key keeps the framework's shipped default.
    """
    cfg = settings.dialect_config(beta)
    for key in _CLIP_KEYS[settings.framework]:
        cfg.setdefault(key, settings.clip_eps)
    return cfg


class Trainer:
    """The training state of one user: settings, the LoRA policy, beta, the step counter.

    Not thread-safe by itself; ``TrainRunner`` drives it from one thread. Model use goes through
    ``lm.sampling.sample`` and ``lm.update.update_step``, each holding ``bundle.lock`` for its own
    call only.
    """

    def __init__(self, bundle: Any, settings: TrainSettings) -> None:
        from roll_viz.lm.update import LoraPolicy

        self.bundle = bundle
        self.settings = settings
        self.policy = LoraPolicy(
            bundle, rank=settings.lora_rank, alpha=settings.lora_alpha, seed=settings.seed
        )
        self.beta = float(settings.beta)
        self.running = None
        self.step = 0

    def close(self) -> None:
        """Remove the adapter from the shared model (idempotent)."""
        self.policy.close()

    def _update(self, rollout: Rollout, trace: Trace) -> dict:
        """One ``lm.update.update_step`` on the trace's advantages; its numbers as a flat dict."""
        from roll_viz.lm.update import UpdateConfig, update_step

        s = self.settings
        cfg = UpdateConfig(
            lr=s.lr,
            epochs=s.ppo_epochs,
            minibatches=min(s.minibatches, rollout.token_ids.shape[0]),
            lora_rank=s.lora_rank,
            lora_alpha=s.lora_alpha,
            seed=s.seed,
        )
        result = update_step(
            self.policy,
            rollout,
            trace.advantages.float(),
            framework=s.framework,
            loss_config=loss_config(s, self.beta),
            cfg=cfg,
        )
        last = result.epochs[-1]
        clip = [
            e.clip_fractions.get("clipped_high", 0.0) + e.clip_fractions.get("clipped_low", 0.0)
            for e in result.epochs
        ]
        dual = [e.clip_fractions.get("dual_clipped", 0.0) for e in result.epochs]
        out: dict[str, float] = {
            "loss": last.terms.get("total", math.nan),
            "grad_norm": result.grad_norm,
            "clip_frac": sum(clip) / len(clip),
            "dual_clip_frac": sum(dual) / len(dual),
            "ratio_mean": last.ratio_mean,
            "ratio_min": last.ratio_min,
            "ratio_max": last.ratio_max,
            "delta_abs_mean": float(
                result.delta.abs().sum() / result.response_mask.sum().clamp_min(1)
            ),
        }
        for key, value in last.terms.items():
            out[f"term_{key}"] = value
        for key, value in last.metrics.items():
            out[key] = value
        for key, value in result.seconds.items():
            out[f"seconds_{key}"] = value
        return out

    def run_step(self, keep_samples: bool = True) -> StepRecord:
        """Do one sample -> reward -> KL -> advantages -> update step and return its record."""
        from roll_viz.lm.sampling import SamplingConfig, sample

        s = self.settings
        t0 = time.perf_counter()
        cfg = SamplingConfig(
            prompts=s.prompts,
            group_size=s.group_size,
            temperature=s.temperature,
            top_p=s.top_p,
            max_new_tokens=s.max_new_tokens,
            seed=s.sampling_seed(self.step),
            greedy=False,
            topk=1,
            feature_dim=1,
        )
        rollout = sample(self.bundle, cfg, source=self.policy)
        t1 = time.perf_counter()
        prompts = [rollout.prompts[int(g)] for g in rollout.group_ids]
        scores = s.reward.score(prompts, rollout.responses, step=self.step)
        pods_stats = {}
        if s.pods_m:  # PODS: keep the m of n rollouts per prompt with the largest reward variance
            groups = scores.view(len(rollout.prompts), s.group_size)  # rows of a prompt contiguous
            kept = max_variance_subset(groups, s.pods_m)  # (P, m) indices into each group
            rows = (kept + s.group_size * torch.arange(groups.shape[0])[:, None]).flatten()
            pods_stats = {
                "pods_std_all": float(groups.std(dim=1).mean()),
                "pods_std_kept": float(torch.gather(groups, 1, kept).std(dim=1).mean()),
            }
            rollout, scores = select_rows(rollout, rows), scores[rows]
        t2 = time.perf_counter()
        batch = batch_from_rollout(rollout, scores, values=torch.zeros_like(rollout.response_mask))
        trace = pipeline.run(batch, s.framework, s.dialect_config(self.beta), self.running)
        t3 = time.perf_counter()
        upd = self._update(rollout, trace)
        t4 = time.perf_counter()
        metrics = step_metrics(s, rollout, scores, trace, upd)
        metrics.update(pods_stats)
        metrics["seconds"] = {
            "sample": t1 - t0,
            "score": t2 - t1,
            "advantage": t3 - t2,
            "update": t4 - t3,
            "total": t4 - t0,
        }
        samples = (
            StepSamples.from_rollout(rollout, scores, trace.advantages) if keep_samples else None
        )
        record = StepRecord(step=self.step, metrics=_round_metrics(metrics), samples=samples)
        self.running = trace.running
        if s.beta_mode == "adaptive":
            self.beta = float(trace.next_kl_coef)
        self.step += 1
        return record


# ---------------------------------------------------------------------------------------------
# Background runner (one per user session)

RUNNER_STATES = ("idle", "running", "paused", "stopped", "done", "error")


class TrainRunner:
    """Runs a ``Trainer`` in a background thread: start, pause, resume, stop, reset.

    Every public method is thread-safe and returns at once. The thread checks for pause and stop
    between steps (a step in progress finishes first). History is bounded: every step's metrics
    are kept; full samples for step 0, every ``settings.sample_every``-th step, the latest step
    and at most ``MAX_HISTORY_SAMPLES`` others.

    Attributes:
        settings: the run's settings.
        status: one of RUNNER_STATES.
        error: the message of the error that stopped the run ("" when none).
    """

    def __init__(
        self,
        bundle: Any,
        settings: TrainSettings,
        on_step: Callable[[StepRecord], None] | None = None,
        trainer_factory: Callable[[Any, TrainSettings], Trainer] | None = None,
    ) -> None:
        self.bundle = bundle
        self.settings = settings
        self.on_step = on_step
        self._factory = trainer_factory or Trainer
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._trainer: Trainer | None = None
        self._records: list[StepRecord] = []
        self._paused = False
        self._parked = False  # the thread is waiting in a pause (no step in progress)
        self._stop = False
        self._generation = 0
        self.status = "idle"
        self.error = ""
        self.started_at: float | None = None

    # -- control ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or continue after stop/done) the run in a background thread; no-op if running."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._paused = False
                self._wake.notify_all()
                return
            if self.status == "error":
                return
            if self.steps_done >= self.settings.steps:
                self.status = "done"
                return
            self._stop, self._paused = False, False
            self.status = "running"
            self.started_at = time.time()
            self._thread = threading.Thread(
                target=self._loop, args=(self._generation,), name="roll-viz-train", daemon=True
            )
            self._thread.start()

    def pause(self) -> None:
        """Pause after the current step."""
        with self._lock:
            if self.status == "running":
                self._paused = True
                self.status = "paused"

    def resume(self) -> None:
        """Continue a paused run (starts a stopped one again)."""
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive()
            if alive:
                self._paused = False
                self.status = "running"
                self._wake.notify_all()
                return
        self.start()

    def stop(self) -> None:
        """Stop after the current step (the steps done are kept; ``start`` continues)."""
        with self._lock:
            self._stop = True
            self._paused = False
            self._wake.notify_all()
            if self.status in ("running", "paused"):
                self.status = "stopped"

    def reset(self, settings: TrainSettings | None = None) -> None:
        """Stop, forget every step and the trained policy; optionally switch settings."""
        self.stop()
        self.join(timeout=None)
        with self._lock:
            self._generation += 1
            trainer, self._trainer = self._trainer, None
        if trainer is not None:
            trainer.close()
        with self._lock:
            self._records = []
            self.status, self.error = "idle", ""
            if settings is not None:
                self.settings = settings

    def close(self) -> None:
        """Stop and free the trained adapter (the runner can still show its records)."""
        self.stop()
        self.join(timeout=None)
        trainer, self._trainer = self._trainer, None
        if trainer is not None:
            trainer.close()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (e.g. after stop or when the run completes)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def wait_steps(self, n: int, timeout: float = 60.0) -> bool:
        """Block until at least ``n`` steps are done or the run ends; True if reached."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._records) < n and self.status in ("running",):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            return len(self._records) >= n

    def wait_paused(self, timeout: float = 60.0) -> bool:
        """After ``pause``: block until the step in progress has finished; True once parked."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._paused and not self._parked and self.alive:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            return self._parked

    # -- reading ------------------------------------------------------------------------------
    @property
    def steps_done(self) -> int:
        """Number of finished steps."""
        return len(self._records)

    @property
    def alive(self) -> bool:
        """True while the background thread exists (running or paused)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def trainer(self) -> Trainer | None:
        """The Trainer (holds the trained policy) once the run has started."""
        return self._trainer

    def records(self) -> list[StepRecord]:
        """A copy of the step records so far."""
        with self._lock:
            return list(self._records)

    def run(self, label: str = "") -> TrainRun:
        """The run so far as a TrainRun (a snapshot)."""
        with self._lock:
            status = "running" if self.status == "running" else self.status
            return TrainRun(
                settings=self.settings,
                steps=tuple(self._records),
                model=getattr(self.bundle, "name", ""),
                label=label or self.settings.label,
                status=status,
                message=self.error,
            )

    # -- the thread -----------------------------------------------------------------------------
    def _keep_samples(self, step: int) -> bool:
        s = self.settings
        return step == 0 or step % s.sample_every == 0 or step == s.steps - 1

    def _loop(self, generation: int) -> None:
        try:
            if self._trainer is None:
                trainer = self._factory(self.bundle, self.settings)
                with self._lock:
                    if generation != self._generation:
                        return
                    self._trainer = trainer
            while True:
                with self._lock:
                    while self._paused and not self._stop:
                        self._parked = True
                        self._wake.notify_all()
                        self._wake.wait()
                    self._parked = False
                    if self._stop or generation != self._generation:
                        return
                    if len(self._records) >= self.settings.steps:
                        self.status = "done"
                        self._wake.notify_all()
                        return
                record = self._trainer.run_step(keep_samples=True)
                with self._lock:
                    if generation != self._generation:
                        return
                    self._append(record)
                    self._wake.notify_all()
                if self.on_step is not None:
                    self.on_step(record)
        except Exception as err:  # the run stops with a message; the steps done are kept
            with self._lock:
                if generation == self._generation:
                    self.status = "error"
                    self.error = f"{type(err).__name__}: {err}"
                    self._wake.notify_all()

    def _append(self, record: StepRecord) -> None:
        """Append a record, keeping memory bounded (caller holds the lock)."""
        if self._records:
            last = self._records[-1]
            if last.samples is not None and not self._keep_samples(last.step):
                self._records[-1] = last.without_samples()
        self._records.append(record)
        kept = [r for r in self._records if r.samples is not None and r.step != 0]
        excess = len(kept) - MAX_HISTORY_SAMPLES
        for r in kept[: max(excess, 0)]:
            self._records[r.step] = r.without_samples()
