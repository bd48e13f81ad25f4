"""Text as the pages show it: visible whitespace, sample labels, numbers formatted for formulas."""

from __future__ import annotations

import math

from roll_viz.core.records import Rollout

#: Display of whitespace inside tokens.
WHITESPACE = {" ": "\u00b7", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}


# ---------------------------------------------------------------------------------------------
# Small utilities
# ---------------------------------------------------------------------------------------------
def visible_whitespace(token: str) -> str:
    """A token with spaces, newlines and tabs shown as visible marks (middle dot, return arrow).

    Args:
        token: the raw display string of one token.

    Returns:
        The same text with whitespace replaced; an empty token becomes the empty-set sign.
    """
    if token == "":
        return "\u2205"
    return "".join(WHITESPACE.get(ch, ch) for ch in token)


def sample_labels(rollout: Rollout) -> list[str]:
    """One label per row b: "p<prompt>/s<sample within group>" (e.g. "p0/s2").

    Args:
        rollout: the batch.

    Returns:
        (B,) labels, in row order.
    """
    out: list[str] = []
    seen: dict[int, int] = {}
    for gid in rollout.group_ids.tolist():
        g = seen.get(gid, 0)
        seen[gid] = g + 1
        out.append(f"p{gid}/s{g}")
    return out


def fmt(x: float, digits: int = 3) -> str:
    """A number for formulas: fixed decimals, scientific below 1e-3, "NaN"/"inf" spelled out."""
    x = float(x)
    if math.isnan(x):
        return r"\mathrm{NaN}"
    if math.isinf(x):
        return r"\infty" if x > 0 else r"-\infty"
    if x != 0 and abs(x) < 10 ** (-digits):
        mantissa, exponent = f"{x:.0e}".split("e")
        return (
            f"{mantissa}\\cdot 10^{{{int(exponent)}}}"
            if mantissa not in {"1", "-1"}
            else (f"{'-' if mantissa == '-1' else ''}10^{{{int(exponent)}}}")
        )
    text = f"{x:.{digits}f}"
    return "0" if text in {f"{0:.{digits}f}", f"-{0:.{digits}f}"} else text


def term(x: float, digits: int = 3) -> str:
    """``fmt`` with parentheses around negative numbers (for use after an operator)."""
    text = fmt(x, digits)
    return f"({text})" if text.startswith("-") else text
