"""Credit per turn: eight rules from one batch of episodes to an advantage per turn and per token.

There is no consensus (PipelineRL PR #135 lays out the levels: L0 broadcast one scalar, L1
Monte-Carlo per-turn returns, L2 structural credit such as GiGPO), so the rules are shown side
by side on the same episodes. Every rule is a pure function ``fn(episodes, params) ->
(advantages per turn per episode, worked example)`` in ``CREDIT_RULES``; ``credit`` runs one
and lays its per-turn advantages over the tokens (``masks.batch_episodes`` rows: every position
of turn t carries turn t's advantage, the prompt 0; the loss mask decides which count).

Rewards. ``turn_rewards(e)``: r_t = ``e.turn_rewards[t]`` (0 when the episode has none) plus the
outcome on the last turn; R = sum_t r_t is the episode return. Episodes of one ``task`` form a
group (first-appearance order). Group statistics: mean and unbiased std (torch.std, verl's
convention), a group of one has mean 0 and std 1 (verl's ``compute_grpo_outcome_advantage``).

- ``outcome_broadcast`` (PipelineRL L0): A_t = R on every turn, no baseline.
- ``episode_grpo`` (GRPO over episodes; Dr. GRPO without the std): A_t = (R - mean) / (std + eps).
- ``turn_returns`` (PipelineRL L1; verifiers PR #1554 "discounted returns normalised across the
  group"): G_t = sum_k gamma^(k-t) r_k, A_t = (G_t - mean_j G_j0) / (std_j G_j0 + eps); the
  baseline is the group's episode return (roll-viz's reading: a baseline that cannot depend on
  the episode's own turns).
- ``turn_gae`` (GAE over turns): delta_t = r_t + gamma V_(t+1) - V_t, A_t = sum_l (gamma lam)^l
  delta_(t+l), with V = 0 (zero critic) or ``params.values`` (a probe critic).
- ``gigpo`` (arXiv 2505.10978; verl-agent ``core_gigpo.py``): A = A^E + omega A^S. A^E: the
  episode return normalised in the task group, each turn a row (``compute_mean_std_cross_steps``
  True: an episode of N turns counts N times); A^S: the discounted step return normalised within
  the anchor-state group (same task, same ``Episode.states`` id); a group of one step gets 0.
- ``mt_grpo`` (arXiv 2505.11821; SiliangZeng/Multi-Turn-RL-Agent ``aae``): A_t = A^O + c A^T_t on
  turns with a turn reward (all but the last), A^O on the last; A^O the normalised outcome, A^T_t
  the turn reward normalised over the group's episodes that reached turn t.
- ``progress_deltas`` (prime-rl PR #3282 ``turn_credit``; verifiers PR #1554): state scores s_t
  (``Episode.progress``, else the cumulative turn rewards), deltas d_t = s_t - s_(t-1), smeared
  back c_t = sum_k gamma^(k-t) d_k, normalised over every turn of the group.
- ``turn_index_sum`` (verl RFC #7244's warning): the natural aggregation of per-turn-index
  normalisation, A_t = sum_(k=t)^(N-1) (r^T_k - b_k) + (O - mean O) with b_k the mean turn-k
  reward over episodes that reached turn k: the number of baseline terms depends on the
  episode's own stopping turn (``turn_index_bias`` gives the bias exactly).

Bounds: the episodes are bounded by ``masks.MAX_EPISODES``; turns by ``MAX_TURNS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import torch
from torch import Tensor

from roll_viz.core.agentic.episode import Episode, Segment
from roll_viz.core.agentic.masks import MAX_EPISODES, batch_episodes

#: agent turns of one episode the credit rules take
MAX_TURNS = 256

TurnAdvantages = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class CreditParams:
    """The knobs of the credit rules (each rule reads the ones it needs).

    Attributes:
        gamma: discount across turns, in [0, 1].
        lam: GAE lambda over turns, in [0, 1].
        scale_by_std: divide by the group std (False: mean-centred only; Dr. GRPO, prime-rl).
        eps: added to the std.
        omega: GiGPO's weight of the step-level advantage.
        turn_coef: MT-GRPO's weight of the turn-level advantage.
        values: per episode, a value per turn (``turn_gae``'s critic), or None for V = 0.
    """

    gamma: float = 1.0
    lam: float = 1.0
    scale_by_std: bool = True
    eps: float = 1e-6
    omega: float = 1.0
    turn_coef: float = 1.0
    values: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} = {value} is not in [0, 1]")
        if not self.eps > 0:
            raise ValueError(f"eps = {self.eps} must be > 0")


@dataclass(frozen=True)
class Credit:
    """One rule's advantages on a batch of episodes.

    Attributes:
        name, label, source: the rule, its human name, its paper or framework.
        formula: the rule's formula in words and symbols.
        worked: the formula with the numbers of the first episode.
        turn_advantages: per episode, one advantage per agent turn.
        token_advantages: (B, T) float64 aligned with ``batch_episodes(episodes, pad_id)``.
        notes: what the rule assumed of these episodes.
    """

    name: str
    label: str
    source: str
    formula: str
    worked: str
    turn_advantages: TurnAdvantages
    token_advantages: Tensor
    notes: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------------------------------------
# Helpers


def _n_turns(episode: Episode) -> int:
    turns = sorted({s.turn for s in episode.segments if s.role == "assistant" and s.turn >= 0})
    if turns != list(range(len(turns))):
        raise ValueError(f"assistant turns {turns} are not 0..N-1")
    if len(turns) > MAX_TURNS:
        raise ValueError(f"{len(turns)} turns: more than the cap {MAX_TURNS}")
    return len(turns)


def turn_rewards(episode: Episode) -> tuple[float, ...]:
    """r_t per agent turn: the turn reward (0 if none) plus the outcome on the last turn."""
    n = _n_turns(episode)
    base = episode.turn_rewards if episode.turn_rewards is not None else (0.0,) * n
    if len(base) != n:
        raise ValueError(f"{len(base)} turn rewards for {n} turns")
    return tuple(float(r) + (episode.outcome if t == n - 1 else 0.0) for t, r in enumerate(base))


def _intermediate(episode: Episode) -> tuple[float, ...]:
    """The turn rewards alone (0 if none), without the outcome."""
    n = _n_turns(episode)
    base = episode.turn_rewards if episode.turn_rewards is not None else (0.0,) * n
    if len(base) != n:
        raise ValueError(f"{len(base)} turn rewards for {n} turns")
    return tuple(float(r) for r in base)


def groups(episodes: Sequence[Episode]) -> list[list[int]]:
    """Indices of the episodes of each task, tasks in first-appearance order."""
    out: dict[str, list[int]] = {}
    for i, e in enumerate(episodes):
        out.setdefault(e.task, []).append(i)
    return list(out.values())


def _stats(values: Sequence[float]) -> tuple[float, float]:
    """(mean, unbiased std); a single value gives (0, 1) like verl's singleton rule."""
    if len(values) == 1:
        return 0.0, 1.0
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var)


def _norm(x: float, mean: float, std: float, params: CreditParams) -> float:
    return (x - mean) / (std + params.eps) if params.scale_by_std else x - mean


def _returns(rewards: Sequence[float], gamma: float) -> list[float]:
    out, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def _std_text(params: CreditParams) -> str:
    return " / (std + eps)" if params.scale_by_std else ""


# ---------------------------------------------------------------------------------------------
# The rules: fn(episodes, params) -> (advantages per turn per episode, worked example)


def outcome_broadcast(episodes: Sequence[Episode], p: CreditParams) -> tuple[TurnAdvantages, str]:
    """A_t = R on every turn."""
    adv = tuple((sum(turn_rewards(e)),) * _n_turns(e) for e in episodes)
    return adv, f"A_0,t = R_0 = {adv[0][0]:.4g} on each of its {len(adv[0])} turns"


def episode_grpo(episodes: Sequence[Episode], p: CreditParams) -> tuple[TurnAdvantages, str]:
    """A_t = (R - group mean) [/ (std + eps)] on every turn."""
    R = [sum(turn_rewards(e)) for e in episodes]
    adv: list[tuple[float, ...]] = [()] * len(episodes)
    worked = ""
    for g in groups(episodes):
        mean, std = _stats([R[i] for i in g])
        for i in g:
            adv[i] = (_norm(R[i], mean, std, p),) * _n_turns(episodes[i])
        if 0 in g:
            div = f" / ({std:.4g} + eps)" if p.scale_by_std else ""
            worked = f"A_0 = ({R[0]:.4g} - {mean:.4g}){div} = {adv[0][0]:.4g} on every turn"
    return tuple(adv), worked


def turn_returns(episodes: Sequence[Episode], p: CreditParams) -> tuple[TurnAdvantages, str]:
    """A_t = (G_t - mean_j G_j0) [/ (std_j G_j0 + eps)], G_t the discounted return from t."""
    G = [_returns(turn_rewards(e), p.gamma) for e in episodes]
    adv: list[tuple[float, ...]] = [()] * len(episodes)
    worked = ""
    for g in groups(episodes):
        mean, std = _stats([G[i][0] for i in g])
        for i in g:
            adv[i] = tuple(_norm(x, mean, std, p) for x in G[i])
        if 0 in g:
            parts = ", ".join(f"G_{t} = {x:.4g}" for t, x in enumerate(G[0]))
            worked = (
                f"gamma = {p.gamma:g}: {parts}; baseline mean G_0 = {mean:.4g}"
                f"{f', std {std:.4g}' if p.scale_by_std else ''}; A = "
                + ", ".join(f"{a:.4g}" for a in adv[0])
            )
    return tuple(adv), worked


def turn_gae(episodes: Sequence[Episode], p: CreditParams) -> tuple[TurnAdvantages, str]:
    """GAE over turns with V = 0 or ``params.values``."""
    if p.values is not None and len(p.values) != len(episodes):
        raise ValueError(f"{len(p.values)} value rows for {len(episodes)} episodes")
    adv = []
    for i, e in enumerate(episodes):
        r = turn_rewards(e)
        V = list(p.values[i]) if p.values is not None else [0.0] * len(r)
        if len(V) != len(r):
            raise ValueError(f"episode {i}: {len(V)} values for {len(r)} turns")
        delta = [
            r[t] + p.gamma * (V[t + 1] if t + 1 < len(r) else 0.0) - V[t] for t in range(len(r))
        ]
        adv.append(tuple(_returns(delta, p.gamma * p.lam)))
    critic = "V = given values" if p.values is not None else "V = 0 (zero critic)"
    worked = f"gamma = {p.gamma:g}, lambda = {p.lam:g}, {critic}: A_0 = " + ", ".join(
        f"{a:.4g}" for a in adv[0]
    )
    return tuple(adv), worked


def gigpo(episodes: Sequence[Episode], p: CreditParams) -> tuple[TurnAdvantages, str]:
    """GiGPO: A = A^E + omega A^S (verl-agent's ``compute_gigpo_outcome_advantage``)."""
    R = [sum(turn_rewards(e)) for e in episodes]
    G = [_returns(turn_rewards(e), p.gamma) for e in episodes]
    n = [_n_turns(e) for e in episodes]
    for i, e in enumerate(episodes):
        if e.states is not None and len(e.states) != n[i]:
            raise ValueError(f"episode {i}: {len(e.states)} anchor states for {n[i]} turns")
    A_E: list[float] = [0.0] * len(episodes)
    A_S: list[list[float]] = [[0.0] * k for k in n]
    for g in groups(episodes):
        rows = [R[i] for i in g for _ in range(n[i])]  # every turn is a row (cross steps)
        mean, std = _stats(rows)
        for i in g:
            A_E[i] = _norm(R[i], mean, std, p)
        anchors: dict[object, list[tuple[int, int]]] = {}
        for i in g:
            for t in range(n[i]):
                key = episodes[i].states[t] if episodes[i].states is not None else (i, t)
                anchors.setdefault(key, []).append((i, t))
        for members in anchors.values():
            vals = [G[i][t] for i, t in members]
            # a group of one: its own return is the mean (A^S = 0), std 1
            m = sum(vals) / len(vals)
            s = _stats(vals)[1] if len(vals) > 1 else 1.0
            for i, t in members:
                A_S[i][t] = _norm(G[i][t], m, s, p)
    adv = tuple(tuple(A_E[i] + p.omega * a for a in A_S[i]) for i in range(len(episodes)))
    worked = (
        f"A^E_0 = {A_E[0]:.4g}; A^S_0 = "
        + ", ".join(f"{a:.4g}" for a in A_S[0])
        + f"; omega = {p.omega:g}: A = "
        + ", ".join(f"{a:.4g}" for a in adv[0])
    )
    return adv, worked


def mt_grpo(episodes: Sequence[Episode], p: CreditParams) -> tuple[TurnAdvantages, str]:
    """MT-GRPO: A^O + c A^T_t on turns with a turn reward, A^O on the last turn."""
    out_r = [e.outcome for e in episodes]
    r = [_intermediate(e) for e in episodes]
    A_O: list[float] = [0.0] * len(episodes)
    A_T: list[list[float]] = [[0.0] * len(x) for x in r]
    for g in groups(episodes):
        mean, std = _stats([out_r[i] for i in g])
        for i in g:
            A_O[i] = _norm(out_r[i], mean, std, p)
        for t in range(max(len(r[i]) for i in g)):
            reached = [i for i in g if len(r[i]) > t]
            m, s = _stats([r[i][t] for i in reached])
            for i in reached:
                A_T[i][t] = _norm(r[i][t], m, s, p)
    adv = tuple(
        tuple(
            A_O[i] + (p.turn_coef * A_T[i][t] if t < len(r[i]) - 1 else 0.0)
            for t in range(len(r[i]))
        )
        for i in range(len(episodes))
    )
    worked = (
        f"A^O_0 = {A_O[0]:.4g}; A^T_0 = "
        + ", ".join(f"{a:.4g}" for a in A_T[0][:-1])
        + f" (last turn: outcome only); c = {p.turn_coef:g}: A = "
        + ", ".join(f"{a:.4g}" for a in adv[0])
    )
    return adv, worked


def progress_deltas(episodes: Sequence[Episode], p: CreditParams) -> tuple[TurnAdvantages, str]:
    """Progress deltas smeared back with gamma^d, normalised over the group's turns."""
    C = []
    for i, e in enumerate(episodes):
        n = _n_turns(e)
        if e.progress is not None:
            if len(e.progress) != n:
                raise ValueError(f"episode {i}: {len(e.progress)} progress scores for {n} turns")
            s = [float(x) for x in e.progress]
        else:
            s = list(torch.tensor(turn_rewards(e), dtype=torch.float64).cumsum(0).tolist())
        d = [s[t] - (s[t - 1] if t else 0.0) for t in range(n)]
        C.append(_returns(d, p.gamma))
    adv: list[tuple[float, ...]] = [()] * len(episodes)
    worked = ""
    for g in groups(episodes):
        mean, std = _stats([c for i in g for c in C[i]])
        for i in g:
            adv[i] = tuple(_norm(c, mean, std, p) for c in C[i])
        if 0 in g:
            worked = (
                f"gamma = {p.gamma:g}: c_0 = "
                + ", ".join(f"{c:.4g}" for c in C[0])
                + f"; group mean {mean:.4g}{_std_text(p).replace('std', f'{std:.4g}')}: A = "
                + ", ".join(f"{a:.4g}" for a in adv[0])
            )
    return tuple(adv), worked


def turn_index_sum(episodes: Sequence[Episode], p: CreditParams) -> tuple[TurnAdvantages, str]:
    """The biased aggregation of verl #7244: of per-turn-index baselines."""
    out_r = [e.outcome for e in episodes]
    r = [_intermediate(e) for e in episodes]
    adv: list[tuple[float, ...]] = [()] * len(episodes)
    worked = ""
    for g in groups(episodes):
        mean_o = sum(out_r[i] for i in g) / len(g)
        K = max(len(r[i]) for i in g)
        b = []
        for k in range(K):
            reached = [r[i][k] for i in g if len(r[i]) > k]
            b.append(sum(reached) / len(reached))
        for i in g:
            terms = [r[i][k] - b[k] for k in range(len(r[i]))]
            adv[i] = tuple(sum(terms[t:]) + out_r[i] - mean_o for t in range(len(r[i])))
        if 0 in g:
            worked = (
                "b_k = "
                + ", ".join(f"{x:.4g}" for x in b)
                + f"; mean O = {mean_o:.4g}: A = "
                + ", ".join(f"{a:.4g}" for a in adv[0])
                + f" ({len(r[0])} baseline terms at turn 0: the episode's own stopping turn)"
            )
    return tuple(adv), worked


@dataclass(frozen=True)
class CreditRule:
    """One credit rule: its name, label, paper or framework, formula and function."""

    name: str
    label: str
    source: str
    formula: str
    fn: Callable[[Sequence[Episode], CreditParams], tuple[TurnAdvantages, str]]


CREDIT_RULES: dict[str, CreditRule] = {
    r.name: r
    for r in (
        CreditRule(
            "outcome_broadcast",
            "outcome broadcast",
            "PipelineRL PR #135 level L0",
            "A_t = R (the episode return on every turn, no baseline)",
            outcome_broadcast,
        ),
        CreditRule(
            "episode_grpo",
            "episode-level GRPO",
            "GRPO over episodes (DeepSeekMath); without the std: Dr. GRPO",
            "A_t = (R - mean_group R) / (std_group R + eps)",
            episode_grpo,
        ),
        CreditRule(
            "turn_returns",
            "per-turn discounted returns",
            "PipelineRL PR #135 level L1; verifiers PR #1554",
            "G_t = sum_k gamma^(k-t) r_k; A_t = (G_t - mean_group G_0) / (std_group G_0 + eps)",
            turn_returns,
        ),
        CreditRule(
            "turn_gae",
            "GAE over turns",
            "GAE (Schulman et al. 2016) with turns as steps",
            "delta_t = r_t + gamma V_(t+1) - V_t; A_t = sum_l (gamma lambda)^l delta_(t+l)",
            turn_gae,
        ),
        CreditRule(
            "gigpo",
            "GiGPO anchor-state groups",
            "arXiv 2505.10978; verl-agent core_gigpo.py",
            "A_t = A^E + omega A^S_t; A^E over the task group, A^S over the anchor-state group",
            gigpo,
        ),
        CreditRule(
            "mt_grpo",
            "MT-GRPO turn-level rewards",
            "arXiv 2505.11821; SiliangZeng/Multi-Turn-RL-Agent (aae)",
            "A_t = A^O + c A^T_t (turns before the last), A^O on the last turn",
            mt_grpo,
        ),
        CreditRule(
            "progress_deltas",
            "progress deltas with gamma^d",
            "prime-rl PR #3282 (turn_credit); verifiers PR #1554",
            "d_t = s_t - s_(t-1); c_t = sum_k gamma^(k-t) d_k; A_t = (c_t - mean) / (std + eps)",
            progress_deltas,
        ),
        CreditRule(
            "turn_index_sum",
            "per-turn-index baselines, summed (biased)",
            "verl-project/verl RFC #7244",
            "A_t = sum_(k=t)^(N-1) (r_k - mean_(reached k) r_k) + (O - mean O)",
            turn_index_sum,
        ),
    )
}


def credit(
    name: str,
    episodes: Sequence[Episode],
    params: CreditParams = CreditParams(),
    pad_id: int = 0,
    unit: str = "token",
) -> Credit:
    """Run credit rule ``name`` and lay its per-turn advantages over the tokens.

    Raises:
        KeyError: an unknown rule (the message names the known ones).
        ValueError: no episodes, too many, turns not 0..N-1, or lengths that disagree.
    """
    if name not in CREDIT_RULES:
        raise KeyError(f"unknown credit rule {name!r}; known: {', '.join(CREDIT_RULES)}")
    if not episodes or len(episodes) > MAX_EPISODES:
        raise ValueError(f"{len(episodes)} episodes: need 1..{MAX_EPISODES}")
    rule = CREDIT_RULES[name]
    adv, worked = rule.fn(episodes, params)
    batch = batch_episodes(episodes, pad_id, unit)
    width = max(1, max(len(a) for a in adv))
    table = torch.zeros((len(adv), width), dtype=torch.float64)
    for i, a in enumerate(adv):
        table[i, : len(a)] = torch.tensor(a, dtype=torch.float64)
    index = batch.turn.clamp(min=0, max=width - 1)
    tokens = torch.gather(table, 1, index)
    tokens = torch.where(batch.valid & (batch.turn >= 0), tokens, torch.zeros_like(tokens))
    notes = []
    if name == "gigpo" and any(e.states is None for e in episodes):
        notes.append("episodes without anchor states: each of their turns is its own step group")
    if name == "progress_deltas" and any(e.progress is None for e in episodes):
        notes.append("episodes without progress scores: the state score is the cumulative reward")
    return Credit(name, rule.label, rule.source, rule.formula, worked, adv, tokens, tuple(notes))


# ---------------------------------------------------------------------------------------------
# verl #7244: the bias of per-turn-index baselines when the policy decides when to stop


@dataclass(frozen=True)
class TurnIndexBias:
    """The expected turn-0 advantage per stopping turn n under three estimators, exactly.

    Attributes:
        stops: the stopping turns n = 1..K.
        probs: P(N = n).
        turn_index: E[A_0 | N = n] of ``turn_index_sum`` (population baselines).
        fixed: the same with the sum over all K turn indices, absent turns 0 (the baseline then
            no longer depends on the episode's own stop).
        reference: E[G - E G | N = n], the unbiased advantage of the whole episode.
        bias: turn_index - reference.
        per_extra_turn: bias[n + 1] - bias[n] (= -E[r_n]: the hidden bonus per extra turn).
        text: the demonstration with its numbers.
    """

    stops: tuple[int, ...]
    probs: tuple[float, ...]
    turn_index: tuple[float, ...]
    fixed: tuple[float, ...]
    reference: tuple[float, ...]
    bias: tuple[float, ...]
    per_extra_turn: tuple[float, ...]
    text: str


def _exact(x: float) -> Fraction:
    return Fraction(repr(float(x)))


def turn_index_bias(
    stop_probs: Sequence[float], turn_reward: Sequence[float], outcome: Sequence[float]
) -> TurnIndexBias:
    """The bias of verl #7244 computed exactly (fractions) for a policy that chooses when to stop.

    Args:
        stop_probs: P(N = n) for n = 1..K (sums to 1).
        turn_reward: E[r_k], the mean intermediate reward of turn k (k = 0..K-1) for every
            episode that reaches it.
        outcome: E[O | N = n], the mean outcome when stopping after n turns.
    """
    K = len(stop_probs)
    if not 1 <= K <= MAX_TURNS or len(turn_reward) != K or len(outcome) != K:
        raise ValueError("need K = 1..MAX_TURNS stop probabilities, turn rewards and outcomes")
    P = [_exact(x) for x in stop_probs]
    if any(x < 0 for x in P) or sum(P) != 1:
        raise ValueError("stop probabilities must be >= 0 and sum to 1")
    mu, o = [_exact(x) for x in turn_reward], [_exact(x) for x in outcome]
    reach = [sum(P[k:]) for k in range(K)]  # P(N > k), k = 0..K-1
    EO = sum(P[n] * o[n] for n in range(K))
    EG = sum(reach[k] * mu[k] for k in range(K)) + EO
    # per-turn-index baseline: b_k = E[r_k | N > k] = mu_k
    turn_index = [sum(mu[k] - mu[k] for k in range(n + 1)) + o[n] - EO for n in range(K)]
    fixed = [
        sum((mu[k] if k <= n else 0) - reach[k] * mu[k] for k in range(K)) + o[n] - EO
        for n in range(K)
    ]
    reference = [sum(mu[: n + 1]) + o[n] - EG for n in range(K)]
    bias = [a - b for a, b in zip(turn_index, reference, strict=True)]
    extra = [bias[n + 1] - bias[n] for n in range(K - 1)]
    f = [float(x) for x in bias]
    text = (
        f"Stopping after n = 1..{K} turns with P = {', '.join(f'{float(x):g}' for x in P)}; "
        f"turn rewards E[r_k] = {', '.join(f'{float(x):g}' for x in mu)}. The per-turn-index "
        f"baseline gives E[A_0 | n] - (unbiased) = {', '.join(f'{x:.4g}' for x in f)}: each "
        "extra turn adds "
        + ", ".join(f"{float(x):+.4g}" for x in extra)
        + " (= -E[r_n], the hidden bonus per extra turn)."
    )
    return TurnIndexBias(
        tuple(range(1, K + 1)),
        tuple(float(x) for x in P),
        tuple(float(x) for x in turn_index),
        tuple(float(x) for x in fixed),
        tuple(float(x) for x in reference),
        tuple(f),
        tuple(float(x) for x in extra),
        text,
    )


def turn_index_demo(
    counts: Sequence[int],
    turn_reward: Sequence[float],
    outcome: Sequence[float],
    task: str = "demo",
) -> tuple[Episode, ...]:
    """A group whose stopping turns occur with exact frequencies ``counts`` (n = 1..K).

    Episode j stopping after n turns has turn rewards ``turn_reward[:n]`` and outcome
    ``outcome[n - 1]``; one token per segment (ids 1 + turn), so ``credit("turn_index_sum",
    ...)`` on it reproduces ``turn_index_bias(counts / sum, ...)`` with sample baselines.
    """
    if sum(counts) > MAX_EPISODES or any(c < 0 for c in counts):
        raise ValueError(f"counts must be >= 0 and sum to at most {MAX_EPISODES}")
    out = []
    for n, c in enumerate(counts, start=1):
        segs: list[Segment] = [Segment("user", "task", (0,), -1)]
        for t in range(n):
            segs.append(Segment("assistant", f"turn {t}", (1 + t,), t, True, (0.0,)))
            if t < n - 1:
                segs.append(Segment("tool", "ok", (900,), t))
        episode = Episode(task, "demo", tuple(segs), float(outcome[n - 1]), tuple(turn_reward[:n]))
        out.extend([episode] * c)
    return tuple(out)
