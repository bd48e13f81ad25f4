"""The answer of every lesson gate, computed by the pipeline on the gate's frozen batch.

A gate (``roll_viz.data.lessons``) names a batch, settings and an answer expression. This module
builds that batch (an inline reward table, a committed preset scored by its reward, the class's
live batch handed in by the caller, or a recorded training run), runs
``roll_viz.core.pipeline.run`` in the gate's dialect, the first update step's loss
(``policy_loss`` at ratio 1) and the local-vs-global analysis, and evaluates the expression on
those numbers. Nothing revealed to the class is typed by hand.

An ``episodes:<set>`` batch (multi-turn transcripts) answers from ``lesson_episodes``: the
gate's mask rule and credit rule on a hand-built set.

What is simplified: an inline batch has no log-probs (its KL is 0, its loss uses log-probs 0);
a live batch is whatever the caller sampled (the page samples it with the gate's seed); a
recorded run answers from its per-step metrics only.

A fix gate ("fix this run") answers per choice: its expression is evaluated on each choice's
recorded run, with the collapsing run's numbers as ``base_<name>``; a choice whose value is not
0 fixes the run (``GateResult.outcomes``). Every outcome is a real recording.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor

from roll_viz import rewards as rewards_mod
from roll_viz.analysis import lesson_episodes
from roll_viz.analysis.local_global import local_vs_global
from roll_viz.analysis.sweep import subsample_groups
from roll_viz.core.pipeline import policy_loss, run
from roll_viz.core.records import Batch, Trace, batch_from_rollout
from roll_viz.data.lesson_expr import BASE_PREFIX, ExprError, evaluate, to_env_value
from roll_viz.data.lessons import (
    EPISODES_PREFIX,
    SETTING_G,
    Gate,
    Lesson,
    LessonError,
    dialect_config,
)
from roll_viz.data.presets import load_preset
from roll_viz.data.recorded_runs import load_recorded

#: |grad_coef| below this counts as no gradient
GRAD_ZERO = 1e-12


@dataclass(frozen=True)
class GateBatch:
    """The frozen batch of a gate.

    Attributes:
        batch: the calculator's input (None for a recorded run).
        prompts: (P,) prompt texts.
        responses: (B,) answer texts (labels for an inline batch).
        run: the recorded training run (recorded batches only).
    """

    batch: Batch | None
    prompts: tuple[str, ...]
    responses: tuple[str, ...]
    run: Any = None


@dataclass(frozen=True)
class Outcome:
    """One choice of a fix gate: the recorded run that shows its outcome, and the verdict.

    Attributes:
        choice: the option's index.
        label: the option as the phones showed it.
        run: the recorded run (``data.recorded_runs.RECORDED``).
        value: the answer expression on that run (the collapsing run's numbers as ``base_``).
        fixed: whether the change fixed the run (value not 0).
        env: the run's names (``run_env``): its curves for the figure.
    """

    choice: int
    label: str
    run: str
    value: float
    fixed: bool
    env: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class GateResult:
    """A gate's revealed answer.

    Attributes:
        gate: the gate.
        value: the expression's value on the pipeline's output.
        correct: index of the right option (choice and sign gates); None for a number gate.
        shown: the answer in words for the projector ("Answer 2 (6.5)", "-1.086").
        formula: LaTeX of the formula behind it, with the batch's numbers.
        env: the names the expression could read (plain floats and lists).
        source: the gate's batch (for the figure).
        trace: the pipeline's Trace (None for a recorded run).
        outcomes: a fix gate's choices with their recorded outcomes (empty for other gates).
    """

    gate: Gate
    value: float
    correct: int | None
    shown: str
    formula: str
    env: Mapping[str, Any] = field(repr=False)
    source: GateBatch = field(repr=False)
    trace: Trace | None = field(default=None, repr=False)
    outcomes: tuple[Outcome, ...] = field(default=(), repr=False)

    @property
    def right(self) -> tuple[int, ...]:
        """The right options: a fix gate's every fixing choice, else ``correct`` (if any)."""
        if self.outcomes:
            return tuple(o.choice for o in self.outcomes if o.fixed)
        return () if self.correct is None else (self.correct,)

    def is_right(self, answer: float | int | None) -> bool:
        """Whether one vote is right (an option index, or a number for a number gate)."""
        if answer is None:
            return False
        if self.outcomes:
            return int(answer) in self.right
        if self.correct is not None:
            return int(answer) == self.correct
        return abs(float(answer) - self.value) <= self.gate.tolerance + 1e-12


# ---------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------


def inline_batch(rewards: Sequence[Sequence[float]], lengths: Sequence[Sequence[int]] | None):
    """A Batch from a reward table: one list per prompt, each answer ``lengths`` tokens (or 1).

    Returns:
        GateBatch with float64 scores, a right-padded mask, no log-probs and a zero critic.
    """
    scores, ids, sizes = [], [], []
    for g, group in enumerate(rewards):
        for j, r in enumerate(group):
            scores.append(float(r))
            ids.append(g)
            sizes.append(int(lengths[g][j]) if lengths is not None else 1)
    width = max(sizes)
    mask = (torch.arange(width)[None, :] < torch.tensor(sizes)[:, None]).to(torch.float64)
    batch = Batch(
        scores=torch.tensor(scores, dtype=torch.float64),
        response_mask=mask,
        group_ids=torch.tensor(ids, dtype=torch.long),
        group_labels=tuple(range(len(rewards))),
        values=torch.zeros_like(mask),
    )
    prompts = tuple(f"prompt {g + 1}" for g in range(len(rewards)))
    counters = [0] * len(rewards)
    responses = []
    for g in ids:
        counters[g] += 1
        responses.append(f"answer {counters[g]} (reward {scores[len(responses)]:g})")
    return GateBatch(batch, prompts, tuple(responses))


@lru_cache(maxsize=8)
def preset_batch(name: str) -> GateBatch:
    """A committed preset's rollout scored by its own reward (zero critic, greedy baseline)."""
    _, spec, rollout = load_preset(name)
    return rollout_batch(rollout, spec)


def rollout_batch(rollout: Any, spec: Any) -> GateBatch:
    """A sampled rollout scored by ``spec`` (zero critic, greedy baseline): a gate's batch.

    A follow-up's fresh batch (sampled in class with a new seed) goes through here too, so it
    is scored exactly as the committed preset it stands in for.
    """
    scores = rewards_mod.score_rollout(rollout, spec)
    greedy = (
        rewards_mod.score_greedy(rollout, spec)
        if len(rollout.greedy_responses) == len(rollout.prompts)
        else None
    )
    batch = batch_from_rollout(
        rollout, scores, values=torch.zeros_like(rollout.response_mask), baseline_scores=greedy
    )
    return GateBatch(batch, tuple(rollout.prompts), tuple(rollout.responses))


def gate_batch(gate: Gate, live: GateBatch | None = None) -> GateBatch:
    """The gate's frozen batch (before its G is applied).

    Args:
        gate: the gate.
        live: the class's live batch, sampled by the caller with ``gate.seed`` (live gates only).

    Raises:
        LessonError: a live gate without a live batch (names the gate and field ``batch``).
    """
    if gate.batch == "inline":
        assert gate.rewards is not None  # the format guarantees it
        return inline_batch(gate.rewards, gate.lengths)
    if gate.batch == "live" or (gate.resample and live is not None):
        if live is None:
            raise LessonError(f"gate {gate.id!r}, field 'batch': needs the class's live batch")
        return live  # a follow-up's fresh batch stands in for its preset
    if gate.batch.startswith("recorded:"):
        train_run = load_recorded(gate.batch.removeprefix("recorded:"))
        return GateBatch(None, tuple(train_run.settings.sampling.prompts), (), run=train_run)
    return preset_batch(gate.batch)


# ---------------------------------------------------------------------------------------------
# The names an expression reads
# ---------------------------------------------------------------------------------------------


def _ragged(x: Tensor, mask: Tensor) -> list[list[float]]:
    lengths = mask.sum(dim=1).long().tolist()
    return [[float(v) for v in x[b, :n].tolist()] for b, n in enumerate(lengths)]


def _first(x: Tensor, mask: Tensor) -> list[float]:
    first = torch.argmax((mask > 0).to(torch.long), dim=1)
    return [float(v) for v in x.gather(1, first[:, None])[:, 0].tolist()]


def _masked_mean(x: Tensor, mask: Tensor) -> list[float]:
    n = mask.sum(dim=1).clamp(min=1)
    return [float(v) for v in ((x * mask).sum(dim=1) / n).tolist()]


def _finite_or_none(values: Tensor) -> list[float] | None:
    return None if not bool(torch.isfinite(values).all()) else [float(v) for v in values.tolist()]


def batch_env(batch: Batch, trace: Trace, config: Mapping[str, Any]) -> dict[str, Any]:
    """Every name of ``data.lessons.NAMES`` a pipeline batch gives (plain floats and lists).

    Args:
        batch: the (sub-sampled) batch the trace was computed on.
        trace: ``run(batch, trace.framework, config)``.
        config: the dialect config the trace used (the first update step reads its loss keys).

    Returns:
        name -> value; a name whose numbers are undefined (NaN local advantages of a one-answer
        prompt, a loss the dialect refuses) is left out, so reading it is a clear error.
    """
    mask = batch.response_mask.to(torch.float64)
    ids = batch.group_ids.to(torch.long)
    counts = torch.bincount(ids)
    env: dict[str, Any] = {
        "scores": to_env_value(trace.scores),
        "rewards": to_env_value(trace.rewards),
        "advantage": _first(trace.advantages, mask),
        "mean_advantage": _masked_mean(trace.advantages, mask),
        "advantages": _ragged(trace.advantages, mask),
        "token_rewards": _ragged(trace.token_rewards, mask),
        "returns": _ragged(trace.returns, mask),
        "kl": _ragged(trace.kl, mask),
        "kl_mean": _masked_mean(trace.kl, mask),
        "lengths": to_env_value(mask.sum(dim=1)),
        "group": to_env_value(ids),
        "B": float(ids.numel()),
        "G": float(counts.max()),
        "P": float(int((counts > 0).sum())),
        "beta": float(trace.beta),
    }
    lg = local_vs_global(batch.scores, ids)
    env["group_mean"] = to_env_value(lg.group_mean)
    env["zero_groups"] = float(
        sum(1 for g in range(len(counts)) if counts[g] > 1 and float(lg.group_std[g]) == 0.0)
    )
    for name, values in (
        ("group_std", lg.group_std),
        ("local_adv", lg.local),
        ("global_adv", lg.global_),
        ("local_scale", torch.tensor(lg.groups["local / global scale"].to_numpy())),
    ):
        finite = _finite_or_none(values.to(torch.float64))
        if finite is not None:
            env[name] = finite
    logprobs = batch.logprobs if batch.logprobs is not None else torch.zeros_like(mask)
    ref = batch.ref_logprobs if batch.ref_logprobs is not None else logprobs
    try:
        loss = policy_loss(
            trace.framework,
            config,
            logprobs=logprobs.to(torch.float64),
            old_logprobs=logprobs.to(torch.float64),
            advantages=trace.advantages,
            response_mask=mask,
            ref_logprobs=ref.to(torch.float64),
        )
    except ValueError:
        return env
    coef = loss.per_token["grad_coef"]
    env["loss"] = float(loss.total)
    env["grad_coef"] = _ragged(coef, mask)
    env["grad_tokens"] = float(int(((coef.abs() > GRAD_ZERO) & (mask > 0)).sum()))
    return env


def run_env(train_run: Any) -> dict[str, Any]:
    """The names of a recorded training run: its per-step metrics (missing steps read as 0)."""

    def series(key: str) -> list[float]:
        return [float(v) if v is not None else 0.0 for v in train_run.series(key)]

    return {
        "steps": float(len(train_run.steps)),
        "run_reward": series("reward_mean"),
        "run_kl": series("kl_exact"),
        "run_entropy": series("entropy"),
        "run_length": series("response_length"),
        "run_loss": series("loss"),
        "run_grad_norm": series("grad_norm"),
    }


# ---------------------------------------------------------------------------------------------
# One gate
# ---------------------------------------------------------------------------------------------


def _fail(gate: Gate, name: str, problem: str) -> LessonError:
    return LessonError(f"gate {gate.id!r}, field {name!r}: {problem}")


def gate_env(gate: Gate, live: GateBatch | None = None) -> tuple[dict, GateBatch, Trace | None]:
    """The numbers a gate's expression reads, its batch and its Trace.

    Raises:
        LessonError: the settings are not valid for this batch (names gate and field).
    """
    if gate.batch.startswith(EPISODES_PREFIX):
        env, labels = lesson_episodes.episodes_env(
            gate.batch.removeprefix(EPISODES_PREFIX), dict(gate.settings)
        )
        return env, GateBatch(None, (gate.batch,), labels), None
    source = gate_batch(gate, live)
    if source.run is not None:
        return run_env(source.run), source, None
    assert source.batch is not None
    settings = dict(gate.settings)
    batch = source.batch
    if SETTING_G in settings:
        batch, keep = subsample_groups(batch, int(settings[SETTING_G]))
        rows = keep.tolist()
        source = GateBatch(batch, source.prompts, tuple(source.responses[i] for i in rows))
    config = dialect_config(gate.framework, settings)
    try:
        trace = run(batch, gate.framework, config)
    except ValueError as err:
        raise _fail(gate, "settings", str(err)) from None
    return batch_env(batch, trace, config), source, trace


def _correct(gate: Gate, value: float) -> int | None:
    if gate.kind == "number":
        return None
    if gate.kind == "sign":
        target = 0.0 if abs(value) <= gate.tolerance else math.copysign(1.0, value)
        return [c.value for c in gate.choices].index(target)
    distances = [abs(c.value - value) for c in gate.choices]
    best = min(distances)
    if distances.count(best) > 1:
        raise _fail(gate, "answer", f"the value {value:g} is as close to two choices")
    return distances.index(best)


def _shown(gate: Gate, value: float, correct: int | None) -> str:
    if correct is not None:
        return gate.choices[correct].label
    return f"{value:.4g}"


def fix_outcomes(gate: Gate, env: Mapping[str, Any]) -> tuple[Outcome, ...]:
    """Each choice of a fix gate on its recorded run, the collapsing run's ``env`` as ``base_``.

    Raises:
        LessonError: the expression fails on a run, or no choice fixes the run (names the
            gate and field ``answer``).
    """
    base = {BASE_PREFIX + name: value for name, value in env.items()}
    out = []
    for i, choice in enumerate(gate.choices):
        assert choice.run is not None  # the format guarantees it
        run_names = run_env(load_recorded(choice.run))
        try:
            value = evaluate(gate.answer, {**run_names, **base})
        except ExprError as err:
            raise _fail(gate, "answer", f"on run {choice.run!r}: {err}") from None
        out.append(Outcome(i, choice.label, choice.run, value, value != 0.0, run_names))
    if not any(o.fixed for o in out):
        raise _fail(gate, "answer", "no choice's run fixes the collapse: a fix gate needs one")
    return tuple(out)


def compute_gate(
    gate: Gate, live: GateBatch | None = None, base: Mapping[str, Any] | None = None
) -> GateResult:
    """A gate's answer from the pipeline.

    Args:
        gate: a gate or a knob follow-up.
        live: the class's live batch (live gates).
        base: for a knob, the env of the gate it follows (read as ``base_<name>``).

    Returns:
        The GateResult.

    Raises:
        LessonError: the expression cannot be computed on this batch (a name it lacks, an index
            out of range, ...), a value outside a number gate's slider, or bad settings.
    """
    env, source, trace = gate_env(gate, live)
    if gate.kind == "fix":
        outcomes = fix_outcomes(gate, env)
        fixes = [o.label for o in outcomes if o.fixed]
        return GateResult(
            gate=gate,
            value=float(len(fixes)),
            correct=None,
            shown="Fixes the run: " + " · ".join(fixes),
            formula=formula(gate, env, trace),
            env=env,
            source=source,
            trace=trace,
            outcomes=outcomes,
        )
    full = dict(env)
    for name, value in (base or {}).items():
        if not name.startswith(BASE_PREFIX):
            full[BASE_PREFIX + name] = value
    try:
        value = evaluate(gate.answer, full)
    except ExprError as err:
        raise _fail(gate, "answer", str(err)) from None
    if gate.kind == "number" and not gate.low <= value <= gate.high:
        raise _fail(gate, "max", f"the answer {value:.4g} is outside the slider's range")
    correct = _correct(gate, value)
    return GateResult(
        gate=gate,
        value=value,
        correct=correct,
        shown=_shown(gate, value, correct),
        formula=formula(gate, env, trace),
        env=env,
        source=source,
        trace=trace,
    )


def compute_lesson(lesson: Lesson, live: GateBatch | None = None) -> tuple[GateResult, ...]:
    """Every step of a lesson (gates and knobs, in order); a knob reads its gate's numbers."""
    out: list[GateResult] = []
    by_id: dict[str, GateResult] = {}
    for gate in lesson.steps:
        base = by_id[gate.parent].env if gate.parent else None
        result = compute_gate(gate, live, base)
        by_id[gate.id] = result
        out.append(result)
    return tuple(out)


def compute_step(lesson: Lesson, index: int, live: GateBatch | None = None) -> GateResult:
    """One step of a lesson (a knob computes its gate first, for the ``base_`` names)."""
    gate = lesson.steps[index]
    base = None
    if gate.parent:
        base = compute_gate(lesson.steps[lesson.step_index(gate.parent)], live).env
    return compute_gate(gate, live, base)


# ---------------------------------------------------------------------------------------------
# The formula with its numbers
# ---------------------------------------------------------------------------------------------


def _focus(gate: Gate, env: Mapping[str, Any]) -> int:
    adv = env.get("advantage") or [0.0]
    if gate.focus is not None and gate.focus < len(adv):
        return gate.focus
    return max(range(len(adv)), key=lambda i: abs(adv[i]))


def _num(x: float) -> str:
    return f"{x:.3f}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


def formula(gate: Gate, env: Mapping[str, Any], trace: Trace | None) -> str:
    """LaTeX of the stage's formula with this batch's numbers (one line, for ``st.latex``)."""
    if trace is None and "trained" in env:
        return lesson_episodes.formula(dict(gate.settings), env)
    if trace is None:
        kl, rew = env["run_kl"], env["run_reward"]
        last = len(kl) - 1
        return (
            rf"\mathrm{{KL}}_0 = {_num(kl[0])} \rightarrow \mathrm{{KL}}_{{{last}}} = "
            rf"{_num(kl[-1])},\quad \bar r_0 = {_num(rew[0])} \rightarrow "
            rf"\bar r_{{{last}}} = {_num(rew[-1])}"
        )
    i = _focus(gate, env)
    g = int(env["group"][i])
    r, a = env["scores"][i], env["advantage"][i]
    mean = env["group_mean"][g]
    std = env.get("group_std", [math.nan] * (g + 1))[g]
    if gate.stage == "kl":
        kl_i = env["kl_mean"][i]
        return (
            rf"r_t = r\,[t=T] - \beta\,\mathrm{{KL}}_t:\ \beta = {_num(env['beta'])},\ "
            rf"\overline{{\mathrm{{KL}}}}_{{{i + 1}}} = {_num(kl_i)},\ "
            rf"A_{{{i + 1},1}} = {_num(a)}"
        )
    if gate.stage == "update" and "grad_coef" in env:
        coef = env["grad_coef"][i][0]
        return (
            rf"L = {_num(env['loss'])},\quad "
            rf"\frac{{\partial L}}{{\partial \log\pi(y_{{{i + 1},1}})}} = {_num(coef)}\ "
            rf"(A = {_num(a)})"
        )
    if gate.stage == "local_global" and "local_adv" in env:
        return (
            rf"A^{{local}}_{{{i + 1}}} = "
            rf"\frac{{{_num(r)} - {_num(mean)}}}{{{_num(std)} + 10^{{-6}}}}"
            rf" = {_num(env['local_adv'][i])},\quad A^{{global}}_{{{i + 1}}} = "
            rf"{_num(env['global_adv'][i])}"
        )
    return (
        rf"A_{{{i + 1}}} = \frac{{r_{{{i + 1}}} - \bar r}}{{\sigma + \varepsilon}} = "
        rf"\frac{{{_num(r)} - {_num(mean)}}}{{{_num(std)} + \varepsilon}}\ \to\ "
        rf"\text{{pipeline: }} {_num(a)}"
    )
