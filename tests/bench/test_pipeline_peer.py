"""The pipeline benchmark's verl peer: verl 0.9.1's own ``compute_advantage``, run for real.

The wheel is fetched from PyPI (``pip download --no-deps``, about 1.7 MB) into this test
module's tmp folder. A failed download fails the test with pip's message: this test exists to
show that roll-viz and verl agree, and a skip would hide that it did not run.
"""

import json
import sys

import pytest
import torch

from benchmarks import framework_peers, pipeline
from roll_viz.core.pipeline import dialects, run

P, G, T = 4, 4, 32


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    cache = tmp_path_factory.mktemp("peer-cache")
    before = set(sys.modules)
    try:
        loaded = framework_peers.verl_peer(cache)
    except framework_peers.PeerUnavailable as err:
        pytest.fail(f"verl's wheel could not be had, so the peer did not run: {err}")
    stubbed = {"verl", "tensordict", "transformers", "omegaconf"}
    left = {m for m in set(sys.modules) - before if m.split(".")[0] in stubbed}
    assert not left, f"stand-ins left registered: {sorted(left)}"
    return loaded, cache


CONFIGS = [
    {"adv_estimator": "grpo"},
    {"adv_estimator": "gae"},
    # the keys the peer passes on: a wrong mapping would not agree
    {"adv_estimator": "gae", "gamma": 0.9, "lam": 0.8},
    {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False},
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_verl_compute_advantage_matches_the_verl_dialect(peer, cfg):
    loaded, _ = peer
    batch = pipeline.rl_batch(P, G, T)
    tensors, uids, kwargs = loaded.inputs(batch, {**dialects.get("verl").DEFAULTS, **cfg})
    assert tensors["response_mask"] is batch.response_mask  # the very tensors run gets
    advantages, returns = loaded.call(tensors, uids, kwargs)
    assert advantages.dtype == torch.float32  # verl computed in the inputs' dtype
    trace = run(batch, "verl", cfg)
    mask = batch.response_mask.bool()
    assert not mask.all()  # padding present: the comparison is over the response tokens
    ours, theirs = trace.advantages[mask], advantages.double()[mask]
    assert theirs.abs().max() > 0.1  # real advantages, not zeros
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-5)
    assert torch.allclose(trace.returns[mask], returns.double()[mask], rtol=0, atol=1e-5)


def test_run_vs_stages_lines_carry_the_peer(peer):
    loaded, _ = peer
    lines = pipeline.bench_run_vs_stages(P, G, T, 2, {"verl": loaded})
    by_name = {line["name"]: line for line in lines}
    for name in ("run_vs_stages:verl:grpo", "run_vs_stages:verl:gae"):
        line = by_name[name]
        assert "compute_advantage" in line["framework_peer"]
        assert line["framework_peer_ms"] > 0
        assert line["framework_peer_cpu_ms"] >= 0
        assert line["run_vs_peer"] == pytest.approx(line["run_ms"] / line["framework_peer_ms"], 0.1)
        assert line["run_vs_peer_cpu"] >= 0
        assert 0 <= line["peer_max_abs_diff_advantages"] <= 1e-5
        assert 0 <= line["peer_max_abs_diff_returns"] <= 1e-5
        assert line["peer_max_abs_diff_advantages_f64"] <= 1e-9  # float64: rounding only
        assert line["peer_max_abs_diff_returns_f64"] <= 1e-9
        json.dumps(line)  # one JSON line
    others = [line for line in lines if ":verl:" not in line["name"]]
    assert len(others) == 5
    assert all("framework_peer_ms" not in line for line in others)


def test_main_uses_the_peer_cache_and_prints_the_peer(peer, capsys):
    _, cache = peer  # the wheel is already there: main reuses it, no second download
    argv = ["--quick", "--only", "run_vs_stages", "--peer-cache", str(cache)]
    assert pipeline.main(argv) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    verl = [line for line in lines if line["name"].startswith("run_vs_stages:verl:")]
    assert len(verl) == 2
    assert all(line["peer_max_abs_diff_advantages"] <= 1e-5 for line in verl)
    assert len(list(cache.glob("verl-*/verl-*.whl"))) == 1


def test_without_pip_the_line_says_skipped(monkeypatch, tmp_path):
    def no_pip(name, version, dest):
        raise framework_peers.PeerUnavailable(f"pip download {name}=={version} failed (offline)")

    monkeypatch.setattr(framework_peers, "download_wheel", no_pip)
    peer = pipeline.load_verl_peer(tmp_path)
    assert peer == "skipped: pip download verl==0.9.1 failed (offline)"
    lines = pipeline.bench_run_vs_stages(2, 2, 8, 1, {"verl": peer})
    verl = [line for line in lines if ":verl:" in line["name"]]
    assert [line["framework_peer"] for line in verl] == [peer, peer]
    assert all("framework_peer_ms" not in line for line in verl)


def test_a_failing_pip_is_reported_with_its_message(tmp_path):
    """The real download path with a release that does not exist: pip's error, no traceback."""
    with pytest.raises(framework_peers.PeerUnavailable, match=r"pip download verl==0\.0\.0"):
        framework_peers.download_wheel("verl", "0.0.0", tmp_path)
