// The instant local-vs-global Streamlit component (st.components.v2): for every sample its
// LOCAL advantage (r - group mean) / (group std + eps) and its GLOBAL advantage
// (r - batch mean) / (batch std + eps), recomputed in the browser on every slider input event
// and drawn in place on two canvases (scatter + group std bars) and a per-sample table.
//
// Loaded as ONE module: roll_viz/ui/instant/__init__.py concatenates pipeline.js, bulk.js and
// this file, so the pipeline's functions (run, groupStats, vectorStd, subsetGroups, decodeArray)
// and bulk.js's (withBulk, waitForBulk: the rewards are sent once per tab) are in scope.
// Both sides go through pipeline.js's ROLL dialect with the resolved configs Python sent
// (roll_viz.analysis.local_global.local_vs_global does the same in Python; tests/js checks the
// two agree to 1e-9). The settled knobs go back to Python on release. Every string from the
// payload (prompts are user text) is rendered with textContent or canvas fillText, never HTML.

const LG_STD_CHOICES = {
  group: "group std (GRPO)",
  none: "nothing: mean only (Dr.GRPO)",
};

function lgEl(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = String(text);
  return node;
}

function lgFmt(x, digits = 4) {
  if (x === null || x === undefined || Number.isNaN(x)) return "undefined";
  return Number(x).toFixed(digits);
}

/** eps as the slider shows it: 1e-6, 3.16e-7, 0.01, 1 */
function lgEpsText(eps) {
  const x = Number(eps);
  if (!(x > 0) || x >= 1e-3) return String(Number(x.toPrecision(3)));
  const [m, e] = x.toExponential(2).split("e");
  return `${Number(m)}e${e}`;
}

// ------------------------------------------------------------------------------ the numbers

/** One response-level token per sample (local_global._response_batch). */
function lgResponseBatch(scores, groupIds) {
  const B = scores.length;
  let P = 0;
  for (const g of groupIds) P = Math.max(P, g + 1);
  return {
    scores: Float64Array.from(scores),
    response_mask: Array.from({ length: B }, () => Float64Array.of(1)),
    group_ids: Array.from(groupIds),
    group_labels: Array.from({ length: P }, (_, p) => p),
    logprobs: null,
    ref_logprobs: null,
    values: null,
    baseline_scores: null,
  };
}

/** ROLL's normalized response-level rewards, rows sorted stably into contiguous groups and
 *  renumbered in order of first appearance (local_global._normalized_rewards). */
function lgNormalized(scores, groupIds, cfg, coverage) {
  const B = scores.length;
  const order = Array.from({ length: B }, (_, i) => i).sort(
    (a, b) => groupIds[a] - groupIds[b] || a - b,
  );
  const lookup = new Map();
  const renum = order.map((i) => {
    const g = groupIds[i];
    if (!lookup.has(g)) lookup.set(g, lookup.size);
    return lookup.get(g);
  });
  const sorted = Float64Array.from(order, (i) => scores[i]);
  const out = run(lgResponseBatch(sorted, renum), "roll", cfg, null, coverage);
  const res = new Float64Array(B);
  order.forEach((i, k) => {
    res[i] = out.rewards[k];
  });
  return res;
}

/**
 * Local vs global advantages of (B,) rewards (roll_viz.analysis.local_global.local_vs_global).
 *
 * scores: (B,) rewards; groupIds: (B,) prompt index 0..P-1; opts: {localConfig, globalConfig}
 * (resolved ROLL configs from the payload), coverage (the payload's ROLL coverage table), std: "group" (divide by the group std, GRPO) or
 * "none" (mean only, Dr.GRPO: a single-sample group then gets 0, not NaN), eps: added to
 * every std (ROLL: 1e-6).
 * Returns {local, global, within, count, groupMean, groupStd, scale (P,), batchMean, batchStd}:
 * local is NaN for single-sample groups when std = "group", global is NaN when B == 1.
 */
export function localVsGlobal(scores, groupIds, opts) {
  const B = scores.length;
  const eps = opts.eps ?? 1e-6;
  const std = opts.std ?? "group";
  let P = 0;
  for (const g of groupIds) P = Math.max(P, g + 1);
  const stats = groupStats(scores, groupIds);
  const count = new Float64Array(P);
  const groupMean = new Float64Array(P).fill(NaN);
  const groupStd = new Float64Array(P).fill(NaN);
  const within = new Array(B);
  for (let b = 0; b < B; b++) {
    const g = groupIds[b];
    within[b] = count[g];
    if (count[g] === 0) {
      groupMean[g] = stats.mean[b];
      groupStd[g] = stats.std[b];
    }
    count[g] += 1;
  }
  const local = new Float64Array(B).fill(NaN);
  if (std === "group") {
    const cfg = { ...opts.localConfig, viz_eps: eps };
    const rows = [];
    for (let b = 0; b < B; b++) if (count[groupIds[b]] > 1) rows.push(b);
    if (rows.length) {
      const part = lgNormalized(
        rows.map((b) => scores[b]), rows.map((b) => groupIds[b]), cfg, opts.coverage,
      );
      rows.forEach((b, k) => {
        local[b] = part[k];
      });
    }
  } else if (std === "none") {
    const cfg = { ...opts.localConfig, norm_std_type: null, viz_eps: eps };
    local.set(lgNormalized(scores, groupIds, cfg, opts.coverage));
  } else {
    throw new Error(`std must be 'group' or 'none', got ${std}`);
  }
  let global = new Float64Array(B).fill(NaN);
  let batchStd = NaN;
  if (B > 1) {
    const globalCfg = { ...opts.globalConfig, viz_eps: eps };
    global = lgNormalized(scores, new Array(B).fill(0), globalCfg, opts.coverage);
    batchStd = vectorStd(scores);
  }
  let sum = 0;
  for (const s of scores) sum += s;
  const batchMean = sum / B;
  const localDiv = std === "group" ? groupStd.map((s) => s + eps) : groupStd.map(() => 1);
  const scale = localDiv.map((d) => (batchStd + eps) / d);
  return { local, global, within, count, groupMean, groupStd, scale, batchMean, batchStd };
}

/** The shown subset: the first G samples of every prompt (payload.subset_groups). */
export function lgSubset(data, G) {
  const batch = subsetGroups(
    {
      scores: data.scores, response_mask: null, group_ids: data.group_ids,
      group_labels: data.group_labels, logprobs: null, ref_logprobs: null, values: null,
      baseline_scores: null,
    },
    G,
  );
  return { scores: batch.scores, group_ids: batch.group_ids, group_labels: data.group_labels };
}

/** The payload (payload.local_global_payload) decoded. */
export function lgDecode(payload) {
  return {
    scores: decodeArray(payload.scores),
    group_ids: Array.from(decodeArray(payload.group_ids), (g) => Math.round(g)),
    group_labels: payload.group_labels ?? [],
  };
}

// ------------------------------------------------------------------------------ drawing

function lgCanvas(canvas, cssHeight) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || canvas.parentNode?.clientWidth || 500;
  const W = Math.round(w * dpr);
  const H = Math.round(cssHeight * dpr);
  canvas.style.height = `${cssHeight}px`;
  // resizing a canvas reallocates it: only when the size really changed
  if (canvas.width !== W) canvas.width = W;
  if (canvas.height !== H) canvas.height = H;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, cssHeight);
  return { ctx, w, h: cssHeight };
}

function lgTicks(lim) {
  const raw = lim / 2.5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let v = -Math.floor(lim / step) * step; v <= lim + 1e-12; v += step) {
    ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return ticks;
}

function lgMarker(ctx, k, x, y, r) {
  ctx.beginPath();
  const shape = k % 4;
  if (shape === 0) ctx.arc(x, y, r, 0, 2 * Math.PI);
  else if (shape === 1) ctx.rect(x - r * 0.85, y - r * 0.85, 1.7 * r, 1.7 * r);
  else if (shape === 2) {
    ctx.moveTo(x, y - r * 1.2);
    ctx.lineTo(x + r * 1.2, y);
    ctx.lineTo(x, y + r * 1.2);
    ctx.lineTo(x - r * 1.2, y);
    ctx.closePath();
  } else {
    ctx.moveTo(x, y - r * 1.2);
    ctx.lineTo(x + r * 1.1, y + r * 0.8);
    ctx.lineTo(x - r * 1.1, y + r * 0.8);
    ctx.closePath();
  }
  ctx.fill();
  ctx.stroke();
}

function lgShort(text, n) {
  const s = String(text).replace(/\s+/g, " ").trim();
  return s.length > n ? `${s.slice(0, n - 1)}\u2026` : s;
}

/** x = global, y = local advantage; the dashed diagonal local = global. Returns point pixels. */
function lgDrawScatter(state, res, shown) {
  const { ui, palette, ink } = state;
  const { ctx, w, h } = lgCanvas(ui.scatter, state.plotH);
  let m = 0;
  for (let b = 0; b < res.local.length; b++) {
    for (const v of [res.local[b], res.global[b]]) if (Number.isFinite(v)) m = Math.max(m, Math.abs(v));
  }
  const lim = Math.max(m, 1) * 1.1;
  const left = 52;
  const bottom = 40;
  const size = Math.max(Math.min(w - left - 12, h - bottom - 12), 40);
  const x0 = left;
  const y0 = 10;
  const px = (v) => x0 + ((v + lim) / (2 * lim)) * size;
  const py = (v) => y0 + ((lim - v) / (2 * lim)) * size;
  ctx.font = "11px sans-serif";
  ctx.lineWidth = 1;
  ctx.strokeStyle = "rgba(128,128,128,0.25)";
  ctx.fillStyle = ink;
  const ticks = lgTicks(lim);
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (const t of ticks) {
    ctx.beginPath();
    ctx.moveTo(px(t), y0);
    ctx.lineTo(px(t), y0 + size);
    ctx.moveTo(x0, py(t));
    ctx.lineTo(x0 + size, py(t));
    ctx.stroke();
    ctx.fillText(String(Number(t.toPrecision(3))), px(t), y0 + size + 4);
  }
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const t of ticks) ctx.fillText(String(Number(t.toPrecision(3))), x0 - 5, py(t));
  ctx.strokeStyle = "rgba(128,128,128,0.6)";
  ctx.strokeRect(x0, y0, size, size);
  ctx.textAlign = "center";
  ctx.textBaseline = "bottom";
  ctx.fillText("global advantage (batch mean / std)", x0 + size / 2, y0 + size + 36);
  ctx.save();
  ctx.translate(12, y0 + size / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textBaseline = "top";
  ctx.fillText("local advantage (group)", 0, 0);
  ctx.restore();
  // diagonal local = global
  ctx.save();
  ctx.setLineDash([5, 4]);
  ctx.strokeStyle = "#888888";
  ctx.beginPath();
  ctx.moveTo(px(-lim), py(-lim));
  ctx.lineTo(px(lim), py(lim));
  ctx.stroke();
  ctx.restore();
  ctx.textAlign = "left";
  ctx.textBaseline = "top";
  ctx.fillStyle = "#888888";
  ctx.fillText("local = global", px(lim * 0.42) + 8, py(lim * 0.42) + 4);
  const points = [];
  // samples on the same spot (ties, or two prompts with the same rewards): "x n" next to it;
  // translucent fills with full-colour outlines keep every prompt's marker visible
  const stacked = new Map();
  ctx.lineWidth = 1.6;
  for (let b = 0; b < res.local.length; b++) {
    const y = res.local[b];
    const x = res.global[b];
    if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
    const g = shown.group_ids[b];
    const colour = palette[g % palette.length];
    ctx.fillStyle = `${colour}66`;
    ctx.strokeStyle = colour;
    lgMarker(ctx, g, px(x), py(y), 5);
    points.push([px(x), py(y), b]);
    const spot = `${Math.round(px(x) / 2)}:${Math.round(py(y) / 2)}`;
    const seen = stacked.get(spot);
    stacked.set(spot, seen ? [seen[0], seen[1], seen[2] + 1] : [px(x), py(y), 1]);
  }
  ctx.fillStyle = ink;
  ctx.textAlign = "left";
  ctx.textBaseline = "middle";
  for (const [x, y, n] of stacked.values()) if (n > 1) ctx.fillText(`\u00d7${n}`, x + 8, y);
  return points;
}

/** One horizontal bar per prompt: its group std, next to the batch std (dashed line). */
function lgDrawBars(state, res, shown) {
  const { ui, palette, ink } = state;
  const P = res.count.length;
  const { ctx, w, h } = lgCanvas(ui.bars, Math.max(state.plotH, 26 * P + 60));
  const left = Math.min(150, Math.max(90, w * 0.32));
  const right = 70;
  const top = 22;
  const rowH = (h - top - 34) / Math.max(P, 1);
  let m = Number.isFinite(res.batchStd) ? res.batchStd : 0;
  for (const s of res.groupStd) if (Number.isFinite(s)) m = Math.max(m, s);
  m = m > 0 ? m * 1.05 : 1;
  const pw = Math.max(w - left - right, 20);
  const px = (v) => left + (v / m) * pw;
  ctx.font = "11px sans-serif";
  ctx.fillStyle = ink;
  ctx.textAlign = "left";
  ctx.textBaseline = "top";
  ctx.fillText("group std (what local divides by)", left, 2);
  for (let p = 0; p < P; p++) {
    const y = top + p * rowH;
    const s = res.groupStd[p];
    const label = lgShort(shown.group_labels[p] ?? `prompt ${p}`, 22);
    ctx.fillStyle = ink;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    ctx.fillText(label, left - 6, y + rowH / 2);
    if (res.count[p] === 0) continue;
    const bh = Math.max(Math.min(rowH * 0.62, 18), 3);
    ctx.fillStyle = palette[p % palette.length];
    const wBar = Number.isFinite(s) ? Math.max(px(s) - left, s > 0 ? 1 : 0) : 0;
    ctx.fillRect(left, y + (rowH - bh) / 2, wBar, bh);
    ctx.fillStyle = ink;
    ctx.textAlign = "left";
    const txt = Number.isFinite(s) ? Number(s.toPrecision(3)).toString() : "undefined (n=1)";
    ctx.fillText(txt, left + wBar + 4, y + rowH / 2);
  }
  ctx.strokeStyle = "rgba(128,128,128,0.6)";
  ctx.beginPath();
  ctx.moveTo(left, top - 2);
  ctx.lineTo(left, top + P * rowH);
  ctx.stroke();
  if (Number.isFinite(res.batchStd)) {
    ctx.save();
    ctx.setLineDash([5, 4]);
    ctx.strokeStyle = ink;
    ctx.beginPath();
    ctx.moveTo(px(res.batchStd), top - 4);
    ctx.lineTo(px(res.batchStd), top + P * rowH + 4);
    ctx.stroke();
    ctx.restore();
    ctx.fillStyle = ink;
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    ctx.fillText(
      `batch std ${Number(res.batchStd.toPrecision(3))}`, px(res.batchStd), top + P * rowH + 8,
    );
  }
}

// ------------------------------------------------------------------------------ the UI

function lgBuildUi(root, payload) {
  root.replaceChildren();
  const ui = {};
  ui.status = lgEl("div", { class: "rv-status", "data-testid": "rv-lg-status" });
  const controls = lgEl("div", { class: "rv-controls" });
  const gWrap = lgEl("label", { class: "rv-knob" }, "G (samples per prompt) ");
  ui.G = lgEl("input", {
    type: "range", min: 1, max: payload.max_group_size, step: 1, "data-testid": "rv-lg-G",
    "aria-label": "G",
  });
  ui.Gout = lgEl("output", { "data-testid": "rv-lg-G-value" });
  gWrap.append(ui.G, ui.Gout);
  const stdWrap = lgEl("label", { class: "rv-knob" }, "local divides by ");
  ui.std = lgEl("select", { "data-testid": "rv-lg-std", "aria-label": "local divides by" });
  for (const [v, label] of Object.entries(LG_STD_CHOICES)) {
    ui.std.appendChild(lgEl("option", { value: v }, label));
  }
  stdWrap.appendChild(ui.std);
  const epsWrap = lgEl("label", { class: "rv-knob" }, "eps (log scale) ");
  const [lo, hi, step] = payload.log10_eps_range;
  ui.eps = lgEl("input", {
    type: "range", min: lo, max: hi, step, "data-testid": "rv-lg-eps", "aria-label": "log10 eps",
  });
  ui.epsOut = lgEl("output", { "data-testid": "rv-lg-eps-value" });
  epsWrap.append(ui.eps, ui.epsOut);
  controls.append(gWrap, stdWrap, epsWrap);
  ui.summary = lgEl("div", { class: "rv-lg-summary", "data-testid": "rv-lg-summary" });
  const plots = lgEl("div", { class: "rv-lg-plots" });
  ui.scatter = lgEl("canvas", { class: "rv-lg-canvas", "data-testid": "rv-lg-scatter" });
  ui.bars = lgEl("canvas", { class: "rv-lg-canvas", "data-testid": "rv-lg-bars" });
  const c1 = lgEl("div", { class: "rv-lg-plot rv-lg-plot-main" });
  const c2 = lgEl("div", { class: "rv-lg-plot" });
  c1.appendChild(ui.scatter);
  c2.appendChild(ui.bars);
  plots.append(c1, c2);
  ui.legend = lgEl("div", { class: "rv-lg-legend", "data-testid": "rv-lg-legend" });
  ui.tip = lgEl("div", { class: "rv-tip", "data-testid": "rv-lg-tip" });
  const tables = lgEl("div", { class: "rv-lg-tables" });
  const w1 = lgEl("div", { class: "rv-table-wrap" });
  ui.table = lgEl("table", { class: "rv-table", "data-testid": "rv-lg-table" });
  w1.appendChild(ui.table);
  const w2 = lgEl("div", { class: "rv-table-wrap" });
  ui.groups = lgEl("table", { class: "rv-table", "data-testid": "rv-lg-groups" });
  w2.appendChild(ui.groups);
  tables.append(w1, w2);
  root.append(ui.status, controls, ui.summary, plots, ui.legend, ui.tip, tables);
  return ui;
}

function lgFill(table, head, rows, testid) {
  // the header once; then only the rows G added or removed change (no rebuild while dragging)
  if (!table.rows.length || table.rows[0].cells.length !== head.length) {
    const tr = lgEl("tr");
    for (const h of head) tr.appendChild(lgEl("th", {}, h));
    table.replaceChildren(tr);
  }
  while (table.rows.length > rows.length + 1) table.rows[table.rows.length - 1].remove();
  while (table.rows.length < rows.length + 1) {
    const r = lgEl("tr", { "data-testid": testid });
    for (let c = 0; c < head.length; c++) r.appendChild(lgEl("td"));
    table.appendChild(r);
  }
  rows.forEach((row, i) => {
    const tr = table.rows[i + 1];
    for (const [k, v] of Object.entries(row.data || {})) tr.dataset[k] = String(v);
    row.cells.forEach((text, c) => {
      const s = String(text);
      if (tr.cells[c].textContent !== s) tr.cells[c].textContent = s;
    });
  });
}

function lgLegend(state, shown, res) {
  const { ui, palette } = state;
  if (ui.legend.childElementCount === shown.group_labels.length) return;
  const items = [];
  shown.group_labels.forEach((label, p) => {
    const item = lgEl("span", { class: "rv-lg-key" });
    const sw = lgEl("canvas", { class: "rv-lg-swatch", width: 28, height: 28 });
    const ctx = sw.getContext("2d");
    ctx.scale(2, 2);
    ctx.fillStyle = `${palette[p % palette.length]}66`;
    ctx.strokeStyle = palette[p % palette.length];
    ctx.lineWidth = 1.6;
    lgMarker(ctx, p, 7, 7, 5);
    item.append(sw, document.createTextNode(lgShort(label, 40)));
    item.title = String(label);
    items.push(item);
  });
  ui.legend.replaceChildren(...items);
  void res;
}

function lgUpdate(state) {
  const { ui, payload } = state;
  const t0 = performance.now();
  const v = state.values;
  ui.Gout.textContent = String(v.G);
  ui.epsOut.textContent = lgEpsText(v.eps);
  let res;
  let shown;
  try {
    shown = lgSubset(state.data, v.G);
    res = localVsGlobal(shown.scores, shown.group_ids, {
      localConfig: payload.local_config, globalConfig: payload.global_config,
      coverage: payload.coverage, std: v.std,
      eps: v.eps,
    });
  } catch (err) {
    state.res = null;
    ui.status.className = "rv-status rv-error";
    ui.status.textContent = `Not computed in the browser: ${err.message}`;
    return;
  }
  const t1 = performance.now();
  state.res = res;
  state.shown = shown;
  state.points = lgDrawScatter(state, res, shown);
  lgDrawBars(state, res, shown);
  lgLegend(state, shown, res);
  const labels = shown.group_labels;
  const B = shown.scores.length;
  const sampleRows = [];
  for (let b = 0; b < B; b++) {
    const g = shown.group_ids[b];
    sampleRows.push({
      data: { local: res.local[b], global: res.global[b], reward: shown.scores[b] },
      cells: [
        b, labels[g] ?? `prompt ${g}`, res.within[b], lgFmt(shown.scores[b]),
        lgFmt(res.groupMean[g]), lgFmt(res.groupStd[g]), lgFmt(res.local[b]),
        lgFmt(res.global[b]),
      ],
    });
  }
  lgFill(
    ui.table,
    ["#", "prompt", "sample", "reward", "group mean", "group std", "local A", "global A"],
    sampleRows,
    "rv-lg-row",
  );
  const groupRows = [];
  for (let p = 0; p < res.count.length; p++) {
    groupRows.push({
      data: { std: res.groupStd[p], scale: res.scale[p] },
      cells: [
        labels[p] ?? `prompt ${p}`, res.count[p], lgFmt(res.groupMean[p]),
        lgFmt(res.groupStd[p]),
        // equal rewards: std 0, local A = 0, the ratio batch std / eps means nothing
        res.groupStd[p] === 0 ? "no signal (std 0)"
          : Number.isFinite(res.scale[p]) ? `${res.scale[p].toPrecision(3)}x` : "undefined",
      ],
    });
  }
  lgFill(
    ui.groups, ["prompt", "n", "group mean", "group std", "local / global scale"], groupRows,
    "rv-lg-group",
  );
  const parts = [`Batch mean ${lgFmt(res.batchMean)}, batch std ${lgFmt(res.batchStd)}.`];
  if (v.std === "group") {
    let worst = -1;
    for (let p = 0; p < res.scale.length; p++) {
      const ok = Number.isFinite(res.scale[p]) && res.groupStd[p] > 0;
      if (ok && (worst < 0 || res.scale[p] > res.scale[worst])) worst = p;
    }
    if (worst >= 0 && res.scale[worst] > 1.05) {
      parts.push(
        `Most stretched: "${lgShort(labels[worst] ?? worst, 40)}" (group std ` +
          `${lgFmt(res.groupStd[worst])}): local divides by a number ` +
          `${res.scale[worst].toPrecision(3)}x smaller than global (batch std + eps).`,
      );
    } else if (worst >= 0) {
      parts.push(
        "No prompt is stretched: every group std is about the batch std or larger " +
          `(largest local / global scale ${res.scale[worst].toPrecision(3)}x).`,
      );
    }
  } else {
    parts.push(
      "Mean only (Dr.GRPO): local = reward - group mean, no division; global still divides " +
        `by batch std + eps = ${lgFmt(res.batchStd + v.eps)}.`,
    );
  }
  let flat = 0;
  for (let p = 0; p < res.count.length; p++) if (res.count[p] > 1 && res.groupStd[p] === 0) flat++;
  if (flat) {
    parts.push(
      `${flat} prompt${flat === 1 ? "" : "s"} with all-equal rewards: local advantage ` +
        "exactly 0 (no signal), " +
        "global still ranks them against the batch.",
    );
  }
  const undef = B - state.points.length;
  if (undef) {
    parts.push(
      `${undef} sample${undef === 1 ? "" : "s"} not plotted: local or global advantage ` +
        "undefined (a group or " +
        "batch of 1).",
    );
  }
  const text = parts.join(" ");
  ui.summary.textContent = text;
  ui.summary.dataset.batchMean = String(res.batchMean);
  ui.summary.dataset.batchStd = String(res.batchStd);
  const t2 = performance.now();
  ui.status.className = "rv-status rv-live";
  ui.status.textContent =
    `Computed in the browser: ${B} sample${B === 1 ? "" : "s"}, ${res.count.length} ` +
    `prompt${res.count.length === 1 ? "" : "s"}, G = ${v.G}, ` +
    `local / ${v.std === "group" ? "(group std + eps)" : "1"} ` +
    `(${(t1 - t0).toFixed(2)} ms compute, ${(t2 - t1).toFixed(2)} ms draw)`;
  state.root.dataset.computeMs = String(t1 - t0);
  state.root.dataset.drawMs = String(t2 - t1);
  state.root.dataset.updates = String(Number(state.root.dataset.updates || 0) + 1);
}

function lgSetParams(state, params) {
  const { ui, payload } = state;
  const max = payload.max_group_size;
  const G = Math.min(Math.max(Math.round(Number(params.G ?? max)), 1), max);
  // a knob Python does not send (no sidebar control) keeps what the student set here
  const prev = state.values || {};
  const std = [params.std, prev.std].find((x) => x in LG_STD_CHOICES) ?? "group";
  const eps = Number(params.eps ?? prev.eps ?? payload.eps);
  state.values = { G, std, eps };
  ui.G.value = String(G);
  ui.std.value = std;
  ui.eps.value = String(Math.log10(eps));
}

function lgSettle(state) {
  const settled = { ...state.values };
  state.sent.push(settled);
  if (state.sent.length > 50) state.sent.shift();
  state.setStateValue("settled", settled);
}

function lgIsEcho(state, params) {
  const keys = Object.keys(params);
  return state.sent.some((sent) => keys.every((k) => sent[k] === params[k]));
}

function lgHover(state, ev) {
  const { ui, res, shown } = state;
  if (!res || !state.points) return;
  const rect = ui.scatter.getBoundingClientRect();
  const x = ev.clientX - rect.left;
  const y = ev.clientY - rect.top;
  let best = null;
  let bestD = 81;
  for (const [px, py, b] of state.points) {
    const d = (px - x) ** 2 + (py - y) ** 2;
    if (d < bestD) {
      bestD = d;
      best = b;
    }
  }
  if (best === null) {
    ui.tip.textContent = "";
    return;
  }
  const g = shown.group_ids[best];
  ui.tip.textContent =
    `#${best} ${lgShort(shown.group_labels[g] ?? g, 60)}, sample ${res.within[best]}: ` +
    `reward ${lgFmt(shown.scores[best])}, local ${lgFmt(res.local[best])}, ` +
    `global ${lgFmt(res.global[best])}`;
}

export default function instantLocalGlobal(component) {
  const { data, parentElement, setStateValue } = component;
  const payload = withBulk(data); // bulk.js: the rewards arrive once per tab
  let state = parentElement.__rvLocalGlobal;
  if (!state || state.payloadId !== data.payload_id) {
    // first mount or a new batch: (re)build; a rerun with the same payload is a no-op
    let root = parentElement.querySelector(".rv-lg");
    if (!root) {
      root = lgEl("div", { class: "rv-lg", "data-testid": "rv-lg-instant" });
      parentElement.appendChild(root);
    }
    state?.observer?.disconnect();
    if (payload === null) {
      parentElement.__rvLocalGlobal = undefined;
      waitForBulk(component, root, "rv-lg-status");
      return () => {
        parentElement.__rvLocalGlobal = undefined;
      };
    }
    state = {
      root, payload, payloadId: data.payload_id, data: lgDecode(payload), setStateValue,
      paramsIn: null, sent: [], plotH: data.plot_height || 360,
      palette: payload.palette?.length ? payload.palette : ["#0072B2"],
    };
    state.ink = getComputedStyle(root).color || "#222";
    state.ui = lgBuildUi(root, payload);
    parentElement.__rvLocalGlobal = state;
    const { ui } = state;
    ui.G.addEventListener("input", () => {
      state.values.G = Number(ui.G.value);
      lgUpdate(state);
    });
    ui.eps.addEventListener("input", () => {
      state.values.eps = Number((10 ** Number(ui.eps.value)).toPrecision(12));
      lgUpdate(state);
    });
    for (const input of [ui.G, ui.eps]) input.addEventListener("change", () => lgSettle(state));
    ui.std.addEventListener("change", () => {
      state.values.std = ui.std.value;
      lgUpdate(state);
      lgSettle(state);
    });
    ui.scatter.addEventListener("mousemove", (ev) => lgHover(state, ev));
    if (typeof ResizeObserver !== "undefined") {
      let width = 0;
      state.observer = new ResizeObserver(() => {
        const w = ui.scatter.clientWidth;
        if (w !== width && state.values) {
          width = w;
          lgUpdate(state);
        }
      });
      state.observer.observe(ui.scatter);
    }
  }
  state.setStateValue = setStateValue;
  const paramsIn = JSON.stringify(data.params || {});
  if (paramsIn !== state.paramsIn) {
    // new values from Python (URL, sidebar): adopt them; an echo of our own settle is ignored
    state.paramsIn = paramsIn;
    if (state.values === undefined || !lgIsEcho(state, data.params || {})) {
      lgSetParams(state, data.params || {});
      lgUpdate(state);
    }
  }
  state.root.dataset.state = "ready";
  return () => {
    state.observer?.disconnect();
    parentElement.__rvLocalGlobal = undefined;
  };
}
