"""The rollout interface on the in-process engine, and the HTTP engine against a stub server.

The stub (``tests/lm/engine_stub.py``) answers in vLLM's shapes from the in-process tiny model, so
these tests need no vLLM; ``tests/engine`` runs the same client against a real server.
"""

import dataclasses

import pytest
import torch

from roll_viz.core.records import rollout_to_dict
from roll_viz.lm.engine import EngineError, LocalEngine
from roll_viz.lm.engine_check import conformance, random_adapter
from roll_viz.lm.engine_http import HttpEngine, check_url, from_env
from roll_viz.lm.engine_rollout import engine_sample, shared_engine_sample, training_sampler
from roll_viz.lm.engine_sync import AdapterRefused, AdapterSync, refusal, save_adapter
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.runfile import TrainSettings
from roll_viz.lm.sampling import sample
from roll_viz.lm.train import Trainer
from tests.lm.engine_stub import SERVED, Stub
from tests.lm.helpers import PROMPTS, identical_config, run_in_threads, steered_config


@pytest.fixture(scope="module")
def stub(tiny):
    server = Stub(LocalEngine(tiny))
    yield server
    server.close()


@pytest.fixture
def bad_stub(tiny):
    servers = []

    def make(mode, hang_s=5.0):
        servers.append(Stub(LocalEngine(tiny), mode, hang_s))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


# In-process engine ---------------------------------------------------------------------------


def test_local_engine_draws_the_samplers_tokens(tiny):
    """Same seed, same contexts: LocalEngine.sample draws sampling.sample's tokens, bit for bit."""
    cfg = dataclasses.replace(identical_config(), greedy=False)
    rollout = sample(tiny, cfg)
    with tiny.lock:
        prompts = [tiny.chat_ids(p) for p in cfg.prompts]
    drawn = LocalEngine(tiny).sample(
        prompts, cfg.group_size, cfg.max_new_tokens, cfg.temperature, cfg.seed
    )
    mask = rollout.response_mask.bool()
    for b, ids in enumerate(drawn.token_ids):
        assert list(ids) == rollout.token_ids[b][mask[b]].tolist()
    assert drawn.finish_reasons == rollout.finish_reasons
    assert drawn.prompt_index == tuple(rollout.group_ids.tolist())


def test_local_engine_scores_like_the_sampler_at_temperature_one(tiny):
    cfg = dataclasses.replace(identical_config(), greedy=False, temperature=1.0)
    rollout = sample(tiny, cfg)
    with tiny.lock:
        prompts = [tiny.chat_ids(p) for p in cfg.prompts]
    local = LocalEngine(tiny)
    drawn = local.sample(prompts, cfg.group_size, cfg.max_new_tokens, 1.0, cfg.seed)
    mask = rollout.response_mask.bool()
    for b in range(len(drawn.token_ids)):
        got = torch.tensor(drawn.logprobs[b])
        assert torch.allclose(got, rollout.logprobs[b][mask[b]], atol=1e-5)
        assert list(drawn.topk_ids[b][0]) == rollout.topk_ids[b, 0].tolist()
    rows = [prompts[g] for g in drawn.prompt_index]
    scored = local.score(rows, [list(r) for r in drawn.token_ids])
    assert scored.logprobs == drawn.logprobs  # the same teacher-forced pass


def test_default_path_is_unchanged_bit_for_bit(tiny):
    """The in-process rollout is still ``sampling.sample``: the same bytes for a seed."""
    a, b = sample(tiny, steered_config()), sample(tiny, steered_config())
    assert rollout_to_dict(a) == rollout_to_dict(b)
    assert torch.equal(a.logprobs, b.logprobs)
    assert torch.equal(a.exact_kl, b.exact_kl)


def test_local_engine_adapter_changes_scores(tiny):
    policy = random_adapter(tiny)
    try:
        local = LocalEngine(tiny, {"a": policy})
        with tiny.lock:
            prompt = tiny.chat_ids(PROMPTS[0])
        base = local.score([prompt], [[5, 6, 7]])
        adapted = local.score([prompt], [[5, 6, 7]], "a")
        assert base.logprobs != adapted.logprobs
        with pytest.raises(EngineError, match="no adapter named"):
            local.score([prompt], [[5]], "missing")
    finally:
        policy.close()


# HTTP engine against the stub ----------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["", "127.0.0.1:8000", "ftp://x", "http://", "http://h:99999", "http://h/?q=1"]
)
def test_bad_urls_give_one_sentence(url):
    with pytest.raises(EngineError) as err:
        check_url(url)
    assert "\n" not in str(err.value)


def test_url_forms():
    assert check_url(" http://127.0.0.1:8000/v1/ ") == "http://127.0.0.1:8000"


def test_from_env_reports_and_falls_back(stub):
    assert from_env({}) == (None, "")
    engine, why = from_env({"ROLL_VIZ_ENGINE": "http://127.0.0.1:1"})
    assert engine is None
    assert "cannot be reached" in why
    assert "in-process" in why
    engine, why = from_env({"ROLL_VIZ_ENGINE": stub.url, "ROLL_VIZ_ENGINE_MODEL": "other"})
    assert engine is None
    assert "does not serve 'other'" in why
    engine, why = from_env({"ROLL_VIZ_ENGINE": stub.url})
    assert why == ""
    assert engine.label == f"vLLM at {stub.url}"


@pytest.mark.parametrize("mode", ["garbage", "shape", "error"])
def test_misbehaving_server_gives_one_clear_message(bad_stub, mode):
    server = bad_stub(mode)
    engine = HttpEngine(server.url, SERVED)
    for call in (
        engine.probe,
        lambda: engine.sample([[1, 2]], 2, 3, 1.0, 0),
        lambda: engine.score([[1, 2]], [[3]]),
    ):
        with pytest.raises(EngineError) as err:
            call()
        assert "\n" not in str(err.value)
        assert engine.label in str(err.value)


def test_timeout_is_an_engine_error(bad_stub):
    server = bad_stub("hang", hang_s=3.0)
    with pytest.raises(EngineError, match="cannot be reached"):
        HttpEngine(server.url, SERVED, timeout=0.5).sample([[1]], 1, 1, 1.0, 0)


def test_http_sample_and_score_match_the_local_engine(tiny, stub):
    engine, local = HttpEngine(stub.url, SERVED), LocalEngine(tiny)
    with tiny.lock:
        prompts = [tiny.chat_ids(p) for p in PROMPTS]
    remote = engine.sample(prompts, 3, 8, 1.0, 11, topk=4)
    here = local.sample(prompts, 3, 8, 1.0, 11, topk=4)
    assert remote.token_ids == here.token_ids
    assert remote.finish_reasons == here.finish_reasons
    assert remote.logprobs == here.logprobs
    assert remote.topk_ids == here.topk_ids
    rows = [prompts[g] for g in remote.prompt_index]
    answers = [list(r) for r in remote.token_ids]
    remote_lp = [x for row in engine.score(rows, answers, topk=3).logprobs for x in row]
    local_lp = [x for row in local.score(rows, answers).logprobs for x in row]
    assert remote_lp == pytest.approx(local_lp, abs=1e-5)
    assert stub.requests[-1]["max_tokens"] == 1  # scoring never asks for max_tokens 0


@pytest.mark.parametrize("config", [identical_config(), steered_config()])
def test_engine_rollout_has_the_samplers_shape(tiny, stub, config):
    engine = HttpEngine(stub.url, SERVED)
    rollout = engine_sample(tiny, engine, config)
    reference = sample(tiny, config)
    assert rollout.token_ids.shape[0] == reference.token_ids.shape[0]
    assert rollout.topk_ids.shape[-1] == config.topk
    assert rollout.features.shape[-1] == config.feature_dim
    assert len(rollout.greedy_responses) == len(config.prompts)
    meta = dict(rollout.meta)
    assert meta["engine"] == engine.label
    assert meta["logprob_temperature"] == 1.0
    mask = rollout.response_mask.bool()
    assert (rollout.exact_kl[mask] >= 0).all()
    assert (rollout.entropy[mask] >= 0).all()
    if config.policy_mode == "identical":
        assert torch.equal(rollout.logprobs, rollout.ref_logprobs)
        assert float(rollout.exact_kl.abs().max()) == 0.0
    else:
        assert not torch.equal(rollout.logprobs[mask], rollout.ref_logprobs[mask])
    rollout_to_dict(rollout)  # the trace JSON accepts it


def test_identical_engine_requests_share_one_run(tiny, stub):
    engine = HttpEngine(stub.url, SERVED)
    cfg = SamplingConfig(prompts=("shared?",), group_size=2, max_new_tokens=6, seed=3)
    before = len(stub.requests)
    stub.delay_s = 1.0
    try:
        workers, results, errors = run_in_threads(
            [lambda: shared_engine_sample(tiny, engine, cfg)] * 3
        )
        for worker in workers:
            worker.join(30)
    finally:
        stub.delay_s = 0.0
    assert not errors
    assert all(r is results[0] for r in results)
    assert len(stub.requests) - before == 2  # one run: the sample and the greedy request


# Adapter sync and conformance on the stub ----------------------------------------------------


def test_adapter_folder_is_peft_layout(tiny, tmp_path):
    policy = random_adapter(tiny)
    try:
        folder = save_adapter(policy, tmp_path / "a")
        assert (folder / "adapter_config.json").is_file()
        assert (folder / "adapter_model.safetensors").is_file()
        from peft import LoraConfig

        config = LoraConfig.from_pretrained(str(folder))
        assert config.r == policy.rank
        assert "q_proj" in config.target_modules
    finally:
        policy.close()


def test_sync_versions_and_bounds(tiny, stub, tmp_path):
    engine = HttpEngine(stub.url, SERVED)
    sync = AdapterSync(engine, tmp_path, max_resident=2)
    policies = [LoraPolicy(tiny, seed=i) for i in range(3)]
    try:
        first = sync.served_name(policies[0], 1)
        assert first.endswith("-s1")
        assert first in stub.loaded
        assert sync.served_name(policies[0], 1) == first  # same version: no reload
        second = sync.served_name(policies[0], 2)
        assert second in stub.loaded
        assert first not in stub.loaded
        sync.served_name(policies[1], 1)
        sync.served_name(policies[2], 1)  # over the bound: the least recently used goes
        assert second not in stub.loaded
        assert len(stub.loaded) == 2
        assert sync.served_name(policies[0], 2) == second  # reloaded on demand
        policies[1].close()
        sync.served_name(policies[2], 1)
        assert not any(n.startswith(policies[1].name + "-") for n in stub.loaded)
        sync.forget(policies[0])
        assert second not in stub.loaded
    finally:
        for policy in policies:
            policy.close()
        sync.close()
    assert stub.loaded == {}


def test_lm_head_adapters_are_refused(tiny, tmp_path):
    policy = LoraPolicy(tiny, target_modules=("q_proj", "lm_head"))
    try:
        assert "lm_head" in refusal(policy)
        with pytest.raises(AdapterRefused, match="lm_head"):
            AdapterSync(HttpEngine("http://127.0.0.1:1"), tmp_path).served_name(policy, 1)
    finally:
        policy.close()


def test_conformance_on_the_stub_is_exact(tiny, stub, tmp_path):
    """The stub IS the in-process model: every difference is float rounding of batch shapes."""
    engine = HttpEngine(stub.url, SERVED)
    result = conformance(tiny, engine, AdapterSync(engine, tmp_path), max_new_tokens=6)
    assert result.passed, result.summary()
    assert result.worst <= 1e-5
    assert result.adapter is not None
    assert result.adapter_shift > 1e-3  # the adapter really moved the log-probs
    assert "(ok)" in result.summary()


def test_conformance_reports_an_unreachable_engine(tiny):
    result = conformance(tiny, HttpEngine("http://127.0.0.1:1"))
    assert not result.passed
    assert "cannot be reached" in result.summary()


def test_training_steps_sample_on_the_engine_with_synced_adapters(tiny, stub, tmp_path):
    engine = HttpEngine(stub.url, SERVED)
    sync = AdapterSync(engine, tmp_path)
    settings = TrainSettings.flat(prompts=PROMPTS, group_size=2, max_new_tokens=6, model="tiny")
    trainer = Trainer(tiny, settings)
    trainer.sampler = training_sampler(tiny, engine, sync)
    try:
        for _ in range(2):
            trainer.run_step(keep_samples=False)
        name = trainer.policy.name
        assert [n for n in stub.loaded if n.startswith(name + "-")] == [f"{name}-s1"]
        sampled = [r["model"] for r in stub.requests if r.get("n") == 2]
        assert sampled[-2:] == [f"{name}-s0", f"{name}-s1"]  # each step its own version
    finally:
        trainer.close()
        sync.close()


def test_training_falls_back_in_process_when_the_engine_fails(tiny, tmp_path):
    engine = HttpEngine("http://127.0.0.1:1", SERVED)
    settings = TrainSettings.flat(prompts=PROMPTS[:1], group_size=2, max_new_tokens=4, model="tiny")
    trainer = Trainer(tiny, settings)
    trainer.sampler = training_sampler(tiny, engine, AdapterSync(engine, tmp_path))
    try:
        record = trainer.run_step(keep_samples=False)
        assert record is not None
    finally:
        trainer.close()
