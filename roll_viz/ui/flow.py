"""The cached data flow of a page, top to bottom: state -> rollout -> scores -> batch -> trace.

    cached_models()           the one shared model (``resources``)
    cached_rollout(state)     the sampled batch: a committed preset (instant) or the live model
    cached_scores(state)      (B,) raw rewards of the batch
    current_batch(state)      the calculator's input (Batch), with a zero or a probe critic
    cached_trace(state, ...)  the pipeline's Trace in the sidebar's dialect (or another one)

A hyperparameter change (beta, gamma, lam, estimator ...) is a cache hit on the rollout and the
scores and only reruns ``pipeline.run`` (pure, milliseconds). Nothing a page computes is handed to
another page through ``st.session_state``; the only per-session state is the running reward
statistics of the Rewards page. Live samples are cached in a small shared LRU held by
``st.cache_resource`` rather than in ``st.cache_data``, so the sampling progress is drawn only on
a cache miss, never replayed on a hit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import streamlit as st
import torch

from roll_viz import rewards
from roll_viz.core import pipeline
from roll_viz.core.pipeline import kl as kl_mod
from roll_viz.core.pipeline import values as values_mod
from roll_viz.core.records import (
    Batch,
    Rollout,
    RunningMoments,
    Trace,
    batch_from_rollout,
    subsample_rollout,
)
from roll_viz.data import presets
from roll_viz.lm import models as models_mod
from roll_viz.lm import rollout as rollout_door
from roll_viz.ui import adapters, instant, rollout_engine
from roll_viz.ui import run_source as runs
from roll_viz.ui.present import top_slot
from roll_viz.ui.resources import cached_models, live_store, mark_loaded, model_loaded
from roll_viz.ui.settings import native_config, preset_defaults
from roll_viz.ui.state import KEY_RUNNING, KEY_RUNNING_BATCHES, AppState, freeze


# ---------------------------------------------------------------------------------------------
# Cached data
# ---------------------------------------------------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=32, ttl=60)
def preset_available(name: str) -> bool:
    """Whether the preset's committed JSON loads (exists and matches its config)."""
    try:
        _preset_rollout(name)
    except (OSError, ValueError, KeyError):
        return False
    return True


@st.cache_data(show_spinner=False, max_entries=32)
def _preset_rollout(name: str) -> Rollout:
    return presets.load_preset(name)[2]


#: what the first page that needs the model says while it loads (then how long it took)
FIRST_USE_NOTE = (
    "First use of the model {name} on this server: loading the policy and the reference (up to "
    "a minute or two on a CPU). Every later page and every student reuse it; a teacher can "
    "press 'Warm up the model' on Home before class."
)


def ensure_model(spec: str) -> Any:
    """The shared model, with a note at the top of the main column when this is its first use.

    Args:
        spec: model spec (``cached_models``).

    Returns:
        The ModelBundle.
    """
    if model_loaded(spec):
        return cached_models(spec)
    with top_slot():
        note = st.empty()
        note.info(FIRST_USE_NOTE.format(name=spec), icon=":material/hourglass_top:")
        start = time.perf_counter()
        bundle = cached_models(spec)
        mark_loaded(spec)  # also when another session's load filled the cache
        # A toast, not a caption: the page's content stays the same for the student who
        # happened to trigger the load and for everyone after (classroom isolation check).
        note.empty()
        st.toast(
            f"Model {spec} loaded in {time.perf_counter() - start:.0f} s; the next uses are "
            "instant.",
            icon=":material/check_circle:",
        )
    return bundle


def is_warm(spec: str) -> bool:
    """True when ``spec`` is loaded and its throwaway update step was taken (``lm.warm``)."""
    return model_loaded(spec) and rollout_door.is_warm(cached_models(spec))


def warm_up(spec: str) -> float:
    """Load ``spec`` and take the throwaway step on a scratch adapter; returns its seconds.

    The session's own adapter is not touched: a lecture's first press of the Update page's
    step is still this session's step 1, with every ratio 1 at epoch 1.
    """
    return rollout_door.warm_up(ensure_model(spec))


def sample_live(model: str, sampling: Any, decode: str = "float") -> Rollout:
    """A live rollout for ``sampling`` (cached; progress drawn only when it really samples).

    Args:
        model: model spec (part of the cache key).
        sampling: the SamplingConfig.
        decode: "float" or "int8" (``AppState.decode``: which weights draw the answers).

    Returns:
        The Rollout.
    """
    store = live_store()
    key = (model, sampling, decode, rollout_door.label(model))
    rollout = store.get(key)
    if rollout is not None:
        return rollout
    try:
        bundle = ensure_model(model)
    except models_mod.ModelNotFoundError as err:
        st.error(f"The live model is not available: {err}")
        st.stop()
    n_rows = len(sampling.prompts) * sampling.group_size
    request = rollout_door.Request(sampling, decode)
    plan = rollout_door.plan(bundle, request)
    estimate, fast = plan.seconds, plan.fast_seconds
    guess = "" if plan.measured else " (a first guess)"
    drawn = " (int8 answers, float scores)" if decode == "int8" else ""
    label = f"Sampling {n_rows} responses with {bundle.name}{drawn}: about {estimate:.0f} s{guess}"
    if decode != "int8" and estimate > 10 and fast < 0.9 * estimate:
        label += f" (about {fast:.0f} s with 'Fast sampling' in the sidebar)"
    if plan.queue_message:
        label = f"{plan.queue_message} Then: {label}"
    if key[-1]:
        label = f"Sampling {n_rows} responses on {key[-1]}"
    with top_slot(), st.status(label, expanded=True) as status:
        bar = st.progress(0.0, text="starting")

        def progress(fraction: float, text: str) -> None:
            # the sampler's text says the queue position, then "320 / 1152 tokens, about 6 s left"
            bar.progress(min(max(float(fraction), 0.0), 1.0), text=text)

        # on the operator's engine when one is configured and up (else, or when it fails: the
        # in-process model, where identical requests in flight at once share one sampling run)
        rollout = rollout_engine.engine(model, bundle).sample(request, progress)
        status.update(label=f"Sampled {n_rows} responses", state="complete", expanded=False)
    store.put(key, rollout)
    return rollout


def cached_rollout(state: AppState) -> Rollout:
    """The batch the pages show: the preset's committed rollout, or a live sample.

    Args:
        state: from page_setup.

    Returns:
        The Rollout (for a preset with a smaller G: the first G samples of each prompt).
    """
    if state.adapted:  # this session's updated or trained policy
        return adapters.policy_rollout(state.source, state.model, state.sampling)
    if state.live:
        return sample_live(state.model, state.sampling, state.decode)
    if state.source.startswith("run:"):
        return runs.step_rollout(state.source, state.sampling.version)
    rollout = _preset_rollout(state.preset)
    if state.group_size < rollout.group_size:
        rollout = _subsampled(state.preset, state.group_size)
    return rollout


@st.cache_data(show_spinner=False, max_entries=64)
def _subsampled(preset: str, group_size: int) -> Rollout:
    return subsample_rollout(_preset_rollout(preset), group_size)


def _rollout_key(state: AppState) -> tuple:
    return (state.source, state.preset, state.model, state.sampling, state.decode)


@st.cache_data(show_spinner=False, max_entries=128)
def _scores(_rollout: Rollout, key: tuple, spec: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if str(key[0]).startswith("run:"):  # an imported run: its file's scores, no reward fn
        return runs.step_scores(key[0], key[3].version), None
    scores = rewards.score_rollout(_rollout, spec)
    greedy = rewards.score_greedy(_rollout, spec) if _rollout.greedy_responses else None
    return scores, greedy


def cached_scores(state: AppState) -> torch.Tensor:
    """(B,) float64 raw rewards of the current batch under the sidebar's RewardSpec."""
    return _scores(cached_rollout(state), _rollout_key(state), state.reward)[0]


def current_batch(state: AppState, values: str = "zero") -> Batch:
    """The calculator's input for the current batch.

    Args:
        state: from page_setup.
        values: critic for GAE: "zero" (V = 0 everywhere) or "probe" (cross-fitted ridge probe on
            the reference model's features, fitted to the Monte-Carlo returns).

    Returns:
        A Batch with scores, masks, log-probs, values and the greedy baseline scores (ReMax).
    """
    rollout = cached_rollout(state)
    scores, greedy = _scores(rollout, _rollout_key(state), state.reward)
    if values == "probe":
        value_tensor = _probe(state)
    elif values == "zero":
        value_tensor = torch.zeros_like(rollout.response_mask)
    else:
        raise ValueError(f"values must be 'zero' or 'probe', got {values!r}")
    return batch_from_rollout(rollout, scores, values=value_tensor, baseline_scores=greedy)


def _probe(state: AppState) -> torch.Tensor:
    rollout = cached_rollout(state)
    return _probe_cached(
        _rollout_key(state), state.reward, state.framework, state.config_items, _rollout=rollout
    )


@st.cache_data(show_spinner=False, max_entries=64)
def _probe_cached(
    key: tuple, spec: Any, framework: str, config_items: tuple, _rollout: Rollout
) -> torch.Tensor:
    if _rollout.features is None:
        return torch.zeros_like(_rollout.response_mask)
    scores, greedy = _scores(_rollout, key, spec)
    batch = batch_from_rollout(
        _rollout, scores, values=torch.zeros_like(_rollout.response_mask), baseline_scores=greedy
    )
    targets = _mc_returns(batch, framework, dict(config_items))
    return values_mod.probe_values(_rollout.features, targets, _rollout.response_mask)


def _mc_returns(batch: Batch, framework: str, config: dict) -> torch.Tensor:
    """Monte-Carlo returns of the dialect's token rewards: the value probe's targets.

    Computed as the dialect's GAE with lam = 1, a zero critic and no whitening.
    """
    fw = framework
    aliases = pipeline.ALIASES[fw]
    choices = pipeline.CHOICES.get(fw, {})
    est_key = aliases.get("estimator")
    if est_key is None or "gae" not in choices.get(est_key, ()):
        fw = "roll"
        aliases = pipeline.ALIASES[fw]
        est_key = aliases["estimator"]
    overrides = {est_key: "gae"}
    if aliases.get("lam"):
        overrides[aliases["lam"]] = 1.0
    if aliases.get("whiten"):
        overrides[aliases["whiten"]] = False
    base = config if fw == framework else {}
    trace = pipeline.run(batch, fw, {**pipeline.DEFAULTS[fw], **base, **overrides})
    return trace.returns


def running_moments() -> RunningMoments:
    """This session's running reward statistics (the Rewards page's "running" mode)."""
    return st.session_state.get(KEY_RUNNING, RunningMoments())


def running_batches() -> int:
    """How many extra batches were added to this session's running statistics."""
    return int(st.session_state.get(KEY_RUNNING_BATCHES, 0))


def reset_running() -> None:
    """Forget this session's running statistics."""
    st.session_state[KEY_RUNNING] = RunningMoments()
    st.session_state[KEY_RUNNING_BATCHES] = 0


def add_running_batch(state: AppState, overrides: Mapping[str, Any] | None = None) -> None:
    """Sample the next batch (same prompts, next seed), fold its rewards into the running stats.

    Args:
        state: from page_setup.
        overrides: extra dialect config (e.g. the Rewards page's normalization mode).
    """
    k = running_batches() + 1
    base = state.sampling
    if not state.live:
        base = preset_defaults(state.preset)[0]
        base = replace(base, group_size=state.group_size)
    next_sampling = replace(base, seed=int(base.seed) + k)
    rollout = sample_live(state.model, next_sampling, state.decode)
    key = ("live", state.preset, state.model, next_sampling, state.decode)
    scores, greedy = _scores(rollout, key, state.reward)
    batch = batch_from_rollout(
        rollout, scores, values=torch.zeros_like(rollout.response_mask), baseline_scores=greedy
    )
    config = native_config(state.framework, dict(state.generic), overrides)
    trace = pipeline.run(batch, state.framework, config, running=running_moments())
    if trace.running is not None:
        st.session_state[KEY_RUNNING] = trace.running
    st.session_state[KEY_RUNNING_BATCHES] = k


def _uses_running(config: Mapping[str, Any]) -> bool:
    return any(v == "running" for v in config.values())


@st.cache_data(show_spinner=False, max_entries=256)
def _trace_cached(
    key: tuple,
    spec: Any,
    values: str,
    framework: str,
    config_items: tuple,
    running: RunningMoments | None,
    _batch: Batch,
) -> Trace:
    return pipeline.run(_batch, framework, dict(config_items), running=running)


def cached_trace(
    state: AppState,
    framework: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    values: str = "zero",
) -> Trace:
    """The pipeline's Trace for the current batch.

    A bad config stops the page with one clear error message (pipeline.run raises ValueError).

    Args:
        state: from page_setup.
        framework: dialect (default: the sidebar's). For another dialect the sidebar's generic
            controls are mapped onto that dialect's keys where it has them.
        overrides: framework keys (or generic names) -> values, applied last.
        values: critic for GAE, "zero" or "probe".

    Returns:
        The Trace (running statistics from this session when the config normalizes by "running").
    """
    fw = framework or state.framework
    if fw == state.framework and not overrides:
        config = state.config
    else:
        config = native_config(fw, dict(state.generic), overrides)
    running = running_moments() if _uses_running(config) else None
    batch = current_batch(state, values=values)
    try:
        return _trace_cached(
            _rollout_key(state), state.reward, values, fw, freeze(config), running, _batch=batch
        )
    except ValueError as err:
        st.error(f"This combination of settings is not valid in {fw}: {err}")
        st.stop()
        raise  # pragma: no cover - st.stop() raises


def kl_estimates(state: AppState, estimator: str) -> torch.Tensor:
    """(B, T) per-token KL of the current batch with a generic estimator name (k1/abs/k2/k3)."""
    rollout = cached_rollout(state)
    return kl_mod.token_kl(
        rollout.logprobs, rollout.ref_logprobs, rollout.response_mask, estimator=estimator
    )


def try_trace(
    state: AppState,
    framework: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    values: str = "zero",
) -> Trace | str:
    """Like cached_trace, but returns the error message instead of stopping the page.

    Args:
        state: from page_setup.
        framework: dialect (default: the sidebar's).
        overrides: framework keys (or generic names) -> values.
        values: critic for GAE, "zero" or "probe".

    Returns:
        The Trace, or the ValueError's message (an estimator undefined for this batch).
    """
    fw = framework or state.framework
    config = native_config(fw, dict(state.generic), overrides)
    running = running_moments() if _uses_running(config) else None
    batch = current_batch(state, values=values)
    try:
        return _trace_cached(
            _rollout_key(state), state.reward, values, fw, freeze(config), running, _batch=batch
        )
    except ValueError as err:
        return str(err)


@st.cache_data(show_spinner=False, max_entries=16)
def instant_payload(state: AppState, values: str = "zero") -> dict:
    """The batch the instant component recomputes in the browser (built once per batch)."""
    return instant.instant_payload(current_batch(state, values), state.framework, state.config)


def follows_group(state: AppState) -> bool:
    """Whether G only picks rows of a committed batch: a preset, scored without reward noise.

    Then the first G samples of every prompt of the preset's whole batch, scored whole, are
    exactly the rows and scores ``current_batch`` gives for that G (the rewards score each
    response on its own; noise is drawn per batch, a live or adapted policy samples anew).
    """
    preset = state.source.startswith("preset:") and not state.adapted
    return preset and not getattr(state.reward, "noise_sigma", 0)


@st.cache_data(show_spinner=False, max_entries=16)
def preset_payload(state: AppState, values: str = "zero") -> dict:
    """``instant_payload`` of the preset's WHOLE batch, for pages that follow G.

    Only where ``follows_group``: the browser then draws any G up to the preset's from it
    (``subset_groups``). ``"follows_G"`` is True; ``preset_tokens`` are its rows' tokens.
    With the probe critic (fitted on the current G's rows) the values are the probe's on
    those rows and 0 elsewhere: right at this G only, so what reads them waits for the server
    after a G move.
    """
    rollout = _preset_rollout(state.preset)
    key = (state.source, state.preset, state.model, "full")
    scores, greedy = _scores(rollout, key, state.reward)
    critic = torch.zeros_like(rollout.response_mask)
    if values == "probe":
        seen: dict[int, int] = {}
        rows = []
        for row, g in enumerate(rollout.group_ids.tolist()):
            seen[g] = seen.get(g, 0) + 1
            if seen[g] <= state.group_size:
                rows.append(row)
        probe = current_batch(state, "probe").values
        critic = torch.zeros(critic.shape, dtype=probe.dtype).index_copy(
            0, torch.tensor(rows), probe
        )
    batch = batch_from_rollout(rollout, scores, values=critic, baseline_scores=greedy)
    payload = instant.instant_payload(batch, state.framework, state.config)
    return payload | {"follows_G": True}


def preset_tokens(state: AppState) -> tuple:
    """The tokens of every row of the preset's whole batch (``preset_payload``'s rows)."""
    return _preset_rollout(state.preset).tokens


@st.cache_data(show_spinner=False, max_entries=16)
def local_global_payload(state: AppState) -> dict:
    """The rewards the instant local-vs-global component recomputes from (built once per batch).

    For a committed preset scored without reward noise this is the preset's FULL batch (every
    sample of every prompt), so the component's G slider reaches the preset's G even when the
    sidebar shows fewer; its first G samples of every prompt are exactly the rows and scores
    ``cached_rollout`` / ``cached_scores`` give for that G (the rewards score each response on
    its own). Otherwise (live or adapted policy, imported run, noisy reward: noise is drawn per
    batch) it is the current batch.

    Returns:
        ``instant.local_global_payload(...)`` plus ``"sync_G"``: whether the sidebar's G may
        follow a release (a preset, where changing G only takes other rows of the same
        committed batch; a live batch would be sampled again).
    """
    preset = state.source.startswith("preset:") and not state.adapted
    if follows_group(state):
        rollout = _preset_rollout(state.preset)
        key = (state.source, state.preset, state.model, "full")
        scores = _scores(rollout, key, state.reward)[0]
    else:
        rollout = cached_rollout(state)
        scores = cached_scores(state)
    payload = instant.local_global_payload(scores, rollout.group_ids, tuple(rollout.prompts))
    payload["sync_G"] = bool(preset)
    return payload
