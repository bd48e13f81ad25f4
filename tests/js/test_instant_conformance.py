"""The browser pipeline (roll_viz/ui/instant/pipeline.js) against roll_viz.core.pipeline.run.

Random batches (ties, all-equal groups, singleton groups, zero-length rows, mid-sequence masked
tokens, padding with non-zero values, no log-probs, one valid token) x every estimator and KL
estimator of every dialect (plus seeded random configs) are written to one JSON file, run under
Node (``tests/js/run_cases.mjs``) and compared field by field to 1e-9. Where Python raises
ValueError the JavaScript must throw too. Skipped only when ``node`` is missing and REQUIRE_E2E
is not set.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from roll_viz.core.pipeline import CHOICES, DEFAULTS, LOSS_DEFAULTS, dialects, resolve_config, run
from roll_viz.core.pipeline.dialects.shared import VIZ_DEFAULTS
from roll_viz.core.records import Batch, RunningMoments
from roll_viz.ui.instant.payload import (
    batch_payload,
    browser_coverage,
    instant_payload,
    jsonable_config,
    subset_groups,
)

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "js" / "run_cases.mjs"
PIPELINE_JS = ROOT / "roll_viz" / "ui" / "instant" / "pipeline.js"
#: the coverage tables the conformance run handed the JavaScript (filled by the fixture)
CONFORMANCE_TABLES: dict = {}
NODE = shutil.which("node") or ("/usr/bin/node" if Path("/usr/bin/node").exists() else None)
TOL = 1e-9
LOSS_ALL = {k for table in LOSS_DEFAULTS.values() for k in table}
VEC_FIELDS = ("rewards", "baseline", "scale")
MAT_FIELDS = ("kl", "token_rewards", "advantages", "returns")
# kl_loss is not mirrored: it depends on the policy-update aggregation (losses.py)
#: JS output name (the Trace's JSON name, records.trace_to_dict) -> Trace field
SCALARS = {"clip_frac": "clip_frac", "kl_coef": "beta", "next_kl_coef": "next_beta"}

pytestmark = pytest.mark.skipif(
    NODE is None and os.environ.get("REQUIRE_E2E") != "1",
    reason="node is not installed (apt-get install -y nodejs); REQUIRE_E2E=1 makes this a failure",
)


def _random_batch(seed: int, P: int, G: int, T: int, **kw) -> Batch:
    """Random batch with the edge cases switched on by ``kw``."""
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    gids = [p for p in range(P) for _ in range(G)]
    if kw.get("singleton"):
        gids.append(P)
    B = len(gids)
    scores = []
    for _ in range(B):
        kind = rng.random()
        scores.append(float(rng.choice([0.0, 1.0])) if kind < 0.5 else rng.uniform(-3, 3))
    if kw.get("constant_group"):
        for b in range(G):
            scores[b] = 0.7  # all-equal group: advantage exactly 0
    mask = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        length = rng.randint(1, T)
        mask[b, :length] = 1.0
        if kw.get("mid_mask", True) and length > 2 and rng.random() < 0.4:
            mask[b, rng.randrange(1, length - 1)] = 0.0
    if kw.get("zero_row") and B > 2:
        mask[rng.randrange(B)] = 0.0
    lp = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 4 - 0.01
    ref = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 4 - 0.01
    if kw.get("extreme"):
        lp[0, 0] = -25.0  # k3 / log-ratio clamps
        ref[1 % B, 0] = -30.0
    values = torch.rand(B, T, generator=gen, dtype=torch.float64) * 2 - 1  # padding non-zero
    logprobs = kw.get("logprobs", True)
    return Batch(
        scores=torch.tensor(scores, dtype=torch.float64),
        response_mask=mask,
        group_ids=torch.tensor(gids, dtype=torch.long),
        group_labels=tuple(f"p{g}" for g in range(max(gids) + 1)),
        logprobs=lp if logprobs else None,
        ref_logprobs=ref if logprobs else None,
        values=values if kw.get("values", True) else None,
        baseline_scores=torch.rand(B, generator=gen, dtype=torch.float64),
    )


def _batches() -> list[Batch]:
    one_token = Batch(
        scores=torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64),
        response_mask=torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64),
        group_ids=torch.tensor([0, 0, 0]),
        group_labels=("q",),
        logprobs=torch.tensor([[-0.5, -1.0], [-1.0, -1.0], [-2.0, -3.0]], dtype=torch.float64),
        ref_logprobs=torch.tensor([[-1.0, -2.0], [-1.0, -1.0], [-2.0, -3.0]], dtype=torch.float64),
        values=torch.tensor([[0.5, 0.6], [0.1, 0.2], [0.3, 0.4]], dtype=torch.float64),
    )
    return [
        _random_batch(1, P=3, G=4, T=7, zero_row=True, constant_group=True),
        _random_batch(2, P=2, G=3, T=5, singleton=True, extreme=True),
        _random_batch(3, P=4, G=2, T=9, zero_row=True, mid_mask=False),
        _random_batch(4, P=2, G=5, T=6, logprobs=False, values=False),
        _random_batch(5, P=1, G=6, T=12, zero_row=True),
        one_token,
    ]


def _configs() -> list[tuple[str, dict]]:
    """Every estimator x KL estimator of each dialect, the switches, and seeded random mixes."""
    out: list[tuple[str, dict]] = []
    for est, kl in itertools.product(CHOICES["roll"]["adv_estimator"], ("kl", "abs", "mse", "k3")):
        out.append(("roll", {"adv_estimator": est, "kl_penalty": kl, "add_token_level_kl": True}))
    for mean, std in itertools.product((None, "group", "batch", "running"), repeat=2):
        out.append(
            ("roll", {"adv_estimator": "reinforce", "norm_mean_type": mean, "norm_std_type": std})
        )
    out += [
        (
            "roll",
            {
                "adv_estimator": "grpo",
                "whiten_advantages": True,
                "advantage_clip": 0.5,
                "reward_clip": 0.8,
                "add_token_level_kl": True,
                "init_kl_coef": 0.3,
                "gamma": 0.9,
            },
        ),
        (
            "roll",
            {
                "adv_estimator": "gae",
                "whiten_rewards": True,
                "whiten_advantages": True,
                "gamma": 0.95,
                "lambd": 0.7,
                "target_kl": 0.05,
                "use_kl_loss": True,
            },
        ),
        (
            "roll",
            {
                "adv_estimator": "grpo",
                "viz_std_ddof": 0,
                "viz_eps": 1e-3,
                "viz_whiten_ddof": 0,
                "whiten_advantages": True,
            },
        ),
    ]
    for est, kl in itertools.product(CHOICES["verl"]["adv_estimator"], ("kl", "abs", "k2", "k3")):
        out.append(
            (
                "verl",
                {
                    "adv_estimator": est,
                    "kl_penalty": kl,
                    "use_kl_in_reward": True,
                    "kl_coef": 0.2,
                    "gamma": 0.9,
                    "lam": 0.8,
                },
            )
        )
    out += [
        ("verl", {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False}),
        (
            "verl",
            {
                "adv_estimator": "gae",
                "use_kl_in_reward": True,
                "kl_ctrl_type": "adaptive",
                "use_kl_loss": True,
                "kl_loss_type": "low_var_kl",
                "lam": 0.95,
            },
        ),
        ("verl", {"adv_estimator": "reinforce_plus_plus", "viz_whiten_ddof": 0}),
    ]
    for est, kl in itertools.product(
        CHOICES["openrlhf"]["advantage_estimator"], ("k1", "k2", "k3")
    ):
        out.append(
            (
                "openrlhf",
                {
                    "advantage_estimator": est,
                    "kl_estimator": kl,
                    "init_coef": 0.1,
                    "gamma": 0.9,
                    "lambd": 0.8,
                },
            )
        )
    out += [
        ("openrlhf", {"advantage_estimator": "gae", "no_std_norm": True, "target": 0.1}),
        ("openrlhf", {"advantage_estimator": "reinforce", "use_loss": True, "clip_range": 0.5}),
        ("openrlhf", {"advantage_estimator": "group_norm", "clip_range": None}),
    ]
    for mode in CHOICES["trl"]["scale_rewards"]:
        out.append(("trl", {"scale_rewards": mode, "beta": 0.04}))
    out.append(("trl", {"scale_rewards": "group", "viz_std_ddof": 0, "viz_eps": 1e-6}))
    rng = random.Random(7)
    for _ in range(12):
        fw = rng.choice(["roll", "verl", "openrlhf", "trl"])
        cfg = {}
        for key, choices in CHOICES[fw].items():
            if rng.random() < 0.7:
                cfg[key] = rng.choice(choices)
        for key in ("gamma", "lambd", "lam"):
            if key in resolve_config(fw, None) and rng.random() < 0.6:
                cfg[key] = rng.choice([0.0, 0.5, 0.93, 1.0])
        out.append((fw, cfg))
    return out


#: estimators that read per-token inputs the browser payload does not carry (verl's optimal
#: token baseline needs sum of pi^2 over the vocabulary at every token): always the server path.
SERVER_ONLY = {("verl", "optimal_token_baseline")}


def _server_only(case):
    cfg = case["config"]
    return (case["framework"], cfg.get("adv_estimator")) in SERVER_ONLY


def _raw(fw, cfg):
    """A config with every reward-stage key plus whatever extra key the case adds."""
    base = jsonable_config(fw, cfg) if fw in DEFAULTS else {}
    return {**base, **{k: v for k, v in cfg.items() if k not in base and k not in LOSS_ALL}}


def _python(batch, fw, cfg, running):
    try:
        return run(batch, fw, cfg, running), None
    except ValueError as err:
        return None, str(err)


def _close(js, py, what):
    py = torch.as_tensor(py, dtype=torch.float64)
    js = torch.tensor(js, dtype=torch.float64).reshape(py.shape)
    torch.testing.assert_close(js, py, rtol=TOL, atol=TOL, msg=lambda m: f"{what}: {m}")


@pytest.fixture(scope="module")
def conformance(tmp_path_factory):
    if NODE is None:
        pytest.fail("REQUIRE_E2E=1 but node is missing")
    batches = _batches()
    running = RunningMoments(mean=0.4, var=1.7, count=5.0)
    cases, expected = [], []
    for bi, batch in enumerate(batches):
        for ci, (fw, cfg) in enumerate(_configs()):
            uses_running = "running" in (cfg.get("norm_mean_type"), cfg.get("norm_std_type"))
            for G in (None, 1, 2) if ci % 5 == 0 else (None,):
                run_batch = batch if G is None else subset_groups(batch, G)
                rm = running if (uses_running and ci % 2) else None
                cases.append(
                    {
                        "id": f"b{bi}-c{ci}-G{G}",
                        "framework": fw,
                        "config": jsonable_config(fw, resolve_config(fw, cfg)),
                        "running": None if rm is None else vars(rm),
                        "G": G,
                        "batch": bi,
                    }
                )
                expected.append(_python(run_batch, fw, cfg, rm))
    coverage = [
        {"id": f"cov-{i}", "framework": c["framework"], "config": c["config"]}
        for i, c in enumerate(cases[:200])
        if not _server_only(c)
    ]
    bad = [
        ("roll", {**resolve_config("roll", None), "adv_estimator": "gigpo"}),
        ("roll", {**resolve_config("roll", None), "difficulty_mask": True}),
        # named reward components (gdpo_reward_keys) are the server path
        ("verl", {**resolve_config("verl", None), "gdpo_reward_keys": ["r"]}),
        ("verl", {**resolve_config("verl", None), "adv_estimator": "optimal_token_baseline"}),
        ("openrlhf", {**resolve_config("openrlhf", None), "kl_estimator": "abs"}),
        ("trl", {"beta": 0.0}),  # not resolved: scale_rewards missing
        ("trl", {**resolve_config("trl", None), "gamma": 0.9}),
        ("roll", {**resolve_config("roll", None), "gamma": 1.5}),
        ("deepspeed", {}),
    ]
    coverage += [
        {"id": f"bad-{i}", "framework": fw, "config": _raw(fw, cfg)}
        for i, (fw, cfg) in enumerate(bad)
    ]
    spec = {
        "batches": [batch_payload(b) for b in batches],
        "cases": cases,
        "coverage": coverage,
        # the coverage tables as the page ships them (instant_payload's "coverage")
        "coverage_tables": instant_payload(batches[0], "roll")["coverage"],
    }
    path = tmp_path_factory.mktemp("js") / "cases.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        [NODE, str(RUNNER), str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    CONFORMANCE_TABLES.update(json.loads(path.read_text())["coverage_tables"])
    return cases, expected, got, len(bad)


def test_every_case_matches_python_to_1e9(conformance):
    cases, expected, got, _ = conformance
    assert len(got["results"]) == len(cases) > 500
    n_ok = n_err = 0
    for case, (trace, err), res in zip(cases, expected, got["results"], strict=True):
        where = f"{case['id']} {case['framework']} {case['config']}"
        if err is not None:
            assert not res["ok"], f"{where}: Python raised {err!r}, JS returned numbers"
            n_err += 1
            continue
        assert res["ok"], f"{where}: JS threw {res.get('error')!r}"
        out = res["out"]
        for name in VEC_FIELDS + MAT_FIELDS:
            _close(out[name], getattr(trace, name), f"{where} {name}")
        for name, field in SCALARS.items():
            want = getattr(trace, field)
            assert math.isclose(out[name], want, rel_tol=TOL, abs_tol=TOL), (
                f"{where} {name}: {out[name]} vs {want}"
            )
        assert out["kl_in_reward"] == trace.kl_in_reward, where
        if trace.running is not None:
            assert out["running"] is not None, where
            for k in ("mean", "var", "count"):
                assert math.isclose(out["running"][k], getattr(trace.running, k), rel_tol=TOL)
        n_ok += 1
    # the grid must exercise both paths: numbers and the errors Python defines
    assert n_ok > 400
    assert n_err > 10


def test_every_estimator_is_exercised(conformance):
    cases, expected, _, _ = conformance
    seen = {
        (c["framework"], c["config"][k])
        for c, (trace, _) in zip(cases, expected, strict=True)
        if trace is not None
        for k in ("adv_estimator", "advantage_estimator", "scale_rewards")
        if k in c["config"]
    }
    for fw, key in (
        ("roll", "adv_estimator"),
        ("verl", "adv_estimator"),
        ("openrlhf", "advantage_estimator"),
        ("trl", "scale_rewards"),
    ):
        for est in CHOICES[fw][key]:
            if (fw, est) in SERVER_ONLY:
                continue  # rejected by covered() (test below): the page computes it on the server
            assert (fw, est) in seen, f"{fw} {est} never computed successfully"


def test_the_suite_uses_the_tables_generated_from_the_records(conformance):
    """pipeline.js types no coverage table: the suite runs on the records' BROWSER_COVERAGE."""
    assert browser_coverage() == CONFORMANCE_TABLES  # what the JS above ran with
    for name, table in browser_coverage().items():
        record = dialects.get(name).BROWSER_COVERAGE
        assert table == {
            **{k: None if v is None else list(v) for k, v in record.items()},
            **dict.fromkeys(VIZ_DEFAULTS),
        }
    source = PIPELINE_JS.read_text()
    assert "const COVERED" not in source
    assert "const KEYS" not in source
    ports = re.search(r"export const PIPELINES = \{(.*?)\};", source, re.S).group(1)
    assert set(browser_coverage()) == set(re.findall(r"(\w+): \w+Pipeline", ports))


def test_covered_accepts_resolved_and_rejects_unknown(conformance):
    _, _, got, n_bad = conformance
    cov = got["coverage"]
    good, bad = cov[:-n_bad], cov[-n_bad:]
    assert all(c["covered"]["ok"] for c in good), [c for c in good if not c["covered"]["ok"]][:3]
    for c in bad:
        assert c["covered"]["ok"] is False, c
        assert c["covered"]["reason"], c


def test_hand_vector_t5_roll_grpo_whitened(tmp_path):
    """algorithms.md T5: ROLL grpo + whiten_advantages, lengths [3, 2, 4] (not via Python)."""
    lengths = [3, 2, 4]
    batch = Batch(
        scores=torch.tensor([8.2, 6.5, 9.1], dtype=torch.float64),
        response_mask=torch.tensor(
            [[1.0 if t < n else 0.0 for t in range(4)] for n in lengths], dtype=torch.float64
        ),
        group_ids=torch.zeros(3, dtype=torch.long),
        group_labels=("q",),
    )
    cfg = resolve_config(
        "roll", {"adv_estimator": "grpo", "whiten_advantages": True, "advantage_clip": 2.0}
    )
    spec = {
        "batches": [batch_payload(batch)],
        "cases": [
            {
                "id": "t5",
                "framework": "roll",
                "config": jsonable_config("roll", cfg),
                "running": None,
                "G": None,
                "batch": 0,
            }
        ],
        "coverage_tables": browser_coverage(),
    }
    path = tmp_path / "t5.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        [NODE, str(RUNNER), str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)["results"][0]
    assert res["ok"], res
    adv = res["out"]["advantages"]
    first = [adv[b][0] for b in range(3)]
    for got, want in zip(first, [-0.020933229, -1.622325266, 0.826862555], strict=True):
        assert abs(got - want) < 1e-8
    assert adv[1][2] == 0.0
    assert adv[1][3] == 0.0


def test_benchmark_big_batch(tmp_path):
    """BENCHMARK lines: browser-pipeline ms under Node vs Python run() on a page-sized batch."""
    import statistics
    import time

    batch = _random_batch(11, P=16, G=4, T=256, zero_row=True)
    payload = batch_payload(batch)
    n_bytes = len(json.dumps(payload))
    for fw, cfg in (
        ("roll", {"adv_estimator": "grpo", "add_token_level_kl": True}),
        ("verl", {"adv_estimator": "gae", "use_kl_in_reward": True}),
    ):
        resolved = jsonable_config(fw, resolve_config(fw, cfg))
        spec = {
            "batches": [payload],
            "cases": [
                {
                    "id": str(i),
                    "framework": fw,
                    "config": resolved,
                    "running": None,
                    "G": None,
                    "batch": 0,
                }
                for i in range(12)
            ],
            "coverage_tables": browser_coverage(),
        }
        path = tmp_path / f"{fw}.json"
        path.write_text(json.dumps(spec))
        proc = subprocess.run(
            [NODE, str(RUNNER), str(path)], capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, proc.stderr
        res = json.loads(proc.stdout)["results"]
        assert all(r["ok"] for r in res)
        js_ms = [r["ms"] for r in res[4:]]  # after JIT warm-up
        py_ms = []
        for _ in range(8):
            t0 = time.perf_counter()
            trace = run(batch, fw, cfg)
            py_ms.append((time.perf_counter() - t0) * 1e3)
        _close(res[-1]["out"]["advantages"], trace.advantages, f"bench {fw}")
        print(
            "BENCHMARK "
            + json.dumps(
                {
                    "name": "instant_pipeline_js_vs_python",
                    "framework": fw,
                    "estimator": cfg,
                    "B": 64,
                    "T": 256,
                    "payload_bytes": n_bytes,
                    "node_median_ms": round(statistics.median(js_ms), 3),
                    "python_median_ms": round(statistics.median(py_ms), 3),
                }
            )
        )
