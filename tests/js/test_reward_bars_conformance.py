"""The Rewards page's bars, computed in the browser, give the server's processed rewards.

On a sidebar knob move the relay (``relay.knob_detail``) sends the sidebar's resolved config
(``detail["config"]``); the Rewards page's bars (``ui/instant/rewards.js``) run ``pipeline.js``
on it with the session's running moments and draw the processed response-level rewards and the
clip fraction. For every dialect's defaults and every estimator, and for ROLL's normalisation
modes (none, group, batch, running with fresh and with accumulated moments) x reward clips x
estimators, on three batches, those JS numbers are compared with the page's ``trace.rewards``
and ``trace.clip_frac`` (``pipeline.run`` on ``native_config`` with the norm overrides, running
moments passed only where the config reads them, as ``flow.cached_trace`` does) to 1e-9; where
Python raises, the JavaScript must throw. The relay's ``config_covered`` must agree with
``covered`` in pipeline.js.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
from typing import Any

import pytest

from roll_viz.core.pipeline import CHOICES, ESTIMATOR_KEY, FRAMEWORKS, run
from roll_viz.core.records import RunningMoments
from roll_viz.ui.instant.payload import batch_payload, browser_coverage, browser_covers
from roll_viz.ui.instant.relay import knob_detail
from roll_viz.ui.settings import generic_defaults, native_config, norm_overrides
from tests.js.test_instant_conformance import NODE, ROOT, RUNNER, TOL, _random_batch

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

#: ROLL's sidebar: normalisation modes x reward clips (0 = off)
NORMS = ("none", "group", "batch", "running")
CLIPS = (0.0, 0.5, 3.0)
#: session running moments before the batch: fresh (ROLL's start) and after a few batches
RUNNING = (RunningMoments(), RunningMoments(mean=0.3, var=2.0, count=12.0))


def _sidebar(framework: str, changes: dict[str, Any]) -> tuple[dict, dict]:
    """(generic values, the sidebar's config) as ``knobs.algorithm_section`` builds them."""
    generic = {k: v for k, v in generic_defaults(framework).items() if v is not None}
    generic.update(changes)
    norm = norm_overrides(framework, generic["norm"]) if "norm" in generic else None
    return generic, native_config(framework, generic, overrides=norm)


def _states(framework: str) -> list[dict[str, Any]]:
    """Sidebar states: each estimator at the dialect's defaults; ROLL: norm x clip x estimator."""
    estimators = CHOICES[framework][ESTIMATOR_KEY[framework]]
    if framework != "roll":
        return [{"estimator": est} for est in estimators] + [{}]
    return [
        {"norm": norm, "clip": clip, "estimator": est}
        for norm in NORMS
        for clip in CLIPS
        for est in estimators
    ]


def _cases():
    batches = [
        _random_batch(21, P=2, G=4, T=6),
        _random_batch(22, P=3, G=3, T=5, constant_group=True),
        _random_batch(23, P=2, G=3, T=4, singleton=True),  # group std of one: ROLL raises
    ]
    cases, expected = [], []
    for framework in FRAMEWORKS:
        for state in _states(framework):
            generic, config = _sidebar(framework, state)
            try:
                detail = knob_detail(framework, generic, config)
            except ValueError:
                continue  # an estimator the app does not offer with these inputs
            if detail["config"] is None:
                continue  # not a valid sidebar config: the page says so, nothing is drawn
            reads_running = any(v == "running" for v in config.values())
            for ri, moments in enumerate(RUNNING if reads_running else RUNNING[:1]):
                for bi, batch in enumerate(batches):
                    try:
                        trace = run(
                            batch, framework, config, running=moments if reads_running else None
                        )
                        want = {"rewards": trace.rewards.tolist(), "clip_frac": trace.clip_frac}
                    except ValueError as err:
                        want = str(err)
                    cases.append(
                        {
                            "id": f"{framework}|{json.dumps(state)}|r{ri}|{bi}",
                            "framework": framework,
                            "config": detail["config"],
                            "batch": bi,
                            # the page always sends the session's moments (rewards.js)
                            "running": {
                                "mean": moments.mean,
                                "var": moments.var,
                                "count": moments.count,
                            },
                            "G": None,
                            "covered": detail["config_covered"],
                        }
                    )
                    expected.append(want)
    return batches, cases, expected


@pytest.fixture(scope="module")
def rewards_conformance(tmp_path_factory):
    batches, cases, expected = _cases()
    spec = {
        "batches": [batch_payload(b) for b in batches],
        "cases": [c for c in cases if c["covered"]],
        "coverage": [
            {"id": c["id"], "framework": c["framework"], "config": c["config"]} for c in cases
        ],
        "coverage_tables": browser_coverage(),
    }
    path = tmp_path_factory.mktemp("rewards") / "cases.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run(
        [NODE, str(RUNNER), str(path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (
        cases,
        dict(zip((c["id"] for c in cases), expected, strict=True)),
        json.loads(proc.stdout),
    )


def test_the_bars_in_the_browser_match_the_server(rewards_conformance):
    cases, expected, got = rewards_conformance
    results = {r["id"]: r for r in got["results"]}
    n_same = n_thrown = n_running = n_clipped = 0
    for case in cases:
        if not case["covered"]:
            continue
        res, want = results[case["id"]], expected[case["id"]]
        if isinstance(want, str):
            assert not res["ok"], f"{case['id']}: Python raised {want!r}, JS computed"
            n_thrown += 1
            continue
        assert res["ok"], f"{case['id']}: JS threw {res.get('error')}"
        js = res["out"]
        assert len(js["rewards"]) == len(want["rewards"])
        for b, (a, e) in enumerate(zip(js["rewards"], want["rewards"], strict=True)):
            assert math.isclose(a, e, rel_tol=TOL, abs_tol=TOL), f"{case['id']} [{b}]"
        assert math.isclose(js["clip_frac"], want["clip_frac"], rel_tol=TOL, abs_tol=TOL), case
        n_same += 1
        n_running += '"running"' in case["id"]
        n_clipped += want["clip_frac"] > 0
    assert n_same > 150
    assert n_running > 20  # ROLL's running normalisation is drawn in the browser too
    assert n_clipped > 20  # the clip changes rewards in many cases: the fraction is tested
    assert n_thrown > 0  # group std of a singleton group: both refuse
    print(f"reward bars: {n_same} equal ({n_running} running), {n_thrown} thrown by both")


def test_the_relay_and_pipeline_js_agree_on_the_sidebars_coverage(rewards_conformance):
    cases, _expected, got = rewards_conformance
    js = {c["id"]: c["covered"]["ok"] for c in got["coverage"]}
    for case in cases:
        assert js[case["id"]] == case["covered"], case["id"]
    assert any(not c["covered"] for c in cases)  # verl's optimal_token_baseline: the server's


def test_the_coverage_flag_reads_running_only_for_the_bars():
    """ROLL's running mode: covered for the bars (the moments are sent), not without them."""
    generic, config = _sidebar("roll", {"norm": "running", "estimator": "reinforce"})
    detail = knob_detail("roll", generic, config)
    assert detail["config"]["norm_mean_type"] == "running"
    assert detail["config_covered"]
    assert not browser_covers("roll", detail["config"])  # a payload without running moments
    generic, config = _sidebar("roll", {"norm": "group", "estimator": "reinforce"})
    assert knob_detail("roll", generic, config)["config_covered"]


def test_the_metrics_round_as_python_formats():
    """The bars' metrics (rewards.js ``fixed``) round exact ties half to even, as the server's
    ``f"{x:.3f}"`` does: quarter rewards give means like 0.3125 (toFixed: "0.313")."""
    rng = random.Random(7)
    cases = [(k / 16, 3) for k in range(-40, 41)] + [(100 * k / 16, 1) for k in range(17)]
    cases += [(rng.uniform(-3, 3), d) for d in (0, 1, 3, 4) for _ in range(50)]
    cases += [(0.0025, 3), (0.0015, 3), (2.5, 0), (3.5, 0), (1 / 3, 4)]
    url = (ROOT / "roll_viz" / "ui" / "instant" / "rewards.js").as_uri()
    script = (
        "import { readFileSync } from 'node:fs';"
        f"const {{ fixed }} = await import({json.dumps(url)});"
        "const cases = JSON.parse(readFileSync(0, 'utf8'));"
        "process.stdout.write(JSON.stringify(cases.map(([x, d]) => fixed(x, d))));"
    )
    proc = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    for (x, d), js in zip(cases, got, strict=True):
        assert js == format(x, f".{d}f"), (x, d)
    assert "0.312" in got  # a tie toFixed would round up
