"""Every sidebar knob, moved in the browser, gives the numbers the server computes for it.

On a sidebar knob move the relay (``roll_viz.ui.instant.relay.knob_detail``) sends each
estimator's config, resolved by Python; the Advantages page's heatmaps run ``pipeline.js`` on them.
For every dialect, every sidebar knob (estimator, beta, KL estimator, KL in the reward, gamma,
lambda, reward clip, whiten, reward normalization) at two values each, on two batches, those JS
results are compared with what the page computes on the server for the same sidebar values
(``pipeline.run`` on ``native_config(framework, generic, {estimator})``, the page's
``try_trace``) to 1e-9; where Python raises, the JavaScript must throw. The relay's coverage
flag (``browser_covers``) must agree with ``covered`` in pipeline.js. The Token KL page's
token rewards likewise: each KL placement's config the relay sends (``placements``) gives, in
the browser, the token rewards of the page's ``try_trace`` with ``kl_placement_overrides``.
"""

from __future__ import annotations

import json
import math
import subprocess
from typing import Any

import pytest

from roll_viz.core.pipeline import ALIASES, CHOICES, FRAMEWORKS, run
from roll_viz.ui.instant.payload import batch_payload, browser_coverage, browser_covers
from roll_viz.ui.instant.relay import PLACEMENTS, knob_detail
from roll_viz.ui.knobs import KNOBS
from roll_viz.ui.settings import (
    estimator_overrides,
    generic_defaults,
    kl_placement_overrides,
    native_config,
    norm_overrides,
)
from tests.js.test_instant_conformance import NODE, RUNNER, TOL, _random_batch

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

#: knob -> two values a student may set (selects: the dialect's choices instead)
MOVES: dict[str, tuple[Any, ...]] = {
    "beta": (0.0, 0.3),
    "kl_in_reward": (True, False),
    "gamma": (0.5, 0.97),
    "lam": (0.0, 0.8),
    "clip": (0.5, 3.0),
    "whiten": (True, False),
    "norm": ("group", "batch"),
}


def _sidebar(framework: str, changes: dict[str, Any]) -> tuple[dict, dict]:
    """(generic values, the sidebar's config) as ``knobs.algorithm_section`` builds them."""
    generic = {k: v for k, v in generic_defaults(framework).items() if v is not None}
    generic.update(changes)
    norm = norm_overrides(framework, generic["norm"]) if "norm" in generic else None
    return generic, native_config(framework, generic, overrides=norm)


def _moves(framework: str) -> list[dict[str, Any]]:
    """One sidebar state per knob value: each knob moved alone from the dialect's defaults.

    The estimator knob needs no state of its own: every state's detail has every estimator.
    """
    states: list[dict[str, Any]] = [{}]
    kl_key = ALIASES[framework].get("kl_estimator")
    if kl_key is not None:
        states.extend({"kl_estimator": v} for v in CHOICES[framework].get(kl_key, ()))
    for knob in KNOBS:
        if knob.widget != "select":
            states.extend({knob.generic: v} for v in MOVES[knob.generic])
    states.extend({"norm": v} for v in MOVES["norm"])
    return states


def _cases():
    batches = [
        _random_batch(11, P=2, G=4, T=7),
        _random_batch(12, P=3, G=3, T=5, constant_group=True),
    ]
    cases, expected = [], []
    for framework in FRAMEWORKS:
        for state in _moves(framework):
            generic, config = _sidebar(framework, state)
            detail = knob_detail(framework, generic, config)
            for est, cfg in detail["configs"].items():
                for bi, batch in enumerate(batches):
                    cid = f"{framework}|{json.dumps(state)}|{est}|{bi}"
                    server = native_config(framework, generic, estimator_overrides(framework, est))
                    try:
                        want = run(batch, framework, server).advantages.tolist()
                    except ValueError as err:
                        want = str(err)
                    covered = est not in detail["server"]
                    case = {"id": cid, "framework": framework, "config": cfg, "batch": bi}
                    cases.append(
                        {**case, "running": None, "G": None, "covered": covered, "of": "advantages"}
                    )
                    expected.append(want)
            for name, cfg in detail["placements"].items():
                beta = float(generic["beta"])
                overrides = kl_placement_overrides(framework, PLACEMENTS[name], beta)
                server = native_config(framework, generic, overrides)
                for bi, batch in enumerate(batches):
                    cid = f"{framework}|{json.dumps(state)}|placement {name}|{bi}"
                    try:
                        want = run(batch, framework, server).token_rewards.tolist()
                    except ValueError as err:
                        want = str(err)
                    case = {"id": cid, "framework": framework, "config": cfg, "batch": bi}
                    covered = browser_covers(framework, cfg)
                    cases.append(
                        {
                            **case,
                            "running": None,
                            "G": None,
                            "covered": covered,
                            "of": "token_rewards",
                        }
                    )
                    expected.append(want)
    return batches, cases, expected


@pytest.fixture(scope="module")
def relay_conformance(tmp_path_factory):
    batches, cases, expected = _cases()
    spec = {
        "batches": [batch_payload(b) for b in batches],
        "cases": [c for c in cases if c["covered"]],
        "coverage": [
            {"id": c["id"], "framework": c["framework"], "config": c["config"]} for c in cases
        ],
        "coverage_tables": browser_coverage(),
    }
    path = tmp_path_factory.mktemp("relay") / "cases.json"
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


def test_every_knob_in_the_browser_matches_the_server(relay_conformance):
    cases, expected, got = relay_conformance
    results = {r["id"]: r for r in got["results"]}
    n_same = n_thrown = n_placed = 0
    for case in cases:
        if not case["covered"]:
            continue
        res, want = results[case["id"]], expected[case["id"]]
        if isinstance(want, str):
            assert not res["ok"], f"{case['id']}: Python raised {want!r}, JS computed"
            n_thrown += 1
            continue
        assert res["ok"], f"{case['id']}: JS threw {res.get('error')}"
        n_placed += case["of"] == "token_rewards"
        for b, (row_js, row_py) in enumerate(zip(res["out"][case["of"]], want, strict=True)):
            for t, (a, e) in enumerate(zip(row_js, row_py, strict=True)):
                assert math.isclose(a, e, rel_tol=TOL, abs_tol=TOL), f"{case['id']} [{b}][{t}]"
        n_same += 1
    moved = {k for c in cases for k in json.loads(c["id"].split("|")[1])}
    assert moved == {"kl_estimator", "norm", *MOVES}  # every knob moved
    assert n_same > 300
    # every dialect's placements (TRL: the loss term only), every knob state, both batches
    assert n_placed > 100
    print(f"relay conformance: {n_same} equal ({n_placed} placements), {n_thrown} thrown by both")


def test_the_relay_and_pipeline_js_agree_on_coverage(relay_conformance):
    cases, _expected, got = relay_conformance
    js = {c["id"]: c["covered"]["ok"] for c in got["coverage"]}
    for case in cases:
        assert js[case["id"]] == case["covered"], case["id"]
    assert any(not c["covered"] for c in cases)  # verl's optimal_token_baseline: the server's
