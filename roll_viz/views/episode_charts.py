"""The Episodes page's pictures: a transcript's token chips, its mask, advantages and credit.

The transcript is drawn as token chips by role and turn, a mask over it or per-token
advantages on it; the credit rules are compared turn by turn.

Functions take plain sequences (one value per token of the transcript, in order) and an
``Episode``; no Streamlit and no math beyond colours and formatting. Model and tool text is
untrusted: every token is HTML-escaped and its whitespace made visible (``chips`` does the same).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import plotly.graph_objects as go

from roll_viz.core.agentic.episode import Episode
from roll_viz.views.chips import colorbar_html
from roll_viz.views.compare_charts import OKABE_ITO
from roll_viz.views.scales import FONT, SIGNED_SCALE, scale_colors, text_color, title_style
from roll_viz.views.text import visible_whitespace

#: chip colours of the mask view (Okabe-Ito: safe for colour-blind readers), with their text
TRAINED = "#0072B2"  # white text, contrast 5.1
CONTEXT = "#EEEEEE"  # black text
WRONGLY_TRAINED = "#E69F00"  # black text: a token the mistake trains and the right mask does not
DIFFERS = "#D55E00"  # outline of a position where the re-encoded history differs
ROLE_NAMES = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def segment_label(role: str, turn: int) -> str:
    """The heading of a segment's row: "assistant, turn 1" (turns counted from 1), "prompt"."""
    if turn < 0:
        return f"{ROLE_NAMES[role]} (prompt)"
    return f"{ROLE_NAMES[role]}, turn {turn + 1}"


def _chip(piece: str, tip: str, style: str, wrap: bool = False) -> str:
    """One token (or, ``wrap``, one whole segment's text: wrapped, whitespace kept) as a chip."""
    shown = html.escape(piece if wrap else visible_whitespace(piece))
    space = (
        "white-space:pre-wrap;display:inline;" if wrap else "white-space:pre;display:inline-block;"
    )
    return (
        f'<span title="{html.escape(tip[:300], quote=True)}" tabindex="0" style="{style}'
        f'padding:1px 3px;margin:1px;border-radius:4px;{space}">{shown}</span>'
    )


def _mask_style(trained: bool, right: bool, differs: bool) -> tuple[str, str]:
    """(css, words) of one token of the mask view."""
    ring = f"outline:3px solid {DIFFERS};outline-offset:1px;" if differs else ""
    if trained and right:
        return f"background:{TRAINED};color:#ffffff;{ring}", "trained"
    if trained:
        return (
            f"background:{WRONGLY_TRAINED};color:#000000;text-decoration:underline wavy;{ring}",
            "trained by the mistake (context, not sampled)",
        )
    if right:
        return (
            f"background:#ffffff;color:#000000;border:2px dashed {TRAINED};"
            f"text-decoration:line-through;{ring}",
            "sampled but left out by the mistake",
        )
    return f"background:{CONTEXT};color:#000000;{ring}", "context (no gradient)"


def _rows(episode: Episode) -> list[tuple[int, int, str]]:
    """(start, end, label) of each segment's tokens in the transcript."""
    out, start = [], 0
    for seg in episode.segments:
        end = start + len(seg.token_ids)
        out.append((start, end, segment_label(seg.role, seg.turn)))
        start = end
    return out


def _frame(rows: list[str]) -> str:
    return (
        f'<div class="rv-chips rv-transcript" style="line-height:1.9;font-family:{FONT};'
        'font-size:0.92em">' + "".join(rows) + "</div>"
    )


def _row(label: str, chips: list[str]) -> str:
    return (
        '<div style="margin:2px 0 6px 0"><span style="font-family:sans-serif;font-weight:600;'
        f'font-size:0.85em;margin-right:6px">{html.escape(label)}:</span>'
        + "".join(chips)
        + "</div>"
    )


def mask_html(
    episode: Episode,
    pieces: Sequence[str],
    trained: Sequence[float],
    right: Sequence[float] | None = None,
    differs: Sequence[int] = (),
    wrap: bool = False,
) -> str:
    """The transcript as token chips, one row per segment, the loss mask over it.

    Args:
        episode: the episode (its segments give the rows' roles and turns).
        pieces: one display string per token of the transcript (untrusted: escaped here).
        trained: the mask being shown, one 0/1 per token.
        right: the right mask (sampled assistant tokens only); tokens where the two differ are
            drawn as the mistake's (orange = trained by mistake, dashed = dropped). None = same.
        differs: positions to outline (the re-encoded history differs from the sampled tokens).
        wrap: each position is a whole segment's text (a file without token ids): wrap it.

    Returns:
        Escaped HTML (a ``div`` of rows of ``span`` chips) for ``st.html``.
    """
    n = len(pieces)
    if len(trained) != n or (right is not None and len(right) != n):
        raise ValueError(f"{n} tokens but a mask of {len(trained)}")
    right = trained if right is None else right
    marked = set(differs)
    rows = []
    for start, end, label in _rows(episode):
        chips = []
        for i in range(start, min(end, n)):
            css, words = _mask_style(trained[i] > 0, right[i] > 0, i in marked)
            note = "; re-encoded token differs" if i in marked else ""
            tip = f"{pieces[i]!r}  position {i}, {label}: {words}{note}"
            chips.append(_chip(pieces[i], tip, css, wrap))
        rows.append(_row(label, chips))
    return _frame(rows)


def advantage_html(
    episode: Episode,
    pieces: Sequence[str],
    advantages: Sequence[float],
    trained: Sequence[float],
    vmax: float,
    wrap: bool = False,
) -> str:
    """The transcript's tokens coloured by a per-token advantage (diverging, 0 = white).

    Tokens outside the mask have no advantage: they are grey with "no gradient" on hover,
    never white (which would read as an advantage of 0).

    Args:
        episode: the episode.
        pieces: one display string per token (escaped here).
        advantages: one advantage per token (ignored where ``trained`` is 0).
        trained: the loss mask.
        vmax: the fixed symmetric colour range [-vmax, vmax] (the legend says it).
        wrap: each position is a whole segment's text: wrap it.
    """
    n = len(pieces)
    colours = scale_colors([float(a) for a in advantages], -vmax, vmax, SIGNED_SCALE)
    rows = []
    for start, end, label in _rows(episode):
        chips = []
        for i in range(start, min(end, n)):
            if trained[i] > 0:
                bg = colours[i]
                css = f"background:{bg};color:{text_color(bg)};"
                tip = f"{pieces[i]!r}  position {i}, {label}: A = {float(advantages[i]):.4f}"
            else:
                css = f"background:{CONTEXT};color:#595959;"
                tip = f"{pieces[i]!r}  position {i}, {label}: no gradient (masked)"
            chips.append(_chip(pieces[i], tip, css, wrap))
        rows.append(_row(label, chips))
    return _frame(rows)


def delta_html(
    episode: Episode,
    pieces: Sequence[str],
    delta: Sequence[float],
    grad_coef: Sequence[float],
    trained: Sequence[float],
    vmax: float,
    wrap: bool = False,
) -> str:
    """The transcript's tokens coloured by delta log pi after one update step (0 = white).

    Every token has a delta (context moves too: the weights are shared); trained tokens carry a
    thick underline, so a context token's colour reads as "moved by context only". The hover
    text gives delta log pi and the gradient coefficient dL/dlog pi (0 off the mask).

    Args:
        episode: the episode.
        pieces: one display string per token (escaped here).
        delta: log pi after - before, one per token (position 0: no log-prob).
        grad_coef: dL/dlog pi per token.
        trained: the loss mask of the step.
        vmax: the symmetric colour range [-vmax, vmax] (the legend says it).
        wrap: each position is a whole segment's text: wrap it.
    """
    n = len(pieces)
    if not len(delta) == len(grad_coef) == len(trained) == n:
        raise ValueError(f"{n} tokens but {len(delta)} deltas")
    colours = scale_colors([float(d) for d in delta], -vmax, vmax, SIGNED_SCALE)
    rows = []
    for start, end, label in _rows(episode):
        chips = []
        for i in range(start, min(end, n)):
            bg = colours[i]
            mark = (
                f"text-decoration:underline;text-decoration-thickness:3px;"
                f"text-decoration-color:{TRAINED};"
                if trained[i] > 0
                else ""
            )
            words = "trained" if trained[i] > 0 else "context (no gradient)"
            tip = (
                f"{pieces[i]!r}  position {i}, {label}: {words}; delta log pi = "
                f"{float(delta[i]):+.4g}, dL/dlog pi = {float(grad_coef[i]):.4g}"
            )
            chips.append(
                _chip(pieces[i], tip, f"background:{bg};color:{text_color(bg)};{mark}", wrap)
            )
        rows.append(_row(label, chips))
    return _frame(rows)


def delta_legend_html(vmax: float) -> str:
    """The delta chips' legend: the diverging scale's range, and the trained tokens' underline."""
    mark = (
        f'<span style="text-decoration:underline;text-decoration-thickness:3px;'
        f'text-decoration-color:{TRAINED};margin-left:10px">trained token</span>'
    )
    bar = colorbar_html(SIGNED_SCALE, -vmax, vmax, "delta log pi (red < 0 < blue):")
    return bar.replace("</div>", mark + "</div>", 1)


def mask_legend_html(with_mistake: bool, with_differs: bool = False) -> str:
    """The mask view's legend: each chip style with its words (colour is never the only cue)."""
    items = [
        (f"background:{TRAINED};color:#ffffff;", "trained (sampled assistant token)"),
        (f"background:{CONTEXT};color:#000000;", "context: no gradient"),
    ]
    if with_mistake:
        items += [
            (
                f"background:{WRONGLY_TRAINED};color:#000000;text-decoration:underline wavy;",
                "trained by the mistake",
            ),
            (
                f"background:#ffffff;color:#000000;border:2px dashed {TRAINED};"
                "text-decoration:line-through;",
                "dropped by the mistake",
            ),
        ]
    if with_differs:
        items.append(
            (f"background:{CONTEXT};color:#000000;outline:3px solid {DIFFERS};", "differs")
        )
    spans = "".join(
        f'<span style="{css}padding:1px 6px;border-radius:4px;margin-right:10px;'
        f'display:inline-block">{html.escape(words)}</span>'
        for css, words in items
    )
    return f'<div style="font-size:0.85em;margin:4px 0 8px 0">{spans}</div>'


def advantage_legend_html(vmax: float) -> str:
    """The advantage chips' legend: the diverging scale's true range, and grey = no gradient."""
    grey = (
        f'<span style="background:{CONTEXT};color:#595959;padding:1px 6px;border-radius:4px;'
        'margin-left:10px">no gradient (masked)</span>'
    )
    bar = colorbar_html(
        SIGNED_SCALE, -vmax, vmax, "advantage A (red < 0 < blue; clipped at the ends):"
    )
    return bar.replace("</div>", grey + "</div>", 1)


def credit_figure(
    rules: Sequence[str], turn_advantages: Sequence[Sequence[float]], title: str
) -> go.Figure:
    """Each rule's advantage per agent turn of one episode, as grouped bars (numbers on hover).

    Args:
        rules: the rules' names (one trace each).
        turn_advantages: per rule, one advantage per agent turn.
        title: the figure's title.
    """
    fig = go.Figure()
    for k, (rule, values) in enumerate(zip(rules, turn_advantages, strict=True)):
        turns = [f"turn {t + 1}" for t in range(len(values))]
        fig.add_trace(
            go.Bar(
                x=turns,
                y=list(values),
                name=rule,
                marker={"color": OKABE_ITO[k % len(OKABE_ITO)]},
                hovertemplate=f"{html.escape(rule)}<br>%{{x}}: A = %{{y:.4f}}<extra></extra>",
            )
        )
    fig.add_hline(y=0, line={"color": "#333333", "width": 1})
    fig.update_layout(
        barmode="group",
        title=title_style(title),
        yaxis_title="advantage of the turn's tokens",
        legend={"orientation": "h"},
        height=380,
        margin={"l": 60, "r": 20, "t": 60, "b": 40},
    )
    return fig


def bias_figure(turns: Sequence[int], biased: Sequence[float], fair: Sequence[float]) -> go.Figure:
    """The bias of verl #7244: the mean advantage of an episode by the turn it stops at.

    Args:
        turns: the stopping turns n on the x axis.
        biased: E[A_0 | stop at n] of per-turn-index baselines (their number depends on n).
        fair: E[G - E G | stop at n], the unbiased advantage of the whole episode.
    """
    fig = go.Figure()
    for name, ys, colour, dash in (
        ("per-turn-index baselines, summed (verl #7244)", biased, OKABE_ITO[5], "solid"),
        ("unbiased: G - E[G]", fair, OKABE_ITO[0], "dash"),
    ):
        fig.add_trace(
            go.Scatter(
                x=list(turns),
                y=[v if math.isfinite(v) else None for v in ys],
                mode="lines+markers+text",
                name=name,
                line={"color": colour, "dash": dash},
                text=[f"{v:+.3f}" if math.isfinite(v) else "" for v in ys],
                textposition="top center",
                hovertemplate="stops after %{x} turns: mean A = %{y:.4f}<extra></extra>",
            )
        )
    fig.update_layout(
        title=title_style("Expected first-turn advantage by the number of turns taken"),
        xaxis={"title": "turns taken", "dtick": 1},
        yaxis_title="mean advantage of its tokens",
        legend={"orientation": "h"},
        height=360,
        margin={"l": 60, "r": 20, "t": 60, "b": 40},
    )
    return fig
