"""The browser local-vs-global (roll_viz/ui/instant/local_global.js) against Python.

Random batches (ties, all-equal groups, singleton groups, interleaved and unequal groups, one
prompt, B == 1) x G (first G samples of every prompt) x what the local side divides by (group
std / nothing) x eps are written to one JSON file, run under Node
(``tests/js/run_local_global.mjs``, which loads pipeline.js + local_global.js exactly as the
component does) and compared to 1e-9 with three oracles:

- ``roll_viz.analysis.local_global.local_vs_global`` (the page's Python numbers; GRPO std and
  ROLL's eps, which is all it computes),
- ``roll_viz.core.pipeline.run`` with ROLL's ``norm_*_type`` and ``viz_eps`` (every knob),
- a plain Python loop with the ``statistics`` module (every knob).

Skipped only when ``node`` is missing and REQUIRE_E2E is not set.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
import torch

from roll_viz.analysis.common import ROLL_EPS
from roll_viz.analysis.local_global import local_vs_global
from roll_viz.analysis.reward_table import GLOBAL_CONFIG, LOCAL_CONFIG
from roll_viz.core.pipeline import run
from roll_viz.core.records import Batch
from roll_viz.ui.instant.payload import local_global_payload, subset_groups, subset_scores

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "js" / "run_local_global.mjs"
NODE = shutil.which("node") or ("/usr/bin/node" if Path("/usr/bin/node").exists() else None)
TOL = 1e-9

pytestmark = pytest.mark.skipif(
    NODE is None and os.environ.get("REQUIRE_E2E") != "1",
    reason="node is not installed (apt-get install -y nodejs); REQUIRE_E2E=1 makes this a failure",
)


def _batch(seed: int, sizes: list[int], interleave: bool = False, **kw) -> tuple:
    """(scores, group_ids, prompts) with ``sizes[p]`` samples of prompt p."""
    rng = random.Random(seed)
    gids = [p for p, n in enumerate(sizes) for _ in range(n)]
    if interleave:
        rng.shuffle(gids)
    scores = [
        float(rng.choice([0.0, 1.0])) if rng.random() < 0.5 else rng.uniform(-3, 3) for _ in gids
    ]
    if kw.get("constant_group"):
        scores = [0.7 if g == 0 else s for s, g in zip(scores, gids, strict=True)]
    if kw.get("near_constant"):
        pairs = zip(scores, gids, strict=True)
        scores = [5.0 + 1e-4 * rng.random() if g == 1 else s for s, g in pairs]
    prompts = [f"<b>p{p}</b> & 'q'" for p in range(len(sizes))]
    return torch.tensor(scores, dtype=torch.float64), torch.tensor(gids), prompts


BATCHES = {
    "ties_constant": _batch(1, [4, 4, 4], constant_group=True),
    "singleton": _batch(2, [3, 1, 3, 2]),
    "interleaved_unequal": _batch(3, [5, 2, 4, 1], interleave=True, near_constant=True),
    "one_prompt": _batch(4, [6]),
    "b1": _batch(5, [1]),
    "all_singletons": _batch(6, [1, 1, 1]),
    "big": _batch(7, [8] * 8, interleave=False, constant_group=True),
}
EPS_VALUES = (ROLL_EPS, 1e-8, 10**-2.5, 1.0)


def _cases() -> list[dict]:
    cases = []
    for k, (name, (_, gids, _)) in enumerate(BATCHES.items()):
        max_g = int(torch.bincount(gids).max())
        for G in sorted({1, 2, max_g} & set(range(1, max_g + 1))):
            for std in ("group", "none"):
                for eps in EPS_VALUES:
                    cases.append(
                        {
                            "id": f"{name}/G={G}/{std}/eps={eps:g}",
                            "batch": name,
                            "payload": k,
                            "G": G,
                            "std": std,
                            "eps": eps,
                        }
                    )
    return cases


@pytest.fixture(scope="module")
def node_results(tmp_path_factory) -> dict[str, dict]:
    payloads = [local_global_payload(*b) for b in BATCHES.values()]
    spec = {"payloads": payloads, "cases": _cases()}
    path = tmp_path_factory.mktemp("lg") / "cases.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        [NODE, str(RUNNER), str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return {r["id"]: r for r in json.loads(proc.stdout)["results"]}


def _close(js, py, what: str) -> None:
    js = [math.nan if v is None else v for v in (js if isinstance(js, list) else [js])]
    py = py.tolist() if hasattr(py, "tolist") else py
    py = [float(v) for v in (py if isinstance(py, list) else [py])]
    assert len(js) == len(py), what
    for i, (a, e) in enumerate(zip(js, py, strict=True)):
        if math.isnan(e):
            assert math.isnan(a), f"{what}[{i}]: {a} vs NaN"
        else:
            assert abs(a - e) <= TOL * (1 + abs(e)), f"{what}[{i}]: {a} vs {e}"


def pipeline_oracle(scores, gids, std: str, eps: float) -> tuple[list[float], list[float]]:
    """local, global via roll_viz.core.pipeline.run (ROLL, one token per sample)."""
    n = len(scores)

    def normalized(rows, ids, cfg):
        out = [math.nan] * n
        if not rows:
            return out
        order = sorted(range(len(rows)), key=lambda i: (ids[i], i))
        first: dict[int, int] = {}
        for i in order:
            first.setdefault(ids[i], len(first))
        batch = Batch(
            scores=torch.tensor([float(scores[rows[i]]) for i in order], dtype=torch.float64),
            response_mask=torch.ones(len(rows), 1, dtype=torch.float64),
            group_ids=torch.tensor([first[ids[i]] for i in order]),
            group_labels=tuple(range(len(first))),
        )
        rewards = run(batch, "roll", cfg).rewards.tolist()
        for k, i in enumerate(order):
            out[rows[i]] = rewards[k]
        return out

    counts = torch.bincount(gids).tolist()
    ids = gids.tolist()
    if std == "group":
        rows = [b for b in range(n) if counts[ids[b]] > 1]
        local = normalized(rows, [ids[b] for b in rows], LOCAL_CONFIG | {"viz_eps": eps})
    else:
        cfg = LOCAL_CONFIG | {"norm_std_type": None, "viz_eps": eps}
        local = normalized(list(range(n)), ids, cfg)
    if n > 1:
        glob = normalized(list(range(n)), [0] * n, GLOBAL_CONFIG | {"viz_eps": eps})
    else:
        glob = [math.nan]
    return local, glob


def _loop_oracle(scores, gids, std: str, eps: float) -> dict:
    """The definition, one sample at a time (statistics.mean / statistics.stdev)."""
    r = [float(x) for x in scores]
    ids = gids.tolist()
    groups: dict[int, list[float]] = {}
    for x, g in zip(r, ids, strict=True):
        groups.setdefault(g, []).append(x)
    local, glob = [], []
    for x, g in zip(r, ids, strict=True):
        members = groups[g]
        mean = statistics.mean(members)
        if std == "none":
            local.append(x - mean)
        elif len(members) > 1:
            local.append((x - mean) / (statistics.stdev(members) + eps))
        else:
            local.append(math.nan)
        if len(r) > 1:
            glob.append((x - statistics.mean(r)) / (statistics.stdev(r) + eps))
        else:
            glob.append(math.nan)
    b_std = statistics.stdev(r) if len(r) > 1 else math.nan
    g_std = [
        statistics.stdev(groups[g]) if len(groups[g]) > 1 else math.nan for g in sorted(groups)
    ]
    if std == "group":
        scale = [(b_std + eps) / (s + eps) for s in g_std]
    else:
        scale = [b_std + eps for _ in g_std]
    return {
        "local": local,
        "global": glob,
        "batch_mean": statistics.mean(r),
        "batch_std": b_std,
        "group_std": g_std,
        "scale": scale,
    }


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["id"])
def test_browser_equals_python(node_results, case):
    res = node_results[case["id"]]
    assert res["ok"], res.get("error")
    out = res["out"]
    scores, gids, prompts = BATCHES[case["batch"]]
    sub_scores, sub_gids = subset_scores(scores, gids, case["G"])
    # the browser's subset is the Python one (same rows, same order)
    assert out["group_ids"] == sub_gids.tolist()
    _close(out["scores"], sub_scores, "scores")
    std, eps = case["std"], case["eps"]

    if std == "group" and eps == ROLL_EPS:
        lg = local_vs_global(sub_scores, sub_gids, prompts)
        _close(out["local"], lg.local, "local vs local_vs_global")
        _close(out["global"], lg.global_, "global vs local_vs_global")
        _close(out["group_mean"], lg.group_mean, "group mean")
        _close(out["group_std"], lg.group_std, "group std")
        _close(out["batch_mean"], lg.batch_mean, "batch mean")
        _close(out["batch_std"], lg.batch_std, "batch std")
        _close(out["scale"], lg.groups["local / global scale"].to_numpy(), "scale")
        assert out["within"] == lg.samples["sample"].tolist()
        _close(out["count"], lg.groups["n"].to_numpy(), "n")

    local, glob = pipeline_oracle(sub_scores, sub_gids, std, eps)
    _close(out["local"], local, "local vs pipeline.run")
    _close(out["global"], glob, "global vs pipeline.run")

    loop = _loop_oracle(sub_scores, sub_gids, std, eps)
    for key in ("local", "global", "batch_mean", "batch_std", "group_std", "scale"):
        _close(out[key], loop[key], f"{key} vs plain loop")


def test_edge_cases_are_what_the_page_says(node_results):
    # an all-equal group: local exactly 0 (not eps-noise), global still ranks it
    out = node_results["ties_constant/G=4/group/eps=1e-06"]["out"]
    assert out["local"][:4] == [0.0, 0.0, 0.0, 0.0]
    assert any(abs(g) > 0.1 for g in out["global"][:4])
    # a single-sample group: local undefined with the group std, 0 with mean only (Dr.GRPO)
    assert node_results["singleton/G=3/group/eps=1e-06"]["out"]["local"][3] is None
    assert node_results["singleton/G=3/none/eps=1e-06"]["out"]["local"][3] == 0.0
    # B == 1: nothing is defined but the batch mean
    b1 = node_results["b1/G=1/group/eps=1e-06"]["out"]
    assert b1["local"] == [None]
    assert b1["global"] == [None]
    assert b1["batch_std"] is None
    assert b1["batch_mean"] == pytest.approx(float(BATCHES["b1"][0][0]))
    # one prompt: its group is the batch, so local = global
    one = node_results["one_prompt/G=6/group/eps=1e-06"]["out"]
    _close(one["local"], one["global"], "one prompt local = global")
    # a bigger eps shrinks the near-constant group's stretch
    tight = node_results["interleaved_unequal/G=5/group/eps=1e-08"]["out"]["scale"][1]
    loose = node_results["interleaved_unequal/G=5/group/eps=0.00316228"]["out"]["scale"][1]
    assert tight > 100 * loose > 0


def test_subset_scores_is_subset_groups():
    scores, gids, prompts = BATCHES["interleaved_unequal"]
    batch = Batch(
        scores=scores,
        response_mask=torch.ones(len(scores), 1, dtype=torch.float64),
        group_ids=gids,
        group_labels=tuple(prompts),
    )
    for G in (1, 2, 3, 5):
        s, g = subset_scores(scores, gids, G)
        ref = subset_groups(batch, G)
        assert torch.equal(s, ref.scores)
        assert torch.equal(g, ref.group_ids)


def test_payload_validates_and_carries_resolved_configs():
    scores, gids, prompts = BATCHES["singleton"]
    p = local_global_payload(scores, gids, prompts)
    assert p["max_group_size"] == 3
    assert p["local_config"]["norm_std_type"] == "group"
    assert p["global_config"]["norm_mean_type"] == "batch"
    assert p["eps"] == ROLL_EPS
    assert p["group_labels"] == prompts  # text as is; the component never parses it as HTML
    with pytest.raises(ValueError, match="finite"):
        local_global_payload(torch.tensor([1.0, math.nan]), torch.tensor([0, 0]), ["a"])
    with pytest.raises(ValueError, match="group ids"):
        local_global_payload(torch.tensor([1.0, 2.0]), torch.tensor([0, 2]), ["a", "b"])
    with pytest.raises(ValueError, match="at least one sample"):
        local_global_payload(torch.tensor([1.0, 2.0]), torch.tensor([0, 2]), ["a", "b", "c"])
