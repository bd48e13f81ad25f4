"""The app with the real bundled SmolLM2 on CPU: live sampling, steered policy, real KL.

Marked `slow` (it loads the real model) but part of `make test`: one prompt, G = 2, 8 tokens.
"""

import pytest

from roll_viz import ui
from tests.ui.test_chain_pages import chart, frame, open_page, zgrid


@pytest.mark.slow
def test_live_page_with_the_real_model():
    # The suite runs with ROLL_VIZ_MODEL=tiny; the sidebar's model picker selects the real one.
    at = open_page(
        "kl",
        model="smollm2",
        preset="pirate",
        live="true",
        G="2",
        T="8",
        prompts="What is the capital of France?",
        policy="steered",
    )
    assert at.selectbox(key=ui.KEY_MODEL).value == "smollm2"
    tokens = frame(at, "kl_tokens")
    assert 2 <= len(tokens) <= 16
    assert (tokens["exact_kl"] >= 0).all()
    assert (tokens["exact_kl"] > 0).any()  # the hidden instruction moves the policy
    k1 = chart(at, "kl_heatmap")["data"][0]
    assert any(v not in (None, 0.0) for row in zgrid(k1) for v in row)
