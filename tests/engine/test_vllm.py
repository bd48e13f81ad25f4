"""A real vLLM server against the in-process model: conformance, adapters, seeds, failures.

The test that stops a server mid-request comes last in this file (it stops the session's server
when this session started it).
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
import torch

from roll_viz.core.records import rollout_to_dict
from roll_viz.lm import engine_server
from roll_viz.lm.engine import EngineError, LocalEngine
from roll_viz.lm.engine_check import TOLERANCE, conformance
from roll_viz.lm.engine_http import HttpEngine
from roll_viz.lm.engine_rollout import engine_sample, templater
from roll_viz.lm.engine_sync import AdapterSync
from roll_viz.lm.lora import LoraPolicy
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample
from roll_viz.lm.update import UpdateConfig, update_step
from tests.ui.apptest import open_page

PROMPTS = ("Explain quantum entanglement in one sentence.", "Write a haiku about the sea.")


def _max_delta(a, b):
    flat_a = torch.tensor([x for row in a for x in row])
    flat_b = torch.tensor([x for row in b for x in row])
    assert flat_a.shape == flat_b.shape
    return float((flat_a - flat_b).abs().max())


def test_conformance_base_adapter_and_sampler(bundle, engine, tmp_path):
    result = conformance(bundle, engine, AdapterSync(engine, tmp_path))
    print(f"\nENGINE conformance: {result.summary()}; adapter shift {result.adapter_shift:.3f}")
    assert result.passed, result.summary()
    assert result.worst <= TOLERANCE
    assert result.adapter_shift > 0.01  # the adapter really changed the scores


def test_seeded_sampling_is_reproducible_even_when_batched(bundle, engine):
    tpl = templater(bundle)
    prompts = [tpl.chat_ids(p) for p in PROMPTS]
    alone = engine.sample(prompts, 4, 24, 1.0, 99)
    again = engine.sample(prompts, 4, 24, 1.0, 99)
    assert alone.token_ids == again.token_ids
    assert alone.logprobs == again.logprobs
    other = threading.Thread(target=engine.sample, args=(prompts[:1], 8, 48, 1.0, 5))
    other.start()
    time.sleep(0.2)
    batched = engine.sample(prompts, 4, 24, 1.0, 99)
    other.join()
    assert batched.token_ids == alone.token_ids
    assert _max_delta(batched.logprobs, alone.logprobs) == 0.0
    assert len(set(alone.token_ids)) == len(alone.token_ids)  # the G answers differ


def test_adapter_synced_after_each_update(bundle, engine, tmp_path):
    """An update step changes the adapter; the engine serves the new version, not the old one."""
    sync = AdapterSync(engine, tmp_path)
    policy = LoraPolicy(bundle, seed=3)
    local = LocalEngine(bundle, {})
    cfg = SamplingConfig(prompts=PROMPTS[:1], group_size=4, max_new_tokens=12, seed=1)
    try:
        rollout = sample(bundle, cfg, source=policy)
        advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None] * rollout.response_mask
        names, scores = [], []
        for step in (1, 2):
            update_step(policy, rollout, advantages, cfg=UpdateConfig(lr=5e-3, seed=step))
            name = sync.served_name(policy, step)
            names.append(name)
            local.adapters[name] = policy
            tpl = templater(bundle)
            rows = [tpl.chat_ids(PROMPTS[0])] * 4
            mask = rollout.response_mask.bool()
            answers = [rollout.token_ids[b][mask[b]].tolist() for b in range(4)]
            remote = engine.score(rows, answers, name)
            here = local.score(rows, answers, name)
            assert _max_delta(remote.logprobs, here.logprobs) <= TOLERANCE
            scores.append(remote.logprobs)
            loaded = engine.adapters()
            assert name in loaded
            assert len([n for n in loaded if n.startswith(policy.name + "-")]) == 1
        assert names == [f"{policy.name}-s1", f"{policy.name}-s2"]
        assert _max_delta(scores[0], scores[1]) > 1e-4  # the second step changed the policy
        sync.forget(policy)
        assert names[-1] not in engine.adapters()
    finally:
        policy.close()
        sync.close()


def test_engine_rollout_agrees_with_in_process_scoring(bundle, engine):
    cfg = SamplingConfig(
        prompts=PROMPTS, group_size=3, max_new_tokens=16, seed=4, policy_mode="steered"
    )
    rollout = engine_sample(bundle, engine, cfg)
    tpl = templater(bundle)
    mask = rollout.response_mask.bool()
    answers = [rollout.token_ids[b][mask[b]].tolist() for b in range(mask.shape[0])]
    ref_rows = [tpl.chat_ids(PROMPTS[g]) for g in rollout.group_ids.tolist()]
    policy_rows = [tpl.chat_ids(PROMPTS[g], cfg.instruction) for g in rollout.group_ids.tolist()]
    local = LocalEngine(bundle)
    ref = [rollout.ref_logprobs[b][mask[b]].tolist() for b in range(mask.shape[0])]
    pol = [rollout.logprobs[b][mask[b]].tolist() for b in range(mask.shape[0])]
    assert _max_delta(ref, local.score(ref_rows, answers).logprobs) <= TOLERANCE
    assert _max_delta(pol, local.score(policy_rows, answers).logprobs) <= TOLERANCE
    assert float(rollout.exact_kl[mask].max()) > 0  # the hidden instruction moves the policy
    json.dumps(rollout_to_dict(rollout))


def test_students_at_once(bundle, engine):
    """Several students' seeded requests together (prefills that would be chunked): all answer,
    and each equals the same request sent alone."""
    cfg = SamplingConfig(
        prompts=PROMPTS, group_size=8, max_new_tokens=24, policy_mode="steered", seed=0
    )
    configs = [replace(cfg, seed=100 + i) for i in range(4)]
    results, errors = [None] * 4, []

    def student(i):
        try:
            results[i] = engine_sample(bundle, engine, configs[i])
        except EngineError as err:
            errors.append(err)

    workers = [threading.Thread(target=student, args=(i,)) for i in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(600)
    assert not errors, errors[:1]
    alone = engine_sample(bundle, engine, configs[2])
    assert torch.equal(alone.token_ids, results[2].token_ids)
    engine.probe()  # the server is still up


def test_cli_sample_on_the_engine(engine):
    out = subprocess.run(
        [sys.executable, "-m", "roll_viz", "sample", "--prompt", "Say hello.", "--group-size",
         "2", "--max-new-tokens", "8", "--model", "smollm2", "--engine", engine.url],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    answer = json.loads(out.stdout)
    assert len(answer["samples"]) == 2
    assert answer["meta"]["engine"] == engine.label


def test_a_page_on_the_engine(engine, monkeypatch):
    """Token KL, live and steered, with answers from the engine; the sidebar says so."""
    monkeypatch.setenv("ROLL_VIZ_ENGINE", engine.url)
    at = open_page(
        "kl", model="smollm2", preset="pirate", live="true", G="2", T="8",
        prompts="What is the capital of France?", policy="steered",
    )  # fmt: skip
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert f"answers from: vLLM at {engine.url}" in captions
    assert not at.warning or all("engine" not in w.value for w in at.warning)


def test_server_gone_mid_request(bundle, server, engine):
    """The server stops during a request: one clear error, and the in-process path still works."""
    if server.pid is None:  # never stop a server this session did not start
        own = engine_server.start()
        target, pid = HttpEngine(own.url), own.pid
    else:
        own, target, pid = None, engine, server.pid
    tpl = templater(bundle)
    prompts = [tpl.chat_ids(p) for p in PROMPTS]
    errors = []

    def long_request():
        try:
            target.sample(prompts, 16, 400, 1.0, 0)
        except EngineError as err:
            errors.append(err)

    worker = threading.Thread(target=long_request)
    worker.start()
    time.sleep(3.0)
    # gone, not shut down: SIGTERM lets vLLM drain the request (it may then succeed); the server
    # leads its own process group (start_new_session), so this kills it with its engine core
    os.killpg(pid, signal.SIGKILL)
    worker.join(120)
    if own:
        own.stop()
    assert len(errors) == 1
    message = str(errors[0])
    assert "\n" not in message
    assert target.label in message
    with pytest.raises(EngineError, match="cannot be reached"):
        target.probe()
    cfg = SamplingConfig(prompts=PROMPTS[:1], group_size=2, max_new_tokens=4, seed=0)
    assert sample(bundle, cfg).token_ids.shape[0] == 2  # nothing lost: in-process still answers
