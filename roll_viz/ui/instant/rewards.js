// The Rewards page's bars (st.components.v2): each sample's raw response-level reward (grey) and
// the reward the pipeline keeps after post-processing (blue), grouped per sample, with the clip
// fraction and the mean processed reward above them. Computed in the browser with pipeline.js
// `run` from the sidebar's resolved config (data.detail.config, relay.knob_detail) and the
// session's running moments (data.running: ROLL's "running" normalisation), and again on every
// "rv-knobs" event the sidebar's relay dispatches (a knob move: no server round trip). A config
// pipeline.js does not cover is drawn from the server's numbers (data.server).
//
// Loaded as ONE module with pipeline.js, bulk.js and draw.js (instant/__init__.py), so run,
// decodeBatch, withBulk, waitForBulk, el, fmt and rowLabels are in scope. Every string is set
// with textContent (never innerHTML); the SVG is built with createElementNS.

const SVG_NS = "http://www.w3.org/2000/svg";
/** raw grey and processed blue: the server figure's colours (3:1 or more on white) */
const RAW = "#767676";
const PROCESSED = "#2166ac";

function svgEl(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = String(text);
  return node;
}

/** Ticks at 1, 2 or 5 x 10^k covering [lo, hi], about n of them. */
function ticks(lo, hi, n = 5) {
  const span = hi - lo || 1;
  const raw = span / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) || 10 * p;
  const out = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return { values: out, step };
}

/** Digits that show a tick step exactly (0.25 -> 2). */
function tickDigits(step) {
  return Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
}

/** x with d decimals as Python's format writes it: an exact tie rounds half to even, where
 *  toFixed rounds it up (the mean of quarter rewards is often one: 0.3125 -> "0.312"). */
export function fixed(x, d) {
  const exact = Math.abs(x).toFixed(100); // the exact decimal expansion at these magnitudes
  const dot = exact.indexOf(".");
  const kept = exact.slice(0, d ? dot + 1 + d : dot);
  const tie = /^50*$/.test(exact.slice(dot + 1 + d));
  if (tie && Number(kept[kept.length - 1]) % 2 === 0) return (x < 0 ? "-" : "") + kept;
  return x.toFixed(d);
}

/** The numbers the bars show: from pipeline.js (covered) or the server's last full run. */
function rewardNumbers(state) {
  const { batch, detail, payload } = state;
  const raw = Array.from(batch.scores);
  if (state.server) {
    return { raw, processed: state.server.rewards, clipFrac: state.server.clip_frac, from: "server" };
  }
  try {
    const out = run(batch, detail.framework, detail.config, state.running,
      payload.coverage[detail.framework]);
    return { raw, processed: Array.from(out.rewards), clipFrac: out.clip_frac, from: "browser" };
  } catch (err) {
    return { raw, error: err.message };
  }
}

function metric(label, value, testid) {
  const box = el("div", { class: "rv-rw-metric", "data-testid": testid });
  box.append(el("div", { class: "rv-rw-metric-label" }, label),
    el("div", { class: "rv-rw-metric-value" }, value));
  return box;
}

function range(xs) {
  return `${fmt(Math.min(...xs), 4)} to ${fmt(Math.max(...xs), 4)}`;
}

/** What a screen reader hears for the chart: its numbers (each of them for 12 samples or fewer). */
function summary(labels, nums, mean) {
  const B = labels.length;
  let text = `Grouped bar chart of the response-level reward of ${B} samples: raw reward in grey, ` +
    `processed reward in blue. Raw ${range(nums.raw)}; processed ${range(nums.processed)}; ` +
    `mean processed reward ${fixed(mean, 4)}; clip fraction ${fixed(100 * nums.clipFrac, 1)}%.`;
  if (B <= 12) {
    text += " " + labels.map((l, b) =>
      `${l}: raw ${fmt(nums.raw[b], 4)}, processed ${fmt(nums.processed[b], 4)}`).join("; ") + ".";
  }
  return text;
}

/** The SVG: y axis with ticks, zero line, two bars per sample, rotated sample labels. */
function chart(state, labels, nums) {
  const fs = parseFloat(getComputedStyle(state.root).fontSize) || 14;
  const W = Math.max(320, Math.round(state.root.clientWidth || 700));
  const H = Math.round(Math.max(300, 22 * fs));
  // room under the axis for the longest label at -45 degrees, then the axis title
  const longest = Math.max(...labels.map((l) => l.length));
  const m = { l: Math.round(4.6 * fs), r: Math.round(0.8 * fs), t: Math.round(0.8 * fs),
    b: Math.round((2.6 + 0.34 * longest) * fs) };
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  const all = [...nums.raw, ...nums.processed, 0];
  let lo = Math.min(...all);
  let hi = Math.max(...all);
  const pad = 0.06 * (hi - lo || 1);
  if (lo < 0) lo -= pad;
  if (hi > 0) hi += pad;
  if (hi === lo) hi = lo + 1;
  const { values: yt, step } = ticks(lo, hi, 6);
  lo = Math.min(lo, yt[0]);
  hi = Math.max(hi, yt[yt.length - 1]);
  const y = (v) => m.t + ph * (1 - (v - lo) / (hi - lo));
  const B = labels.length;
  const band = pw / Math.max(B, 1);
  const barW = Math.max(1, (band * 0.8) / 2);
  const svg = svgEl("svg", {
    class: "rv-rw-svg", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": summary(labels, nums, state.mean), "data-testid": "rv-rw-svg",
  });
  const digits = tickDigits(step);
  for (const v of yt) {
    const yy = y(v);
    svg.appendChild(svgEl("line", { x1: m.l, x2: m.l + pw, y1: yy, y2: yy, class: "rv-rw-grid" }));
    svg.appendChild(svgEl("text", {
      x: m.l - 0.4 * fs, y: yy, "text-anchor": "end", "dominant-baseline": "middle",
    }, v.toFixed(digits)));
  }
  svg.appendChild(svgEl("text", {
    x: 0, y: 0, transform: `translate(${fs}, ${m.t + ph / 2}) rotate(-90)`,
    "text-anchor": "middle", "dominant-baseline": "middle", class: "rv-rw-axis",
  }, "reward"));
  // prompts apart: a faint line between groups
  for (let b = 1; b < B; b++) {
    if (state.batch.group_ids[b] !== state.batch.group_ids[b - 1]) {
      const xx = m.l + b * band;
      svg.appendChild(svgEl("line", { x1: xx, x2: xx, y1: m.t, y2: m.t + ph, class: "rv-rw-sep" }));
    }
  }
  const every = Math.max(1, Math.ceil((1.3 * fs) / band)); // labels that fit, none overlapping
  for (let b = 0; b < B; b++) {
    const x0 = m.l + b * band + band * 0.1;
    for (const [k, v, colour, name] of [
      [0, nums.raw[b], RAW, "raw reward"], [1, nums.processed[b], PROCESSED, "processed reward"],
    ]) {
      const top = y(Math.max(v, 0));
      const rect = svgEl("rect", {
        x: x0 + k * barW, y: top, width: barW, height: Math.max(Math.abs(y(v) - y(0)), 0.5),
        fill: colour, "data-sample": labels[b], "data-kind": k ? "processed" : "raw",
      });
      const tip = `${labels[b]}: ${name} = ${fmt(v, 4)}`;
      rect.appendChild(svgEl("title", {}, tip));
      rect.addEventListener("mouseenter", () => { state.tip.textContent = tip; });
      svg.appendChild(rect);
    }
    if (b % every === 0) {
      const xc = m.l + (b + 0.5) * band;
      svg.appendChild(svgEl("text", {
        x: 0, y: 0, transform: `translate(${xc}, ${m.t + ph + 0.5 * fs}) rotate(-45)`,
        "text-anchor": "end", "dominant-baseline": "middle",
      }, labels[b]));
    }
  }
  svg.appendChild(svgEl("line", { x1: m.l, x2: m.l + pw, y1: y(0), y2: y(0), class: "rv-rw-zero" }));
  svg.appendChild(svgEl("line", { x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph, class: "rv-rw-zero" }));
  svg.appendChild(svgEl("text", {
    x: m.l + pw / 2, y: H - 0.4 * fs, "text-anchor": "middle", class: "rv-rw-axis",
  }, "sample (prompt p / sample s)"));
  return svg;
}

function csvOf(labels, nums) {
  const lines = ["sample,raw_reward,processed_reward"];
  labels.forEach((l, b) => lines.push(`${l},${nums.raw[b]},${nums.processed[b]}`));
  return lines.join("\n") + "\n";
}

function drawRewards(state) {
  const { root } = state;
  const labels = rowLabels(state.batch.group_ids);
  const nums = rewardNumbers(state);
  state.nums = nums;
  if (nums.error) {
    state.body.replaceChildren(
      el("div", { class: "rv-status rv-error", role: "status" },
        `These settings are not valid for this batch: ${nums.error}`),
    );
    root.dataset.state = "error";
    return;
  }
  const B = nums.processed.length;
  state.mean = nums.processed.reduce((a, v) => a + v, 0) / B;
  const changed = Math.round(nums.clipFrac * B);
  const metrics = el("div", { class: "rv-rw-metrics" });
  metrics.append(
    metric("clip fraction", `${fixed(100 * nums.clipFrac, 1)}% (${changed} of ${B})`, "rv-rw-clip"),
    metric("mean processed reward", fixed(state.mean, 3), "rv-rw-mean"),
  );
  const legend = el("div", { class: "rv-rw-legend", "aria-hidden": "true" });
  for (const [colour, name] of [[RAW, "raw reward"], [PROCESSED, "processed reward"]]) {
    const key = el("span", { class: "rv-rw-key" });
    const swatch = el("span", { class: "rv-rw-swatch" });
    swatch.style.background = colour;
    key.append(swatch, el("span", {}, name));
    legend.appendChild(key);
  }
  state.tip = el("div", { class: "rv-tip", "aria-live": "off", "data-testid": "rv-rw-tip" },
    "Hover a bar for its value.");
  const save = el("button", { type: "button", class: "rv-rw-save" }, "Download these numbers (CSV)");
  save.addEventListener("click", () => {
    const url = URL.createObjectURL(new Blob([csvOf(labels, nums)], { type: "text/csv" }));
    const a = el("a", { href: url, download: "rewards_browser.csv" });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  });
  const note = el("div", { class: "rv-legend" },
    nums.from === "browser"
      ? "Computed in your browser from the sidebar's settings: it follows every knob move."
      : "Computed on the server (these settings are not in the browser pipeline).");
  const foot = el("div", { class: "rv-rw-foot" });
  foot.append(note, save);
  state.body.replaceChildren(metrics, legend, chart(state, labels, nums), state.tip, foot);
  root.dataset.updates = String(Number(root.dataset.updates || 0) + 1);
  root.dataset.seq = state.detail.seq || "";
  root.dataset.from = nums.from;
  root.dataset.state = "ready";
}

export default function rewardBars(component) {
  const { data, parentElement } = component;
  const payload = withBulk(data);
  let root = parentElement.querySelector(".rv-rw-root");
  if (!root) {
    root = el("div", { class: "rv-instant rv-rw rv-rw-root", "data-testid": "rv-reward-bars" });
    parentElement.appendChild(root);
  }
  if (payload === null) {
    parentElement.__rvRw = undefined;
    waitForBulk(component, root, "rv-rw-status");
    return () => {};
  }
  let state = parentElement.__rvRw;
  if (!state || state.payloadId !== data.payload_id) {
    if (state) {
      globalThis.removeEventListener("rv-knobs", state.onKnobs);
      state.resize?.disconnect();
    }
    root.replaceChildren();
    const title = el("div", { class: "rv-rw-title", role: "heading", "aria-level": 4 },
      "Response-level reward: raw vs post-processed");
    const body = el("div", { class: "rv-rw-body" });
    root.append(title, body);
    state = { root, body, payload, payloadId: data.payload_id, batch: decodeBatch(payload.batch),
      detailIn: null, width: 0 };
    state.onKnobs = (ev) => {
      const detail = ev.detail || {};
      // another dialect, or a config pipeline.js does not cover: the server reruns the page
      if (detail.framework !== state.payload.framework || !detail.config_covered) return;
      state.detail = detail;
      state.server = null;
      root.dataset.source = "relay";
      drawRewards(state);
    };
    globalThis.addEventListener("rv-knobs", state.onKnobs);
    if (typeof ResizeObserver === "function") {
      // the SVG is drawn at the column's width: redraw when it changes (not on every pixel)
      state.resize = new ResizeObserver(() => {
        const w = root.clientWidth;
        if (state.detail && Math.abs(w - state.width) > 24) {
          state.width = w;
          drawRewards(state);
        }
      });
      state.resize.observe(root);
    }
    parentElement.__rvRw = state;
  }
  const incoming = JSON.stringify([data.detail || {}, data.running ?? null, data.server ?? null]);
  if (incoming !== state.detailIn) {
    // a full run's values (the server's own, after a pause or a page change)
    state.detailIn = incoming;
    state.detail = data.detail || {};
    state.running = data.running ?? null;
    state.server = data.server ?? null;
    state.width = root.clientWidth;
    root.dataset.source = "server";
    drawRewards(state);
  }
  return () => {};
}
