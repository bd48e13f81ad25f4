// The knob relay (roll_viz/ui/instant/relay.py): the sidebar's algorithm fragment mounts it with
// the settled knob values and a mode (relay.move_mode). On a knob move in mode "browser" it
// dispatches them on window as an "rv-knobs" CustomEvent (the page's instant components
// recompute) and marks the page's server-only sections (containers keyed rv_stale_*) as computed
// for the previous values; in mode "whole" it marks the whole main column instead (the browser
// redraws nothing); either way, after pause_ms without a new move it sets its "settle" trigger:
// the server then reruns the page once. Mode "steady" (the page reads no algorithm knob) does
// nothing; "full" (the server just ran the page) clears the marks. Text is set by textContent.

const STYLE_ID = "rv-stale-style";

// the main column's block (Streamlit's test id): marked whole in mode "whole"
const MAIN = '[data-testid="stMainBlockContainer"]';

function ensureStyle(prefix) {
  if (document.getElementById(STYLE_ID)) return;
  const style = document.createElement("style");
  style.id = STYLE_ID;
  // dark text on a light amber label: 4.5:1 contrast in either theme's page
  const mark = `outline: 2px dashed #8a5a00; outline-offset: 3px;`;
  const label = `display: block; background: #fff3cd; color: #3d2c00; font-weight: 600;
  font-size: 0.85rem; padding: 0.15rem 0.5rem; border-radius: 0.25rem;`;
  style.textContent = `
html[data-rv-stale="sections"] [class*="st-key-${prefix}"] { ${mark} }
html[data-rv-stale="sections"] [class*="st-key-${prefix}"]::before {
  content: "Computed for the previous knob values: updates when you pause"; ${label} }
html[data-rv-stale="whole"] ${MAIN} { outline: 2px dashed #8a5a00; outline-offset: -4px; }
html[data-rv-stale="whole"] ${MAIN}::before {
  content: "Computed for the previous knob values: this page updates when you pause";
  ${label} position: sticky; top: 3.75rem; z-index: 5; }
`;
  document.head.appendChild(style);
}

/** Mark "sections" (the page's stale sections), "whole" (the main column) or nothing (null). */
function setStale(what) {
  const html = document.documentElement;
  if (what) html.dataset.rvStale = what;
  else delete html.dataset.rvStale;
}

const STATUS = {
  browser: "Figures recomputed in your browser; the marked sections update when you pause.",
  whole: "This page updates when you pause.",
  steady: "Nothing on this page reads this knob; the pages of the chain use it.",
};

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
  const mode = data.mode || "full";
  if (mode === "full") {
    // the server just ran the page with these values: nothing is stale
    clearTimeout(state.timer);
    state.timer = null;
    state.seq = detail.seq;
    note("full", detail.seq);
    setStale(null);
    state.status.textContent = "";
    state.status.dataset.state = "full";
    return () => {};
  }
  if (detail.seq !== state.seq) {
    state.seq = detail.seq;
    state.moves += 1;
    state.status.dataset.moves = String(state.moves);
    state.status.textContent = STATUS[mode] || "";
    state.status.dataset.state = "moved";
    if (mode === "steady") {
      note("steady", detail.seq);
      return () => {};
    }
    if (mode === "browser") {
      note("dispatch", detail.seq);
      globalThis.dispatchEvent(new CustomEvent("rv-knobs", { detail }));
    } else {
      note("whole", detail.seq);
    }
    setStale(mode === "browser" ? "sections" : "whole");
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
