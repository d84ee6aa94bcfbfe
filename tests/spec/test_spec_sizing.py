"""VRAM estimation and right-sizing on worked examples.

Accounting (ZeRO paper, sec. 3.1): bf16 weights 2 B + bf16 grads 2 B + AdamW
momentum/variance 8 B + fp32 master weights 4 B = 16 B per parameter. A 7B model
then holds 112 GB of state; with the 20% allowance and 2 GB of context that is
112 * 1.2 + 2 = 136.4 GB per GPU.
"""

from __future__ import annotations

import pytest

from grace.core.sizing import estimate_vram_gb, fitting_models, vram_need_gb
from grace.spec import BUILTIN_GPUS, JobSpec, ModelSizeSpec


def _model(**fields: object) -> ModelSizeSpec:
    return ModelSizeSpec.model_validate({"params_b": 7, "precision": "bf16", "optimizer": "adamw",
                                         **fields})


def _vram(**fields: object) -> float:
    return estimate_vram_gb(_model(**fields))


def test_7b_bf16_adamw_unsharded() -> None:
    assert _vram() == pytest.approx(112 * 1.2 + 2)  # 136.4


def test_zero3_divides_all_state_by_data_parallel_ranks() -> None:
    assert _vram(parallelism={"data": 8, "zero_stage": 3}) == pytest.approx(112 / 8 * 1.2 + 2)


@pytest.mark.parametrize(
    ("stage", "state_gb"),
    [
        (0, 14 + 14 + 84),          # nothing sharded
        (1, 14 + 14 + 84 / 8),      # optimizer state sharded
        (2, 14 + 14 / 8 + 84 / 8),  # + gradients
        (3, 112 / 8),               # + weights (FSDP full sharding)
    ],
)
def test_zero_stages_shard_progressively(stage: int, state_gb: float) -> None:
    got = _vram(parallelism={"data": 8, "zero_stage": stage})
    assert got == pytest.approx(state_gb * 1.2 + 2)


def test_data_parallelism_alone_does_not_shard() -> None:
    assert _vram(parallelism={"data": 8}) == pytest.approx(_vram())


def test_tensor_and_pipeline_divide_the_state() -> None:
    assert _vram(parallelism={"tensor": 2, "pipeline": 2}) == pytest.approx(112 / 4 * 1.2 + 2)


def test_lora_is_much_smaller() -> None:
    # Frozen bf16 weights (14 GB) plus grads and AdamW state for 1% of the parameters.
    lora = _vram(lora=True)
    assert lora == pytest.approx((14 + 0.07 * 2 + 0.07 * 12) * 1.2 + 2)
    assert lora < _vram() / 6


def test_activations_are_added_as_declared() -> None:
    assert _vram(activation_gb=10) == pytest.approx(_vram() + 10)


def test_fp32_has_no_separate_master_copy() -> None:
    # fp32 weights 4 + grads 4 + Adam 8 = 16 B, the same total as bf16 mixed precision.
    assert _vram(precision="fp32") == pytest.approx(_vram())


def test_inference_holds_weights_only() -> None:
    assert _vram(optimizer="none") == pytest.approx(14 * 1.2 + 2)


def _job(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "gpus": 1, **fields})


def test_min_vram_overrides_the_estimate() -> None:
    job = _job(min_vram_gb=30, model={"params_b": 70})
    assert vram_need_gb(job) == 30
    assert vram_need_gb(_job()) is None
    assert vram_need_gb(_job(model={"params_b": 7})) == pytest.approx(136.4)


def _pick(*names: str) -> dict:
    return {n: BUILTIN_GPUS[n] for n in names}


def test_full_7b_needs_a_big_gpu_and_takes_the_cheapest() -> None:
    job = _job(model={"params_b": 7})
    nvidia = _pick("L40S", "A100-80GB", "H100-SXM", "H200", "B200")
    assert fitting_models(job, nvidia) == ["H200", "B200"]


def test_7b_lora_lands_on_the_cheapest_fitting_gpu() -> None:
    job = _job(model={"params_b": 7, "lora": True})
    lab = _pick("A100-80GB", "L40S")
    assert fitting_models(job, lab) == ["L40S", "A100-80GB"]


def test_fitting_models_orders_by_reference_price() -> None:
    job = _job(min_vram_gb=40)
    names = fitting_models(job, BUILTIN_GPUS)
    prices = [BUILTIN_GPUS[n].usd_per_hour for n in names]
    assert prices == sorted(prices)
    assert all(BUILTIN_GPUS[n].vram_gb >= 40 for n in names)
    assert "A100-40GB" in names and "L40S" in names and "A10" not in names


def test_a_named_model_is_the_only_choice() -> None:
    job = _job(gpu_model="H100-SXM", min_vram_gb=1)
    assert fitting_models(job, BUILTIN_GPUS) == ["H100-SXM"]
    assert fitting_models(job, _pick("A100-80GB")) == []


def test_a_job_too_big_for_any_gpu_fits_nothing() -> None:
    assert fitting_models(_job(model={"params_b": 70}), BUILTIN_GPUS) == []


def test_without_vram_information_every_model_fits() -> None:
    assert sorted(fitting_models(_job(), BUILTIN_GPUS)) == sorted(BUILTIN_GPUS)
