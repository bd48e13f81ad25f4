// The payload's bulk, sent once per browser tab: see _mount in roll_viz/ui/instant/__init__.py.
// Kept on the window (not the parentElement: Streamlit remounts a component on some reruns and
// on navigating back), the last BULK_MAX in order of arrival.

const BULK_MAX = 24; // Python remembers 8 per component key; three keys share this store

/** data.payload with its bulk (received now or earlier in this tab), or null if not held. */
function withBulk(data) {
  const store = globalThis.__rvBulks || new Map();
  globalThis.__rvBulks = store;
  if (data.bulk) {
    store.delete(data.bulk_id);
    store.set(data.bulk_id, data.bulk);
    while (store.size > BULK_MAX) store.delete(store.keys().next().value);
  }
  const bulk = store.get(data.bulk_id);
  return bulk === undefined ? null : { ...data.payload, ...bulk };
}

/** The tab lacks the bulk Python believes it sent: ask for it (forget_sent) and show a short
 *  status meanwhile, never an error. */
function waitForBulk(component, root, statusTestid) {
  const { data, parentElement, setTriggerValue } = component;
  if (parentElement.__rvAsked !== data) {
    // once per render (a repeated call with the same data does not ask again)
    parentElement.__rvAsked = data;
    setTriggerValue("missing_payload", data.bulk_id);
  }
  const status = document.createElement("div");
  status.className = "rv-status rv-loading";
  status.dataset.testid = statusTestid;
  status.textContent = "Loading the batch...";
  root.replaceChildren(status);
  root.dataset.state = "loading";
}
