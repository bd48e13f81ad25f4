// Runs roll_viz/ui/instant/pipeline.js on the cases of a JSON file and prints the results.
//
// Usage: node tests/js/run_cases.mjs CASES.json > RESULTS.json
// CASES.json: {"batches": [payload batch], "cases": [{"id", "framework", "config", "running",
//              "G", "batch": index into batches}],
//              "coverage": [{"id", "framework", "config"}],
//              "coverage_tables": {framework: table}} (payload.browser_coverage(), as the page ships it)
// Each result: {"id", "ok": true, "out": {...trace fields as plain arrays...}} or
// {"id", "ok": false, "error": message}; coverage results: {"id", "covered": {ok, reason}}.
import { readFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { dirname, resolve } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const pipelineUrl = pathToFileURL(resolve(here, "../../roll_viz/ui/instant/pipeline.js")).href;
const P = await import(pipelineUrl);

const plain = (x) => {
  if (x === null || x === undefined) return null;
  if (Array.isArray(x)) return x.map((row) => Array.from(row));
  if (ArrayBuffer.isView(x)) return Array.from(x);
  return x;
};

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const batches = spec.batches.map((b) => P.decodeBatch(b));
const results = [];
for (const c of spec.cases) {
  let batch = batches[c.batch];
  if (c.G !== null && c.G !== undefined) batch = P.subsetGroups(batch, c.G);
  try {
    const t0 = performance.now();
    const out = P.run(batch, c.framework, c.config, c.running, spec.coverage_tables[c.framework]);
    const ms = performance.now() - t0;
    const fields = {};
    for (const k of ["rewards", "baseline", "scale", "kl", "token_rewards", "advantages",
                     "returns", "clip_frac", "kl_coef", "next_kl_coef", "kl_in_reward",
                     "running"]) {
      fields[k] = plain(out[k]);
    }
    results.push({ id: c.id, ok: true, out: fields, ms });
  } catch (err) {
    results.push({ id: c.id, ok: false, error: String(err.message || err) });
  }
}
const coverage = (spec.coverage || []).map((c) => ({
  id: c.id, covered: P.covered(c.framework, c.config, spec.coverage_tables[c.framework]),
}));
process.stdout.write(JSON.stringify({ results, coverage }));
