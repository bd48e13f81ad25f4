"""The Training page's Streamlit layer: per-session runners, controls, live charts, the scrubber.

Each browser session owns up to ``MAX_SLOTS`` background runners (``lm.train.TrainRunner``), kept
in ``st.session_state`` under ``KEY_RUNNERS``; each holds its own LoRA adapter over the shared
base model and takes the model lock per phase of a step, so other users' pages keep working
while it trains. Recorded runs (``data.recorded``) open without a model.

``trained_policy()`` is registered with ``adapters`` when a run starts: the session's trained
policy (slot A) and its step, so the other pages can show "trained (step k) vs reference".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import streamlit as st

from roll_viz.core import pipeline
from roll_viz.core.pipeline import dialects
from roll_viz.lm.runfile import RewardChoice, SamplingConfig, TrainSettings
from roll_viz.lm.train import TrainRunner
from roll_viz.ui import adapters, reconnect, rollout_engine, training_mu, training_stale, url
from roll_viz.ui.fields import Field, check_fields
from roll_viz.ui.state import KEY_BETA, AppState
from roll_viz.views import text

KEY_RUNNERS = "_train_runners"
KEY_RUN = "run"  # URL: a recorded run to open (?run=hack_beta0)
KEY_STEPS = "tr_steps"
KEY_LR = "tr_lr"
KEY_TRAIN_BETA_MODE = "tr_beta_mode"
#: the run's initial beta; a link's sidebar ``beta=`` starts it (``link_beta``), ``tr_beta=`` wins
KEY_TRAIN_BETA = "tr_beta"
KEY_TARGET = "tr_target"
KEY_HORIZON = "tr_horizon"
KEY_ENTROPY_TARGET = "tr_ent"  # the adaptive entropy target (0 = off)
KEY_SEED = "tr_seed"
KEY_SLOT = "tr_slot"
KEY_COMPARE = "tr_compare"
KEY_KNOB = "tr_knob"

SLOTS = ("A", "B", "C")
MAX_SLOTS = len(SLOTS)

# Caps of a run started from the page (stated in the UI). A CPU step of the bundled model with
# 4 prompts x 4 samples x 48 tokens takes seconds to tens of seconds.
CAP_STEPS = 50
CAP_PROMPTS = 4
CAP_GROUP = 8
CAP_TOKENS = 64
LR_CHOICES = (1e-5, 3e-5, 1e-4, 3e-4, 5e-4, 1e-3, 3e-3)
CAPS_TEXT = (
    f"Caps for a run started here: at most {CAP_STEPS} steps, {CAP_PROMPTS} prompts, "
    f"G = {CAP_GROUP} samples per prompt and {CAP_TOKENS} new tokens (the first prompts and the "
    f"sidebar's other settings are used). Bigger runs: the CLI, `python -m roll_viz train`."
)

#: the gameable reward of the hacking demo: counts positive words (a cap it never reaches)
HACK_REWARD = RewardChoice.single("positive_words", per_word=0.25, cap=10.0)
HACK_BETA = 1.0
#: the pair's step count: in the recorded pair the beta = 0 run's reward jumps after about 25
#: steps (20 stops before the hacking shows)
HACK_STEPS = 30

#: the knobs "compare runs" can vary: label -> list of (run label, settings changes)
KNOBS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "KL: beta = 0 vs beta > 0 vs adaptive": [
        ("beta = 0", {"beta": 0.0, "beta_mode": "fixed"}),
        ("beta = 0.2", {"beta": 0.2, "beta_mode": "fixed"}),
        ("adaptive beta (from 0.2)", {"beta": 0.2, "beta_mode": "adaptive"}),
    ],
    "estimator: GRPO vs REINFORCE++ vs GAE (verl)": [
        ("GRPO", {"framework": "verl", "config": {"adv_estimator": "grpo"}}),
        ("REINFORCE++", {"framework": "verl", "config": {"adv_estimator": "reinforce_plus_plus"}}),
        ("GAE (zero critic)", {"framework": "verl", "config": {"adv_estimator": "gae"}}),
    ],
    "async: the sampler k = 0 / 1 / 2 steps behind": [
        ("k = 0 (synchronous)", {"staleness": 0}),
        ("k = 1", {"staleness": 1}),
        ("k = 2", {"staleness": 2}),
    ],
    "async pi_old (k = 1): recomputed vs := pi_theta vs := mu": [
        ("pi_old recomputed", {"staleness": 1, "old_policy": "recomputed"}),
        ("pi_old := pi_theta (ratio 1)", {"staleness": 1, "old_policy": "current"}),
        ("pi_old := mu", {"staleness": 1, "old_policy": "mu"}),
    ],
    "normalization: local (group) vs global (batch) (ROLL reinforce)": [
        (
            "local: group mean / std",
            {
                "framework": "roll",
                "config": {
                    "adv_estimator": "reinforce",
                    "norm_mean_type": "group",
                    "norm_std_type": "group",
                },
            },
        ),
        (
            "global: batch mean / std",
            {
                "framework": "roll",
                "config": {
                    "adv_estimator": "reinforce",
                    "norm_mean_type": "batch",
                    "norm_std_type": "batch",
                },
            },
        ),
    ],
}

# ---------------------------------------------------------------------------------------------
# Session runners


class _SessionRunners:
    """This student's runners; parked ``reconnect.RECONNECT_GRACE_S`` after the websocket goes away.

    A release (``park``, on Streamlit's event loop, ``ui.reconnect``) returns at once: running
    runs pause at their next step boundary (no work for a student who is not there) and wait
    under the student key (``reconnect.student_key``: the browser's cookie, so a reload finds
    them too); the same student coming back within the grace takes them back and they resume
    (``_session_runners``, or ``runners`` when the old tab's release came after the new tab's
    first run); otherwise they are closed (``TrainRunner.close``: the adapters are freed off the
    request path).
    """

    def __init__(self, session: str) -> None:
        self.session = session
        self.by_slot: dict[str, TrainRunner] = {}
        self._paused: set[str] = set()

    def park(self) -> None:
        """on_release: pause what runs and wait for the session to come back (returns at once)."""
        if not self.by_slot:
            return
        for slot, runner in self.by_slot.items():
            if runner.status == "running":
                runner.pause()
                self._paused.add(slot)
        _PARKED.park(self.session, self, _SessionRunners.close)

    def come_back(self) -> None:
        """The same session reconnected in time: resume what the disconnect paused."""
        for slot in self._paused:
            runner = self.by_slot.get(slot)
            if runner is not None and runner.status == "paused":
                runner.resume()
        self._paused.clear()

    def adopt(self, other: _SessionRunners) -> None:
        """Take the runs of the same student's earlier tab (free slots only), resumed."""
        for slot, runner in other.by_slot.items():
            if slot in self.by_slot:
                runner.close()  # this tab already has a run there: the newer one stays
            else:
                self.by_slot[slot] = runner
                if slot in other._paused:
                    self._paused.add(slot)
        other.by_slot = {}
        self.come_back()

    def close(self) -> None:
        """Nobody came back within the grace: close every run (returns at once)."""
        for runner in list(self.by_slot.values()):
            runner.close()


_PARKED = reconnect.Parking()
#: the link's mark of this student's live run (``reconnect.work_mark``)
KEY_LIVE_MARK = "tr_live"


@st.cache_resource(
    scope="session", on_release=_SessionRunners.park, max_entries=1, show_spinner=False
)
def _session_runners() -> _SessionRunners:
    student = reconnect.student_key()
    parked = _PARKED.take(student)
    if parked is not None:  # a reconnect or a reload of the same student: its runs, resumed
        parked.come_back()
        return parked
    return _SessionRunners(student)


def runners() -> dict[str, TrainRunner]:
    """This student's runners by slot (also in session_state; parked when the tab goes away)."""
    holder = _session_runners()
    late = _PARKED.take(holder.session)  # the old tab's release came after this tab started
    if late is not None and late is not holder:
        holder.adopt(late)
    if KEY_RUNNERS in st.session_state and st.session_state[KEY_RUNNERS] is not holder.by_slot:
        holder.by_slot.update(st.session_state[KEY_RUNNERS])
    st.session_state[KEY_RUNNERS] = holder.by_slot
    return holder.by_slot


def lost_run_notice() -> str | None:
    """What the link says was lost when this session has no run but the link had one."""
    if runners():
        return None
    return reconnect.lost_work_notice(
        st.query_params.get(KEY_LIVE_MARK),
        "run",
        "its settings are in the link (press Start to run it again)",
    )


def trained_policy() -> tuple[Any, int] | None:
    """(LoraPolicy, steps trained) of this session's slot-A run, or None (for other pages).

    The policy is a ``PolicySource``: ``lm.sampling.sample(bundle, cfg, source=policy)`` samples
    from it and scores against the base model as the reference.
    """
    runner = runners().get("A")
    if runner is None or runner.trainer is None or runner.trainer.policy.closed:
        return None
    return runner.trainer.policy, runner.steps_done


def any_running() -> bool:
    """True while one of this session's runners is training."""
    return any(r.status == "running" for r in runners().values())


def start_run(bundle: Any, slot: str, settings: TrainSettings) -> TrainRunner:
    """Start a fresh run in ``slot`` (an old run there is stopped and its adapter freed)."""
    table = runners()
    old = table.get(slot)
    if old is not None:
        old.close()
    # on the operator's engine when one is up: each step's samples there, the adapter synced
    factory = rollout_engine.trainer_factory(settings.model)
    runner = TrainRunner(bundle, settings, trainer_factory=factory)
    table[slot] = runner
    runner.start()
    adapters.register(adapters.TRAINED, trained_policy)
    return runner


def drop_run(slot: str) -> None:
    """Stop and forget the run in ``slot``."""
    runner = runners().pop(slot, None)
    if runner is not None:
        runner.close()


# ---------------------------------------------------------------------------------------------
# Settings from the sidebar and the page controls


def base_settings(state: AppState, model: str) -> tuple[TrainSettings, list[str]]:
    """TrainSettings from the sidebar's prompts, reward and dialect and the page's controls.

    Returns:
        (settings, one message per cap applied).
    """
    notes = []
    prompts = tuple(state.sampling.prompts)
    if len(prompts) > CAP_PROMPTS:
        notes.append(f"Training on the first {CAP_PROMPTS} of {len(prompts)} prompts.")
        prompts = prompts[:CAP_PROMPTS]
    group = int(state.sampling.group_size)
    if group > CAP_GROUP:
        notes.append(f"G capped at {CAP_GROUP} (sidebar: {group}).")
        group = CAP_GROUP
    group = max(group, 2)
    tokens = int(state.sampling.max_new_tokens)
    if tokens > CAP_TOKENS:
        notes.append(f"Response length capped at {CAP_TOKENS} tokens (sidebar: {tokens}).")
        tokens = CAP_TOKENS
    reward = RewardChoice(
        terms=tuple(state.reward.terms),
        noise_sigma=state.reward.noise_sigma,
        noise_seed=state.reward.noise_seed,
    )
    dialect = dialects.get(state.framework)
    # beta and the controller come from the page's controls (dialect.train_config sets them)
    config = {k: v for k, v in state.config.items() if k not in dialect.CONTROLLER_KEYS}
    option, sampler, mu_notes = training_mu.chosen(state.framework)
    lag, old_policy = training_stale.chosen()
    notes += mu_notes
    mode = _field(KEY_TRAIN_BETA_MODE)
    if mode == "adaptive" and not dialect.ADAPTIVE_BETA:
        notes.append(f"{dialect.LABEL} has no adaptive KL controller: fixed beta.")
        mode = "fixed"
    sampling = SamplingConfig(
        prompts=prompts,
        group_size=group,
        max_new_tokens=tokens,
        temperature=max(float(state.sampling.temperature), 0.1),
        top_p=float(state.sampling.top_p),
        seed=int(_field(KEY_SEED)),
    )
    settings = TrainSettings(
        sampling=sampling,
        steps=int(_field(KEY_STEPS)),
        reward=reward,
        framework=state.framework,
        config=config,
        beta_mode=mode,
        beta=float(_field(KEY_TRAIN_BETA)),
        target_kl=float(_field(KEY_TARGET)),
        horizon=float(_field(KEY_HORIZON)),
        lr=float(_field(KEY_LR)),
        model=model,
        loss_option=option,
        sampler=sampler,
        entropy_target=float(_field(KEY_ENTROPY_TARGET)),
        staleness=lag,
        old_policy=old_policy,
    )
    return settings, notes


def vary(settings: TrainSettings, label: str, changes: dict[str, Any]) -> TrainSettings:
    """``settings`` with one knob changed (a config change replaces the dialect config)."""
    changes = dict(changes)
    if "config" in changes:
        fw = changes.get("framework", settings.framework)
        keep = dict(settings.config) if fw == settings.framework else {}
        keep.update(changes["config"])
        known = pipeline.resolve_config(fw, None)
        changes["config"] = {k: v for k, v in keep.items() if k in known}
    return replace(settings, label=label, **changes)


def field_specs() -> dict[str, Field]:
    """What each training field accepts (checked on the server, ``fields.check_fields``)."""
    return {
        KEY_STEPS: Field(20.0, 1, CAP_STEPS, integer=True),
        KEY_SEED: Field(0.0, 0, 10_000, integer=True),
        KEY_LR: Field(5e-4, options=LR_CHOICES),
        KEY_TRAIN_BETA_MODE: Field("fixed", options=("fixed", "adaptive")),
        KEY_TRAIN_BETA: Field(0.0, 0.0, 5.0),
        KEY_TARGET: Field(0.05, 0.001, 10.0),
        KEY_HORIZON: Field(100.0, 1.0, 100_000.0),
        KEY_ENTROPY_TARGET: Field(0.0, 0.0, 20.0),
        KEY_SLOT: Field("A", options=SLOTS),
        **training_mu.FIELDS,
        **training_stale.FIELDS,
    }


def _field(key: str) -> Any:
    """The field's value when valid, else its default (whatever the client sent)."""
    spec = field_specs()[key]
    value = st.session_state.get(key, spec.default)
    return value if spec.accepts(value) else spec.default


def link_beta() -> None:
    """Start the run's beta at a link's sidebar ``beta=x``: one knob, one name (call first).

    The sidebar's beta and the run's initial beta are the same coefficient, so a link that says
    ``beta=0.3`` trains at 0.3 (the dialect's own key is set from it by ``train_config``). The
    page's own ``tr_beta=`` (links shared before) is the more specific and wins; without either
    the run starts at the field's default, 0. Only while the control has no value of its own:
    once drawn it holds what the student set.
    """
    if KEY_TRAIN_BETA in st.session_state or KEY_TRAIN_BETA in st.query_params:
        return
    raw = url.link_value(KEY_BETA)  # the link's, even when equal to the sidebar's default
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return  # the sidebar's link notice names the refused value
    if value is not None and field_specs()[KEY_TRAIN_BETA].accepts(value):
        st.session_state[KEY_TRAIN_BETA] = value


def check_controls() -> None:
    """Put crafted or out-of-range values back to their defaults, with a notice (call first)."""
    notices = check_fields(field_specs())
    if notices:
        st.warning("\n".join(f"- {text.md_escape(m)}" for m in notices), icon=":material/info:")


def entropy_target_control(disabled: bool = False) -> None:
    """The adaptive entropy target's one knob (URL-bound; 0 = off)."""
    e1, _ = st.columns([1, 3])
    with e1:
        st.number_input(
            "entropy target (0 = off)",
            0.0,
            20.0,
            0.0,
            step=0.1,
            key=KEY_ENTROPY_TARGET,
            bind="query-params",
            disabled=disabled,
            format="%.2f",
            help="Adaptive entropy bonus (TRL PR #6140's rule, on any framework): the bonus "
            "loss -= c x entropy applies once a step's mean token entropy is at or below the "
            "target; c starts at 0 and moves by 0.005 a step, up while the entropy stays at or "
            "below the target, down above it. Its curve is drawn under the training curves.",
        )


def controls(disabled: bool = False) -> None:
    """The page's training controls (each bound to the URL; checked on the server first)."""
    check_controls()
    c1, c2, c3, c4 = st.columns(4)
    with c1:
        # whole numbers as float inputs: Streamlit's int input crashes on a crafted NaN
        st.number_input(
            "Steps N",
            1.0,
            float(CAP_STEPS),
            20.0,
            step=1.0,
            format="%.0f",
            key=KEY_STEPS,
            bind="query-params",
            disabled=disabled,
            help=f"Training steps (at most {CAP_STEPS} here).",
        )
        st.number_input(
            "Seed",
            0.0,
            10_000.0,
            0.0,
            step=1.0,
            format="%.0f",
            key=KEY_SEED,
            bind="query-params",
            disabled=disabled,
            help="Seeds the adapter and every step's sampling: the same seed gives the same run.",
        )
    with c2:
        st.select_slider(
            "LoRA learning rate",
            options=list(LR_CHOICES),
            value=5e-4,
            key=KEY_LR,
            bind="query-params",
            disabled=disabled,
            format_func=lambda v: f"{v:g}",
            help="Frameworks ship 1e-6 (full fine-tuning); LoRA needs 10-100x more. Around 1e-4 "
            "to 1e-3 the policy moves visibly within 30 steps (policy-update.md 2.3).",
        )
    with c3:
        st.segmented_control(
            "beta",
            ["fixed", "adaptive"],
            default="fixed",
            key=KEY_TRAIN_BETA_MODE,
            bind="query-params",
            required=True,
            disabled=disabled,
            help="Adaptive: the framework's controller (Ziegler et al.), beta <- beta * (1 + "
            "clip(KL / target - 1, -0.2, 0.2) * batch size / horizon), on each step's real KL.",
        )
        st.number_input(
            "initial beta",
            0.0,
            5.0,
            0.0,
            step=0.05,
            key=KEY_TRAIN_BETA,
            bind="query-params",
            disabled=disabled,
            format="%.3f",
            help="KL coefficient: in the token rewards (ROLL, verl, OpenRLHF) or the loss (TRL).",
        )
    with c4:
        st.number_input(
            "target KL",
            0.001,
            10.0,
            0.05,
            step=0.01,
            key=KEY_TARGET,
            bind="query-params",
            disabled=disabled,
            format="%.3f",
            help="Adaptive controller: KL it steers towards.",
        )
        st.number_input(
            "horizon",
            1.0,
            100_000.0,
            100.0,
            step=10.0,
            key=KEY_HORIZON,
            bind="query-params",
            disabled=disabled,
            help="Adaptive controller: frameworks ship 10000, with which beta moves by at most "
            "0.2 x batch / 10000 per step (invisible in 30 steps); 100 makes it visible.",
        )
    entropy_target_control(disabled)
