"""Text as the pages show it: visible whitespace, sample labels, numbers formatted for formulas."""

from __future__ import annotations

import math
import re
import unicodedata

from roll_viz.core.records import Rollout

#: Display of whitespace inside tokens.
WHITESPACE = {" ": "\u00b7", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}


# ---------------------------------------------------------------------------------------------
# User and model text, shown exactly as typed
# ---------------------------------------------------------------------------------------------
#: Every character Markdown, LaTeX ($), HTML or Streamlit's directives (:red[...], :material/x:,
#: :emoji:) give a meaning to. A backslash before each shows it literally.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|$<>~:=^-])")


def visible_controls(text: object) -> str:
    """Text with control and separator characters made visible (e.g. U+2028 as <U+2028>).

    Newlines and tabs are kept; every other character of Unicode category C* or Z(l|p)
    (NUL, BEL, U+0085, U+2028, U+2029, zero-width and bidi controls) is shown as its code
    point, so nothing a user typed is invisible or reorders the text around it.
    """
    out = []
    for ch in str(text):
        if ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in {"Zl", "Zp"}:
            out.append(f"<U+{ord(ch):04X}>")
        else:
            out.append(ch)
    return "".join(out)


def md_escape(text: object) -> str:
    """Text for a Markdown renderer (st.markdown, captions, labels), shown literally.

    No emphasis, links, images, LaTeX, HTML or Streamlit directives survive; control
    characters are made visible. Use it for every prompt, response, table cell or message
    that came from a user or the model.

    Args:
        text: anything; converted with ``str``.

    Returns:
        The escaped text.
    """
    return _MD_SPECIAL.sub(r"\\\1", visible_controls(text))


def md_line(text: object, limit: int = 90) -> str:
    """``md_escape`` on one line: newlines shown as a return mark, cut at ``limit`` characters."""
    flat = str(text).replace("\r\n", "\n").replace("\n", " \u21b5 ")
    if len(flat) > limit:
        flat = flat[:limit] + "\u2026"
    return md_escape(flat)


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


def count(n: int, noun: str, plural: str | None = None) -> str:
    """A number with its noun in the right number: "1 prompt", "3 prompts"."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"
