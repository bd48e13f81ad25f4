// The instant-advantages Streamlit component (st.components.v2): sliders, a canvas heatmap and
// a per-sample table, recomputed in the browser with pipeline.js on every input event.
//
// Loaded as ONE module: roll_viz/ui/instant/__init__.py concatenates pipeline.js, bulk.js,
// draw.js and this file, so the pipeline's functions (run, covered, decodeBatch, subsetGroups),
// bulk.js's (withBulk, waitForBulk: the batch is sent once per tab) and draw.js's (el, fmt,
// colour, absMax, niceCeil, rowLabels, drawHeatmap) are in scope.
// Python stays the source of truth: the payload carries the resolved config, the sliders only
// move the keys ALIASES maps them to, and the settled values go back to Python on release
// (setStateValue("settled", ...)), where the page recomputes with roll_viz.core.pipeline.run.
// Every string from the payload is rendered with textContent (never innerHTML).

const VIEWS = {
  advantages: "Advantages",
  token_rewards: "Token rewards",
  returns: "Returns",
  kl: "Token KL",
};
const KNOB_LABELS = { beta: "beta (KL coef)", gamma: "gamma", lam: "lambda" };

function buildUi(root, payload, knobs, view) {
  // knobs: which controls to show (Token KL needs only beta); hidden ones keep config values
  const shown = new Set(knobs || ["estimator", "beta", "gamma", "lam", "G"]);
  const hide = (node, name) => {
    if (!shown.has(name)) node.hidden = true;
    return node;
  };
  root.replaceChildren();
  const ui = {};
  ui.status = el("div", { class: "rv-status", "data-testid": "rv-status" });
  const controls = el("div", { class: "rv-controls" });
  ui.estimator = el("select", { "data-testid": "rv-estimator", "aria-label": "estimator" });
  for (const est of payload.estimators) ui.estimator.appendChild(el("option", { value: est }, est));
  const estWrap = el("label", { class: "rv-knob" }, "estimator ");
  estWrap.appendChild(ui.estimator);
  controls.appendChild(hide(estWrap, "estimator"));
  ui.knobs = {};
  for (const knob of ["beta", "gamma", "lam"]) {
    const [min, max, step] = payload.sliders[knob];
    const key = payload.aliases[knob];
    const wrap = el("label", { class: "rv-knob" }, `${KNOB_LABELS[knob]} `);
    const input = el("input", {
      type: "range", min, max, step, "data-testid": `rv-${knob}`, "aria-label": knob,
    });
    const out = el("output", { "data-testid": `rv-${knob}-value` });
    if (key === null || key === undefined) {
      input.disabled = true;
      out.textContent = `(${payload.framework} has no ${knob})`;
    }
    wrap.append(input, out);
    controls.appendChild(hide(wrap, knob));
    ui.knobs[knob] = { input, out, key };
  }
  const gWrap = el("label", { class: "rv-knob" }, "G (samples per prompt) ");
  ui.G = el("input", {
    type: "range", min: 1, max: payload.max_group_size, step: 1, "data-testid": "rv-G",
    "aria-label": "G",
  });
  ui.Gout = el("output", { "data-testid": "rv-G-value" });
  gWrap.append(ui.G, ui.Gout);
  controls.appendChild(hide(gWrap, "G"));
  ui.view = el("select", { "data-testid": "rv-view", "aria-label": "view" });
  for (const [v, label] of Object.entries(VIEWS)) ui.view.appendChild(el("option", { value: v }, label));
  if (view && view in VIEWS) ui.view.value = view;
  const viewWrap = el("label", { class: "rv-knob" }, "show ");
  viewWrap.appendChild(ui.view);
  controls.appendChild(viewWrap);
  ui.legend = el("div", { class: "rv-legend", "data-testid": "rv-legend" });
  ui.canvas = el("canvas", { class: "rv-heatmap", "data-testid": "rv-heatmap" });
  ui.rows = el("div", { class: "rv-rows", "data-testid": "rv-rows" });
  const strip = el("div", { class: "rv-strip" });
  strip.append(ui.rows, ui.canvas);
  ui.tip = el("div", { class: "rv-tip", "data-testid": "rv-tip" });
  const tableWrap = el("div", { class: "rv-table-wrap" });
  ui.table = el("table", { class: "rv-table", "data-testid": "rv-table" });
  tableWrap.appendChild(ui.table);
  root.append(ui.status, controls, ui.legend, strip, ui.tip, tableWrap);
  return ui;
}

function setParams(state, params) {
  // exact values live in state.values; a slider is only a view of them (a range input snaps to
  // its step, so an untouched knob keeps the config's exact value, e.g. verl kl_coef 0.001)
  const { ui, payload } = state;
  const cfg = payload.config;
  const values = {
    estimator: params.estimator ?? cfg[payload.estimator_key],
    G: params.G ?? payload.max_group_size,
  };
  ui.estimator.value = values.estimator;
  ui.G.value = String(values.G);
  for (const [knob, k] of Object.entries(ui.knobs)) {
    values[knob] = k.key ? Number(params[knob] ?? cfg[k.key]) : null;
    if (k.key) k.input.value = String(values[knob]);
  }
  state.values = values;
}

/** The resolved config the knobs mean (payload.apply_params in Python). */
function configFor(payload, params) {
  const cfg = { ...payload.config };
  if (payload.aliases.estimator) cfg[payload.aliases.estimator] = params.estimator;
  for (const knob of ["beta", "gamma", "lam"]) {
    const key = payload.aliases[knob];
    if (key && params[knob] !== null && params[knob] !== undefined) cfg[key] = params[knob];
  }
  return cfg;
}

function tableCells(batch, out, b, label) {
  const first = batch.response_mask[b].findIndex((m) => m > 0);
  let sum = 0;
  for (let t = 0; t < out.token_rewards[b].length; t++) sum += out.token_rewards[b][t];
  const g = batch.group_ids[b];
  return [
    label, batch.group_labels[g] ?? g, fmt(batch.scores[b]), fmt(out.rewards[b]),
    first < 0 ? "(empty)" : fmt(out.advantages[b][first]), fmt(sum),
  ];
}

function renderTable(table, batch, out) {
  const B = batch.scores.length;
  if (table.rows.length !== B + 1) {
    // new shape (first draw, G changed): rebuild; otherwise only the texts change below
    const head = el("tr");
    for (const h of ["sample", "prompt", "score", "reward", "A (first token)", "sum token reward"]) {
      head.appendChild(el("th", {}, h));
    }
    const rows = [head];
    for (let b = 0; b < B; b++) {
      const tr = el("tr");
      for (let c = 0; c < 6; c++) tr.appendChild(el("td"));
      rows.push(tr);
    }
    table.replaceChildren(...rows);
  }
  const labels = rowLabels(batch.group_ids);  // p0/s2, as the strip's rows above
  for (let b = 0; b < B; b++) {
    const cells = tableCells(batch, out, b, labels[b]);
    const tds = table.rows[b + 1].cells;
    for (let c = 0; c < cells.length; c++) {
      const text = String(cells[c]);
      if (tds[c].textContent !== text) tds[c].textContent = text;
    }
  }
}

function update(state) {
  const { ui, payload } = state;
  const t0 = performance.now();
  const params = { ...state.values };
  for (const [knob, k] of Object.entries(ui.knobs)) if (k.key) k.out.textContent = String(params[knob]);
  ui.Gout.textContent = String(params.G);
  const cfg = configFor(payload, params);
  const coverage = payload.coverage[payload.framework];
  const cov = covered(payload.framework, cfg, coverage);
  state.params = params;
  state.config = cfg;
  if (!cov.ok) {
    state.trace = null;
    ui.status.className = "rv-status rv-fallback";
    ui.status.textContent =
      `Not computed in the browser (${cov.reason}): server path, the page updates on release.`;
    return;
  }
  let out;
  try {
    const batch = subsetGroups(state.batch, params.G);
    out = run(batch, payload.framework, cfg, payload.running, coverage);
    state.shown = batch;
  } catch (err) {
    state.trace = null;
    ui.status.className = "rv-status rv-error";
    ui.status.textContent = `${payload.framework}: ${err.message}`;
    ui.table.replaceChildren();
    return;
  }
  const t1 = performance.now();
  state.trace = out;
  const view = ui.view.value;
  // one fixed scale per view while the knobs move: set on the view's first draw of this batch;
  // advantages never below the heatmaps' +-3 (payload.scale_floor), so a colour means the same
  state.scales = state.scales || {};
  if (!(view in state.scales)) {
    const floor = (payload.scale_floor || {})[view] || 0;
    state.scales[view] = Math.max(floor, niceCeil(absMax(out[view], state.shown.response_mask)));
  }
  const zmax = state.scales[view];
  const labels = rowLabels(state.shown.group_ids);
  ui.rows.replaceChildren(
    ...labels.map((label) =>
      el("div", { class: "rv-row", style: `height:${state.cellH}px;line-height:${state.cellH}px` },
        label),
    ),
  );
  // after the labels: the canvas's width is what they leave of the strip
  drawHeatmap(ui.canvas, out[view], state.shown.response_mask, state.cellH, zmax);
  renderTable(ui.table, state.shown, out);
  const t2 = performance.now();
  const beyond = absMax(out[view], state.shown.response_mask) > zmax ? " (larger values show the end colour)" : "";
  ui.legend.textContent =
    `${VIEWS[view]}, fixed scale: red -${fmt(zmax, 4)} .. white 0 .. blue ` +
    `+${fmt(zmax, 4)}${beyond}; grey = padding; rows p<prompt>/s<sample>`;
  ui.status.className = "rv-status rv-live";
  ui.status.textContent =
    `Computed in the browser: ${payload.framework} ${params.estimator}, ` +
    `${state.shown.scores.length} samples (${(t1 - t0).toFixed(2)} ms compute, ` +
    `${(t2 - t1).toFixed(2)} ms draw)`;
  state.root.dataset.computeMs = String(t1 - t0);
  state.root.dataset.drawMs = String(t2 - t1);
  state.root.dataset.updates = String(Number(state.root.dataset.updates || 0) + 1);
}

function settle(state) {
  state.sent.push({ ...state.params });
  if (state.sent.length > 50) state.sent.shift();
  state.setStateValue("settled", { ...state.params, config: state.config });
}

/** Whether Python's params are only an echo of something this component settled earlier
 *  (a page that writes the settled values to the URL reads them back one rerun later). */
function isEcho(state, params) {
  const keys = Object.keys(params);
  return state.sent.some((sent) => keys.every((k) => sent[k] === params[k]));
}

function onHover(state, ev) {
  const { ui } = state;
  if (!state.trace) return;
  const rect = ui.canvas.getBoundingClientRect();
  const z = state.trace[ui.view.value];
  const B = z.length;
  const T = B ? z[0].length : 0;
  const t = Math.floor(((ev.clientX - rect.left) / rect.width) * T);
  const b = Math.floor(((ev.clientY - rect.top) / rect.height) * B);
  if (b < 0 || b >= B || t < 0 || t >= T) return;
  const pad = state.shown.response_mask[b][t] > 0 ? "" : " (padding)";
  const name = rowLabels(state.shown.group_ids)[b];
  ui.tip.textContent = `sample ${name}, token ${t}: ${fmt(z[b][t], 6)}${pad}`;
}

export default function instantAdvantages(component) {
  const { data, parentElement, setStateValue } = component;
  const cleanup = () => {
    const gone = parentElement.__rvInstant;
    if (gone) globalThis.removeEventListener("rv-knobs", gone.onKnobs);
    parentElement.__rvInstant = undefined;
  };
  const payload = withBulk(data); // bulk.js: the batch arrives once per tab
  let state = parentElement.__rvInstant;
  if (!state || state.payloadId !== data.payload_id) {
    if (state) globalThis.removeEventListener("rv-knobs", state.onKnobs);
    // first mount or a new batch/config: (re)build; a rerun with the same payload is a no-op
    let root = parentElement.querySelector(".rv-instant");
    if (!root) {
      root = el("div", { class: "rv-instant", "data-testid": "rv-instant" });
      parentElement.appendChild(root);
    }
    if (payload === null) {
      parentElement.__rvInstant = undefined;
      waitForBulk(component, root, "rv-status");
      return cleanup;
    }
    state = {
      root, payload, payloadId: data.payload_id, batch: decodeBatch(payload.batch),
      cellH: data.cell_height || 10, setStateValue, paramsIn: null, sent: [],
    };
    state.ui = buildUi(root, payload, data.knobs, data.view);
    parentElement.__rvInstant = state;
    const { ui } = state;
    const knobInput = (name, input) => () => {
      state.values[name] = Number(input.value);
      update(state);
    };
    for (const [name, k] of Object.entries(ui.knobs)) {
      k.input.addEventListener("input", knobInput(name, k.input));
      k.input.addEventListener("change", () => settle(state));
    }
    ui.G.addEventListener("input", knobInput("G", ui.G));
    ui.G.addEventListener("change", () => settle(state));
    ui.estimator.addEventListener("change", () => {
      state.values.estimator = ui.estimator.value;
      update(state);
      settle(state);
    });
    ui.view.addEventListener("change", () => update(state));
    // the sidebar's knobs moved (relay.js): start from the sidebar's new config and values,
    // keep this strip's G, or take the sidebar's where the strip holds a preset's whole batch
    state.onKnobs = (ev) => {
      const detail = ev.detail || {};
      if (detail.framework !== state.payload.framework || !detail.config) return;
      state.payload = { ...state.payload, config: detail.config };
      const own = state.values ? state.values.G : undefined;
      const G = state.payload.follows_G && detail.G >= 1 ? detail.G : own;
      setParams(state, { ...detail.params, G });
      update(state);
    };
    globalThis.addEventListener("rv-knobs", state.onKnobs);
    ui.canvas.addEventListener("mousemove", (ev) => onHover(state, ev));
  }
  state.setStateValue = setStateValue;
  const paramsIn = JSON.stringify(data.params || {});
  if (paramsIn !== state.paramsIn) {
    // new values from Python (URL, sidebar): adopt them; an echo of our own settle is ignored
    state.paramsIn = paramsIn;
    if (state.values === undefined || !isEcho(state, data.params || {})) {
      setParams(state, data.params || {});
      update(state);
    }
  }
  state.root.dataset.state = "ready";
  return cleanup;
}
