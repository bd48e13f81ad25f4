// roll-viz accessibility fixes on Streamlit's own markup (loaded by roll_viz/ui/a11y.py).
// Attributes only, never moved or added nodes (React owns the DOM): a MutationObserver re-applies
// them after every redraw, at most once per animation frame. No "<" followed by a letter or "/"
// anywhere (comments included): Streamlit's HTML sanitiser then drops the whole script.
(() => {
  "use strict";
  const NUM = (v) => {
    if (!Number.isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
    return String(Number(v.toPrecision(3)));
  };

  // every finite number in a (nested) array or typed array
  function numbers(value, out) {
    if (value == null || typeof value === "string") return out;
    if (typeof value === "number") {
      if (Number.isFinite(value)) out.push(value);
      return out;
    }
    if (ArrayBuffer.isView(value) || Array.isArray(value)) {
      for (const v of value) numbers(v, out);
    }
    return out;
  }

  const plain = (s) => String(s == null ? "" : s).replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim();

  function range(vals) {
    let lo = Infinity, hi = -Infinity;
    for (const v of vals) { if (v < lo) lo = v; if (v > hi) hi = v; }
    return `${NUM(lo)} to ${NUM(hi)}`;
  }

  // the values themselves when few, else their range: the numbers the chart shows
  function listed(axis, value) {
    if (value == null) return "";
    if (!(Array.isArray(value) || ArrayBuffer.isView(value))) return "";
    const items = Array.from(value).flat();
    if (!items.length) return "";
    if (items.length <= 12) {
      return `${axis}: ` + items.map((v) => (typeof v === "number" ? NUM(v) : plain(v))).join(", ");
    }
    const vals = numbers(items, []);
    return vals.length ? `${axis} ${range(vals)}` : `${axis}: ${items.length} categories`;
  }

  // One trace in words: kind, name, size and its numbers (all of them when few, else the range).
  function describeTrace(t) {
    const kind = t.type || "scatter";
    const name = /^trace \d+$/.test(plain(t.name)) ? "" : plain(t.name); // Plotly's default
    const head = name ? `${kind} "${name}"` : kind;
    if (t.z != null) {
      const rows = Array.isArray(t.z) || ArrayBuffer.isView(t.z) ? Array.from(t.z) : [];
      const cols = rows.reduce((m, r) => Math.max(m, r && r.length ? r.length : 0), 0);
      const vals = numbers(rows, []);
      const blank = rows.length * cols - vals.length;
      return `${head}, ${rows.length} by ${cols}` +
        (vals.length ? `, values ${range(vals)}` : ", no values") +
        (blank > 0 ? `, ${blank} blank` : "");
    }
    if (kind === "histogram") {
      const vals = numbers(t.x != null ? t.x : t.y, []);
      return `${head}, ${vals.length} values` + (vals.length ? ` from ${range(vals)}` : "");
    }
    const parts = [head];
    for (const [axis, v] of [["x", t.x], ["y", t.y]]) {
      const s = listed(axis, v);
      if (s) parts.push(s);
    }
    return parts.join("; ");
  }

  // The chart's text alternative: its title, each trace (at most 8) and the axis titles.
  function describeFigure(data, layout) {
    const lay = layout || {};
    let title = plain(lay.title && (lay.title.text != null ? lay.title.text : lay.title));
    if (!title && Array.isArray(lay.annotations)) { // subplots: their titles are annotations
      title = lay.annotations.slice(0, 6).map((a) => plain(a && a.text)).filter(Boolean).join("; ");
    }
    const traces = (data || []).filter((t) => t && t.visible !== false);
    const shown = traces.slice(0, 8).map(describeTrace);
    if (traces.length > 8) shown.push(`and ${traces.length - 8} more traces`);
    const axes = [];
    for (const key of ["xaxis", "yaxis"]) {
      const ax = lay[key];
      const name = ax && ax.title ? plain(ax.title.text != null ? ax.title.text : ax.title) : "";
      if (name) axes.push(`${key[0]} axis: ${name}`);
    }
    const text = [`Chart${title ? ": " + title : ""}`, ...axes, ...shown].join(". ");
    return text.length > 900 ? text.slice(0, 897) + "..." : text;
  }

  function set(el, attr, value) {
    if (el.getAttribute(attr) !== value) el.setAttribute(attr, value);
  }

  // Streamlit draws each navigation section as a div (its header, then its li items) inside
  // the ul, and a list may hold only list items (axe: list, listitem). The ul becomes a plain
  // container and each section a list of its own, named by its header.
  function fixNav(root) {
    for (const ul of root.querySelectorAll('[data-testid="stSidebarNavItems"]')) {
      set(ul, "role", "none");
      for (const child of ul.children) {
        if (child.tagName !== "DIV") continue;
        set(child, "role", "list");
        const header = child.querySelector('[data-testid="stNavSectionHeader"]');
        if (header) {
          set(header, "role", "none");
          const label = plain(header.textContent.replace(/expand_(more|less)/g, ""));
          if (label) set(child, "aria-label", label);
        }
      }
    }
  }

  // A display formula or code block too wide for its column scrolls: a keyboard must reach it.
  function fixScrollers(root) {
    for (const el of root.querySelectorAll('[data-testid="stMain"] .katex-display')) {
      set(el, "tabindex", "0");
      set(el, "role", "group");
      set(el, "aria-label", "formula");
    }
    for (const el of root.querySelectorAll('[data-testid="stCode"] pre')) set(el, "tabindex", "0");
  }

  const described = new WeakMap(); // chart div -> the data it was described from
  function fixCharts(root) {
    for (const gd of root.querySelectorAll(".js-plotly-plot")) {
      const data = gd._fullData || gd.data;
      if (!data || described.get(gd) === data) continue;
      described.set(gd, data);
      // the input layout: the full one holds "Click to enter ... title" where none was given
      set(gd, "aria-label", describeFigure(data, gd.layout));
      // a figure, not an img: Plotly's drag layers inside are focusable (axe: nested-interactive)
      set(gd, "role", "figure");
    }
  }

  function fix() {
    fixNav(document);
    fixScrollers(document);
    fixCharts(document);
  }

  const api = { describeFigure, fix, pending: false };
  if (typeof module !== "undefined") { module.exports = api; return; } // Node (the tests)
  if (window.__rvA11y) { window.__rvA11y.fix(); return; }
  window.__rvA11y = api;
  const schedule = () => {
    if (api.pending) return;
    api.pending = true;
    requestAnimationFrame(() => { api.pending = false; fix(); });
  };
  new MutationObserver(schedule).observe(document.body, { childList: true, subtree: true });
  fix();
})();
