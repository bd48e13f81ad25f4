"""Streamlit glue of the Update page: the per-session LoRA adapter, the step button, the views.

What the page says about a step (its summary, mu, bf16, timing, one token's formula) is pure
text of the step's result: ``views/update_text.py``.

The adapter lives in a SESSION-scoped ``st.cache_resource`` (Streamlit 1.67): one LoraPolicy per
browser session, released with ``LoraPolicy.release()`` by ``on_release`` when the session ends or
the entry is replaced (another model, rank or seed), so its adapter and AdamW state (tens of MB
at most) never outlive the session. ``on_release`` runs on Streamlit's event loop, so the release
only cancels (a step in progress stops at its next minibatch) and the adapter is freed on the
reaper thread. The step's UpdateResult (a few (B, T) tensors) is kept in ``st.session_state``
next to the key of the batch it was taken on, so a result is never drawn over another batch.

The step first, delta log pi second: ``take_step`` runs ``update_step`` with ``rescore=False``, so
the page draws the step's figures (loss, ratio, clip fractions, gradient, timing) as soon as the
optimizer is done; at the end of that run ``finish_rescore`` scores the batch again under the
moved adapter (``lm.update.rescore``, the model lock held for that pass only), stores the filled
result and reruns the page, which then draws delta log pi. A rerun in between (a student moves a
widget) keeps the step and only repeats the re-score.
"""

from __future__ import annotations

import threading
from typing import Any

import streamlit as st

from roll_viz.core.records import Rollout, Trace
from roll_viz.lm.lora import DEFAULT_ALPHA, DEFAULT_RANK, LoraPolicy
from roll_viz.lm.rollout import SOURCE_LABELS
from roll_viz.lm.runfile import DEFAULT_OPTION, OPTION_IDS, options_for
from roll_viz.lm.update import (
    MAX_EPOCHS,
    UpdateConfig,
    behaviour_mu,
    bf16_slower_than_float32,
    group_difficulty,
    loss_inputs,
    rescore,
    update_step,
)
from roll_viz.ui import adapters, reconnect
from roll_viz.ui.fields import Field, check_fields
from roll_viz.ui.resources import cached_models
from roll_viz.ui.state import AppState
from roll_viz.views import text

KEY_LR = "upd_lr"
KEY_EPOCHS = "upd_epochs"
KEY_MINIBATCHES = "upd_minibatches"
KEY_STEP = "upd_step"
KEY_RESET = "upd_reset"
KEY_RESULT = "upd_result"
KEY_SAMPLE = "upd_sample"
KEY_POSITION = "upd_pos"
KEY_LOSS_OPTION = "upd_loss"
KEY_MU = "upd_mu"
KEY_PRECISION = "upd_precision"
#: the link's mark of this student's adapter steps (``reconnect.work_mark``)
KEY_LIVE_MARK = "upd_live"

#: the learning rates offered (LoRA r8, alpha 16): 1e-5 barely moves, 1e-3 and up clip a lot
LR_CHOICES = (1e-5, 3e-5, 1e-4, 2e-4, 5e-4, 1e-3, 3e-3)
MAX_MINIBATCHES = 4

#: the base model's matmul precisions offered (UpdateConfig.precision), the exact one first
PRECISIONS = ("float32", "bf16")

#: the behaviour sources offered for mu (lm.behaviour), the trainer's own path first
MU_SOURCES = ("fp32", "bf16", "fp16", "int8", "top_p", "top_k")
MU_LABELS = {
    **SOURCE_LABELS,
    "fp32": "fp32 = same as the trainer (mu = pi_old)",
    "top_p": "top-p 0.9 sampler, processed log-probs (outside the nucleus: mu = pi_old)",
    "top_k": "top-k 50 sampler, processed log-probs (outside the top 50: mu = pi_old)",
}


_PARKED = reconnect.Parking()
_RESETTING = threading.local()  # set while ``reset_adapter`` clears the cache: free, not park


def _free(policy: Any) -> None:
    policy.release()  # cancel, and free on the reaper thread


def _release(policy: Any) -> None:
    """Streamlit calls this on its event loop when the websocket closes: returns at once.

    The adapter waits ``reconnect.RECONNECT_GRACE_S`` for the same session to reconnect (a wifi
    drop keeps its steps); a reset, or nobody coming back, frees it (``LoraPolicy.release``).
    """
    key = getattr(policy, "park_key", None)
    if key is None or getattr(_RESETTING, "active", False) or policy.closed or policy.cancelled:
        _free(policy)
        return
    _PARKED.park(key, policy, _free)


@st.cache_resource(scope="session", on_release=_release, max_entries=1, show_spinner=False)
def session_policy(spec: str, rank: int, alpha: float, seed: int) -> Any:
    """This session's LoraPolicy on the shared model ``spec`` (closed when the session ends).

    Args:
        spec: model spec (as ``cached_models`` takes it).
        rank: LoRA r.
        alpha: LoRA alpha.
        seed: seed of the LoRA A init.

    Returns:
        The LoraPolicy (the one a dropped websocket of this session parked, when there is one).
    """
    key = (reconnect.student_key(), spec, rank, alpha, seed)
    parked = _PARKED.take(key)
    if parked is not None and not parked.closed and not parked.cancelled:
        return parked
    policy = LoraPolicy(cached_models(spec), rank=rank, alpha=alpha, seed=seed)
    policy.park_key = key
    return policy


def batch_key(state: AppState) -> tuple:
    """What identifies the batch and advantages a step was taken on."""
    return (
        state.source,
        state.preset,
        state.model,
        state.sampling,
        state.framework,
        state.config_items,
        state.reward,
    )


def model_problem(rollout: Rollout, bundle: Any) -> str:
    """Why the shared model cannot take a step on this batch ("" when it can)."""
    spec = str(rollout.meta.model_spec or "")
    vocab = int(bundle.model.get_output_embeddings().weight.shape[0])
    if spec and spec != bundle.spec:
        return (
            f"This batch was sampled with model {text.md_escape(spec)}, the loaded model is "
            f"{text.md_escape(bundle.spec)}: a step needs the model that wrote the tokens."
        )
    if rollout.token_ids.numel() and int(rollout.token_ids.max()) >= vocab:
        return "The batch's token ids do not fit the loaded model's vocabulary."
    return ""


FIELDS = {
    KEY_LR: Field(2e-4, options=LR_CHOICES),
    KEY_EPOCHS: Field(1.0, 1, MAX_EPOCHS, integer=True),
    KEY_MINIBATCHES: Field(1.0, 1, MAX_MINIBATCHES, integer=True),
    KEY_LOSS_OPTION: Field(DEFAULT_OPTION, options=OPTION_IDS),
    KEY_MU: Field("fp32", options=MU_SOURCES),
    KEY_PRECISION: Field("float32", options=PRECISIONS),
}


def controls() -> tuple[float, int, int]:
    """The step's learning rate, epochs K and minibatches (bounded widgets, checked on the server).

    A value the widgets would never send (NaN epochs from a crafted websocket message, a
    minibatch count beyond the bound) is put back to its default with a notice first. The whole
    number fields are float inputs shown without decimals: Streamlit turns an int input's value
    into ``int`` before any page code runs, and ``int(nan)`` there broke the session for good,
    while a float input resets a non-finite or out-of-range value to its default itself.
    """
    notices = check_fields(FIELDS)
    if notices:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in notices), icon=":material/info:")
    c1, c2, c3 = st.columns(3)
    with c1:
        lr = st.select_slider(
            "Learning rate (LoRA r8, alpha 16)",
            options=LR_CHOICES,
            value=2e-4,
            format_func=lambda v: f"{v:g}",
            key=KEY_LR,
            help="1e-5: barely visible. 1e-4 to 5e-4: visible. 1e-3 and up: too big, many "
            "tokens clip in the second epoch.",
        )
    with c2:
        epochs = st.number_input(  # a float input: Streamlit's int one crashes on a crafted NaN
            f"Epochs K (1 to {MAX_EPOCHS})",
            min_value=1.0,
            max_value=float(MAX_EPOCHS),
            value=1.0,
            step=1.0,
            format="%.0f",
            key=KEY_EPOCHS,
            help="Passes over the batch. In epoch 1 every ratio is 1; clipping can only bite "
            "from epoch 2.",
        )
    with c3:
        minibatches = st.number_input(
            f"Minibatches (1 to {MAX_MINIBATCHES})",
            min_value=1.0,
            max_value=float(MAX_MINIBATCHES),
            value=1.0,
            step=1.0,
            format="%.0f",
            key=KEY_MINIBATCHES,
            help="The batch is split into this many minibatches, one optimizer step each.",
        )
    return float(lr), int(epochs), int(minibatches)


def loss_option(framework: str) -> tuple[str, dict[str, Any]]:
    """The page's loss option for ``framework`` (a select bound to the URL): (option, loss keys).

    The sidebar sets the reward-stage keys only; this select adds the loss options that read more
    than log-probs (ROLL topr and difficulty weights, OpenRLHF's and TRL's train/rollout
    corrections), each under the framework's own key. A link's option of another framework falls
    back to the shipped defaults.
    """
    options = options_for(framework)
    current = st.session_state.get(KEY_LOSS_OPTION, st.query_params.get(KEY_LOSS_OPTION))
    if current is not None and current not in options:
        st.session_state[KEY_LOSS_OPTION] = DEFAULT_OPTION
    if len(options) == 1:
        return DEFAULT_OPTION, {}
    choice = st.selectbox(
        "Loss option",
        list(options),
        key=KEY_LOSS_OPTION,
        bind="query-params",
        help="Loss options that read more than the log-probs: the batch's scores (topr), each "
        "sample's difficulty (its group's failure rate here; ROLL reads a data set column), or "
        "the sampler's log-probs mu (train/rollout corrections).",
    )
    return str(choice), dict(options[choice])


def needs(state: AppState, loss_keys: dict[str, Any]) -> frozenset[str]:
    """What the loss with these keys reads beyond log-probs (``lm.update.loss_inputs``)."""
    try:
        return loss_inputs(state.framework, {**dict(state.config), **loss_keys})
    except ValueError:  # a bad key: the step says so in its own message
        return frozenset()


def mu_control(rollout: Rollout, needs: frozenset[str]) -> str | None:
    """The behaviour policy mu select (bound to the URL) when the loss reads mu; else None."""
    if "rollout_logprobs" not in needs:
        return None
    source = st.selectbox(
        "Behaviour policy mu (the sampler's log-probs)",
        list(MU_SOURCES),
        key=KEY_MU,
        bind="query-params",
        help="The sampler's numeric path, scored on the same tokens as the trainer's float32 "
        "recompute pi_old: its gap d = log pi_old - log mu is applied to the batch, so the "
        "ratio pi_theta / mu at epoch 1 is exp(d), not 1.",
    )
    engine = rollout.meta.engine
    st.caption(f"mu: {MU_LABELS.get(str(source), str(source))}.")
    if source == "fp32":
        st.caption(
            "mu = pi_old: the in-process float sampler is the trainer's own model, so pi_old / mu "
            "= 1 on every token and the correction has nothing to correct. Pick bf16 or int8 to "
            "see it act."
        )
    if engine:
        st.caption(
            f"This batch's log-probs come from {text.md_escape(str(engine))}; the step uses them "
            "as pi_old, and the source picked here adds its gap measured on the embedded model."
        )
    return str(source)


def precision_control() -> str:
    """The base model's matmul precision select (bound to the URL): "float32" or "bf16"."""
    choice = st.selectbox(  # plain option names: the link carries them as they read
        "Base matmuls: float32 (exact) / bf16 (approximate)",
        list(PRECISIONS),
        key=KEY_PRECISION,
        bind="query-params",
        help="bf16 runs the frozen base model's matrix products in bfloat16 (faster only on a "
        "CPU with AVX-512 BF16 or AMX, or a GPU); the adapter, its gradients, the optimizer and "
        "the head stay in float32. The log-probs move by a few hundredths, so the epoch-1 ratio "
        "is no longer exactly 1 and delta log pi carries that noise.",
    )
    if choice == "bf16" and bf16_slower_than_float32():
        st.caption(BF16_SLOW_HERE)
    return str(choice)


#: said under the precision select where bf16 only costs accuracy
BF16_SLOW_HERE = (
    "This server's CPU has no bf16 instructions (AVX-512 BF16 or AMX): bf16 is emulated here "
    "and slower than float32. It still shows what bf16 does to the numbers."
)


def _policy(state: AppState) -> Any:
    """This session's LoraPolicy for the state's model (a fresh one if it was released)."""
    seed = int(state.sampling.seed) if state.sampling is not None else 0
    policy = session_policy(state.model, DEFAULT_RANK, DEFAULT_ALPHA, seed)
    if policy.closed or policy.cancelled:  # released under us (cache cleared): make a new one
        session_policy.clear()
        policy = session_policy(state.model, DEFAULT_RANK, DEFAULT_ALPHA, seed)
    return policy


def take_step(
    state: AppState,
    rollout: Rollout,
    trace: Trace,
    lr: float,
    epochs: int,
    minibatches: int,
    loss_keys: dict[str, Any] | None = None,
    mu_source: str | None = None,
    precision: str = "float32",
) -> str:
    """One update step with this session's adapter; stores the UpdateResult (delta log pi to come).

    The adapter is then registered as this session's "updated" policy (``adapters``), so the
    sidebar can offer it to every page. The batch's scores go to a loss that reads them (ROLL
    topr), its groups' failure rates as each sample's difficulty, and mu from ``mu_source``
    (None or "fp32": mu = pi_old). The step skips its re-score (``finish_rescore`` fills delta
    log pi after the page has drawn the step); ``precision`` is the base's matmul dtype.

    Returns:
        "" when the step ran, else one sentence why this option cannot run on this batch.
    """
    seed = int(state.sampling.seed) if state.sampling is not None else 0
    policy = _policy(state)
    cfg = UpdateConfig(
        lr=lr,
        epochs=epochs,
        minibatches=min(minibatches, int(rollout.token_ids.shape[0])),
        seed=seed,
        rescore=False,
        precision=precision if precision in PRECISIONS else "float32",
    )
    try:
        mu = None
        if mu_source not in (None, "fp32"):
            mu = behaviour_mu(policy.bundle, rollout, str(mu_source))[0]
        result = update_step(
            policy,
            rollout,
            trace.advantages,
            framework=state.framework,
            loss_config={**dict(state.config), **(loss_keys or {})},
            ref_logprobs=rollout.ref_logprobs,
            cfg=cfg,
            scores=trace.scores,
            difficulty=group_difficulty(trace.scores, rollout.group_ids),
            rollout_logprobs=mu,
        )
    except ValueError as exc:
        return f"This option cannot run on this batch: {exc}"
    st.session_state[KEY_RESULT] = (batch_key(state), result)
    adapters.register(adapters.UPDATED, lambda: (policy, int(policy.steps)))
    st.query_params[KEY_LIVE_MARK] = reconnect.work_mark(policy.steps)  # a restart can say so
    return ""


def finish_rescore(state: AppState, rollout: Rollout, result: Any) -> str:
    """Fill in the stored step's delta log pi (one no-grad pass), then rerun the page.

    Call at the end of the page's run, after the step's figures are drawn. The filled result is
    stored before anything else is drawn, so a rerun a student triggers meanwhile keeps it.

    Returns:
        Why the re-score could not run; on success the page reruns and this does not return.
    """
    try:
        filled = rescore(_policy(state), rollout, result)
    except ValueError as exc:
        return f"Delta log pi could not be re-scored: {exc}."
    st.session_state[KEY_RESULT] = (batch_key(state), filled)
    st.rerun()
    return ""


#: Markdown hard line break between the step's phases and the re-score: the caption sits beside a
#: button at 1280 px, where a free wrap left a lone "s." on its second line


def use_updated_policy() -> None:
    """Callback: every page shows the updated policy (the sidebar's radio redrawn with it).

    The radio exists as soon as the adapter has a step (the page reruns after the re-score), and
    a radio's own state outweighs its index: drop it so the radio starts at the new choice.
    """
    st.session_state[adapters.KEY_POLICY_VIEW] = adapters.UPDATED
    st.session_state.pop(adapters.KEY_POLICY_WIDGET, None)


def reset_adapter() -> None:
    """Callback: drop this session's adapter (a fresh one, equal to the base, on the next step)."""
    _RESETTING.active = True
    try:
        session_policy.clear()
    finally:
        _RESETTING.active = False
    st.session_state.pop(KEY_RESULT, None)
    st.query_params.pop(KEY_LIVE_MARK, None)


def lost_adapter_notice() -> str | None:
    """What the link says was lost when this session's adapter has no step but the link had some.

    A hall process that died (or a restarted server) took the adapter with it; the student's
    browser reconnects to another process with the link, and its mark says how many steps.
    """
    if adapters.UPDATED in adapters.available():
        return None
    return reconnect.lost_work_notice(
        st.query_params.get(KEY_LIVE_MARK),
        "adapter",
        "press Take one update step to start again from the base model",
    )


def stored_result(state: AppState) -> Any:
    """The last UpdateResult if it was taken on the current batch, else None."""
    item = st.session_state.get(KEY_RESULT)
    if item is None or item[0] != batch_key(state):
        return None
    return item[1]
