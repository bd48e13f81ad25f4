// Drawing helpers shared by the instant strip (component.js) and the estimator heatmaps
// (estimators.js): elements with text only, the app's RdBu colours, nice scale ceilings, row
// labels and a canvas heatmap. Concatenated into each component's one module (instant/__init__.py).

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = String(text);
  return node;
}

function fmt(x, digits = 6) {
  if (x === null || x === undefined || Number.isNaN(x)) return "";
  return Number(x).toFixed(digits);
}

// the app's RdBu convention for z / zmax in [-1, 1]: red negative, white 0, blue positive
function colour(u) {
  const v = Math.max(-1, Math.min(1, u));
  const lo = [178, 24, 43];
  const mid = [247, 247, 247];
  const hi = [33, 102, 172];
  const [a, b, w] = v < 0 ? [mid, lo, -v] : [mid, hi, v];
  return [0, 1, 2].map((i) => Math.round(a[i] + (b[i] - a[i]) * w));
}

/** max |z| over the valid cells. */
function absMax(z, mask) {
  let top = 0;
  for (let b = 0; b < z.length; b++) {
    for (let t = 0; t < z[b].length; t++) if (mask[b][t] > 0) top = Math.max(top, Math.abs(z[b][t]));
  }
  return top;
}

/** Round up to 1, 2 or 5 x 10^k (the server figures' nice ceilings); 1 for 0. */
function niceCeil(x) {
  if (!(x > 0) || !Number.isFinite(x)) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  // 1, 2, 3 or 5 times a power of ten: views.scales.nice_ceiling's steps, so the strip and the
  // heatmaps round a range the same way
  for (const m of [1, 2, 3, 5, 10]) if (m * p >= x * (1 - 1e-12)) return m * p;
  return 10 * p;
}

/** "p0/s2" row names, as every page names samples (views.text.sample_labels). */
function rowLabels(groupIds) {
  const seen = new Map();
  return Array.from(groupIds, (g) => {
    const k = seen.get(g) || 0;
    seen.set(g, k + 1);
    return `p${g}/s${k}`;
  });
}

/** Draw (B, T) z on the canvas on a fixed scale [-zmax, zmax] (beyond it: the end colour). */
function drawHeatmap(canvas, z, mask, cellH, zmax) {
  const B = z.length;
  const T = B ? z[0].length : 0;
  const off = canvas.__off || document.createElement("canvas");
  canvas.__off = off;
  off.width = Math.max(T, 1);
  off.height = Math.max(B, 1);
  const octx = off.getContext("2d");
  const img = octx.createImageData(off.width, off.height);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      const i = 4 * (b * T + t);
      const rgb = mask[b][t] > 0 ? colour(zmax > 0 ? z[b][t] / zmax : 0) : [214, 214, 214];
      img.data[i] = rgb[0];
      img.data[i + 1] = rgb[1];
      img.data[i + 2] = rgb[2];
      img.data[i + 3] = 255;
    }
  }
  octx.putImageData(img, 0, 0);
  const width = canvas.clientWidth || canvas.parentNode?.clientWidth || 800;
  const height = Math.max(B * cellH, 1);
  // the CSS height pins each row to its label's cellH px: with width 100% alone the canvas
  // scaled its height by displayed / drawn width, and the labels drifted off their rows
  canvas.style.height = `${height}px`;
  // resizing a canvas reallocates it: only when the size really changed
  if (canvas.width !== width) canvas.width = width;
  if (canvas.height !== height) canvas.height = height;
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, 0, 0, canvas.width, canvas.height);
}
