"""AppTest of the Token KL page's fourth placement: the KL as a centred advantage adjustment."""

from __future__ import annotations

from tests.ui.apptest import open_page


def _samples(at):
    return next(d.value for d in at.dataframe if "adjustment sum" in d.value.columns)


def test_pirate_moves_advantage_between_tokens_and_adds_none():
    at = open_page("kl", preset="pirate", beta="0.3")
    assert not at.exception
    keys = {c.key for c in at.get("plotly_chart")}
    assert "kl_centred_heatmap" in keys
    samples = _samples(at)
    assert abs(float(samples["adjustment sum"].sum())) < 1e-9  # zero-mean over the batch
    assert float(samples["adjustment sum"].abs().max()) > 1e-3  # but not zero per sample
    # samples that drifted more than the batch lose advantage on average
    mean = (samples["mean KL x"] * samples["tokens"]).sum() / samples["tokens"].sum()
    drifted = samples[samples["mean KL x"] > mean]
    assert (drifted["mean A after"] < drifted["mean A before"]).all()


def test_identical_policy_adjusts_nothing():
    at = open_page("kl", preset="quantum")
    samples = _samples(at)
    assert (samples["adjustment sum"].abs() < 1e-12).all()
    assert (samples["mean A after"] == samples["mean A before"]).all()
