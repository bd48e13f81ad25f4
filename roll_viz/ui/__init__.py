"""Layer 7, the Streamlit layer: the only package code that imports streamlit.

A page reads top to bottom: ``state = ui.page_setup("Title")`` (sidebar -> frozen AppState), then
``ui.cached_rollout(state)`` / ``ui.cached_trace(state)`` (the cached flow), then figures from
``roll_viz.views`` drawn with ``ui.plot``. The modules, in import order (each imports only those
above it):

    nav.py            the navigation (st.Page objects) from the page table roll_viz/nav.py
    resources.py      the shared model and the store of live samples
    state.py          widget keys, caps, AppState, the URL of a page
    url.py            the URL binding of the shared controls and its notices
    present.py        presentation mode (projector CSS, hidden controls)
    settings.py       generic widget values -> each dialect's config keys
    rollout_engine.py the rollout door's engine (``lm.rollout``) and its lines on the pages
    adapters.py       the adapted policies this session registered (Update, Training)
    run_source.py     an imported run's step as the data: allowed files, cached scan, one step
    flow.py           the cached data flow: rollout -> scores -> batch -> trace
    guard.py          the page-level catch-all (no traceback on a page)
    knobs.py          the algorithm section of the sidebar, from one table of knobs
    sidebar.py        the shared sidebar, page_setup and the router's frame
    widgets.py        plot, explainer, links, downloads, token chips
    figure_cache.py   plot_of: a figure cached by its inputs' content (no rebuild per run)
    episode_sources.py the Episodes page's episodes: recorded, live through the door, an ATIF file
    update_page.py, training_page.py, your_run_page.py   glue of the pages (no other ui
                      module imports a page's glue: flow and the sidebar read run_source);
                      training_page's parts: training_view (a run's status, buttons, curves,
                      recorded runs), training_steps, training_demos, training_mu, run_files

This file re-exports what pages call, so a page needs one import. May import every layer below;
must not import ``cli`` or ``bench``.
"""

# read-only dialect tables and the observed-KL readout, so pages need no import of the core
from roll_viz.core.pipeline import ALIASES, CHOICES
from roll_viz.core.pipeline.kl import observed_kl
from roll_viz.data.presets import PRESETS
from roll_viz.ui.figure_cache import plot_of
from roll_viz.ui.flow import (
    add_running_batch,
    cached_rollout,
    cached_scores,
    cached_trace,
    current_batch,
    ensure_model,
    follows_group,
    instant_payload,
    is_warm,
    kl_estimates,
    local_global_payload,
    preset_payload,
    preset_tokens,
    reset_running,
    running_batches,
    running_moments,
    try_trace,
    warm_up,
)
from roll_viz.ui.guard import page_guard
from roll_viz.ui.instant import (
    instant_estimators,
    instant_local_global,
    instant_panel,
    instant_reward_bars,
    instant_token_rewards,
)
from roll_viz.ui.instant.relay import page_detail, stale_section, steady_page
from roll_viz.ui.present import is_present
from roll_viz.ui.resources import cached_models, model_loaded, model_spec
from roll_viz.ui.run_source import stop_run, use_run_step
from roll_viz.ui.settings import (
    describe_terms,
    estimator_options,
    estimator_overrides,
    generic_value,
    kl_placement_overrides,
    norm_overrides,
)
from roll_viz.ui.sidebar import frame, go_live, page_setup, select_preset
from roll_viz.ui.state import (
    KEY_BETA,
    KEY_BETA_MODE,
    KEY_CHIP_VIEW,
    KEY_CLIP,
    KEY_CRITIC,
    KEY_ESTIMATOR,
    KEY_FAST,
    KEY_FRAMEWORK,
    KEY_G,
    KEY_GAMMA,
    KEY_HORIZON,
    KEY_KL_VIEW,
    KEY_LAM,
    KEY_LIVE,
    KEY_MODEL,
    KEY_NORM,
    KEY_POSITION,
    KEY_PRESET,
    KEY_PROMPTS,
    KEY_REWARD,
    KEY_SAMPLE,
    KEY_STEPS,
    KEY_TARGET_KL,
    PRESET_REWARD,
    AppState,
    framework_label,
    framework_names,
)
from roll_viz.ui.table_fit import table
from roll_viz.ui.widgets import (
    accept_index_url,
    back_next,
    beta_note,
    chips,
    critic_radio,
    download_csv,
    download_trace_json,
    explainer,
    first_moving_token,
    folded,
    lecture_title,
    page_link,
    plot,
    prose,
    reset_reward_table,
    reward_table_base,
    share_reward_table,
    stop_page,
    trace_json,
    widget_default,
    zero_kl_notice,
)

__all__ = [
    "ALIASES",
    "CHOICES",
    "KEY_BETA",
    "KEY_BETA_MODE",
    "KEY_CHIP_VIEW",
    "KEY_CLIP",
    "KEY_CRITIC",
    "KEY_ESTIMATOR",
    "KEY_FAST",
    "KEY_FRAMEWORK",
    "KEY_G",
    "KEY_GAMMA",
    "KEY_HORIZON",
    "KEY_KL_VIEW",
    "KEY_LAM",
    "KEY_LIVE",
    "KEY_MODEL",
    "KEY_NORM",
    "KEY_POSITION",
    "KEY_PRESET",
    "KEY_PROMPTS",
    "KEY_REWARD",
    "KEY_SAMPLE",
    "KEY_STEPS",
    "KEY_TARGET_KL",
    "PRESETS",
    "PRESET_REWARD",
    "AppState",
    "accept_index_url",
    "add_running_batch",
    "back_next",
    "beta_note",
    "cached_models",
    "cached_rollout",
    "cached_scores",
    "cached_trace",
    "chips",
    "critic_radio",
    "current_batch",
    "describe_terms",
    "download_csv",
    "download_trace_json",
    "ensure_model",
    "estimator_options",
    "estimator_overrides",
    "explainer",
    "first_moving_token",
    "folded",
    "follows_group",
    "frame",
    "framework_label",
    "framework_names",
    "generic_value",
    "go_live",
    "instant_estimators",
    "instant_local_global",
    "instant_panel",
    "instant_payload",
    "instant_reward_bars",
    "instant_token_rewards",
    "is_present",
    "is_warm",
    "kl_estimates",
    "kl_placement_overrides",
    "lecture_title",
    "local_global_payload",
    "model_loaded",
    "model_spec",
    "norm_overrides",
    "observed_kl",
    "page_detail",
    "page_guard",
    "page_link",
    "page_setup",
    "plot",
    "plot_of",
    "preset_payload",
    "preset_tokens",
    "prose",
    "reset_reward_table",
    "reset_running",
    "reward_table_base",
    "running_batches",
    "running_moments",
    "select_preset",
    "share_reward_table",
    "stale_section",
    "steady_page",
    "stop_page",
    "stop_run",
    "table",
    "trace_json",
    "try_trace",
    "use_run_step",
    "warm_up",
    "widget_default",
    "zero_kl_notice",
]
