"""Right-sizing: how much VRAM a job needs, and which GPU models fit it.

The estimate follows the standard accounting for mixed-precision training
(Rajbhandari et al., "ZeRO", SC'20, section 3.1): per parameter, weights and
gradients in the training precision, plus for Adam an fp32 master copy,
momentum and variance (12 bytes), i.e. 16 bytes per parameter with bf16.
Tensor and pipeline parallelism divide all model state; ZeRO stage 1 shards
the optimizer state over data-parallel ranks, stage 2 also gradients, stage 3
(FSDP full sharding) also weights. On top come the activations the job
declares, a 20% allowance for allocator fragmentation and temporary buffers,
and 2 GB for the CUDA context and communication buffers.

The figure is an estimate for choosing hardware, not a guarantee; a job that
knows better sets ``min_vram_gb``.
"""

from __future__ import annotations

from grace.spec.gpus import GpuModel
from grace.spec.job import JobSpec, ModelSizeSpec, Optimizer, Precision

_BYTES = {Precision.FP32: 4, Precision.BF16: 2, Precision.FP16: 2, Precision.FP8: 1}
#: bytes per parameter of optimizer state (fp32 master copy included when mixed precision)
_OPTIMIZER_BYTES = {Optimizer.ADAM: 8, Optimizer.ADAMW: 8, Optimizer.SGD: 4,
                    Optimizer.ADAFACTOR: 0.5, Optimizer.NONE: 0}
FRAGMENTATION_ALLOWANCE = 1.2
CONTEXT_GB = 2.0
LORA_TRAINABLE_SHARE = 0.01


def estimate_vram_gb(model: ModelSizeSpec) -> float:
    """VRAM per GPU, in GB, for training ``model`` with its parallelism."""
    p = model.params_b * 1e9
    weight_b = _BYTES[model.precision]
    grad_b = 0 if model.optimizer is Optimizer.NONE else max(weight_b, 2)
    opt_b = _OPTIMIZER_BYTES[model.optimizer]
    if model.optimizer is not Optimizer.NONE and model.precision is not Precision.FP32:
        opt_b += 4  # fp32 master weights
    par = model.parallelism
    model_shards = par.tensor * par.pipeline
    dp = par.data
    trainable = LORA_TRAINABLE_SHARE if model.lora else 1.0
    weights = p * weight_b / model_shards
    grads = p * trainable * grad_b / model_shards
    optim = p * trainable * opt_b / model_shards
    if par.zero_stage >= 1:
        optim /= dp
    if par.zero_stage >= 2:
        grads /= dp
    if par.zero_stage >= 3:
        weights /= dp
    state_gb = (weights + grads + optim) / 1e9
    return state_gb * FRAGMENTATION_ALLOWANCE + model.activation_gb + CONTEXT_GB


def vram_need_gb(job: JobSpec) -> float | None:
    """The job's VRAM need per GPU: explicit minimum, else the estimate, else unknown."""
    if job.min_vram_gb is not None:
        return job.min_vram_gb
    if job.model is not None:
        return estimate_vram_gb(job.model)
    return None


def fitting_models(job: JobSpec, available: dict[str, GpuModel]) -> list[str]:
    """GPU models this job may run on, cheapest first (the right-sizing order).

    A named ``gpu_model`` is the only choice. Otherwise every available model
    with enough VRAM qualifies, ordered by reference price, so a 7B fine-tune
    lands on an L40S or A100 and leaves the H100s to the jobs that need them.
    """
    if job.gpu_model is not None:
        return [job.gpu_model] if job.gpu_model in available else []
    need = vram_need_gb(job)
    fits = [m for m in available.values() if need is None or m.vram_gb >= need]
    fits.sort(key=lambda m: (m.usd_per_hour, m.name))
    return [m.name for m in fits]
