// The browser-drawn heatmaps of the pages that follow the sidebar's relay (st.components.v2):
// on Advantages one canvas heatmap of the advantages per estimator of the dialect, the sidebar's
// first (views.heatmaps.estimator_heatmaps: max(3, the largest |A| rounded up)); on Token KL
// (data.kind "placements") the token rewards of each KL placement ("in the reward", "as a loss
// term"), side by side on one shared scale (the largest |r| rounded up), as the page's Plotly
// token_reward_heatmap. Row labels p<prompt>/s<sample> and a hover tip with the token. Computed
// in the browser with pipeline.js from the configs Python resolved (data.detail, relay.
// knob_detail), and again on every "rv-knobs" event the sidebar's relay dispatches (a knob move:
// no server round trip for these figures).
//
// Loaded as ONE module with pipeline.js, bulk.js and component.js (instant/__init__.py), so
// run, decodeBatch, withBulk, waitForBulk, el, fmt, colour, absMax, niceCeil, rowLabels and
// drawHeatmap are in scope. Every string is rendered with textContent (never innerHTML).

/** The rows drawn at group size G: the first G of every prompt (pipeline.js subsetGroups, the
 *  server's subsample_rollout) when the payload is a preset's whole batch (payload.follows_G),
 *  else the payload's batch as it is. With their tokens and row labels. */
function rowsAt(state, G) {
  let { full: batch, fullTokens: tokens } = state;
  if (state.payload.follows_G && G >= 1) {
    const seen = new Map();
    const keep = [];
    batch.group_ids.forEach((g, row) => {
      seen.set(g, (seen.get(g) || 0) + 1);
      if (seen.get(g) <= G) keep.push(row);
    });
    batch = subsetGroups(batch, G);
    tokens = keep.map((r) => tokens[r] || []);
  }
  return { batch, tokens, labels: rowLabels(batch.group_ids) };
}

/** What a kind of component draws from the relay's detail: panels, their configs, quantity. */
function panelsOf(kind, detail) {
  if (kind === "placements") {
    const configs = detail.placements || {};
    return {
      order: Object.keys(configs), configs, server: [], quantity: "token_rewards", symbol: "r",
      what: "token rewards", covered: detail.placements_covered,
      title: (name) => `Token rewards, KL ${name}`,
    };
  }
  return {
    order: detail.order, configs: detail.configs, server: detail.server || [],
    quantity: "advantages", symbol: "A", what: "advantages", covered: detail.covered,
    title: (est) => (est === detail.estimator ? `${est} (sidebar)` : est),
  };
}

function drawEstimators(state) {
  const { payload, detail, root } = state;
  const panels = panelsOf(state.kind, detail);
  const { quantity, symbol } = panels;
  const t0 = performance.now();
  const coverage = payload.coverage[detail.framework];
  const results = {};
  let peak = 0;
  const fromServer = new Set(panels.server);
  // the relay's G where the browser holds the whole batch, else the rows of the last full run
  const G = state.payload.follows_G && detail.G >= 1 ? detail.G : state.G;
  const rows = rowsAt(state, G);
  state.batch = rows.batch;
  // estimators that read the probe critic: right on the full run's rows only
  if (G !== state.G) for (const est of state.onRows) fromServer.add(est);
  for (const est of panels.order) {
    const cfg = panels.configs[est];
    if (fromServer.has(est) || !cfg) {
      // not computed by pipeline.js: the server's numbers of the last full run, marked as
      // such while the knobs have moved since (the pause reruns the page)
      const got = state.server[est] || { error: "computed on the server: updates when you pause" };
      // on the rows of the last full run (a G move since: fewer or more rows in the others)
      results[est] = got.error
        ? { error: got.error, stale: state.moved, rows: state.serverRows }
        : { advantages: decodeArray(got.advantages), stale: state.moved, rows: state.serverRows };
      if (results[est].advantages) {
        peak = Math.max(peak, absMax(results[est].advantages, state.serverRows.batch.response_mask));
      }
      continue;
    }
    try {
      const out = run(state.batch, detail.framework, cfg, null, coverage);
      results[est] = { advantages: out[quantity], rows };
      peak = Math.max(peak, absMax(out[quantity], state.batch.response_mask));
    } catch (err) {
      results[est] = { error: err.message, rows };
    }
  }
  const floor = (payload.scale_floor || {})[quantity] || 0;
  const zmax = Math.max(floor, niceCeil(peak));
  const t1 = performance.now();
  const blocks = [];
  for (const est of panels.order) {
    const name = panels.title(est);
    const res = results[est];
    const block = el("div", {
      class: res.stale ? "rv-est rv-est-stale" : "rv-est", "data-testid": "rv-est",
      "data-estimator": est,
    });
    // placements: each in its own column of the page's grid, as the Plotly pair was
    const column = (state.columns || []).indexOf(est);
    if (column >= 0) block.style.gridColumn = String(column + 1);
    block.appendChild(el("div", { class: "rv-est-title", role: "heading", "aria-level": 4 }, name));
    if (res.stale) {
      block.appendChild(
        el("div", { class: "rv-stale-note" },
          "Computed on the server for the previous knob values: updates when you pause"),
      );
    }
    if (res.error) {
      block.appendChild(
        el("div", { class: "rv-status rv-fallback" }, `${est} is undefined for this batch: ${res.error}`),
      );
      blocks.push(block);
      continue;
    }
    const { labels, tokens, batch } = res.rows;
    const strip = el("div", { class: "rv-strip" });
    const rows = el("div", { class: "rv-rows", "aria-hidden": "true" });
    for (const label of labels) {
      rows.appendChild(
        el("div", { style: `height:${state.cellH}px;line-height:${state.cellH}px` }, label),
      );
    }
    const canvas = el("canvas", {
      class: "rv-heatmap",
      role: "img",
      "aria-label":
        `${name}: ${panels.what} of ${labels.length} samples by token position, ` +
        `red negative, blue positive, scale -${fmt(zmax, 3)} to +${fmt(zmax, 3)}`,
    });
    strip.append(rows, canvas);
    const tip = el("div", { class: "rv-tip", "aria-live": "off" });
    block.append(strip, tip);
    blocks.push(block);
    canvas.addEventListener("mousemove", (ev) => {
      const rect = canvas.getBoundingClientRect();
      const z = res.advantages;
      const B = z.length;
      const T = B ? z[0].length : 0;
      const t = Math.floor(((ev.clientX - rect.left) / rect.width) * T);
      const b = Math.floor(((ev.clientY - rect.top) / rect.height) * B);
      if (b < 0 || b >= B || t < 0 || t >= T) return;
      if (!(batch.response_mask[b][t] > 0)) {
        tip.textContent = `${est}, sample ${labels[b]}, t = ${t}: padding`;
        return;
      }
      const token = (tokens[b] || [])[t] ?? "";
      tip.textContent =
        `"${token}" (${est}, sample ${labels[b]}, t = ${t}) ${symbol} = ${fmt(z[b][t], 4)}`;
    });
    res.canvas = canvas;
  }
  state.list.replaceChildren(...blocks);
  for (const est of panels.order) {
    const res = results[est];
    if (res.canvas) {
      drawHeatmap(res.canvas, res.advantages, res.rows.batch.response_mask, state.cellH, zmax);
    }
  }
  const t2 = performance.now();
  const scale = state.kind === "placements"
    ? "Token reward r, one scale for both placements"
    : "Advantage A, one fixed scale for every estimator";
  state.legend.textContent =
    `${scale}: red -${fmt(zmax, 3)} .. white 0 .. ` +
    `blue +${fmt(zmax, 3)}; grey = padding; rows p<prompt>/s<sample>. Computed in your browser ` +
    `(${(t1 - t0).toFixed(1)} ms compute, ${(t2 - t1).toFixed(1)} ms draw).`;
  state.results = results;
  state.zmax = zmax;
  root.dataset.updates = String(Number(root.dataset.updates || 0) + 1);
  root.dataset.seq = detail.seq || "";
  root.dataset.rows = String(rows.batch.group_ids.length);
  root.dataset.state = "ready";
}

export default function estimatorHeatmaps(component) {
  const { data, parentElement } = component;
  const payload = withBulk(data);
  let state = parentElement.__rvEst;
  let root = parentElement.querySelector(".rv-est-root");
  if (!root) {
    root = el("div", { class: "rv-instant rv-est-root", "data-testid": "rv-est-heatmaps" });
    parentElement.appendChild(root);
  }
  if (payload === null) {
    parentElement.__rvEst = undefined;
    waitForBulk(component, root, "rv-est-status");
    return () => {};
  }
  if (!state || state.payloadId !== data.payload_id) {
    if (state) globalThis.removeEventListener("rv-knobs", state.onKnobs);
    root.replaceChildren();
    state = {
      root, payload, payloadId: data.payload_id, full: decodeBatch(payload.batch),
      fullTokens: payload.tokens || [], cellH: data.cell_height || 14, detailIn: null,
      server: {}, moved: false, kind: data.kind || "estimators", columns: data.columns || null,
      onRows: [],
    };
    state.legend = el("div", { class: "rv-legend", "data-testid": "rv-est-legend" });
    state.list = el("div", { class: state.columns ? "rv-est-list rv-est-grid" : "rv-est-list" });
    root.append(state.legend, state.list);
    state.onKnobs = (ev) => {
      const detail = ev.detail || {};
      // another dialect's estimators are not this payload's: the server reruns the page then
      if (detail.framework !== state.payload.framework) return;
      if (!panelsOf(state.kind, detail).covered) return;
      state.detail = detail;
      state.moved = true;
      root.dataset.source = "relay";
      drawEstimators(state);
    };
    globalThis.addEventListener("rv-knobs", state.onKnobs);
    parentElement.__rvEst = state;
  }
  const incoming = JSON.stringify([
    data.detail || {}, data.server || {}, data.G ?? null, data.on_rows || [],
  ]);
  if (incoming !== state.detailIn) {
    // a full run's values (the server's own, after a pause or a page change)
    state.detailIn = incoming;
    state.detail = data.detail;
    state.server = data.server || {};
    state.moved = false;
    state.G = data.G; // the full run's G: the server's numbers are on its rows
    state.onRows = data.on_rows || [];
    state.serverRows = rowsAt(state, state.G);
    root.dataset.source = "server";
    drawEstimators(state);
  }
  return () => {};
}
