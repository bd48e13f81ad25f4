"""The group-health strip: one line of small chips a projector can read above any batch.

``health_chips_html(health)`` turns ``analysis.group_health.GroupHealth`` into escaped HTML:
the number of groups, all-good / all-bad / mixed counts (each a coloured chip), the share that
gives GRPO no signal, and the mean within-group std of the combined reward next to each reward
function's own (ms-swift#4570: a function can vary inside a group while the sum does not).
``component_stds`` gives those means as numbers (the tests and the chips read the same ones).
"""

from __future__ import annotations

import html
import math

from roll_viz.analysis.group_health import GroupHealth

#: chip colours (background, text) by group status; no-signal statuses share the warm tone
STATUS_COLOURS: dict[str, tuple[str, str]] = {
    "all-good": ("#d8efd9", "#14532d"),
    "all-bad": ("#f9dcdc", "#7f1d1d"),
    "flat": ("#f6ead0", "#713f12"),
    "mixed": ("#dbe8f7", "#1e3a8a"),
    "single": ("#ececec", "#333333"),
}
NEUTRAL = ("#f1f1f1", "#222222")
CSS_CLASS = "rv-health"


def _chip(label: str, colours: tuple[str, str], title: str = "", wrap: bool = False) -> str:
    bg, fg = colours
    tip = f" title='{html.escape(title, quote=True)}'" if title else ""
    space = "normal" if wrap else "nowrap"
    return (
        f"<span{tip} style='background:{bg};color:{fg};border-radius:0.6em;"
        f"padding:0.05em 0.55em;margin-right:0.3em;white-space:{space};"
        f"-webkit-box-decoration-break:clone;box-decoration-break:clone'>"
        f"{html.escape(label)}</span>"
    )


def component_stds(health: GroupHealth) -> dict[str, float]:
    """Mean within-group std of the combined reward ("reward") and of each reward function.

    Groups of one (no std) are left out; NaN when no group has two answers.
    """
    groups = health.groups
    out: dict[str, float] = {}
    columns = [("reward", "std")] + [(name, f"std {name}") for name in health.components]
    for name, column in columns:
        if not len(groups) or column not in groups:
            out[name] = float("nan")
            continue
        values = [float(v) for v in groups[column] if math.isfinite(float(v))]
        out[name] = sum(values) / len(values) if values else float("nan")
    return out


def _num(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.3g}"


def health_chips_html(health: GroupHealth) -> str:
    """One line of chips: counts per status, the no-signal share, and the std of each reward term.

    Args:
        health: ``group_health`` of a batch.

    Returns:
        An escaped HTML ``div`` (class ``rv-health``) safe for ``st.html``.
    """
    c = health.counts
    n = health.n_groups
    parts = [
        "<b style='margin-right:0.4em;white-space:nowrap'>"
        + html.escape(f"{n} group{'s' if n != 1 else ''}:")
        + "</b>"
    ]
    tips = {
        "all-good": "every answer of the prompt got the batch's best reward: A = 0 under GRPO",
        "all-bad": "every answer got the batch's worst reward: A = 0 under GRPO",
        "flat": "every answer got the same middle reward: A = 0 under GRPO",
        "mixed": "the answers differ: these groups carry the learning signal",
        "single": "a group of one: no group std",
    }
    for status in ("all-good", "all-bad", "flat", "mixed", "single"):
        if c[status] or status in ("all-good", "all-bad", "mixed"):
            parts.append(_chip(f"{c[status]} {status}", STATUS_COLOURS[status], tips[status]))
    if n:
        share = health.no_signal / n
        parts.append(
            _chip(
                f"{share:.0%} no signal",
                STATUS_COLOURS["flat"] if health.no_signal else NEUTRAL,
                "groups whose answers all scored the same: no policy gradient, yet their tokens "
                "may stay in the denominator and their KL term may still pull (TRL#7068)",
            )
        )
    if health.near_flat:
        parts.append(
            _chip(
                f"{health.near_flat} std <= {health.eps:g}",
                STATUS_COLOURS["flat"],
                "mixed groups a 'std <= eps' filter drops and an exact-equality filter keeps",
            )
        )
    stds = component_stds(health)
    if health.components:
        terms = " \u00b7 ".join(f"{name} {_num(v)}" for name, v in stds.items())
        parts.append(
            _chip(
                f"std: {terms}",
                NEUTRAL,
                "mean within-group std of the combined reward and of each reward function: a "
                "function may vary inside a group while the sum does not (ms-swift#4570)",
                wrap=True,
            )
        )
    elif n:
        parts.append(
            _chip(f"std {_num(stds['reward'])}", NEUTRAL, "mean within-group std of the reward")
        )
    return (
        f"<div class='{CSS_CLASS}' style='font-size:0.92rem;line-height:1.9;margin:0'>"
        + " ".join(parts)
        + "</div>"
    )
