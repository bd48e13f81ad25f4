"""Whether bf16 is native on this CPU, read from its feature flags."""

from pathlib import Path

from roll_viz.lm import cpu_features


def test_native_bf16_needs_avx512_bf16_or_amx():
    assert cpu_features.native_bf16(frozenset({"avx2", "fma"})) is False
    assert cpu_features.native_bf16(frozenset({"avx512f", "avx512_bf16"})) is True
    assert cpu_features.native_bf16(frozenset({"amx_bf16", "amx_tile"})) is True


def test_unreadable_flags_say_unknown_not_slow():
    assert cpu_features.native_bf16(frozenset()) is None


def test_this_machines_flags_are_read_once_and_agree_with_proc_cpuinfo():
    flags = cpu_features.cpu_flags()
    assert cpu_features.cpu_flags() is flags  # cached
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        assert flags == frozenset()
        return
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    assert flags == frozenset(line.split(":", 1)[1].split()) if line else flags == frozenset()


def test_bf16_is_slower_only_on_a_cpu_known_to_lack_it(monkeypatch):
    monkeypatch.setattr(cpu_features.torch.cuda, "is_available", lambda: False)
    for flags, slower in ((frozenset({"avx2"}), True), (frozenset({"amx_bf16"}), False)):
        monkeypatch.setattr(cpu_features, "cpu_flags", lambda f=flags: f)
        assert cpu_features.bf16_slower_than_float32() is slower
    monkeypatch.setattr(cpu_features, "cpu_flags", frozenset)  # unreadable: no claim
    assert cpu_features.bf16_slower_than_float32() is False
