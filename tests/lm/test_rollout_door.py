"""The one rollout door (``lm.rollout``): which engine answers, the fallback, the typed meta.

The in-process engine must BE ``sampling.sample`` (same bytes); a configured server answers for
its own model spec only; a server that fails mid-request is reported once and the request runs
in-process. The stub server (``tests/lm/engine_stub.py``) stands in for vLLM.
"""

import dataclasses

import pytest
import torch

from roll_viz.core.records import Rollout, RolloutMeta, build_rollout
from roll_viz.lm import rollout
from roll_viz.lm.engine import EngineError, LocalEngine
from roll_viz.lm.sampling import sample
from tests.lm.engine_stub import SERVED, Stub
from tests.lm.helpers import identical_config, steered_config


@pytest.fixture
def no_engine(monkeypatch):
    monkeypatch.delenv("ROLL_VIZ_ENGINE", raising=False)
    rollout.forget()
    yield
    rollout.forget()


@pytest.fixture
def served(tiny, monkeypatch):
    """A stub server over the tiny model, configured as the operator's engine for ``tiny``."""
    stub = Stub(LocalEngine(tiny))
    monkeypatch.setenv("ROLL_VIZ_ENGINE", stub.url)
    monkeypatch.setenv("ROLL_VIZ_ENGINE_MODEL", SERVED)
    monkeypatch.setenv("ROLL_VIZ_ENGINE_SPEC", "tiny")
    rollout.forget()
    yield stub
    stub.close()
    rollout.forget()


def _same(a: Rollout, b: Rollout) -> None:
    assert a.responses == b.responses
    assert a.tokens == b.tokens
    for name in ("token_ids", "response_mask", "logprobs", "ref_logprobs", "exact_kl", "entropy"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert dict(a.meta) == dict(b.meta)


def test_the_in_process_door_is_sampling_sample(tiny, no_engine):
    engine = rollout.current("tiny", tiny)
    assert isinstance(engine, rollout.InProcess)
    assert engine.label == ""
    assert rollout.label("tiny") == ""
    cfg = steered_config()
    _same(engine.sample(rollout.Request(cfg)), sample(tiny, cfg))


def test_other_specs_stay_in_process(tiny, served, monkeypatch):
    monkeypatch.setenv("ROLL_VIZ_ENGINE_SPEC", "smollm2")
    assert isinstance(rollout.current("tiny", tiny), rollout.InProcess)


def test_a_configured_engine_answers_for_its_spec(tiny, served):
    engine = rollout.current("tiny", tiny)
    assert isinstance(engine, rollout.Remote)
    assert engine.label == f"vLLM at {served.url}" == rollout.label("tiny")
    drawn = engine.sample(rollout.Request(identical_config()))
    assert drawn.meta.engine == engine.label
    assert drawn.meta.policy_mode == "identical"
    assert any(r.get("n") == 3 for r in served.requests)  # G = 3 answers per prompt, there


def test_a_failing_engine_is_reported_and_the_request_runs_in_process(tiny, served):
    heard: list[EngineError] = []
    engine = rollout.current("tiny", tiny, on_failure=heard.append)
    assert isinstance(engine, rollout.Remote)
    served.mode = "error"  # up at the probe, failing mid-request
    cfg = identical_config()
    drawn = engine.sample(rollout.Request(cfg))
    assert len(heard) == 1
    assert drawn.meta.engine is None
    _same(drawn, sample(tiny, cfg))
    # marked down: the next use probes again, finds it unusable and says why in one sentence
    found = rollout.probe()
    assert found.engine is None
    assert "in-process model instead" in found.why
    assert isinstance(rollout.current("tiny", tiny), rollout.InProcess)


def test_an_unreachable_engine_is_probed_once_and_named(tiny, no_engine, monkeypatch):
    monkeypatch.setenv("ROLL_VIZ_ENGINE", "http://127.0.0.1:1")
    assert rollout.configured()
    found = rollout.probe()
    assert found.engine is None
    assert found.why
    assert rollout.probe() is found  # cached for PROBE_TTL_S
    assert isinstance(rollout.current(rollout.served_spec(), tiny), rollout.InProcess)


def test_meta_is_typed_and_reads_and_writes_the_same_pairs(identical):
    meta = identical.meta
    assert isinstance(meta, RolloutMeta)
    assert meta.policy_mode == "identical"
    assert meta.decode_weights == "float32"
    assert "exactly 0" in meta.kl_note
    pairs = list(meta)
    assert pairs == sorted(pairs, key=lambda p: p[0])
    assert RolloutMeta.of(pairs) == meta
    odd = RolloutMeta.of((("seed", 3), ("zz_new", "kept"), ("model", "m")))
    assert (odd.seed, odd.model, odd.extra) == (3, "m", (("zz_new", "kept"),))
    assert dict(odd) == {"model": "m", "seed": 3, "zz_new": "kept"}
    assert dataclasses.replace(identical, meta=tuple(pairs)).meta == meta  # pairs are read


def test_the_builder_checks_shapes_and_meta(identical):
    fields = {f.name: getattr(identical, f.name) for f in dataclasses.fields(Rollout)}
    assert build_rollout(**fields).meta == identical.meta
    with pytest.raises(AssertionError, match="logprobs"):
        build_rollout(**{**fields, "logprobs": identical.logprobs[:, :-1]})
    with pytest.raises(AssertionError, match="RolloutMeta"):
        build_rollout(**{**fields, "meta": tuple(identical.meta)})
