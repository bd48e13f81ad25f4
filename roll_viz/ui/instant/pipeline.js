// The reward -> advantage pipeline of roll_viz.core.pipeline, in plain JavaScript (float64).
//
// A browser mirror of the Python source of truth, so a slider can recompute a page's numbers
// on every input event without a Streamlit rerun. Same names, same order of operations, same
// constants as roll_viz/core/pipeline/{postprocess,kl,advantages,dialects}.py and
// roll_viz/core/ops.py; the suite (tests/js) checks it against roll_viz.core.pipeline.run to
// 1e-9 on random batches. No build step, no dependencies: an ES module that runs in Node and
// in the browser.
//
// Shapes: B sequences, T response tokens. A (B,) vector is a Float64Array; a (B, T) matrix is
// an Array of B Float64Array rows (x[b][t]). Masks are 0/1 floats. Nothing is modified in
// place: every function returns new arrays.
//
// Input: a batch as decoded by decodeBatch() (scores, response_mask, group_ids, logprobs,
// ref_logprobs, values, baseline_scores, group_labels) and a RESOLVED config (Python's
// resolve_config output: every key present). Not mirrored: Trace.kl_loss (it depends on the
// policy-update aggregation, losses.py) and Trace.notes; both stay server side.
// covered(framework, config, coverage) says whether this
// module computes that config exactly (coverage: the payload's table, from the Python records); when it does not, callers use the server path.

// ---------------------------------------------------------------------------- (B, T) helpers

/** New (B, T) matrix of zeros. */
export function zerosLike(x) {
  return x.map((row) => new Float64Array(row.length));
}

/** New (B, T) matrix out[b][t] = fn(x[b][t], b, t) (plain loops: TypedArray.map is slow). */
export function mapRows(x, fn) {
  const out = new Array(x.length);
  for (let b = 0; b < x.length; b++) {
    const row = x[b];
    const o = new Float64Array(row.length);
    for (let t = 0; t < row.length; t++) o[t] = fn(row[t], b, t);
    out[b] = o;
  }
  return out;
}

/** x where mask is 1, +0.0 elsewhere (ops.apply_mask: 0 + x * mask). */
export function applyMask(x, mask) {
  const out = new Array(x.length);
  for (let b = 0; b < x.length; b++) {
    const row = x[b];
    const m = mask[b];
    const o = new Float64Array(row.length);
    for (let t = 0; t < row.length; t++) if (m[t] > 0) o[t] = 0 + row[t];
    out[b] = o;
  }
  return out;
}

/** Number of valid tokens in the whole batch. */
export function countValid(mask) {
  let n = 0;
  for (const row of mask) for (const m of row) if (m > 0) n += 1;
  return n;
}

/** Sum over valid positions: per row (B,) when perRow, else a number. */
export function maskedSum(x, mask, perRow = false) {
  const rows = x.map((row, b) => {
    let s = 0;
    for (let t = 0; t < row.length; t++) if (mask[b][t] > 0) s += row[t];
    return s;
  });
  if (perRow) return Float64Array.from(rows);
  let s = 0;
  for (const v of rows) s += v;
  return s;
}

/** Mean over valid positions (count clamped to 1): per row (B,) when perRow, else a number. */
export function maskedMean(x, mask, perRow = false) {
  if (perRow) {
    const sums = maskedSum(x, mask, true);
    return sums.map((s, b) => s / Math.max(countValid([mask[b]]), 1));
  }
  let s = 0;
  for (let b = 0; b < x.length; b++) {
    for (let t = 0; t < x[b].length; t++) if (mask[b][t] > 0) s += x[b][t];
  }
  return s / Math.max(countValid(mask), 1);
}

/**
 * Token-weighted whitening over all valid positions (ops.masked_whiten).
 * eps_mode "add": (x - mean) / sqrt(var + eps); "floor": (x - mean) / sqrt(max(var, eps)).
 * Throws with count <= ddof valid tokens (as ops.masked_var does).
 */
export function maskedWhiten(x, mask, ddof = 1, eps = 1e-8, epsMode = "add") {
  const count = countValid(mask);
  if (count <= ddof) {
    throw new Error(
      `variance with ddof=${ddof} needs at least ${ddof + 1} valid tokens, got ${count}`,
    );
  }
  const mean = maskedMean(x, mask);
  const dev = mapRows(x, (v, b, t) => (mask[b][t] > 0 ? 0 + (v - mean) : 0));
  let sq = 0;
  for (const row of dev) for (const d of row) sq += d * d;
  const variance = sq / (count - ddof);
  let invStd;
  if (epsMode === "add") invStd = 1 / Math.sqrt(variance + eps);
  else if (epsMode === "floor") invStd = 1 / Math.sqrt(Math.max(variance, eps));
  else throw new Error(`eps_mode must be 'add' or 'floor', got ${epsMode}`);
  return mapRows(dev, (d) => d * invStd);
}

/**
 * Mean, std, size and sum of each sample's group, gathered back to the samples (ops.group_stats).
 * The mean gets one refinement pass, so a constant group has an exactly-zero deviation.
 * std is NaN where the group size is <= ddof.
 */
export function groupStats(values, groupIds, ddof = 1) {
  const B = values.length;
  let N = 0;
  for (const g of groupIds) N = Math.max(N, g + 1);
  const sums = new Float64Array(N);
  const counts = new Float64Array(N);
  for (let b = 0; b < B; b++) {
    sums[groupIds[b]] += values[b];
    counts[groupIds[b]] += 1;
  }
  const means = sums.map((s, g) => s / Math.max(counts[g], 1));
  const resid = new Float64Array(N);
  for (let b = 0; b < B; b++) resid[groupIds[b]] += values[b] - means[groupIds[b]];
  for (let g = 0; g < N; g++) means[g] += resid[g] / Math.max(counts[g], 1);
  const sq = new Float64Array(N);
  for (let b = 0; b < B; b++) {
    const d = values[b] - means[groupIds[b]];
    sq[groupIds[b]] += d * d;
  }
  const std = sq.map((s, g) => {
    const denom = counts[g] - ddof;
    return denom > 0 ? Math.sqrt(s / Math.max(denom, 1)) : NaN;
  });
  const gather = (arr) => Float64Array.from(groupIds, (g) => arr[g]);
  return { mean: gather(means), std: gather(std), count: gather(counts), sum: gather(sums) };
}

/** Unbiased (ddof) std of a whole vector, two-pass (torch.std(correction=ddof)). */
export function vectorStd(x, ddof = 1) {
  const n = x.length;
  let mean = 0;
  for (const v of x) mean += v;
  mean /= n;
  let sq = 0;
  for (const v of x) sq += (v - mean) * (v - mean);
  return Math.sqrt(sq / (n - ddof));
}

/** Index of the last valid token of each row, 0 for an all-zero row (ops.last_token_index). */
export function lastTokenIndex(mask) {
  return mask.map((row) => {
    let last = 0;
    for (let t = 0; t < row.length; t++) if (row[t] > 0) last = t;
    return last;
  });
}

/** y_t = x_t + discount * y_{t+1} along each row (ops.reverse_discounted_cumsum). */
export function reverseDiscountedCumsum(x, discount) {
  if (!(discount >= 0 && discount <= 1)) {
    throw new Error(`discount must be in [0, 1], got ${discount}`);
  }
  return x.map((row) => {
    const out = new Float64Array(row.length);
    let running = 0;
    for (let t = row.length - 1; t >= 0; t--) {
      running = row[t] + discount * running;
      out[t] = running;
    }
    return out;
  });
}

/** Each row's valid tokens moved to the front, stable (ops.compact_valid): {x, mask, order}. */
export function compactValid(x, mask) {
  const B = x.length;
  const order = new Array(B);
  const xc = new Array(B);
  const mc = new Array(B);
  for (let b = 0; b < B; b++) {
    const row = mask[b];
    const T = row.length;
    const o = new Int32Array(T);
    let j = 0;
    for (let t = 0; t < T; t++) if (row[t] > 0) o[j++] = t;
    for (let t = 0; t < T; t++) if (!(row[t] > 0)) o[j++] = t;
    order[b] = o;
    xc[b] = gatherRow(x[b], o);
    mc[b] = gatherRow(row, o);
  }
  return { x: xc, mask: mc, order };
}

/** row[order[j]] for every j. */
export function gatherRow(row, order) {
  const out = new Float64Array(order.length);
  for (let j = 0; j < order.length; j++) out[j] = row[order[j]];
  return out;
}

/** Inverse of compactValid (ops.scatter_back). */
export function scatterBack(yCompact, order) {
  return yCompact.map((row, b) => {
    const out = new Float64Array(row.length);
    for (let j = 0; j < row.length; j++) out[order[b][j]] = row[j];
    return out;
  });
}

// ------------------------------------------------------------------------- stage 1: postprocess

/** Merge a batch of scores into running statistics (postprocess.update_running_moments). */
export function updateRunningMoments(running, scores) {
  const n = scores.length;
  if (n === 0) return running;
  let batchMean = 0;
  for (const v of scores) batchMean += v;
  batchMean /= n;
  let batchVar = 0;
  for (const v of scores) batchVar += (v - batchMean) * (v - batchMean);
  batchVar /= n;
  const delta = batchMean - running.mean;
  const total = running.count + n;
  const newVar =
    (running.var * running.count + (delta * delta * running.count * n) / total + batchVar * n) /
    total;
  return { mean: running.mean + (delta * n) / total, var: newVar, count: total };
}

/** Bessel-corrected running std; NaN while count <= 1 (records.RunningMoments.std). */
export function runningStd(running) {
  if (running.count <= 1) return NaN;
  return Math.sqrt((running.var * running.count) / (running.count - 1));
}

/** Labels of groups with exactly one sample (postprocess.singleton_groups). */
export function singletonGroups(groupIds, groupLabels = []) {
  const counts = new Map();
  for (const g of groupIds) counts.set(g, (counts.get(g) || 0) + 1);
  return [...counts.entries()]
    .filter(([, c]) => c === 1)
    .map(([g]) => g)
    .sort((a, b) => a - b)
    .map((g) => (g < groupLabels.length ? groupLabels[g] : g));
}

/** Throw naming the first group with fewer than minimum samples (postprocess.require_group_size). */
export function requireGroupSize(groupIds, groupLabels, what, minimum = 2) {
  const counts = new Map();
  for (const g of groupIds) counts.set(g, (counts.get(g) || 0) + 1);
  const small = [...counts.entries()].filter(([, c]) => c < minimum).sort((a, b) => a[0] - b[0]);
  if (small.length) {
    const [g, c] = small[0];
    const label = g < groupLabels.length ? groupLabels[g] : g;
    throw new Error(
      `${what} needs at least ${minimum} samples per prompt (group ${label} has ${c})`,
    );
  }
}

/** (r - mean) / (std + eps) with independent mean/std sources (postprocess.normalize_scores). */
export function normalizeScores(scores, groupIds, meanType, stdType, running, ddof, eps, labels) {
  const B = scores.length;
  const zeros = new Float64Array(B);
  let baseline;
  if (meanType === "group") baseline = groupStats(scores, groupIds).mean;
  else if (meanType === "batch") baseline = groupStats(scores, new Array(B).fill(0)).mean;
  else if (meanType === "running") baseline = zeros.map(() => running.mean);
  else baseline = zeros;
  if (stdType === null) {
    return {
      rewards: scores.map((s, b) => s - baseline[b]),
      baseline,
      scale: new Float64Array(B).fill(1),
    };
  }
  let std;
  if (stdType === "group") {
    if (ddof > 0) requireGroupSize(groupIds, labels, `group std (ddof=${ddof})`, ddof + 1);
    std = groupStats(scores, groupIds, ddof).std;
  } else if (stdType === "batch") {
    if (B <= ddof) {
      throw new Error(`batch std (ddof=${ddof}) needs at least ${ddof + 1} samples, got ${B}`);
    }
    const s = B > 1 ? vectorStd(scores, ddof) : 0;
    std = zeros.map(() => s);
  } else {
    if (running.count <= 1) throw new Error("running std needs more than 1 score seen so far");
    std = zeros.map(() => runningStd(running));
  }
  const scale = std.map((s) => s + eps);
  return { rewards: scores.map((s, b) => (s - baseline[b]) / scale[b]), baseline, scale };
}

/** b_i = (group sum - r_i) / (n - 1); 0 for a singleton (postprocess.leave_one_out_baseline). */
export function leaveOneOutBaseline(scores, groupIds) {
  const stats = groupStats(scores, groupIds);
  return scores.map((s, b) => {
    const n = stats.count[b];
    const factor = n / Math.max(n - 1, 1);
    return n > 1 ? s - factor * (s - stats.mean[b]) : 0;
  });
}

/**
 * Clamp to [low, high] (either may be null) and the fraction of (valid) values changed
 * (postprocess.clip_rewards). Works on a (B,) vector (mask null) or a (B, T) matrix.
 */
export function clipRewards(rewards, low, high, mask = null) {
  const clamp = (v) => {
    let y = v;
    if (low !== null && y < low) y = low;
    if (high !== null && y > high) y = high;
    return y;
  };
  if (low === null && high === null) {
    const copy = Array.isArray(rewards) ? rewards.map((r) => r.slice()) : rewards.slice();
    return { clipped: copy, frac: 0 };
  }
  let changed = 0;
  let total = 0;
  if (!Array.isArray(rewards)) {
    const clipped = rewards.map(clamp);
    clipped.forEach((v, b) => {
      total += 1;
      if (v !== rewards[b]) changed += 1;
    });
    return { clipped, frac: total > 0 ? changed / total : 0 };
  }
  const clipped = mapRows(rewards, clamp);
  for (let b = 0; b < rewards.length; b++) {
    for (let t = 0; t < rewards[b].length; t++) {
      const w = mask === null || mask[b][t] > 0;
      if (!w) continue;
      total += 1;
      if (clipped[b][t] !== rewards[b][t]) changed += 1;
    }
  }
  return { clipped, frac: total > 0 ? changed / total : 0 };
}

// ---------------------------------------------------------------------------------- stage 2: KL

/** Per-token KL estimators of log_r = logprobs - ref_logprobs (kl.KL_ESTIMATORS). */
export const KL_ESTIMATORS = {
  k1: (r) => r,
  abs: (r) => Math.abs(r),
  k2: (r) => 0.5 * r * r,
  k3: (r) => Math.expm1(-r) + r,
};

/** (B, T) per-token KL, exactly 0 on padding (kl.token_kl). */
export function tokenKl(logprobs, refLogprobs, mask, estimator = "k1", clamp = null, ratioClamp = null) {
  const fn = KL_ESTIMATORS[estimator];
  if (!fn) throw new Error(`KL estimator must be one of k1, abs, k2, k3, got ${estimator}`);
  return mapRows(logprobs, (lp, b, t) => {
    let r = mask[b][t] > 0 ? 0 + (lp - refLogprobs[b][t]) : 0;
    if (ratioClamp !== null) r = Math.min(Math.max(r, -ratioClamp), ratioClamp);
    let k = fn(r);
    if (clamp !== null) k = Math.min(Math.max(k, -clamp), clamp);
    return k;
  });
}

/** Controller KL: mean over samples of each sample's token-mean KL (kl.observed_kl). */
export function observedKl(kl, mask) {
  if (kl.length === 0) return 0;
  const perRow = maskedMean(kl, mask, true);
  let s = 0;
  for (const v of perRow) s += v;
  return s / perRow.length;
}

/** Adaptive KL controller, Ziegler et al. 2019 (kl.next_beta). */
export function nextKlCoef(beta, observed, target, horizon, nSteps) {
  if (!(target > 0)) throw new Error(`adaptive KL controller needs target > 0, got ${target}`);
  if (!(horizon > 0)) throw new Error(`adaptive KL controller needs horizon > 0, got ${horizon}`);
  const error = Math.min(Math.max(observed / target - 1, -0.2), 0.2);
  return beta * (1 + (error * nSteps) / horizon);
}

/** Token-mean of a KL term over all valid tokens (kl.kl_term_mean). */
export function klTermMean(kl, mask) {
  return maskedMean(kl, mask);
}

// ------------------------------------------------------------------- stages 4-5: advantages

/** Response reward on the last valid token, minus beta * kl on every valid token. */
export function tokenRewards(rewards, mask, kl = null, beta = 0) {
  const last = lastTokenIndex(mask);
  const out = mask.map((row, b) => {
    const r = new Float64Array(row.length);
    r[last[b]] = rewards[b];
    if (kl !== null && beta !== 0) for (let t = 0; t < r.length; t++) r[t] -= beta * kl[b][t];
    return r;
  });
  return applyMask(out, mask);
}

function broadcast(seq, mask) {
  const out = new Array(mask.length);
  for (let b = 0; b < mask.length; b++) {
    const m = mask[b];
    const o = new Float64Array(m.length);
    for (let t = 0; t < m.length; t++) if (m[t] > 0) o[t] = 0 + seq[b];
    out[b] = o;
  }
  return out;
}

function seqRewards(tokens, mask, params) {
  return params.seq_rewards ?? maskedSum(tokens, mask, true);
}

/** R_t = r_t + gamma R_{t+1} over valid tokens (carryThrough) or the full width. */
export function discountedReturns(tokens, mask, gamma, carryThrough) {
  const rewards = applyMask(tokens, mask);
  let returns;
  if (carryThrough) {
    const c = compactValid(rewards, mask);
    returns = scatterBack(reverseDiscountedCumsum(c.x, gamma), c.order);
  } else {
    returns = reverseDiscountedCumsum(rewards, gamma);
  }
  return applyMask(returns, mask);
}

/** Plain GAE over the full width: delta_t = r_t + gamma V_{t+1} - V_t, V_T = 0 (advantages.gae). */
export function gae(tokens, values, gamma, lam) {
  const deltas = mapRows(
    tokens,
    (r, b, t) => r + gamma * (t + 1 < values[b].length ? values[b][t + 1] : 0) - values[b][t],
  );
  return reverseDiscountedCumsum(deltas, gamma * lam);
}

const ones = (B) => new Float64Array(B).fill(1);

/** The estimators, one signature: (tokens, mask, groupIds, params) -> {advantages, returns,
 *  baseline, scale} (advantages.ADVANTAGE_ESTIMATORS). params: gamma, lam, values,
 *  baseline_scores, seq_rewards, std_eps, std_ddof, singleton ("raw"), carry_through,
 *  whiten_ddof, whiten_eps, whiten_eps_mode. */
export const ADVANTAGE_ESTIMATORS = {
  gae(tokens, mask, groupIds, p) {
    if (!p.values) throw new Error("gae needs critic values (batch.values, shape (B, T))");
    const rewards = applyMask(tokens, mask);
    let adv;
    if (p.carry_through) {
      const c = compactValid(rewards, mask);
      const vC = applyMask(
        p.values.map((row, b) => gatherRow(row, c.order[b])),
        c.mask,
      );
      adv = scatterBack(gae(c.x, vC, p.gamma, p.lam), c.order);
    } else {
      adv = gae(rewards, p.values, p.gamma, p.lam);
    }
    const B = tokens.length;
    return {
      advantages: applyMask(adv, mask),
      returns: applyMask(mapRows(adv, (a, b, t) => a + p.values[b][t]), mask),
      baseline: new Float64Array(B),
      scale: ones(B),
    };
  },
  reinforce(tokens, mask, groupIds, p) {
    const returns = discountedReturns(tokens, mask, p.gamma, p.carry_through);
    const B = tokens.length;
    return { advantages: returns, returns, baseline: new Float64Array(B), scale: ones(B) };
  },
  grpo(tokens, mask, groupIds, p) {
    const seq = seqRewards(tokens, mask, p);
    const { mean, std } = groupBaseline(seq, groupIds, p);
    const scale = std.map((s) => s + p.std_eps);
    const adv = broadcast(seq.map((s, b) => (s - mean[b]) / scale[b]), mask);
    return { advantages: adv, returns: adv, baseline: mean, scale };
  },
  dr_grpo(tokens, mask, groupIds, p) {
    const seq = seqRewards(tokens, mask, p);
    const { mean } = groupBaseline(seq, groupIds, p);
    const adv = broadcast(seq.map((s, b) => s - mean[b]), mask);
    return { advantages: adv, returns: adv, baseline: mean, scale: ones(seq.length) };
  },
  rloo(tokens, mask, groupIds, p) {
    const seq = seqRewards(tokens, mask, p);
    const baseline = leaveOneOutBaseline(seq, groupIds);
    if (p.singleton === "zero") {
      // a group of one gets advantage 0 (verl rloo_vectorized): its baseline is its own score
      const single = new Set(singletonGroups(groupIds));
      groupIds.forEach((g, b) => {
        if (single.has(g)) baseline[b] = seq[b];
      });
    }
    const adv = broadcast(seq.map((s, b) => s - baseline[b]), mask);
    return { advantages: adv, returns: adv, baseline, scale: ones(seq.length) };
  },
  reinforce_pp(tokens, mask, groupIds, p) {
    const returns = discountedReturns(tokens, mask, p.gamma, p.carry_through);
    const adv = maskedWhiten(returns, mask, p.whiten_ddof, p.whiten_eps, p.whiten_eps_mode);
    const B = tokens.length;
    return { advantages: adv, returns, baseline: new Float64Array(B), scale: ones(B) };
  },
  reinforce_pp_baseline(tokens, mask, groupIds, p) {
    const seq = seqRewards(tokens, mask, p);
    const { mean } = groupBaseline(seq, groupIds, p);
    const centred = broadcast(seq.map((s, b) => s - mean[b]), mask);
    const adv = maskedWhiten(centred, mask, p.whiten_ddof, p.whiten_eps, p.whiten_eps_mode);
    return { advantages: adv, returns: adv, baseline: mean, scale: ones(seq.length) };
  },
  length_weighted(tokens, mask, groupIds, p) {
    // OPO: A = s - sum_j L_j s_j / sum_j L_j over the group (a group of one: baseline 0)
    const seq = seqRewards(tokens, mask, p);
    const lengths = Float64Array.from(mask, (m) => m.reduce((a, x) => a + x, 0));
    const weighted = groupStats(seq.map((s, b) => lengths[b] * s), groupIds).sum;
    const totalLen = groupStats(lengths, groupIds).sum;
    const count = groupStats(seq, groupIds).count;
    const baseline = seq.map((_, b) => {
      if (count[b] <= 1) return 0;
      if (totalLen[b] === 0) {
        throw new Error("opo: a group whose responses are all empty has no length-weighted mean");
      }
      return weighted[b] / Math.max(totalLen[b], 1);
    });
    const adv = broadcast(seq.map((s, b) => s - baseline[b]), mask);
    return { advantages: adv, returns: adv, baseline, scale: ones(seq.length) };
  },
  gpg(tokens, mask, groupIds, p) {
    // GPG: A = alpha (s - group mean), alpha = B / max(#nonzero scores, 1)
    const seq = seqRewards(tokens, mask, p);
    let nonzero = 0;
    for (const s of seq) if (s !== 0) nonzero += 1;
    const alpha = seq.length / Math.max(nonzero, 1);
    const stats = groupStats(seq, groupIds);
    const mean = stats.mean.map((m, b) => (stats.count[b] > 1 ? m : 0));
    const adv = broadcast(seq.map((s, b) => alpha * (s - mean[b])), mask);
    return { advantages: adv, returns: adv, baseline: mean, scale: seq.map(() => 1.0 / alpha) };
  },
  passk(tokens, mask, groupIds, p) {
    // pass@k: each group's best sample gets (r_max - r_second) / (std + eps), the others 0
    const seq = seqRewards(tokens, mask, p);
    requireGroupSize(groupIds, p.group_labels, "grpo_passk");
    const stats = groupStats(seq, groupIds, p.std_ddof);
    const advSeq = new Float64Array(seq.length);
    const baseline = Float64Array.from(seq);
    const members = new Map();
    groupIds.forEach((g, b) => members.set(g, [...(members.get(g) ?? []), b]));
    for (const idx of members.values()) {
      const order = [...idx].sort((a, b) => seq[b] - seq[a] || a - b);
      const [best, second] = order;
      baseline[best] = seq[second];
      advSeq[best] = seq[best] - seq[second];
    }
    const scale = p.std_eps == null ? ones(seq.length) : stats.std.map((s) => s + p.std_eps);
    const adv = broadcast(advSeq.map((a, b) => a / scale[b]), mask);
    return { advantages: adv, returns: adv, baseline, scale };
  },
  remax(tokens, mask, groupIds, p) {
    if (!p.baseline_scores) {
      throw new Error("remax needs greedy baseline scores (batch.baseline_scores, shape (B,))");
    }
    const returns = discountedReturns(tokens, mask, 1.0, false);
    const adv = applyMask(
      mapRows(returns, (r, b) => r - p.baseline_scores[b]),
      mask,
    );
    return {
      advantages: adv,
      returns,
      baseline: p.baseline_scores.slice(),
      scale: ones(tokens.length),
    };
  },
};

/**
 * Group mean/std in float32 as verl's group_mean_std (one pass each, no refinement):
 * advantages._group_stats_float32 (verl grpo_vectorized).
 */
function groupStatsFloat32(values, groupIds, ddof) {
  const f = Math.fround;
  let N = 0;
  for (const g of groupIds) N = Math.max(N, g + 1);
  const sums = new Float32Array(N);
  const counts = new Float32Array(N);
  for (let b = 0; b < values.length; b++) {
    sums[groupIds[b]] = f(sums[groupIds[b]] + f(values[b]));
    counts[groupIds[b]] += 1;
  }
  const means = Float32Array.from(sums, (s, g) => f(s / Math.max(counts[g], 1)));
  const sq = new Float32Array(N);
  for (let b = 0; b < values.length; b++) {
    const c = f(f(values[b]) - means[groupIds[b]]);
    sq[groupIds[b]] = f(sq[groupIds[b]] + f(c * c));
  }
  const std = Float32Array.from(sq, (s, g) => f(Math.sqrt(f(s / Math.max(counts[g] - ddof, 1)))));
  const gather = (arr) => Float64Array.from(groupIds, (g) => arr[g]);
  return { mean: gather(means), std: gather(std), count: gather(counts) };
}

/** Group mean/std with verl's singleton rule (mean 0, std 1): advantages._group_baseline. */
function groupBaseline(seq, groupIds, p) {
  const stats = p.float32_stats
    ? groupStatsFloat32(seq, groupIds, p.std_ddof)
    : groupStats(seq, groupIds, p.std_ddof);
  const single = stats.count.map((c) => (c <= 1 ? 1 : 0));
  return {
    mean: stats.mean.map((m, b) => (single[b] ? 0 : m)),
    std: stats.std.map((s, b) => (single[b] ? 1 : s)),
  };
}

// ------------------------------------------------------------------------ stage 6: dialects

function conventions(cfg, stdDdof, eps, whitenDdof) {
  return {
    std_ddof: cfg.viz_std_ddof ?? stdDdof,
    eps: cfg.viz_eps ?? eps,
    whiten_ddof: whitenDdof === null ? null : (cfg.viz_whiten_ddof ?? whitenDdof),
  };
}

function batchKl(batch, estimator, clamp, ratioClamp = null) {
  if (!batch.logprobs) return zerosLike(batch.response_mask);
  return tokenKl(batch.logprobs, batch.ref_logprobs, batch.response_mask, estimator, clamp, ratioClamp);
}

function controller(beta, kl, mask, target, horizon) {
  if (target === null || target === undefined) return beta;
  return nextKlCoef(beta, observedKl(kl, mask), target, horizon, kl.length);
}

function trace(framework, batch, fields) {
  const mask = batch.response_mask;
  const out = { framework, scores: batch.scores, ...fields };
  for (const key of ["kl", "token_rewards", "advantages", "returns"]) {
    out[key] = applyMask(fields[key], mask);
  }
  return out;
}

const ROLL_KL = { kl: "k1", abs: "abs", mse: "k2", k3: "k3" };

function rollWhiten(x, mask, conv) {
  if (countValid(mask) <= 1) return x; // ROLL PR #476: whitening skipped with <= 1 token
  return maskedWhiten(x, mask, conv.whiten_ddof, 1e-8, "add");
}

/** ROLL RLVR: reward_postprocess -> compute_token_reward -> compute_advantage. */
export function rollPipeline(batch, cfg, running = null) {
  const mask = batch.response_mask;
  const scores = batch.scores;
  const est = cfg.adv_estimator;
  const conv = conventions(cfg, 1, 1e-6, 1);
  let meanType = cfg.norm_mean_type;
  let stdType = cfg.norm_std_type;
  if (est === "grpo") meanType = stdType = "group";
  let run = running;
  if (meanType === "running" || stdType === "running") {
    run = updateRunningMoments(running ?? { mean: 0, var: 1, count: 1e-24 }, scores);
  }
  if (stdType === "group" && meanType !== "group") {
    throw new Error(
      `norm_std_type: group needs norm_mean_type: group in ROLL (got ${meanType}): its ` +
        "reward_norm divides the (B,) rewards by the (prompts, 1) group std, a (prompts, B) " +
        "broadcast the batch cannot store (ROLL raises)",
    );
  }
  if (stdType === "group" && conv.std_ddof > 0) {
    const singles = singletonGroups(batch.group_ids, batch.group_labels);
    if (singles.length) {
      throw new Error(
        `roll ${est} with group std needs at least 2 samples per prompt (group ${singles[0]} ` +
          "has 1): ROLL takes torch.std of one value, which is NaN",
      );
    }
  }
  const norm = normalizeScores(
    scores, batch.group_ids, meanType, stdType, run, conv.std_ddof, conv.eps, batch.group_labels,
  );
  const clip = cfg.reward_clip;
  const { clipped: rewards, frac: clipFrac } = clipRewards(
    norm.rewards, clip ? -clip : null, clip ?? null,
  );
  const kl = batchKl(batch, ROLL_KL[cfg.kl_penalty], cfg.kl_penalty === "k3" ? 10 : null);
  const beta = cfg.init_kl_coef;
  const klInReward = cfg.add_token_level_kl;
  let tokens = tokenRewards(rewards, mask, klInReward ? kl : null, beta);
  const nextBeta = controller(beta, kl, mask, cfg.target_kl, cfg.kl_horizon);
  if (clip) tokens = clipRewards(tokens, -clip, clip, mask).clipped;
  if (cfg.whiten_rewards) tokens = rollWhiten(tokens, mask, conv);
  const params = { gamma: cfg.gamma, lam: cfg.lambd, values: batch.values, carry_through: false };
  const estimate = ADVANTAGE_ESTIMATORS[est === "gae" ? "gae" : "reinforce"](
    tokens, mask, batch.group_ids, params,
  );
  let advantages = estimate.advantages;
  if (cfg.whiten_advantages) advantages = rollWhiten(advantages, mask, conv);
  if (cfg.advantage_clip) {
    const c = cfg.advantage_clip;
    advantages = clipRewards(advantages, -c, c, mask).clipped;
  }
  return trace("roll", batch, {
    rewards, baseline: norm.baseline, scale: norm.scale, clip_frac: clipFrac, kl,
    kl_coef: beta, next_kl_coef: nextBeta, kl_in_reward: klInReward,
    token_rewards: tokens, advantages, returns: estimate.returns, running: run,
  });
}

const VERL_KL = { kl: "k1", k1: "k1", abs: "abs", mse: "k2", k2: "k2", low_var_kl: "k3", k3: "k3" };
const VERL_ESTIMATORS = {
  gae: "gae",
  grpo: "grpo",
  grpo_vectorized: "grpo",
  rloo: "rloo",
  rloo_vectorized: "rloo",
  reinforce_plus_plus: "reinforce_pp",
  reinforce_plus_plus_baseline: "reinforce_pp_baseline",
  remax: "remax",
  opo: "length_weighted",
  gpg: "gpg",
  grpo_passk: "passk",
  gdpo: "gdpo",
};

/** verl gdpo without gdpo_reward_keys: the combined reward as its one component (GRPO: the
 *  trainer does not pass norm_adv_by_std_in_grpo to gdpo), then token-weighted whitening. */
function verlGdpo(mask, groupIds, params, byStd) {
  const zeros = mask.map((m) => new Float64Array(m.length));
  const part = ADVANTAGE_ESTIMATORS[byStd ? "grpo" : "dr_grpo"](zeros, mask, groupIds, params);
  const total = mapRows(part.advantages, (a) => 0 + 1.0 * a);
  const adv = applyMask(
    maskedWhiten(total, mask, params.whiten_ddof, params.whiten_eps, params.whiten_eps_mode),
    mask,
  );
  const B = mask.length;
  return { advantages: adv, returns: adv, baseline: new Float64Array(B), scale: ones(B) };
}

function verlKl(batch, name) {
  const canonical = VERL_KL[name];
  return canonical === "k3" ? batchKl(batch, "k3", 10, 20) : batchKl(batch, canonical, null);
}

/** verl: (apply_kl_penalty) -> compute_advantage, normalization inside the estimator. */
export function verlPipeline(batch, cfg, running = null) {
  const mask = batch.response_mask;
  const scores = batch.scores;
  const est = cfg.adv_estimator;
  const conv = conventions(cfg, 1, 1e-6, 1);
  const kl = verlKl(batch, cfg.kl_penalty);
  const beta = cfg.kl_coef;
  let nextBeta = beta;
  const klInReward = cfg.use_kl_in_reward;
  const tokens = tokenRewards(scores, mask, klInReward ? kl : null, beta);
  if (klInReward && cfg.kl_ctrl_type === "adaptive") {
    nextBeta = controller(beta, kl, mask, cfg.target_kl, cfg.horizon);
  }
  // a zero-length response's score has no token; verl still sums it into s_i (index -1)
  const rowSums = maskedSum(tokens, mask, true);
  const seq = rowSums.map((s, b) => s + (countValid([mask[b]]) === 0 ? scores[b] : 0));
  let name = VERL_ESTIMATORS[est];
  if (est === "grpo" && !cfg.norm_adv_by_std_in_grpo) name = "dr_grpo";
  const noStd = est === "grpo_passk" && !cfg.norm_adv_by_std_in_grpo;
  const params = {
    gamma: cfg.gamma, lam: cfg.lam, values: batch.values, baseline_scores: batch.baseline_scores,
    seq_rewards: seq, std_eps: noStd ? null : conv.eps, std_ddof: conv.std_ddof,
    singleton: est === "rloo_vectorized" ? "zero" : "raw",
    carry_through: true, whiten_ddof: conv.whiten_ddof, whiten_eps: 1e-8, whiten_eps_mode: "add",
    group_labels: batch.group_labels, float32_stats: est === "grpo_vectorized",
  };
  let estimate;
  let advantages;
  try {
    estimate =
      name === "gdpo"
        ? verlGdpo(mask, batch.group_ids, params, true)
        : ADVANTAGE_ESTIMATORS[name](tokens, mask, batch.group_ids, params);
    advantages = estimate.advantages;
    if (name === "gae") advantages = maskedWhiten(advantages, mask, conv.whiten_ddof, 1e-8, "add");
  } catch (err) {
    throw new Error(`verl ${est}: ${err.message}`);
  }
  return trace("verl", batch, {
    rewards: scores.slice(), baseline: estimate.baseline, scale: estimate.scale, clip_frac: 0,
    kl, kl_coef: beta, next_kl_coef: nextBeta, kl_in_reward: klInReward,
    token_rewards: tokens, advantages, returns: estimate.returns, running,
  });
}

const OPENRLHF_GROUP_ESTIMATORS = ["rloo", "reinforce_baseline", "group_norm", "dr_grpo"];

/** OpenRLHF: shaping -> clamp -> compute_reward -> returns -> global whitening. */
export function openrlhfPipeline(batch, cfg, running = null) {
  const mask = batch.response_mask;
  const scores = batch.scores;
  const est = cfg.advantage_estimator;
  const conv = conventions(cfg, 1, 1e-9, 0);
  const B = scores.length;
  let gamma = cfg.gamma;
  let baseline = new Float64Array(B);
  let scale = ones(B);
  if (OPENRLHF_GROUP_ESTIMATORS.includes(est)) {
    requireGroupSize(batch.group_ids, batch.group_labels, `openrlhf ${est}`);
    gamma = 1.0;
    const stats = groupStats(scores, batch.group_ids, conv.std_ddof);
    baseline = est === "rloo" ? leaveOneOutBaseline(scores, batch.group_ids) : stats.mean;
    if (est === "group_norm") scale = stats.std.map((s) => s + conv.eps);
  } else if (est === "flash_reinforce") {
    gamma = 1.0; // reward minus the whole batch's mean, no group, no whitening
    const mean = scores.reduce((a, s) => a + s, 0) / B;
    baseline = baseline.map(() => mean);
  }
  const shaped = scores.map((s, b) => (s - baseline[b]) / scale[b]);
  const [low, high] = cfg.clip_range ?? [null, null];
  const { clipped: rewards, frac: clipFrac } = clipRewards(shaped, low, high);
  const kl = batchKl(batch, cfg.kl_estimator, 10);
  const beta = Math.max(cfg.init_coef, 0);
  const klInReward = !cfg.use_loss && beta > 0;
  const tokens = tokenRewards(rewards, mask, klInReward ? kl : null, beta);
  const nextBeta = controller(beta, kl, mask, cfg.target, cfg.horizon);
  let estimate;
  if (est === "gae") {
    const values = batch.values ? applyMask(batch.values, mask) : null;
    estimate = ADVANTAGE_ESTIMATORS.gae(tokens, mask, batch.group_ids, {
      gamma, lam: cfg.lambd, values, carry_through: false,
    });
  } else {
    estimate = ADVANTAGE_ESTIMATORS.reinforce(tokens, mask, batch.group_ids, {
      gamma, carry_through: false,
    });
  }
  let advantages = estimate.advantages;
  if (["gae", "reinforce", "reinforce_baseline"].includes(est) && countValid(mask) > 0) {
    if (cfg.no_std_norm) {
      const mean = maskedMean(advantages, mask);
      advantages = mapRows(advantages, (a) => a - mean);
    } else {
      advantages = maskedWhiten(advantages, mask, conv.whiten_ddof, 1e-8, "floor");
    }
  }
  return trace("openrlhf", batch, {
    rewards, baseline, scale, clip_frac: clipFrac, kl, kl_coef: beta, next_kl_coef: nextBeta,
    kl_in_reward: klInReward, token_rewards: tokens, advantages,
    returns: estimate.returns, running,
  });
}

/** TRL normalize_then_sum with the combined reward as the one reward function: z-score per
 *  group, then over the batch (scale_rewards unused). */
function trlNormalizeThenSum(batch, cfg, conv, running) {
  const mask = batch.response_mask;
  const scores = batch.scores;
  const stats = groupStats(scores, batch.group_ids, conv.std_ddof);
  const total = scores.map((s, b) => 0 + (1.0 * (s - stats.mean[b])) / (stats.std[b] + conv.eps));
  let mean = 0;
  for (const x of total) mean += x;
  mean /= total.length;
  const std = vectorStd(total, conv.std_ddof);
  const advantages = broadcast(total.map((x) => (x - mean) / (std + conv.eps)), mask);
  const kl = batchKl(batch, "k3", null);
  return trace("trl", batch, {
    rewards: total, baseline: total.map(() => 0 + mean), scale: total.map(() => 0 + std + conv.eps),
    clip_frac: 0, kl, kl_coef: cfg.beta, next_kl_coef: cfg.beta, kl_in_reward: false,
    token_rewards: tokenRewards(scores, mask), advantages, returns: advantages, running,
  });
}

/** TRL GRPOTrainer: (r - group mean) / (group|batch std + 1e-4); KL only in the loss. */
export function trlPipeline(batch, cfg, running = null) {
  const mask = batch.response_mask;
  const scores = batch.scores;
  const mode = cfg.scale_rewards;
  const conv = conventions(cfg, 1, 1e-4, null);
  requireGroupSize(batch.group_ids, batch.group_labels, "trl GRPO (num_generations)");
  if (cfg.multi_objective_aggregation === "normalize_then_sum") {
    return trlNormalizeThenSum(batch, cfg, conv, running);
  }
  const stats = groupStats(scores, batch.group_ids, conv.std_ddof);
  const baseline = stats.mean;
  let scale;
  if (mode === "group") scale = stats.std.map((s) => s + conv.eps);
  else if (mode === "batch") {
    const s = vectorStd(scores, conv.std_ddof) + conv.eps;
    scale = scores.map(() => s);
  } else scale = ones(scores.length);
  const advantages = broadcast(scores.map((s, b) => (s - baseline[b]) / scale[b]), mask);
  const kl = batchKl(batch, "k3", null);
  return trace("trl", batch, {
    rewards: scores.slice(), baseline, scale, clip_frac: 0, kl, kl_coef: cfg.beta,
    next_kl_coef: cfg.beta, kl_in_reward: false,
    token_rewards: tokenRewards(scores, mask), advantages, returns: advantages, running,
  });
}

export const PIPELINES = {
  roll: rollPipeline,
  verl: verlPipeline,
  openrlhf: openrlhfPipeline,
  trl: trlPipeline,
};

// ------------------------------------------------------------------------- coverage, entry

// Which keys and values each port above computes exactly is not typed here: it is each Python
// dialect record's BROWSER_COVERAGE (roll_viz/core/pipeline/dialects/<name>.py), shipped in the
// payload (payload.coverage, ui/instant/payload.py browser_coverage) with the viz_ keys added.

/**
 * Whether this module computes (framework, config) exactly.
 * config: a resolved config (every key of that framework's DEFAULTS); coverage: that
 * framework's table from the payload (key -> the values covered, null for any value; absent:
 * the framework has no browser port). Returns {ok: true} or {ok: false, reason} naming the
 * first key/value this module does not know; the caller then uses the server path (and says so).
 */
export function covered(framework, config, coverage) {
  if (!(framework in PIPELINES) || !coverage) {
    return { ok: false, reason: `framework ${framework} not covered` };
  }
  for (const key of Object.keys(coverage)) {
    if (!(key in config)) return { ok: false, reason: `config key ${key} missing (not resolved)` };
  }
  for (const [key, value] of Object.entries(config)) {
    if (!(key in coverage)) return { ok: false, reason: `config key ${key} not covered` };
    const choices = coverage[key];
    if (choices && !choices.includes(value)) {
      return { ok: false, reason: `${key}=${JSON.stringify(value)} not covered` };
    }
  }
  for (const key of ["gamma", "lambd", "lam"]) {
    if (key in config && !(config[key] >= 0 && config[key] <= 1)) {
      return { ok: false, reason: `${key}=${config[key]} outside [0, 1]` };
    }
  }
  return { ok: true };
}

/**
 * Run one framework's pipeline (roll_viz.core.pipeline.run): same inputs, same numbers.
 * running: ROLL's running statistics or null; coverage: the framework's table (see covered).
 * Throws an Error where Python raises ValueError (a group too small, missing values, any
 * non-finite result) and where the config is not covered.
 */
export function run(batch, framework, config, running, coverage) {
  const cov = covered(framework, config, coverage);
  if (!cov.ok) throw new Error(`not covered by the browser pipeline: ${cov.reason}`);
  const out = PIPELINES[framework](batch, config, running);
  for (const name of ["kl", "token_rewards", "advantages", "returns"]) {
    const x = out[name];
    for (let b = 0; b < x.length; b++) {
      const row = x[b];
      let sum = 0;
      for (let t = 0; t < row.length; t++) sum += row[t] * 0; // NaN iff some entry is inf/NaN
      if (sum !== 0) {
        const t = row.findIndex((v) => !Number.isFinite(v));
        throw new Error(`${framework}: non-finite ${name} at [${b}, ${t}]`);
      }
    }
  }
  for (let b = 0; b < out.rewards.length; b++) {
    if (!Number.isFinite(out.rewards[b])) throw new Error(`${framework}: non-finite rewards at [${b}]`);
  }
  for (const name of ["kl_coef", "next_kl_coef", "clip_frac"]) {
    if (!Number.isFinite(out[name])) {
      throw new Error(`${framework}: non-finite ${name} (${out[name]})`);
    }
  }
  return out;
}

// -------------------------------------------------------------------------------- payload codec

function b64ToBytes(b64) {
  if (typeof atob === "function") {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }
  return new Uint8Array(Buffer.from(b64, "base64"));
}

/** {dtype: "f8"|"u1"|"i8", shape: [B] | [B, T], b64} (little-endian) -> Float64Array or rows. */
export function decodeArray(enc) {
  if (enc === null || enc === undefined) return null;
  const bytes = b64ToBytes(enc.b64);
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  let flat;
  if (enc.dtype === "f8") flat = new Float64Array(buf);
  else if (enc.dtype === "u1") flat = Float64Array.from(new Uint8Array(buf));
  else if (enc.dtype === "i4") flat = Float64Array.from(new Int32Array(buf));
  else throw new Error(`unknown dtype ${enc.dtype}`);
  if (enc.shape.length === 1) return flat;
  const [B, T] = enc.shape;
  return Array.from({ length: B }, (_, b) => flat.slice(b * T, (b + 1) * T));
}

/** The payload's batch (roll_viz.ui.instant.batch_payload) as the arrays this module uses. */
export function decodeBatch(p) {
  const gids = decodeArray(p.group_ids);
  return {
    scores: decodeArray(p.scores),
    response_mask: decodeArray(p.response_mask),
    group_ids: Array.from(gids, (g) => Math.round(g)),
    group_labels: p.group_labels ?? [],
    logprobs: decodeArray(p.logprobs),
    ref_logprobs: decodeArray(p.ref_logprobs),
    values: decodeArray(p.values),
    baseline_scores: decodeArray(p.baseline_scores),
  };
}

/** The first groupSize rows of every prompt, in row order (payload.subset_groups). */
export function subsetGroups(batch, groupSize) {
  if (!(groupSize >= 1)) throw new Error(`group size must be >= 1, got ${groupSize}`);
  const seen = new Map();
  const keep = [];
  batch.group_ids.forEach((g, row) => {
    const n = (seen.get(g) || 0) + 1;
    seen.set(g, n);
    if (n <= groupSize) keep.push(row);
  });
  const vec = (x) => (x ? Float64Array.from(keep, (r) => x[r]) : null);
  const mat = (x) => (x ? keep.map((r) => x[r]) : null);
  return {
    scores: vec(batch.scores),
    response_mask: mat(batch.response_mask),
    group_ids: keep.map((r) => batch.group_ids[r]),
    group_labels: batch.group_labels,
    logprobs: mat(batch.logprobs),
    ref_logprobs: mat(batch.ref_logprobs),
    values: mat(batch.values),
    baseline_scores: vec(batch.baseline_scores),
  };
}
