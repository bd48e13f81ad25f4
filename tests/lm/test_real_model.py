"""One short smoke test on the real bundled SmolLM2 (GGUF -> cached safetensors), on CPU."""

import pytest

from roll_viz.lm.models import load_models
from roll_viz.lm.request import SamplingConfig
from roll_viz.lm.sampling import sample


@pytest.mark.slow
def test_bundled_model_samples():
    bundle = load_models("smollm2", device="cpu", dtype="float32")
    assert bundle.source in {"gguf-convert", "gguf-cache"}
    assert bundle.eos_ids == (2,)
    cfg = SamplingConfig(
        prompts=("Explain quantum entanglement in one sentence.",),
        group_size=2,
        max_new_tokens=8,
        seed=0,
        greedy=False,
    )
    r = sample(bundle, cfg)
    assert r.token_ids.shape[0] == 2
    assert r.token_ids.shape[1] <= 8
    assert all(isinstance(text, str) and text for text in r.responses)
    valid = r.response_mask.bool()
    assert (r.logprobs[valid] < 0).all()
    assert (r.exact_kl == 0).all()
