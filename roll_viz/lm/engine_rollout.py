"""A page's Rollout from a rollout engine: policy samples, reference scores, in one batch.

``engine_sample(bundle, engine, cfg, source, adapter)`` is ``lm.sampling.sample`` for an engine
that is not the in-process model (``lm.engine_http.HttpEngine``): the same SamplingConfig in, the
same Rollout fields out, so pages, the trace JSON and the CLI work the same on either.

1. the policy's and the reference's contexts are chat-templated here (an own copy of the
   tokenizer, so a page never waits for ``bundle.lock`` behind a training step);
2. one sampling request: G answers per prompt with the sampler's log pi and top-K (the policy =
   base + ``adapter`` or the steered prompt); greedy answers (ReMax) in a second request sent at
   the same time;
3. one scoring request: the reference (the base model on the plain prompt) scores the same
   tokens with its top-20 (skipped when the policy IS the reference: KL exactly 0).

What an engine does not return, and what stands in for it (written in the Rollout's ``meta``):

- log-probs are raw (temperature 1) whatever the sampling temperature (``logprob_temperature``
  1.0), for the policy and the reference alike;
- ``exact_kl`` and ``entropy`` are those of the policy's top-K plus one bucket for the rest of the
  vocabulary: lower bounds of the full-vocabulary values (coarse-graining never raises KL or
  entropy), exact when the top-K hold all the mass;
- a top-K token of the policy outside the reference's top-20 gets the reference's 20th log-prob
  (an upper bound of its true log q); ``meta["ref_topk_filled"]`` counts them;
- the value probe's features project per-position log-prob summaries (the engine returns no
  hidden states) with the same fixed random projection.

``shared_engine_sample`` lets identical concurrent requests share one engine run.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from roll_viz.core.records import Rollout, RolloutMeta, build_rollout
from roll_viz.lm.engine import EngineError, EngineSample, EngineScore, RolloutEngine
from roll_viz.lm.flight import SingleFlight
from roll_viz.lm.models import ModelBundle, apply_chat_template
from roll_viz.lm.request import PolicySource, SamplingConfig, policy_source
from roll_viz.lm.sampling import sample
from roll_viz.lm.scoring import FEATURE_SEED, probe_features

logger = logging.getLogger(__name__)

REF_TOPK = 20  # reference top-K asked per position (the server's default --max-logprobs)


class _Templater:
    """A bundle's chat template over its own tokenizer copy (thread-safe, no ``bundle.lock``)."""

    def __init__(self, bundle: ModelBundle) -> None:
        self.tokenizer = copy.deepcopy(bundle.tokenizer)
        self.eos_ids = bundle.eos_ids
        self.lock = threading.Lock()

    def chat_ids(self, prompt: str, instruction: str = "") -> list[int]:
        """As ``ModelBundle.chat_ids``."""
        content = f"{prompt}\n\n{instruction}" if instruction else prompt
        with self.lock:
            return apply_chat_template(self.tokenizer, content)

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` (special tokens kept, as the in-process path)."""
        with self.lock:
            return self.tokenizer.decode(ids, skip_special_tokens=False)


_TEMPLATERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TEMPLATERS_LOCK = threading.Lock()


def templater(bundle: ModelBundle) -> _Templater:
    """The bundle's tokenizer copy for engine requests (made once, under the bundle's lock)."""
    with _TEMPLATERS_LOCK:
        found = _TEMPLATERS.get(bundle)
    if found is None:
        with bundle.lock:
            found = _Templater(bundle)
        with _TEMPLATERS_LOCK:
            found = _TEMPLATERS.setdefault(bundle, found)
    return found


def engine_sample(
    bundle: ModelBundle,
    engine: RolloutEngine,
    cfg: SamplingConfig,
    source: PolicySource | None = None,
    adapter: str | None = None,
    progress: Any = None,
) -> Rollout:
    """Sample and score ``cfg`` through ``engine``; the Rollout ``lm.sampling.sample`` would give.

    Args:
        bundle: the shared model (its tokenizer and chat template; the weights are not used).
        engine: the engine that samples and scores.
        cfg: what to sample.
        source: the policy (None: ``policy_source(cfg)``); a LoRA policy needs ``adapter``.
        adapter: the name the policy's adapter is served under (``lm.engine_sync``), or None.
        progress: optional ``(fraction, message)`` callback.

    Returns:
        A Rollout with B = P * G rows (rows of one prompt contiguous).

    Raises:
        engine.EngineError: the engine failed (one sentence).
    """
    report = progress or (lambda fraction, message: None)
    source = source or policy_source(cfg)
    if getattr(source, "mode", "") == "lora" and adapter is None:
        raise ValueError("a LoRA policy needs the name its adapter is served under")
    tpl = templater(bundle)
    policy_ctx = [source.context_ids(tpl, p) for p in cfg.prompts]  # type: ignore[arg-type]
    shares = source.shares_reference
    ref_ctx = policy_ctx if shares else [tpl.chat_ids(p) for p in cfg.prompts]
    report(0.05, f"Sampling {cfg.num_sequences} responses on {engine.label}")
    with ThreadPoolExecutor(max_workers=2) as pool:
        greedy_job = None
        if cfg.greedy:
            greedy_job = pool.submit(
                engine.sample, policy_ctx, 1, cfg.max_new_tokens, 0.0, cfg.seed, adapter, 1
            )
        drawn = engine.sample(
            policy_ctx,
            cfg.group_size,
            cfg.max_new_tokens,
            cfg.temperature,
            cfg.seed,
            adapter,
            cfg.topk,
            cfg.top_p,
        )
        greedy = greedy_job.result() if greedy_job is not None else None
    ref = None
    if not shares:
        report(0.7, f"Scoring the same tokens under the reference on {engine.label}")
        rows_ref = [ref_ctx[g] for g in drawn.prompt_index]
        ref = engine.score(rows_ref, [list(r) for r in drawn.token_ids], None, REF_TOPK)
    report(0.95, "Decoding text")
    rollout = _rollout(tpl, bundle, cfg, source, drawn, ref, greedy, engine.label)
    report(1.0, "Done")
    return rollout


def _rollout(
    tpl: _Templater,
    bundle: ModelBundle,
    cfg: SamplingConfig,
    source: PolicySource,
    drawn: EngineSample,
    ref: EngineScore | None,
    greedy: EngineSample | None,
    label: str,
) -> Rollout:
    rows = len(drawn.token_ids)
    width = max((len(r) for r in drawn.token_ids), default=0)
    k = cfg.topk
    token_ids = torch.zeros(rows, width, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    logprobs = torch.zeros(rows, width)
    ref_lp = torch.zeros(rows, width)
    kl = torch.zeros(rows, width)
    entropy = torch.zeros(rows, width)
    top_ids = torch.zeros(rows, width, k, dtype=torch.long)
    top_lp = torch.zeros(rows, width, k)
    top_ref = torch.zeros(rows, width, k)
    filled = 0
    for b, ids in enumerate(drawn.token_ids):
        for t, token in enumerate(ids):
            token_ids[b, t], mask[b, t] = token, True
            lp = drawn.logprobs[b][t]
            ids_k, lps_k = _padded(drawn.topk_ids[b][t], drawn.topk_logprobs[b][t], k)
            logprobs[b, t] = lp
            top_ids[b, t], top_lp[b, t] = torch.tensor(ids_k), torch.tensor(lps_k)
            if ref is None:
                ref_lp[b, t] = lp
                top_ref[b, t] = top_lp[b, t]
                qs = lps_k
            else:
                table = ref.extra[b][t]
                ref_lp[b, t] = ref.logprobs[b][t]
                floor = min(table.values())
                qs = [table.get(i, floor) for i in ids_k]
                filled += sum(1 for i in ids_k if i not in table)
                top_ref[b, t] = torch.tensor(qs)
            kl[b, t] = 0.0 if ref is None else _coarse_kl(lps_k, qs)
            entropy[b, t] = _coarse_entropy(lps_k)
    summary = torch.cat([logprobs[..., None], ref_lp[..., None], top_lp, top_ref], dim=-1)
    features = probe_features(summary, cfg.feature_dim) * mask[..., None]
    shown = {i for r in drawn.token_ids for i in r} | set(top_ids[mask].flatten().tolist())
    vocab_ids = sorted(shown)
    vocab = {i: tpl.decode([i]) for i in vocab_ids}
    responses = tuple(_text(tpl, list(r)) for r in drawn.token_ids)
    greedy_texts = () if greedy is None else tuple(_text(tpl, list(r)) for r in greedy.token_ids)
    meta = _meta(bundle, cfg, source, label, filled)
    return build_rollout(
        prompts=cfg.prompts,
        group_ids=torch.tensor(drawn.prompt_index, dtype=torch.long),
        responses=responses,
        token_ids=token_ids,
        tokens=tuple(tuple(vocab[i] for i in r) for r in drawn.token_ids),
        response_mask=mask.float(),
        logprobs=logprobs,
        ref_logprobs=ref_lp,
        exact_kl=kl,
        entropy=entropy,
        topk_ids=top_ids,
        topk_logprobs=top_lp,
        topk_ref_logprobs=top_ref,
        finish_reasons=drawn.finish_reasons,
        greedy_responses=greedy_texts,
        features=features,
        vocab=vocab,
        meta=meta,
    )


def _padded(ids: tuple, lps: tuple, k: int) -> tuple[list[int], list[float]]:
    """Exactly K entries (an engine may return fewer when the vocabulary is tiny)."""
    ids_k, lps_k = list(ids[:k]), list(lps[:k])
    while len(ids_k) < k:
        ids_k.append(ids_k[-1] if ids_k else 0)
        lps_k.append(-math.inf)
    return ids_k, lps_k


def _coarse_kl(logp: list[float], logq: list[float]) -> float:
    """KL over the top-K tokens plus one bucket for the rest (a lower bound of the exact KL)."""
    total, mass_p, mass_q = 0.0, 0.0, 0.0
    for lp, lq in zip(logp, logq, strict=True):
        if lp == -math.inf:
            continue
        p = math.exp(lp)
        total += p * (lp - lq)
        mass_p, mass_q = mass_p + p, mass_q + math.exp(lq)
    rest_p, rest_q = max(0.0, 1.0 - mass_p), max(1e-12, 1.0 - mass_q)
    if rest_p > 0:
        total += rest_p * math.log(rest_p / rest_q)
    return max(0.0, total)


def _coarse_entropy(logp: list[float]) -> float:
    """Entropy of the top-K tokens plus one bucket for the rest (a lower bound)."""
    total, mass = 0.0, 0.0
    for lp in logp:
        if lp == -math.inf:
            continue
        p = math.exp(lp)
        total -= p * lp
        mass += p
    rest = max(0.0, 1.0 - mass)
    return total - (rest * math.log(rest) if rest > 0 else 0.0)


def _text(tpl: _Templater, ids: list[int]) -> str:
    body = ids[:-1] if ids and ids[-1] in tpl.eos_ids else ids
    return tpl.decode(body)


def _meta(
    bundle: ModelBundle, cfg: SamplingConfig, source: PolicySource, label: str, filled: int
) -> RolloutMeta:
    shares = source.shares_reference
    return RolloutMeta(
        model=bundle.name,
        model_spec=bundle.spec,
        engine=label,
        device=label,
        dtype="float32",
        seed=cfg.seed,
        group_size=cfg.group_size,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
        policy_mode=getattr(source, "mode", cfg.policy_mode),
        instruction=cfg.instruction if cfg.policy_mode == "steered" else "",
        logprob_temperature=1.0,
        logprob_note=(
            f"raw log_softmax(logits) from {label} (temperature 1 whatever the sampling "
            "temperature), same for policy and reference; top-p truncation not applied"
        ),
        kl_note=(
            "identical: the policy IS the reference, so KL is exactly 0"
            if shares
            else f"KL(policy || ref) over the policy's top-{cfg.topk} tokens plus one bucket for "
            "the rest of the vocabulary: a lower bound of the exact KL (the engine returns top-K "
            "only)"
        ),
        entropy_note=f"entropy over the top-{cfg.topk} tokens plus one bucket: a lower bound",
        ref_topk_filled=filled,
        decode_weights="float32",
        decode_note=f"responses drawn by {label} (float32)",
        topk=cfg.topk,
        feature_dim=cfg.feature_dim,
        feature_note=(
            "per-position log-prob summaries (policy, reference, top-K of both) x fixed random "
            f"projection (seed {FEATURE_SEED}); the engine returns no hidden states"
        ),
    )


# ---------------------------------------------------------------------------------------------
# One run for identical concurrent requests


_SHARED = SingleFlight()


def shared_engine_sample(
    bundle: ModelBundle,
    engine: RolloutEngine,
    cfg: SamplingConfig,
    progress: Any = None,
) -> Rollout:
    """``engine_sample`` for a prompt-only policy, identical concurrent requests sharing one run.

    Requests are identical when they go to the same engine with an equal (frozen) config; the
    followers get the leader's Rollout (read-only) or its error. Nothing is kept after the run.
    """
    key = (id(bundle), getattr(engine, "url", id(engine)), getattr(engine, "model", ""), cfg)
    work = lambda report: engine_sample(bundle, engine, cfg, progress=report)  # noqa: E731
    return _SHARED.run(key, work, progress, wrap_error=False)


def training_sampler(bundle: ModelBundle, engine: RolloutEngine, sync: Any) -> Any:
    """A ``Trainer.sampler``: each step's samples from the engine, the adapter synced first.

    Step k samples with the adapter as it is after k updates, loaded under ``<name>-s<k>``
    (``engine_sync.AdapterSync``: the previous version unloaded). When the engine fails or
    refuses the adapter, that step samples in-process (logged), so a run never stops for it.
    """

    def sampler(cfg: SamplingConfig, policy: Any, step: int) -> Rollout:
        try:
            name = sync.served_name(policy, step)
            return engine_sample(bundle, engine, cfg, policy, name)
        except EngineError as err:
            logger.warning("training step %d samples in-process: %s", step, err)
            return sample(bundle, cfg, source=policy)

    return sampler
