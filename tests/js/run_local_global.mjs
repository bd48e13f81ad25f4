// Runs roll_viz/ui/instant/local_global.js (concatenated after pipeline.js, as the component
// loads it; bulk.js only serves the default export, not needed here) on a JSON file of cases.
//
// Usage: node tests/js/run_local_global.mjs CASES.json > RESULTS.json
// CASES.json: {"payloads": [local_global_payload], "cases": [{"id", "payload": index, "G",
//              "std", "eps"}]}
// Each result: {"id", "ok": true, "out": {...}} (NaN as null) or {"id", "ok": false, "error"}.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const dir = resolve(here, "../../roll_viz/ui/instant");
const source =
  readFileSync(resolve(dir, "pipeline.js"), "utf8") + "\n" +
  readFileSync(resolve(dir, "local_global.js"), "utf8");
const M = await import(`data:text/javascript;base64,${Buffer.from(source).toString("base64")}`);

const plain = (x) => Array.from(x, (v) => (Number.isNaN(v) ? null : v));
const num = (v) => (Number.isNaN(v) ? null : v);

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const payloads = spec.payloads;
const decoded = payloads.map((p) => M.lgDecode(p));
const results = [];
for (const c of spec.cases) {
  const p = payloads[c.payload];
  try {
    const shown = M.lgSubset(decoded[c.payload], c.G);
    const out = M.localVsGlobal(shown.scores, shown.group_ids, {
      localConfig: p.local_config, globalConfig: p.global_config, coverage: p.coverage,
      std: c.std, eps: c.eps,
    });
    results.push({
      id: c.id,
      ok: true,
      out: {
        scores: plain(shown.scores), group_ids: shown.group_ids, local: plain(out.local),
        global: plain(out.global), within: out.within, count: plain(out.count),
        group_mean: plain(out.groupMean), group_std: plain(out.groupStd),
        scale: plain(out.scale), batch_mean: num(out.batchMean), batch_std: num(out.batchStd),
      },
    });
  } catch (err) {
    results.push({ id: c.id, ok: false, error: String(err.message || err) });
  }
}
process.stdout.write(JSON.stringify({ results }));
