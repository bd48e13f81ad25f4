"""Deliberately naive per-token / per-sample Python-loop oracles, written from algorithms.md.

Plain Python floats and lists only; nothing here imports roll_viz, so a shared bug cannot hide.
"""

from __future__ import annotations

import math
import struct

# ---------------------------------------------------------------- basic kernels


def f32(x):
    """x rounded to the nearest float32 (IEEE single), as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def grpo_float32(seq, gids, eps):
    """verl grpo_vectorized: each group's mean and (unbiased) std summed in float32, in order;
    a group of one: mean 0, std 1; then (s - mean) / (std + eps) in double."""
    out = []
    for b, s in enumerate(seq):
        xs = [f32(seq[j]) for j in range(len(seq)) if gids[j] == gids[b]]
        if len(xs) <= 1:
            mean, sd = 0.0, 1.0
        else:
            total = 0.0
            for x in xs:
                total = f32(total + x)
            mean = f32(total / len(xs))
            sq = 0.0
            for x in xs:
                c = f32(x - mean)
                sq = f32(sq + f32(c * c))
            sd = f32(math.sqrt(f32(sq / (len(xs) - 1))))
        out.append((s - mean) / (sd + eps))
    return out


def reverse_cumsum(xs, d):
    out = [0.0] * len(xs)
    run = 0.0
    for t in reversed(range(len(xs))):
        run = xs[t] + d * run
        out[t] = run
    return out


def gae_row(r, v, m, gamma, lam, carry):
    """One row of GAE. carry=True: verl skip-masked recursion; False: plain over full width."""
    T = len(r)
    adv = [0.0] * T
    last = 0.0
    next_v = 0.0
    for t in reversed(range(T)):
        if carry:
            delta = r[t] + gamma * next_v - v[t]
            a = delta + gamma * lam * last
            if m[t]:
                next_v = v[t]
                last = a
            adv[t] = last if m[t] else 0.0
        else:
            nv = v[t + 1] if t + 1 < T else 0.0
            last = r[t] + gamma * nv - v[t] + gamma * lam * last
            adv[t] = last
    return adv


def returns_row(r, m, gamma, carry):
    T = len(r)
    out = [0.0] * T
    run = 0.0
    for t in reversed(range(T)):
        if carry:
            if m[t]:
                run = r[t] + gamma * run
                out[t] = run
        else:
            run = r[t] * m[t] + gamma * run
            out[t] = run
    return out


def mean(xs):
    return sum(xs) / len(xs)


def std(xs, ddof=1):
    mu = mean(xs)
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - ddof))


def groups_of(gids):
    out = {}
    for i, g in enumerate(gids):
        out.setdefault(g, []).append(i)
    return out


def kl_value(lp, ref, est, clamp=None, inner=None):
    d = lp - ref
    if inner is not None:
        d = max(-inner, min(inner, d))
    if est == "k1":
        k = d
    elif est == "abs":
        k = abs(d)
    elif est == "k2":
        k = 0.5 * d * d
    elif est == "k3":
        k = math.exp(-d) - 1 + d
    else:
        raise ValueError(est)
    if clamp is not None:
        k = max(-clamp, min(clamp, k))
    return k


def token_kl(lp, ref, mask, est, clamp=None, inner=None):
    B, T = len(mask), len(mask[0])
    if lp is None:
        return [[0.0] * T for _ in range(B)]
    return [
        [kl_value(lp[b][t], ref[b][t], est, clamp, inner) if mask[b][t] else 0.0 for t in range(T)]
        for b in range(B)
    ]


def whiten(x, mask, ddof, eps, floor=False):
    vals = [x[b][t] for b in range(len(x)) for t in range(len(x[0])) if mask[b][t]]
    mu = mean(vals)
    var = sum((v - mu) ** 2 for v in vals) / (len(vals) - ddof)
    inv = 1 / math.sqrt(max(var, eps) if floor else var + eps)
    return [
        [(x[b][t] - mu) * inv if mask[b][t] else 0.0 for t in range(len(x[0]))]
        for b in range(len(x))
    ]


def place(rewards, mask, kl=None, beta=0.0):
    B, T = len(mask), len(mask[0])
    out = [[0.0] * T for _ in range(B)]
    for b in range(B):
        last = None
        for t in range(T):
            if mask[b][t]:
                last = t
        for t in range(T):
            if mask[b][t]:
                out[b][t] = (rewards[b] if t == last else 0.0) - (beta * kl[b][t] if kl else 0.0)
    return out


def masked(x, mask):
    return [[x[b][t] if mask[b][t] else 0.0 for t in range(len(x[0]))] for b in range(len(x))]


def row_mean(x, m):
    n = sum(m)
    return sum(a for a, k in zip(x, m, strict=True) if k) / n if n else 0.0


def full_kl(p_logits, q_logits):
    def logsoftmax(z):
        mx = max(z)
        s = math.log(sum(math.exp(v - mx) for v in z)) + mx
        return [v - s for v in z]

    lp, lq = logsoftmax(p_logits), logsoftmax(q_logits)
    return sum(math.exp(a) * (a - b) for a, b in zip(lp, lq, strict=True))


def ziegler(beta, kl, target, horizon, n):
    err = max(-0.2, min(0.2, kl / target - 1))
    return beta * (1 + err * n / horizon)


# ---------------------------------------------------------------- generic estimators (verl-style)


def seq_sums(tok, mask):
    return [sum(tok[b][t] for t in range(len(tok[0])) if mask[b][t]) for b in range(len(tok))]


def broadcast(seq, mask):
    return [[seq[b] if mask[b][t] else 0.0 for t in range(len(mask[0]))] for b in range(len(mask))]


def estimator(
    name,
    tok,
    mask,
    gids,
    gamma=1.0,
    lam=1.0,
    values=None,
    baseline=None,
    eps=1e-6,
    ddof=1,
    carry=True,
    wddof=1,
    weps=1e-8,
    wfloor=False,
    seq=None,
):
    """Returns (advantages, returns) like roll_viz's ADVANTAGE_ESTIMATORS with singleton='raw'."""
    B, T = len(mask), len(mask[0])
    seq = seq_sums(tok, mask) if seq is None else seq
    grp = groups_of(gids)
    if name == "gae":
        adv = [gae_row(tok[b], values[b], mask[b], gamma, lam, carry) for b in range(B)]
        adv = masked(adv, mask)
        ret = masked([[adv[b][t] + values[b][t] for t in range(T)] for b in range(B)], mask)
        return adv, ret
    if name in ("reinforce", "reinforce_pp"):
        ret = masked([returns_row(tok[b], mask[b], gamma, carry) for b in range(B)], mask)
        if name == "reinforce":
            return ret, ret
        return whiten(ret, mask, wddof, weps, wfloor), ret
    if name == "remax":
        ret = masked([returns_row(tok[b], mask[b], 1.0, False) for b in range(B)], mask)
        adv = masked([[ret[b][t] - baseline[b] for t in range(T)] for b in range(B)], mask)
        return adv, ret
    out = [0.0] * B
    for idx in grp.values():
        xs = [seq[i] for i in idx]
        for i in idx:
            if len(idx) == 1:
                mu, sd = 0.0, 1.0
            else:
                mu = mean(xs)
                sd = std(xs, ddof) if name == "grpo" else 1.0
            if name == "grpo":
                out[i] = (seq[i] - mu) / (sd + eps)
            elif name in ("dr_grpo", "reinforce_pp_baseline"):
                out[i] = seq[i] - mu
            elif name == "rloo":
                out[i] = seq[i] if len(idx) == 1 else seq[i] - (sum(xs) - seq[i]) / (len(idx) - 1)
    adv = broadcast(out, mask)
    if name == "reinforce_pp_baseline":
        adv = whiten(adv, mask, wddof, weps, wfloor)
    return adv, adv


# ---------------------------------------------------------------- dialects, straight from the doc


def roll(
    scores,
    mask,
    gids,
    lp=None,
    ref=None,
    values=None,
    *,
    est="grpo",
    gamma=1.0,
    lambd=0.95,
    mean_type=None,
    std_type=None,
    reward_clip=None,
    kl_in_reward=False,
    beta=0.2,
    kl="kl",
    whiten_adv=False,
    adv_clip=None,
):
    B, T = len(mask), len(mask[0])
    if est == "grpo":
        mean_type = std_type = "group"
    grp = groups_of(gids)
    rewards = []
    for i in range(B):
        idx = grp[gids[i]]
        xs = [scores[j] for j in idx]
        mu = {"group": mean(xs), "batch": mean(scores), None: 0.0}[mean_type]
        if std_type is None:
            rewards.append(scores[i] - mu)
        else:
            sd = std(xs) if std_type == "group" else std(scores)
            rewards.append((scores[i] - mu) / (sd + 1e-6))
    if reward_clip:
        rewards = [max(-reward_clip, min(reward_clip, r)) for r in rewards]
    est_kl = {"kl": "k1", "abs": "abs", "mse": "k2", "k3": "k3"}[kl]
    kld = token_kl(lp, ref, mask, est_kl, clamp=10.0 if kl == "k3" else None)
    tok = place(rewards, mask, kld if kl_in_reward else None, beta)
    if reward_clip:
        tok = [[max(-reward_clip, min(reward_clip, v)) for v in row] for row in tok]
    if est == "gae":
        adv = [gae_row(tok[b], values[b], mask[b], gamma, lambd, carry=False) for b in range(B)]
        ret = [[adv[b][t] + values[b][t] for t in range(T)] for b in range(B)]
    else:
        adv = [returns_row(tok[b], [1] * T, gamma, carry=False) for b in range(B)]
        ret = adv
    adv, ret = masked(adv, mask), masked(ret, mask)
    if whiten_adv and sum(map(sum, mask)) > 1:
        adv = whiten(adv, mask, 1, 1e-8)
    if adv_clip:
        adv = [[max(-adv_clip, min(adv_clip, v)) for v in row] for row in adv]
    return {"rewards": rewards, "kl": kld, "token_rewards": tok, "advantages": adv, "returns": ret}


def verl(
    scores,
    mask,
    gids,
    lp=None,
    ref=None,
    values=None,
    baseline=None,
    *,
    est="grpo",
    gamma=1.0,
    lam=1.0,
    use_kl_in_reward=False,
    kl_coef=0.001,
    kl="kl",
    norm_by_std=True,
    sum_pi2=None,
):
    canon = {
        "kl": "k1",
        "k1": "k1",
        "abs": "abs",
        "mse": "k2",
        "k2": "k2",
        "low_var_kl": "k3",
        "k3": "k3",
    }[kl]
    kld = token_kl(lp, ref, mask, canon, *((10.0, 20.0) if canon == "k3" else (None, None)))
    tok = place(scores, mask, kld if use_kl_in_reward else None, kl_coef)
    name = {
        "reinforce_plus_plus": "reinforce_pp",
        "reinforce_plus_plus_baseline": "reinforce_pp_baseline",
    }.get(est, est)
    if name == "grpo" and not norm_by_std:
        name = "dr_grpo"
    # a zero-length response's score has no token but still counts as its sequence reward
    seq = [
        s if any(m) else scores[b]
        for b, (s, m) in enumerate(zip(seq_sums(tok, mask), mask, strict=False))
    ]
    if name == "grpo_vectorized":  # always / std (the trainer never passes the flag), float32
        adv = broadcast(grpo_float32(seq, gids, 1e-6), mask)
        ret = adv
    elif name == "rloo_vectorized":
        adv = broadcast(rloo_vectorized(seq, gids), mask)
        ret = adv
    elif name == "optimal_token_baseline":
        adv, ret = verl_otb(tok, mask, gids, lp, sum_pi2)
    elif name in ("opo", "gpg", "grpo_passk", "gdpo"):
        adv = broadcast(verl_outcome_2026(name, seq, mask, gids, norm_by_std), mask)
        if name == "gdpo":
            adv = whiten(adv, mask, 1, 1e-8)
        ret = adv
    else:
        adv, ret = estimator(name, tok, mask, gids, gamma, lam, values, baseline, seq=seq)
    if name == "gae":
        adv = whiten(adv, mask, 1, 1e-8)
    return {
        "rewards": list(scores),
        "kl": kld,
        "token_rewards": tok,
        "advantages": adv,
        "returns": ret,
    }


def rloo_vectorized(seq, gids):
    """verl rloo_vectorized per sample: s_i - mean of the others; a group of one gets 0."""
    out = [0.0] * len(seq)
    for idx in groups_of(gids).values():
        if len(idx) == 1:
            continue
        total = sum(seq[i] for i in idx)
        for i in idx:
            out[i] = seq[i] - (total - seq[i]) / (len(idx) - 1)
    return out


def verl_otb(tok, mask, gids, lp, sum_pi2):
    """verl compute_optimal_token_baseline_advantage with plain loops (no rollout IS weights)."""
    B, T = len(mask), len(mask[0])
    ret = [[sum(tok[b][s] * mask[b][s] for s in range(t, T)) for t in range(T)] for b in range(B)]
    w_cum = []
    for b in range(B):
        acc, row = 0.0, []
        for t in range(T):
            acc += (1 - 2 * math.exp(lp[b][t]) + sum_pi2[b][t]) * mask[b][t]
            row.append(acc)
        w_cum.append(row)
    base = [[0.0] * T for _ in range(B)]
    for idx in groups_of(gids).values():
        if len(idx) == 1:
            continue
        for t in range(T):
            num = sum(ret[i][t] * w_cum[i][t] * mask[i][t] for i in idx)
            den = sum(w_cum[i][t] * mask[i][t] for i in idx) + 1e-8
            for i in idx:
                base[i][t] = num / den
        lengths = [sum(mask[i]) for i in idx]
        longest, second = sorted(lengths)[-1], sorted(lengths)[-2]
        if lengths.count(longest) == 1 and longest > second:
            i = idx[lengths.index(longest)]
            for t in range(int(second), T):
                base[i][t] = 0.0
    adv = [[(ret[b][t] - base[b][t]) * mask[b][t] for t in range(T)] for b in range(B)]
    return masked(adv, mask), masked(ret, mask)


def verl_outcome_2026(name, seq, mask, gids, norm_by_std=True, eps=1e-6):
    """verl opo / gpg / grpo_passk / gdpo (one component) per sample, as core_algos loops them."""
    B = len(seq)
    lengths = [sum(row) for row in mask]
    out = [0.0] * B
    nonzero = sum(1 for x in seq if x != 0)
    alpha = B / max(nonzero, 1)
    for idx in groups_of(gids).values():
        xs = [seq[i] for i in idx]
        if name == "grpo_passk":
            assert len(idx) >= 2
            order = sorted(idx, key=lambda i: -seq[i])
            best, second = order[0], order[1]
            a = seq[best] - seq[second]
            out[best] = a / (std(xs) + eps) if norm_by_std else a
            continue
        for i in idx:
            if name == "opo":
                b = 0.0
                if len(idx) > 1:
                    b = sum(lengths[j] * seq[j] for j in idx) / sum(lengths[j] for j in idx)
                out[i] = seq[i] - b
            elif name == "gpg":
                out[i] = alpha * (seq[i] - (mean(xs) if len(idx) > 1 else 0.0))
            else:  # gdpo with one component: grpo (singleton mean 0, std 1); always by std:
                # ray_trainer.compute_advantage does not pass norm_adv_by_std_in_grpo to gdpo
                mu, sd = (0.0, 1.0) if len(idx) == 1 else (mean(xs), std(xs))
                out[i] = (seq[i] - mu) / (sd + eps)
    return out


def openrlhf(
    scores,
    mask,
    gids,
    lp=None,
    ref=None,
    values=None,
    *,
    est="gae",
    gamma=1.0,
    lambd=1.0,
    kl="k1",
    init_coef=0.01,
    use_loss=False,
    clip=(-10.0, 10.0),
    no_std_norm=False,
):
    B, T = len(mask), len(mask[0])
    grp = groups_of(gids)
    shaped = []
    for i in range(B):
        xs = [scores[j] for j in grp[gids[i]]]
        n = len(xs)
        if est == "rloo":
            shaped.append(scores[i] - (sum(xs) - scores[i]) / (n - 1))
        elif est in ("reinforce_baseline", "dr_grpo"):
            shaped.append(scores[i] - mean(xs))
        elif est == "group_norm":
            shaped.append((scores[i] - mean(xs)) / (std(xs) + 1e-9))
        elif est == "flash_reinforce":  # the whole batch's mean, no group
            shaped.append(scores[i] - mean(scores))
        else:
            shaped.append(scores[i])
    rewards = [max(clip[0], min(clip[1], r)) for r in shaped]
    kld = token_kl(lp, ref, mask, kl, clamp=10.0)
    coef = max(init_coef, 0.0)
    tok = place(rewards, mask, kld if (not use_loss and coef > 0) else None, coef)
    if est != "gae" and est != "reinforce":
        gamma = 1.0
    if est == "gae":
        vm = masked(values, mask)
        adv = [gae_row(tok[b], vm[b], mask[b], gamma, lambd, carry=False) for b in range(B)]
        ret = [[adv[b][t] + vm[b][t] for t in range(T)] for b in range(B)]
    else:
        adv = [returns_row(tok[b], mask[b], gamma, carry=False) for b in range(B)]
        ret = adv
    adv, ret = masked(adv, mask), masked(ret, mask)
    if est in ("gae", "reinforce", "reinforce_baseline"):
        if no_std_norm:
            vals = [adv[b][t] for b in range(B) for t in range(T) if mask[b][t]]
            mu = mean(vals)
            adv = masked([[v - mu for v in row] for row in adv], mask)
        else:
            adv = whiten(adv, mask, 0, 1e-8, floor=True)
    return {"rewards": rewards, "kl": kld, "token_rewards": tok, "advantages": adv, "returns": ret}


def trl(scores, mask, gids, lp=None, ref=None, *, scale="group"):
    B = len(mask)
    grp = groups_of(gids)
    out = []
    for i in range(B):
        xs = [scores[j] for j in grp[gids[i]]]
        a = scores[i] - mean(xs)
        if scale == "group":
            a /= std(xs) + 1e-4
        elif scale == "batch":
            a /= std(scores) + 1e-4
        out.append(a)
    adv = broadcast(out, mask)
    kld = token_kl(lp, ref, mask, "k3")
    return {"rewards": list(scores), "kl": kld, "advantages": adv, "returns": adv}
