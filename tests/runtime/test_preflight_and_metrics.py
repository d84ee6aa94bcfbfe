"""The runtime's metric reports (rt.report_metric, rank 0, in heartbeat records), the control
plane's metrics file, and preflight mode: a real model in one process, real checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import grace.runtime as gr  # noqa: E402
from grace.control import sweep_metrics  # noqa: E402
from grace.runtime import checkpoint as ckpt  # noqa: E402
from grace.runtime.config import RuntimeEnv  # noqa: E402
from grace.runtime.preflight import (  # noqa: E402
    PREFLIGHT_FAILED_EXIT_CODE,
    PREFLIGHT_STEPS_ENV,
    PreflightFailed,
    PreflightPassed,
    loss_problem,
    steps_from_env,
)

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def env_for(workdir: Path) -> RuntimeEnv:
    return RuntimeEnv(job_id=None, attempt=1, node="test", rank=0, world_size=1, local_rank=0,
                      workdir=workdir, checkpoint_dir=workdir / "checkpoints", interval_s=None,
                      url=None)


def regression(workdir: Path, lr: float) -> tuple[gr.Runtime, torch.nn.Module,
                                                    torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    rt = gr.init(model, opt, env=env_for(workdir), handle_sigterm=False,
                 heartbeat_record_s=0.0, heartbeat_flush_s=0.05)
    return rt, model, opt


def train(rt: gr.Runtime, model: torch.nn.Module, opt: torch.optim.Optimizer,
          steps: int) -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    for _ in range(steps):
        x = torch.randn(32, 4, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), x @ w.T)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rt.step_done(loss=loss)
        rt.report_metric("val_loss", loss.item() / 2)


def records(workdir: Path) -> list[dict]:
    path = workdir / "attempt-1" / "heartbeats-rank0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_reported_metrics_ride_in_heartbeats_once_each(tmp_path: Path) -> None:
    rt, model, opt = regression(tmp_path, 0.05)
    rt.resume()
    train(rt, model, opt, 12)
    rt.report_metric("accuracy", float("nan"))  # dropped: not finite
    rt.report_metric("accuracy", 0.9, step=12)  # after the last step: carried at finish
    rt.finish()
    recs = records(tmp_path)
    points = [p for r in recs for p in r.get("metrics", {}).get("val_loss", [])]
    assert [p[0] for p in points] == list(range(1, 13))  # every step, none twice
    assert [p for r in recs for p in r.get("metrics", {}).get("accuracy", [])] == [[12, 0.9]]
    # what the control plane keeps: loss at each record's step, and the reported series
    merged = sweep_metrics.merge({}, recs)
    assert [s for s, _ in merged["val_loss"]] == list(range(1, 13))
    assert merged["loss"] and merged["accuracy"] == [[12, 0.9]]
    sweep_metrics.record(tmp_path, recs)
    assert sweep_metrics.read(tmp_path)["accuracy"] == [(12, 0.9)]


def test_the_metrics_file_stays_bounded() -> None:
    many = [{"step": i, "loss": 1.0 / (i + 1)} for i in range(3000)]
    merged = sweep_metrics.merge({}, many)
    assert len(merged["loss"]) <= sweep_metrics.MAX_POINTS
    assert merged["loss"][-1] == [2999, 1.0 / 3000]  # the newest kept whole
    names = [{"step": 1, "metrics": {f"m{i}": [[1, 1.0]]}} for i in range(20)]
    assert len(sweep_metrics.merge({}, names)) == 8


def test_loss_checks() -> None:
    falling = [1.0 / (1 + i) for i in range(20)]
    assert loss_problem(falling) is None
    wobble = [1.0 + (0.1 if i % 2 else -0.1) for i in range(20)]
    problem = loss_problem(wobble)
    assert problem is not None and "did not fall" in problem
    assert "no loss" in (loss_problem([1.0, None, 0.5, 0.2]) or "")
    assert "not finite" in (loss_problem([1.0, float("nan"), 0.5, 0.2]) or "")
    assert "at least 4" in (loss_problem([1.0, 0.5]) or "")
    assert steps_from_env({PREFLIGHT_STEPS_ENV: "50"}) == 50
    assert steps_from_env({}) is None and steps_from_env({PREFLIGHT_STEPS_ENV: "x"}) is None


def test_a_preflight_that_learns_saves_resumes_and_passes(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFLIGHT_STEPS_ENV, "10")
    rt, model, opt = regression(tmp_path, 0.05)
    rt.resume()
    with pytest.raises(PreflightPassed) as e:
        train(rt, model, opt, 50)  # the runtime ends it at step 10
    assert e.value.code == 0 and rt.step == 10
    assert [s for s, _ in ckpt.committed(tmp_path / "checkpoints")] == [10]
    report = json.loads((tmp_path / "attempt-1" / "preflight.json").read_text())
    assert report == {"step": 10, "passed": True, "reason": None}


def test_a_preflight_whose_loss_does_not_fall_fails(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PREFLIGHT_STEPS_ENV, "12")
    rt, model, opt = regression(tmp_path, 0.0)  # lr 0: nothing is learned
    rt.resume()
    with pytest.raises(PreflightFailed) as e:
        train(rt, model, opt, 50)
    assert e.value.code == PREFLIGHT_FAILED_EXIT_CODE
    assert "did not fall" in e.value.reason
    report = json.loads((tmp_path / "attempt-1" / "preflight.json").read_text())
    assert report["passed"] is False and "did not fall" in report["reason"]
