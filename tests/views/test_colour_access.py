"""The colour scales under the common colour-vision deficiencies, and the chips in greyscale.

Protanopia, deuteranopia and tritanopia are simulated with Machado, Oliveira & Fernandes (2009)
at full severity (a 3x3 matrix on linear sRGB); distances are CIE76 Delta E in CIELAB, where
about 10 reads as clearly different at a glance.

- The diverging scale (signed quantities): +v and -v stay apart by at least ``MIN_SIGN_DE`` for
  every deficiency at a quarter, half, three quarters and all of the range, so the sign never
  rests on red versus green alone.
- The sequential scales: lightness rises or falls monotonically under every simulation, so their
  order survives any deficiency and a greyscale print.
- Token and health chips: text against its background is at least 4.5:1 (WCAG AA) after both
  are turned to grey, across each chip scale's whole range.

Each check is also run on a scale or a colour rule known to fail it, so it can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from plotly.colors import sample_colorscale, unlabel_rgb

from roll_viz.views import compare_charts, scales
from roll_viz.views.chips import CHIP_VIEWS
from roll_viz.views.health import NEUTRAL, STATUS_COLOURS

MACHADO = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                   [0.004733, 0.691367, 0.303900]],
}  # fmt: skip
SRGB_TO_XYZ = np.array(
    [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
)
WHITE = np.array([0.95047, 1.0, 1.08883])  # D65
MIN_SIGN_DE = 20.0
DIVERGING = sorted({scales.SIGNED_SCALE, compare_charts.DIVERGING})
SEQUENTIAL = sorted(
    {scales.SEQUENTIAL_SCALE, scales.CHIP_SEQUENTIAL_SCALE, compare_charts.SEQUENTIAL}
    | {scale for _label, _field, scale, _range, _surprisal in CHIP_VIEWS.values()}
)
CHIP_SCALES = sorted({scales.SIGNED_SCALE} | {v[2] for v in CHIP_VIEWS.values()})


def linear(colour: str) -> np.ndarray:
    """'#rrggbb' or 'rgb(r, g, b)' -> linear sRGB in [0, 1]."""
    if colour.startswith("#"):
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], float)
    else:
        rgb = np.array(unlabel_rgb(colour), float)
    c = rgb / 255.0
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(lin: np.ndarray) -> np.ndarray:
    """Linear sRGB -> CIELAB (D65)."""
    t = SRGB_TO_XYZ @ np.clip(lin, 0.0, 1.0) / WHITE
    f = np.where(t > 216 / 24389, np.cbrt(t), (24389 / 27 * t + 16) / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def seen(colour: str, deficiency: str) -> np.ndarray:
    """CIELAB of ``colour`` as a viewer with ``deficiency`` sees it (Machado 2009)."""
    return lab(np.array(MACHADO[deficiency]) @ linear(colour))


def sign_distance(scale: str, deficiency: str, v: float) -> float:
    """Delta E between the colours of -v and +v (fractions of the half range)."""
    low, high = sample_colorscale(scale, [0.5 - v / 2, 0.5 + v / 2])
    return float(np.linalg.norm(seen(low, deficiency) - seen(high, deficiency)))


def lightness_is_monotonic(scale: str, deficiency: str, steps: int = 41) -> bool:
    """Whether L* strictly rises or strictly falls along the scale for this viewer."""
    colours = sample_colorscale(scale, list(np.linspace(0.0, 1.0, steps)))
    diffs = np.diff([seen(c, deficiency)[0] for c in colours])
    return bool((diffs > 0).all() or (diffs < 0).all())


def grey_contrast(fg: str, bg: str) -> float:
    """WCAG contrast of the two colours turned to grey (each to its relative luminance)."""
    weights = np.array([0.2126, 0.7152, 0.0722])
    lum = sorted((float(weights @ linear(fg)), float(weights @ linear(bg))))
    return (lum[1] + 0.05) / (lum[0] + 0.05)


def worst_chip_contrast(scale: str, text_for=scales.text_color, steps: int = 201) -> float:
    """The lowest greyscale text contrast of a chip anywhere on ``scale``."""
    backgrounds = sample_colorscale(scale, list(np.linspace(0.0, 1.0, steps)))
    return min(grey_contrast(text_for(bg), bg) for bg in backgrounds)


@pytest.mark.parametrize("deficiency", MACHADO)
@pytest.mark.parametrize("scale", DIVERGING)
def test_the_diverging_scale_keeps_its_sign_for_colour_blind_viewers(scale, deficiency):
    for v in (0.25, 0.5, 0.75, 1.0):
        assert sign_distance(scale, deficiency, v) >= MIN_SIGN_DE, (scale, deficiency, v)


def test_the_sign_check_catches_a_red_green_scale():
    assert sign_distance("RdYlGn", "deuteranopia", 0.25) < MIN_SIGN_DE
    assert sign_distance("RdYlGn", "protanopia", 0.5) < MIN_SIGN_DE


@pytest.mark.parametrize("deficiency", MACHADO)
@pytest.mark.parametrize("scale", SEQUENTIAL)
def test_sequential_scales_keep_their_order_for_colour_blind_viewers(scale, deficiency):
    assert lightness_is_monotonic(scale, deficiency), (scale, deficiency)


def test_the_order_check_catches_a_rainbow():
    assert not lightness_is_monotonic("Jet", "deuteranopia")


@pytest.mark.parametrize("scale", CHIP_SCALES)
def test_token_chips_are_readable_in_greyscale(scale):
    assert worst_chip_contrast(scale) >= 4.5, scale


def test_the_chip_check_catches_one_text_colour_for_every_chip():
    assert worst_chip_contrast(scales.SIGNED_SCALE, text_for=lambda _bg: "#000000") < 4.5


@pytest.mark.parametrize("status", [*STATUS_COLOURS, "neutral"])
def test_health_chips_are_readable_in_greyscale(status):
    bg, fg = STATUS_COLOURS.get(status, NEUTRAL)
    assert grey_contrast(fg, bg) >= 4.5, (status, fg, bg)
