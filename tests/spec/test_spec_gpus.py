"""Facts of the built-in GPU catalog that right-sizing and MIG packing rely on."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from grace.spec import BUILTIN_GPUS, GpuModel, MigProfile

REQUIRED = ["A100-80GB", "H100-SXM", "H200", "B200", "L40S", "MI300X"]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_model_is_present_with_positive_figures(name: str) -> None:
    gpu = BUILTIN_GPUS[name]
    assert gpu.name == name
    assert gpu.vram_gb > 0
    assert gpu.bf16_tflops > 0
    assert gpu.board_watts > 0
    assert gpu.usd_per_hour > 0


def test_datasheet_memory_sizes() -> None:
    vram = {n: BUILTIN_GPUS[n].vram_gb for n in REQUIRED}
    assert vram == {"A100-80GB": 80, "H100-SXM": 80, "H200": 141, "B200": 180, "L40S": 48,
                    "MI300X": 192}
    assert BUILTIN_GPUS["MI300X"].vendor == "amd"


def test_h100_mig_profiles_follow_the_mig_user_guide() -> None:
    h100 = BUILTIN_GPUS["H100-SXM"]
    assert h100.supports_mig
    assert [(p.name, p.max_per_gpu) for p in h100.mig_profiles] == [
        ("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1),
    ]
    assert h100.mig_profiles[-1].memory_gb == h100.vram_gb


def test_a100_variants_scale_their_profiles() -> None:
    assert [p.name for p in BUILTIN_GPUS["A100-80GB"].mig_profiles] == [
        "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert [p.name for p in BUILTIN_GPUS["A100-40GB"].mig_profiles] == [
        "1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]


@pytest.mark.parametrize("name", ["L40S", "MI300X", "V100-32GB", "P100", "T4", "A10"])
def test_models_without_mig(name: str) -> None:
    gpu = BUILTIN_GPUS[name]
    assert not gpu.supports_mig
    assert gpu.mig_profiles == ()
    assert gpu.smallest_mig_profile_for(1) is None


@pytest.mark.parametrize("name", ["A100-80GB", "A100-40GB", "H100-SXM", "H200", "B200"])
def test_mig_profiles_fit_the_gpu(name: str) -> None:
    gpu = BUILTIN_GPUS[name]
    assert len(gpu.mig_profiles) == 6
    for p in gpu.mig_profiles:
        assert p.memory_gb <= gpu.vram_gb
        assert p.compute_slices * p.max_per_gpu <= 7
        assert p.memory_slices * p.max_per_gpu <= 8
        assert gpu.mig_profile(p.name) is p


@pytest.mark.parametrize(
    ("vram_gb", "profile"),
    [(5, "1g.10gb"), (9, "1g.10gb"), (10, "1g.10gb"), (15, "1g.20gb"), (30, "3g.40gb"),
     (79, "7g.80gb"), (81, None)],
)
def test_smallest_mig_profile_for(vram_gb: float, profile: str | None) -> None:
    found = BUILTIN_GPUS["H100-SXM"].smallest_mig_profile_for(vram_gb)
    assert (found.name if found else None) == profile


def test_unknown_profile_name_is_none() -> None:
    assert BUILTIN_GPUS["H100-SXM"].mig_profile("9g.99gb") is None


def test_a_profile_larger_than_the_gpu_is_rejected() -> None:
    big = MigProfile(name="7g.96gb", compute_slices=7, memory_slices=8, memory_gb=96, max_per_gpu=1)
    with pytest.raises(ValidationError, match="lower the profile's memory_gb"):
        GpuModel(name="small", vram_gb=80, bf16_tflops=1, nvlink_gbps=0, board_watts=1,
                 usd_per_hour=1, mig_profiles=(big,))


def test_catalog_is_immutable() -> None:
    with pytest.raises(ValidationError):
        BUILTIN_GPUS["H100-SXM"].vram_gb = 1  # type: ignore[misc]
