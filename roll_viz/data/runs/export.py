"""Write the app's batches and imported steps as UNIPO JSONL, RL Logging Board JSONL or compute.

Two sources, one neutral per-sample form (``Sample`` dicts of plain lists over valid tokens):

- the app's own batch: a ``Rollout``, its (B,) raw scores and the pipeline ``Trace``
  (``samples_from_trace``);
- an imported step: a ``RunStep`` (``samples_from_step``).

Targets:

- **UNIPO JSONL** (``unipo_lines``): a header line then one ``{"type": "step"}`` line per step.
  ``reward`` = the raw score; ``advantage`` = the advantage of the first response token (equal to
  every token's for the outcome estimators); tokens carry ``ids``, ``strings``, ``log_probs``,
  ``ref_log_probs``, ``advantages``, ``rewards`` (token rewards), ``token_kl`` (the dialect's
  estimator), ``returns``. UNIPO requires ``metrics.policy_objective``: roll-viz writes the
  surrogate objective at ratio 1, i.e. the token-mean of the advantages (before any update),
  and null when no advantages are known;
- **RL Logging Board JSONL** (``rllb_lines``): one line per sample in ROLL's writer shape:
  ``reward`` = the response-level reward after the framework's processing (Trace.rewards; the
  file's score for an imported step), ``token_rewards`` and ``values`` both = the token rewards
  (ROLL writes ``token_level_rewards`` twice), ``new_response_mask`` of ones (valid positions
  only, so nothing is stripped);
- **compute** (``compute_case``): the calculator's own input ``{"batch": {...}, "config":
  {...}}`` (``roll_viz.cli.calculator``), which reproduces the Trace when run.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from roll_viz.core.records import Rollout, Trace
from roll_viz.data.runs.run_records import RunStep

Sample = dict[str, Any]

# ---------------------------------------------------------------------------------------------
# CSV cells a spreadsheet will not run

#: what a spreadsheet reads as the start of a formula (OWASP "CSV injection")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def neutral_cell(value: Any) -> Any:
    """A text cell starting with = + - @ tab or CR gets a leading ``'``; anything else as is.

    Numbers stay numbers (a negative number is not a formula), and so does text that is a plain
    number ("-2.5"): only text a spreadsheet would evaluate is changed.
    """
    text = isinstance(value, str) and value.startswith(FORMULA_START)
    if text and not _PLAIN_NUMBER.match(value):
        return "'" + value
    return value


def safe_csv(df: pd.DataFrame, index: bool = False) -> str:
    """``df.to_csv`` with every text cell and column name neutralised (``neutral_cell``)."""
    out = df.copy(deep=False)
    out.columns = [neutral_cell(str(c)) for c in out.columns]
    for name in out.columns:
        column = out[name]
        if column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
            out[name] = column.map(neutral_cell)
    if index:
        out.index = out.index.map(neutral_cell)
    # pandas leaves a lone CR unquoted (it splits the row in a reader): quote every text cell then
    lone_cr = any(
        out[name].map(lambda v: isinstance(v, str) and "\r" in v).any()
        for name in out.columns
        if out[name].dtype == object or pd.api.types.is_string_dtype(out[name].dtype)
    )
    return out.to_csv(index=index, quoting=csv.QUOTE_NONNUMERIC if lone_cr else csv.QUOTE_MINIMAL)


def _row(x: Tensor | None, b: int, n: int) -> list[float] | None:
    if x is None:
        return None
    return [v + 0.0 for v in x[b, :n].to(torch.float64).tolist()]


def samples_from_trace(
    rollout: Rollout, scores: Tensor, trace: Trace | None = None
) -> list[Sample]:
    """Per-sample dicts of the app's batch (valid positions only).

    Args:
        rollout: the sampled batch (B rows, T positions).
        scores: (B,) raw scores.
        trace: the pipeline Trace of this batch, or None (then no rewards/advantages/KL).

    Returns:
        B dicts: prompt, group, response, score, reward, advantage, tokens, token_ids,
        logprobs, ref_logprobs, token_rewards, token_advantages, token_kl, returns, entropy.
    """
    lengths = rollout.response_mask.sum(dim=1).long().tolist()
    out = []
    for b, n in enumerate(lengths):
        g = int(rollout.group_ids[b])
        adv = _row(trace.advantages, b, n) if trace is not None else None
        out.append(
            {
                "prompt": rollout.prompts[g],
                "group": g,
                "response": rollout.responses[b],
                "score": float(scores[b]),
                "reward": float(trace.rewards[b]) if trace is not None else None,
                "advantage": (adv[0] if adv else 0.0) if adv is not None else None,
                "tokens": list(rollout.tokens[b][:n]),
                "token_ids": rollout.token_ids[b, :n].tolist(),
                "logprobs": _row(rollout.logprobs, b, n),
                "ref_logprobs": _row(rollout.ref_logprobs, b, n),
                "token_rewards": _row(trace.token_rewards, b, n) if trace is not None else None,
                "token_advantages": adv,
                "token_kl": _row(trace.kl, b, n) if trace is not None else None,
                "returns": _row(trace.returns, b, n) if trace is not None else None,
                "entropy": _row(rollout.entropy, b, n),
            }
        )
    return out


def samples_from_step(step: RunStep) -> list[Sample]:
    """Per-sample dicts of an imported step (what the file had; None for the rest)."""
    lengths = step.response_mask.sum(dim=1).long().tolist()
    out = []
    for b, n in enumerate(lengths):
        g = int(step.group_ids[b])
        token_adv = _row(step.token_advantages, b, n) if step.has_tokens else None
        if step.advantages is not None:
            advantage = float(step.advantages[b])
        elif token_adv:
            advantage = token_adv[0]
        else:
            advantage = None
        out.append(
            {
                "prompt": step.prompts[g],
                "group": step.group_labels[g],
                "response": step.responses[b],
                "score": float(step.scores[b]),
                "reward": float(step.scores[b]),
                "advantage": advantage,
                "tokens": list(step.tokens[b]) if step.tokens is not None else None,
                "token_ids": step.token_ids[b, :n].tolist() if step.token_ids is not None else None,
                "logprobs": _row(step.logprobs, b, n) if step.has_tokens else None,
                "ref_logprobs": _row(step.ref_logprobs, b, n) if step.has_tokens else None,
                "token_rewards": _row(step.token_rewards, b, n) if step.has_tokens else None,
                "token_advantages": token_adv,
                "token_kl": None,
                "returns": None,
                "entropy": _row(step.entropy, b, n) if step.has_tokens else None,
            }
        )
    return out


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def _objective(samples: list[Sample]) -> float | None:
    """Token-mean of the advantages (the surrogate at ratio 1), or the sequence mean."""
    tokens = [v for s in samples for v in (s["token_advantages"] or [])]
    if tokens:
        return math.fsum(tokens) / len(tokens)
    seq = [s["advantage"] for s in samples if s["advantage"] is not None]
    return math.fsum(seq) / len(seq) if seq else None


def unipo_step(step: int, samples: list[Sample], metrics: Mapping[str, float] = ()) -> dict:
    """One UNIPO ``{"type": "step"}`` object."""
    groups: dict[Any, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s["group"], []).append(i)
    prompts = []
    for p, (_, rows) in enumerate(groups.items()):
        responses = []
        for r, i in enumerate(rows):
            s = samples[i]
            response: dict[str, Any] = {"id": f"step{step}_p{p}_sample{r}", "reward": s["score"]}
            if s["advantage"] is not None:
                response["advantage"] = s["advantage"]
            response["response_text"] = s["response"]
            if s["token_ids"] is not None:
                response["response_length"] = len(s["token_ids"])
                tokens: dict[str, Any] = {"ids": s["token_ids"]}
                for key, name in (
                    ("tokens", "strings"),
                    ("logprobs", "log_probs"),
                    ("ref_logprobs", "ref_log_probs"),
                    ("token_advantages", "advantages"),
                    ("token_rewards", "rewards"),
                    ("token_kl", "token_kl"),
                    ("returns", "returns"),
                ):
                    if s[key] is not None:
                        tokens[name] = s[key]
                response["tokens"] = tokens
            responses.append(response)
        prompts.append({"prompt": samples[rows[0]]["prompt"], "responses": responses})
    scores = [s["score"] for s in samples]
    merged = {
        "policy_objective": _objective(samples),
        "reward": math.fsum(scores) / len(scores) if scores else None,
        **dict(metrics),
    }
    return {
        "type": "step",
        "step": step,
        "is_first_step_after_rollout_phase": True,
        "metrics": merged,
        "prompts": prompts,
        "batch": {
            "promptsInBatch": len(prompts),
            "responsesPerPrompt": max((len(p["responses"]) for p in prompts), default=0),
            "rolloutCollectedAtStep": step,
        },
    }


def unipo_lines(
    steps: list[tuple[int, list[Sample], Mapping[str, float]]], header: Mapping[str, Any]
) -> Iterator[str]:
    """UNIPO JSONL: a header line, then one line per ``(step, samples, metrics)``."""
    yield _dumps({"type": "header", "totalSteps": len(steps), **dict(header)})
    for step, samples, metrics in steps:
        yield _dumps(unipo_step(step, samples, metrics))


def rllb_lines(step: int, samples: list[Sample]) -> Iterator[str]:
    """RL Logging Board JSONL lines of one step (ROLL's writer shape; see the module docstring)."""
    for s in samples:
        line: dict[str, Any] = {"step": step, "prompt": s["prompt"], "response": s["response"]}
        if s["tokens"] is not None:
            line["response_tokens"] = s["tokens"]
        for key in ("logprobs", "ref_logprobs"):
            if s[key] is not None:
                line[key] = s[key]
        if s["entropy"] is not None:
            line["old_log_probs2_entropy"] = s["entropy"]
        n = len(s["tokens"]) if s["tokens"] is not None else None
        if n is not None:
            line["new_response_mask"] = [1] * n
        if s["token_rewards"] is not None:
            line["token_rewards"] = s["token_rewards"]
            line["values"] = s["token_rewards"]
        line["reward"] = s["reward"] if s["reward"] is not None else s["score"]
        yield _dumps(line)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def compute_case(
    scores: Tensor,
    response_mask: Tensor,
    group_labels: list,
    framework: str = "roll",
    config: Mapping[str, Any] | None = None,
    logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
) -> dict:
    """The calculator's input ``{"batch": {...}, "config": {"framework": ..., ...}}``.

    Args:
        scores: (B,) raw scores.
        response_mask: (B, T) 0/1.
        group_labels: (B,) prompt id of each sample (strings or ints).
        framework: dialect name.
        config: that framework's keys (None values are dropped: the calculator fills defaults).
        logprobs: (B, T) policy log-probs, or None (written only with ref_logprobs).
        ref_logprobs: (B, T) reference log-probs, or None.
    """
    batch: dict[str, Any] = {
        "scores": [float(x) for x in scores.tolist()],
        "response_mask": [[int(v) for v in row] for row in response_mask.tolist()],
        "group": list(group_labels),
    }
    if logprobs is not None and ref_logprobs is not None:
        mask = response_mask.to(torch.float64)
        batch["logprobs"] = (logprobs.to(torch.float64) * mask + 0.0).tolist()
        batch["ref_logprobs"] = (ref_logprobs.to(torch.float64) * mask + 0.0).tolist()
    cfg = {k: _plain(v) for k, v in dict(config or {}).items() if v is not None}
    return {"batch": batch, "config": {"framework": framework, **cfg}}


def trace_to_compute(rollout: Rollout, scores: Tensor, trace: Trace) -> dict:
    """The app's batch as a calculator case that reproduces ``trace`` (same dialect, config)."""
    return compute_case(
        scores,
        rollout.response_mask,
        [int(g) for g in rollout.group_ids.tolist()],
        trace.framework,
        dict(trace.config),
        rollout.logprobs,
        rollout.ref_logprobs,
    )


def step_to_compute(
    step: RunStep, framework: str = "roll", config: Mapping[str, Any] | None = None
) -> dict:
    """An imported step as a calculator case (log-probs when the file has both)."""
    labels = [step.group_labels[int(g)] for g in step.group_ids.tolist()]
    return compute_case(
        step.scores,
        step.response_mask,
        labels,
        framework,
        config,
        step.logprobs,
        step.ref_logprobs,
    )


def step_to_unipo(step: RunStep, header: Mapping[str, Any] | None = None) -> list[str]:
    """An imported step as UNIPO JSONL lines (header + one step line)."""
    head = {"algorithm": "unknown", "roll_viz_source": step.source_format, **dict(header or {})}
    return list(unipo_lines([(step.step, samples_from_step(step), dict(step.metrics))], head))


def step_to_rllb(step: RunStep) -> list[str]:
    """An imported step as RL Logging Board JSONL lines."""
    return list(rllb_lines(step.step, samples_from_step(step)))


def trace_to_unipo(
    rollout: Rollout, scores: Tensor, trace: Trace, step: int = 0, header: Mapping | None = None
) -> list[str]:
    """The app's batch as UNIPO JSONL lines (header + one step line)."""
    model = str(rollout.meta.model or "")
    head = {
        "algorithm": trace.framework,
        "model_name": model,
        "reference_model_name": model,
        "hparams": {k: _plain(v) for k, v in trace.config},
        **dict(header or {}),
    }
    return list(unipo_lines([(step, samples_from_trace(rollout, scores, trace), {})], head))


def trace_to_rllb(rollout: Rollout, scores: Tensor, trace: Trace, step: int = 0) -> list[str]:
    """The app's batch as RL Logging Board JSONL lines."""
    return list(rllb_lines(step, samples_from_trace(rollout, scores, trace)))
