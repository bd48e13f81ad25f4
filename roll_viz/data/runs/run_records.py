"""The records of an imported run: one sample as read (``Row``), one step's scalars, one step.

A reader turns its files into ``Row`` objects, one per sample, in file order. The scan
(``runs.scan``) reduces rows to per-step ``StepSummary`` scalars (token arrays are dropped as
soon as a row's length and KL are known), and ``load_step`` reads one step again and builds a
``RunStep`` with tensors, which converts to the calculator's ``Batch`` and a token ``Rollout``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from roll_viz.core.records import Batch, Rollout, RolloutMeta, build_rollout

# token series a row may carry, by roll-viz name
TOKEN_SERIES = (
    "logprobs",
    "ref_logprobs",
    "token_rewards",
    "token_advantages",
    "entropy",
    "exact_kl",
    "values",
)


@dataclass
class Row:
    """One sample as a reader normalises it (mutable, short-lived).

    Attributes:
        step: training step it belongs to.
        prompt: prompt text (as the file has it).
        response: response text.
        score: response-level reward (what the file calls score/reward; see ``score_kind``).
        group: explicit group id (uid prefix, TRL run of equal prompts) or None to group by
            identical prompt text.
        advantage: the framework's sequence-level advantage, or None.
        columns: extra per-sample numbers (TRL reward functions, verl reward_extra_info, ...).
        tokens: token display strings of the valid positions, or None.
        token_ids: token ids of the valid positions, or None.
        series: token series over the valid positions (keys from TOKEN_SERIES).
        metrics: the framework's own scalar metrics for the step (one row per entry has them).
        empty: a placeholder for a step that has metrics but no samples (never a sample).
        file: source file; line: 1-based line (or row + 1); offset: byte offset of the line.
    """

    step: int
    prompt: str
    response: str
    score: float
    group: str | None = None
    advantage: float | None = None
    columns: dict[str, float] = field(default_factory=dict)
    tokens: list[str] | None = None
    token_ids: list[int] | None = None
    series: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, float] | None = None
    empty: bool = False
    file: str = ""
    line: int = 0
    offset: int = -1

    @property
    def n_tokens(self) -> int | None:
        """Valid token positions, when the row has token data."""
        if self.tokens is not None:
            return len(self.tokens)
        if self.token_ids is not None:
            return len(self.token_ids)
        for values in self.series.values():
            return len(values)
        return None


@dataclass(frozen=True)
class StepSummary:
    """Per-sample scalars of one step, for history across steps (no token arrays).

    Attributes:
        step: training step.
        scores: (B,) float64 response-level reward as the file gives it.
        group_ids: (B,) long group index of each sample (first-seen order, rows in file order).
        group_labels: (P,) group ids (uid prefix, ``p<k>`` for text-grouped prompts, ...).
        prompts: (P,) prompt text of each group.
        lengths: (B,) float64 response length (tokens, or characters when the file has no tokens).
        length_unit: "tokens" or "characters".
        advantages: (B,) float64 the framework's sequence-level advantage, or None.
        kl_k1: (B,) float64 mean over valid tokens of logp - ref_logp, or None.
        kl_k3: (B,) float64 mean of exp(ref - logp) - (ref - logp) - 1, or None.
        columns: extra per-sample numbers as (name, (B,) tensor) pairs.
        metrics: the framework's own scalar metrics for the step, as (key, value) pairs.
    """

    step: int
    scores: Tensor
    group_ids: Tensor
    group_labels: tuple[str, ...]
    prompts: tuple[str, ...]
    lengths: Tensor
    length_unit: str
    advantages: Tensor | None = None
    kl_k1: Tensor | None = None
    kl_k3: Tensor | None = None
    columns: tuple[tuple[str, Tensor], ...] = ()
    metrics: tuple[tuple[str, float], ...] = ()

    @property
    def samples(self) -> int:
        """B."""
        return int(self.scores.numel())

    @property
    def num_prompts(self) -> int:
        """P."""
        return len(self.group_labels)


@dataclass(frozen=True)
class RunStep:
    """One step of an imported run, as tensors (rows of one prompt contiguous).

    When the file has no token data, ``response_mask`` is (B, 1) of ones: one slot per response,
    enough for the outcome-reward estimators (GRPO, RLOO, ...), and every token field is None.

    Attributes:
        step: training step.
        source_format: the reader's format name ("rllb", "trl", ...).
        prompts: (P,) prompt text of each group.
        group_labels: (P,) group ids as the file names them (or ``p<k>``).
        group_ids: (B,) long prompt index of each sample.
        responses: (B,) response texts (untrusted: escape before display).
        scores: (B,) float64 response-level reward as the file gives it (see ``score_kind``).
        score_kind: what ``scores`` is: "raw score", "normalized reward" (ROLL board), ...
        response_mask: (B, T) float64, 1.0 on valid tokens.
        lengths: (B,) long response length in ``length_unit``.
        length_unit: "tokens" or "characters".
        tokens: (B,) tuples of token strings of the valid positions, or None.
        token_ids: (B, T) long token ids (file ids, or ids local to this import), or None.
        vocab: id -> string for ``token_ids`` (empty when the file gives no strings).
        logprobs: (B, T) policy log-probs of the sampled tokens, or None.
        ref_logprobs: (B, T) reference log-probs, or None.
        token_rewards: (B, T) token-level rewards from the file, or None.
        token_advantages: (B, T) token-level advantages from the file, or None.
        entropy: (B, T) policy entropy per position, or None.
        exact_kl: (B, T) full-vocabulary KL(policy || ref) per position (roll-viz runs), or None.
        values: (B, T) critic values V(s_t) from the file, or None (ROLL's board ``values`` is a
            copy of the token rewards and is not read as values).
        advantages: (B,) the framework's sequence-level advantage, or None.
        columns: extra per-sample numbers as (name, (B,) tensor) pairs.
        reward_names: names in ``columns`` that were summed into ``scores`` (TRL).
        metrics: the framework's own metrics for this step, as (key, value) pairs.
        sources: (B,) (file, line) of each row.
        total_samples: samples of this step in the file (>= B when the token cap dropped prompts).
        total_prompts: prompts of this step in the file.
        notes: what was detected, what is missing, what a cap dropped.
    """

    step: int
    source_format: str
    prompts: tuple[str, ...]
    group_labels: tuple[str, ...]
    group_ids: Tensor
    responses: tuple[str, ...]
    scores: Tensor
    score_kind: str
    response_mask: Tensor
    lengths: Tensor
    length_unit: str
    tokens: tuple[tuple[str, ...], ...] | None = None
    token_ids: Tensor | None = None
    vocab: dict = field(default_factory=dict)
    logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None
    token_rewards: Tensor | None = None
    token_advantages: Tensor | None = None
    entropy: Tensor | None = None
    exact_kl: Tensor | None = None
    values: Tensor | None = None
    advantages: Tensor | None = None
    columns: tuple[tuple[str, Tensor], ...] = ()
    reward_names: tuple[str, ...] = ()
    metrics: tuple[tuple[str, float], ...] = ()
    sources: tuple[tuple[str, int], ...] = ()
    total_samples: int = 0
    total_prompts: int = 0
    notes: tuple[str, ...] = ()

    @property
    def has_tokens(self) -> bool:
        """Whether the step carries per-token data (strings or ids)."""
        return self.tokens is not None or self.token_ids is not None

    def column(self, name: str) -> Tensor:
        """A (B,) extra column by name (KeyError if absent)."""
        return dict(self.columns)[name]

    def to_batch(self) -> Batch:
        """The calculator's input (Batch): scores, mask, groups, log-probs, critic values.

        Log-probs go in only when both series are present; values only when the file has them.
        """
        both = self.logprobs is not None and self.ref_logprobs is not None
        return Batch(
            scores=self.scores,
            response_mask=self.response_mask,
            group_ids=self.group_ids,
            group_labels=self.group_labels,
            logprobs=self.logprobs if both else None,
            ref_logprobs=self.ref_logprobs if both else None,
            values=self.values,
        )

    def to_rollout(self) -> Rollout:
        """The step as a ``Rollout`` every page can show (needs tokens, logprobs, ref_logprobs).

        Fields the dumps never carry are filled so the record is well-formed and marked in
        ``meta``: ``exact_kl`` is the file's (roll-viz runs) or zeros (no framework dump has the
        full-vocabulary distribution),
        ``entropy`` is the file's entropy or zeros, top-k tensors have K = 0, finish reasons are
        "unknown". ``meta`` holds ``("source", format)``, ``("step", k)`` and
        ``("missing", "exact_kl,entropy,topk,...")`` so a page can hide what is not real.

        Raises:
            ValueError: the step has no token strings/ids, or lacks logprobs or ref_logprobs.
        """
        missing = [
            name
            for name, value in (
                ("tokens", self.tokens if self.tokens is not None else self.token_ids),
                ("logprobs", self.logprobs),
                ("ref_logprobs", self.ref_logprobs),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                f"step {self.step} ({self.source_format}) has no {', '.join(missing)}: "
                "it cannot be shown as a token-level Rollout (use to_batch)"
            )
        mask = self.response_mask.to(torch.float32)
        B, T = mask.shape
        zeros = torch.zeros(B, T)
        lacking = ["topk", "finish_reasons"]
        if self.exact_kl is None:
            lacking.insert(0, "exact_kl")
        if self.entropy is None:
            lacking.insert(1, "entropy")
        tokens = self.tokens
        if tokens is None:
            tokens = tuple(
                tuple(self.vocab.get(int(i), str(int(i))) for i in row[: int(n)].tolist())
                for row, n in zip(self.token_ids, mask.sum(dim=1).long(), strict=True)
            )
        token_ids = self.token_ids
        if token_ids is None:
            token_ids = torch.zeros(B, T, dtype=torch.long)
            lacking.append("token_ids")
        return build_rollout(
            prompts=self.prompts,
            group_ids=self.group_ids,
            responses=self.responses,
            token_ids=token_ids,
            tokens=tokens,
            response_mask=mask,
            logprobs=self.logprobs.to(torch.float32) * mask,
            ref_logprobs=self.ref_logprobs.to(torch.float32) * mask,
            exact_kl=zeros if self.exact_kl is None else self.exact_kl.to(torch.float32) * mask,
            entropy=zeros if self.entropy is None else self.entropy.to(torch.float32) * mask,
            topk_ids=torch.zeros(B, T, 0, dtype=torch.long),
            topk_logprobs=torch.zeros(B, T, 0),
            topk_ref_logprobs=torch.zeros(B, T, 0),
            finish_reasons=("unknown",) * B,
            vocab=dict(self.vocab),
            meta=RolloutMeta(missing=",".join(lacking), source=self.source_format, step=self.step),
        )
