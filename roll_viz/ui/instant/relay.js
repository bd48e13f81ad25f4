// The knob relay (roll_viz/ui/instant/relay.py): the sidebar's algorithm fragment mounts it with
// the settled knob values; on a knob move (a fragment rerun, data.full false) it dispatches them
// on window as an "rv-knobs" CustomEvent (the page's instant components recompute), marks the
// page's server-only sections (containers keyed rv_stale_*) as computed for the previous values,
// and after pause_ms without a new move sets its "settle" trigger: the server then reruns the
// page once. A full run (data.full) clears the marks. Strings are set with textContent only.

const STYLE_ID = "rv-stale-style";

function ensureStyle(prefix) {
  if (document.getElementById(STYLE_ID)) return;
  const style = document.createElement("style");
  style.id = STYLE_ID;
  // dark text on a light amber label: 4.5:1 contrast in either theme's page
  style.textContent = `
html[data-rv-stale] [class*="st-key-${prefix}"] { outline: 2px dashed #8a5a00;
  outline-offset: 3px; }
html[data-rv-stale] [class*="st-key-${prefix}"]::before {
  content: "Computed for the previous knob values: updates when you pause";
  display: block; background: #fff3cd; color: #3d2c00; font-weight: 600;
  font-size: 0.85rem; padding: 0.15rem 0.5rem; border-radius: 0.25rem; }
`;
  document.head.appendChild(style);
}

function setStale(on) {
  const html = document.documentElement;
  if (on) html.dataset.rvStale = "1";
  else delete html.dataset.rvStale;
}

/** What the relay did, with timestamps (the browser tests read it): dispatch, settle, full. */
function note(e, seq) {
  globalThis.__rvRelayLog = globalThis.__rvRelayLog || [];
  globalThis.__rvRelayLog.push({ t: performance.now(), e, seq });
}

export default function knobRelay(component) {
  const { data, parentElement, setTriggerValue } = component;
  let state = parentElement.__rvRelay;
  if (!state) {
    // parentElement may be a shadow root (no dataset): the relay's own element carries state
    const status = document.createElement("div");
    status.setAttribute("role", "status");
    status.dataset.testid = "rv-relay";
    status.style.fontSize = "0.8rem";
    parentElement.appendChild(status);
    state = { seq: null, timer: null, status, moves: 0 };
    parentElement.__rvRelay = state;
  }
  state.setTriggerValue = setTriggerValue;
  ensureStyle(data.prefix || "rv_stale_");
  const detail = data.detail || {};
  if (data.full) {
    // the server just ran the page with these values: nothing is stale
    clearTimeout(state.timer);
    state.timer = null;
    state.seq = detail.seq;
    note("full", detail.seq);
    setStale(false);
    state.status.textContent = "";
    state.status.dataset.state = "full";
    return () => {};
  }
  if (detail.seq !== state.seq) {
    state.seq = detail.seq;
    state.moves += 1;
    state.status.dataset.moves = String(state.moves);
    note("dispatch", detail.seq);
    globalThis.dispatchEvent(new CustomEvent("rv-knobs", { detail }));
    setStale(true);
    state.status.textContent =
      "Figures recomputed in your browser; the marked sections update when you pause.";
    state.status.dataset.state = "moved";
    clearTimeout(state.timer);
    const seq = detail.seq;
    state.timer = setTimeout(() => {
      state.timer = null;
      state.status.dataset.state = "settling";
      note("settle", seq);
      state.setTriggerValue("settle", seq);
    }, Number(data.pause_ms) || 1500);
  }
  return () => {};
}
