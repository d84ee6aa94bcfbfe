"""The built-in GPU catalog.

Right-sizing, the runtime model and the cost model all need the same few facts
about each GPU model, so they live in one table that users can extend (a
cluster file may add models under ``gpu_models``) but never have to retype.

Figures are vendors' public datasheet numbers: dense BF16 tensor TFLOP/s
(without sparsity), NVLink (or Infinity Fabric) bandwidth per GPU, board power
and the MIG profiles NVIDIA documents in its MIG user guide. ``usd_per_hour``
is a reference rental price used only to rank models from cheap to dear when
right-sizing; it comes from ``shared/pricing/proposed_defaults.csv``
(neocloud on-demand medians) where the GPU is listed there, and from the
public rate cards quoted beside each entry otherwise.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: MIG hardware partitions a GPU into 7 compute slices and 8 memory slices.
MIG_COMPUTE_SLICES = 7
MIG_MEMORY_SLICES = 8


class MigProfile(BaseModel):
    """One MIG instance shape: ``2g.20gb`` is 2 of 7 compute and 20 GB."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    compute_slices: int = Field(ge=1, le=MIG_COMPUTE_SLICES)
    memory_slices: int = Field(ge=1, le=MIG_MEMORY_SLICES)
    memory_gb: float = Field(gt=0)
    max_per_gpu: int = Field(ge=1, le=MIG_COMPUTE_SLICES)


class GpuModel(BaseModel):
    """What the scheduler and the cost model know about one GPU model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    vendor: str = "nvidia"
    vram_gb: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0, description="dense BF16 tensor TFLOP/s")
    nvlink_gbps: float = Field(
        ge=0, description="GPU-to-GPU bandwidth inside an NVLink domain, GB/s per GPU"
    )
    board_watts: float = Field(gt=0)
    usd_per_hour: float = Field(gt=0, description="reference price, only for ranking")
    mig_profiles: tuple[MigProfile, ...] = ()

    @model_validator(mode="after")
    def _profiles_fit(self) -> GpuModel:
        for p in self.mig_profiles:
            if p.memory_gb > self.vram_gb + 1e-9:
                raise ValueError(
                    f"MIG profile {p.name} has {p.memory_gb} GB but the GPU has {self.vram_gb} GB;"
                    " lower the profile's memory_gb"
                )
        return self

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)

    def smallest_mig_profile_for(self, vram_gb: float) -> MigProfile | None:
        """The cheapest slice (fewest compute slices, then memory) that holds ``vram_gb``."""
        fitting = [p for p in self.mig_profiles if p.memory_gb >= vram_gb]
        if not fitting:
            return None
        return min(fitting, key=lambda p: (p.compute_slices, p.memory_slices))

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)


def _mig_family(per_slice_gb: float, total_gb: float) -> tuple[MigProfile, ...]:
    """The six MIG profiles A100-80GB, H100, H200 and B200 share, scaled to memory.

    NVIDIA's MIG guide lists, for an 8-memory-slice GPU: 1g (1 mem slice, up to
    7), 1g with 2 mem slices (up to 4), 2g (2, up to 3), 3g (4, up to 2), 4g (4,
    up to 1), 7g (8, 1). Memory sizes are rounded the way NVIDIA names them.
    """
    shapes = [(1, 1, 7), (1, 2, 4), (2, 2, 3), (3, 4, 2), (4, 4, 1), (7, 8, 1)]
    out = []
    for compute, mem, max_n in shapes:
        gb = total_gb if mem == MIG_MEMORY_SLICES else math.floor(per_slice_gb * mem + 0.5)
        out.append(
            MigProfile(
                name=f"{compute}g.{int(gb)}gb",
                compute_slices=compute,
                memory_slices=mem,
                memory_gb=gb,
                max_per_gpu=max_n,
            )
        )
    return tuple(out)


BUILTIN_GPUS: dict[str, GpuModel] = {
    g.name: g
    for g in [
        # NVIDIA A100 80GB SXM datasheet: 312 TF BF16 dense, NVLink 600 GB/s, 400 W.
        GpuModel(name="A100-80GB", vram_gb=80, bf16_tflops=312, nvlink_gbps=600,
                 board_watts=400, usd_per_hour=1.79, mig_profiles=_mig_family(10, 80)),
        # A100 40GB: same compute, 5 GB memory slices.
        GpuModel(name="A100-40GB", vram_gb=40, bf16_tflops=312, nvlink_gbps=600,
                 board_watts=400, usd_per_hour=1.29, mig_profiles=_mig_family(5, 40)),
        # H100 SXM5 datasheet: 989 TF BF16 dense, NVLink 900 GB/s, 700 W.
        GpuModel(name="H100-SXM", vram_gb=80, bf16_tflops=989, nvlink_gbps=900,
                 board_watts=700, usd_per_hour=2.99, mig_profiles=_mig_family(10, 80)),
        # H200 SXM datasheet: 141 GB HBM3e, same Hopper compute, 700 W.
        GpuModel(name="H200", vram_gb=141, bf16_tflops=989, nvlink_gbps=900,
                 board_watts=700, usd_per_hour=3.75,
                 mig_profiles=_mig_family(141 / 8, 141)),
        # HGX B200: 180 GB, ~2.25 PF BF16 dense, NVLink 5 at 1.8 TB/s, 1000 W.
        GpuModel(name="B200", vram_gb=180, bf16_tflops=2250, nvlink_gbps=1800,
                 board_watts=1000, usd_per_hour=6.69,
                 mig_profiles=_mig_family(22.5, 180)),
        # L40S datasheet: 48 GB, 362 TF BF16 dense, PCIe only (64 GB/s), 350 W, no MIG.
        GpuModel(name="L40S", vram_gb=48, bf16_tflops=362, nvlink_gbps=64,
                 board_watts=350, usd_per_hour=0.86),
        # AMD MI300X: 192 GB HBM3, 1307 TF BF16 dense, Infinity Fabric 896 GB/s, 750 W.
        GpuModel(name="MI300X", vendor="amd", vram_gb=192, bf16_tflops=1307,
                 nvlink_gbps=896, board_watts=750, usd_per_hour=2.49),
        # Older models that appear in public traces (Philly, Alibaba PAI/openb).
        GpuModel(name="V100-32GB", vram_gb=32, bf16_tflops=125, nvlink_gbps=300,
                 board_watts=300, usd_per_hour=0.55),
        GpuModel(name="V100-16GB", vram_gb=16, bf16_tflops=125, nvlink_gbps=300,
                 board_watts=300, usd_per_hour=0.45),
        GpuModel(name="P100", vram_gb=16, bf16_tflops=21, nvlink_gbps=160,
                 board_watts=300, usd_per_hour=0.30),
        GpuModel(name="T4", vram_gb=16, bf16_tflops=65, nvlink_gbps=32,
                 board_watts=70, usd_per_hour=0.25),
        GpuModel(name="A10", vram_gb=24, bf16_tflops=125, nvlink_gbps=64,
                 board_watts=150, usd_per_hour=0.60),
    ]
}
