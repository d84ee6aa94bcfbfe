"""Live constraint verdicts through a real store, reconciler and API (a scripted backend):
``GET /jobs/N`` gains ``constraint``, ``grace job`` prints it in one line, /metrics gains
``grace_job_constraint`` and ``grace_cluster_constraint_gpus``, showback splits waits."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import test_metrics
from helpers import served
from rich.console import Console
from test_metrics import Plane, record, value

from grace.cli import client
from grace.core.constraint import Constraint

#: test_metrics' world: a real store, reconciler (scripted backend) and API on the lab cluster
plane = test_metrics.plane


def constraint(p: Plane, job: int) -> dict:
    r = p.client.get(f"/jobs/{job}", headers=p.admin)
    assert r.status_code == 200, r.text
    body = r.json()
    assert {"attempts", "events", "progress", "spec"} <= set(body)  # the old keys stay
    return body["constraint"]


def test_a_job_waiting_on_batches_is_named_input_bound_in_the_job_view(plane: Plane) -> None:
    job = plane.submit(name="slow-reader", tenant="a", gpus=4, gpu_model="A100-80GB")
    waiting = plane.submit(name="waits", tenant="a", nodes=2, gpus_per_node=4,
                           gpu_model="A100-80GB")  # 4 A100s left of 8: it waits
    plane.rec.cycle()
    assert constraint(plane, job)["kind"] == "unknown"  # running, no heartbeat yet
    assert constraint(plane, waiting) is None  # no live attempt: no verdict
    plane.beat(job, [record(10, plane.clock.now, step_s=0.5, data=0.31, forward=0.1,
                            backward=0.05)])
    c = constraint(plane, job)
    assert c["kind"] == "input" and c["share"] == pytest.approx(0.62)
    assert c["label"] == "input-bound (storage read)" and c["detail"] == "data 62% of step"
    assert c["shares"]["data"] == pytest.approx(0.62)
    # the batches come in time again: the next heartbeat window changes the verdict
    plane.beat(job, [record(20, plane.clock.now, step_s=0.5, data=0.01, forward=0.2,
                            backward=0.25)])
    assert constraint(plane, job)["kind"] == "compute"


def test_metrics_name_each_jobs_constraint_and_the_clusters_gpus_per_constraint(
        plane: Plane) -> None:
    slow = plane.submit(name="slow", tenant="a", gpus=4, gpu_model="A100-80GB")
    busy = plane.submit(name="busy", tenant="b", gpus=4, gpu_model="A100-80GB")
    quiet = plane.submit(name="quiet", tenant="b", gpus=2, gpu_model="L40S")
    plane.rec.cycle()
    plane.beat(slow, [record(5, plane.clock.now, data=0.7, forward=0.2)])
    plane.beat(busy, [record(5, plane.clock.now, data=0.05, forward=0.3, backward=0.6)])
    m = plane.metrics()
    assert value(m["grace_job_constraint"], job=str(slow), constraint="input") == 1
    assert value(m["grace_job_constraint"], job=str(busy), constraint="compute") == 1
    assert value(m["grace_job_constraint"], job=str(quiet), constraint="unknown") == 1
    assert {s.labels["constraint"] for s in m["grace_job_constraint"]} <= {str(c) for c in Constraint}
    gpus = {s.labels["constraint"]: s.value for s in m["grace_cluster_constraint_gpus"]}
    assert set(gpus) == {str(c) for c in Constraint}  # the closed set, zeros included
    assert gpus["input"] == 4 and gpus["compute"] == 4 and gpus["unknown"] == 2
    assert sum(gpus.values()) == sum(s.value for s in m["grace_job_gpus"])


def test_grace_job_prints_the_verdict_in_one_line_of_80_columns(
        plane: Plane, monkeypatch: pytest.MonkeyPatch) -> None:
    job = plane.submit(name="slow-reader", tenant="a", gpus=4)
    plane.rec.cycle()
    plane.beat(job, [record(10, plane.clock.now, step_s=0.5, data=0.31, forward=0.1)])
    out = io.StringIO()
    monkeypatch.setattr(client, "console", Console(file=out, width=80, force_terminal=False))
    monkeypatch.setenv("GRACE_TOKEN", plane.admin["Authorization"].removeprefix("Bearer "))
    with served(plane.client.app) as url:
        monkeypatch.setenv("GRACE_URL", url)
        client.job(job, as_json=False, clear_exclusions=False)
    lines = out.getvalue().splitlines()
    assert "constraint  input-bound (storage read): data 62% of step" in lines
    assert max(len(line) for line in lines) <= 80


def test_the_constraint_line_is_cut_to_the_width_and_quiet_without_a_verdict() -> None:
    long = {"kind": "communication-placement", "label": "communication-bound (placement)",
            "detail": "comm 55% of step; cluster, fits leaf, and much more to say"}
    line = client.constraint_line(long, 60)
    assert line is not None and len(line) == 60 and line.endswith("...")
    assert client.constraint_line(None) is None
    unknown = {"kind": "unknown", "label": "unknown (no phase data yet)", "detail": "x"}
    assert client.constraint_line(unknown) == "constraint  unknown (no phase data yet)"


def test_showback_splits_waiting_into_io_and_sync_per_tenant(plane: Plane, tmp_path: Path) -> None:
    job = plane.submit(name="reader", tenant="a", gpus=4)
    plane.rec.cycle()
    plane.beat(job, [record(10, plane.clock.now, data=0.3, allreduce=0.1, sync=0.1)])
    plane.clock.advance(3600)
    r = plane.client.get("/showback", headers=plane.admin)
    assert r.status_code == 200, r.text
    a = r.json()["tenants"]["a"]
    assert a["io_wait_share"] == pytest.approx(0.3) and a["sync_wait_share"] == pytest.approx(0.2)
    assert a["data_sync_gpu_hours"] == pytest.approx(a["io_wait_gpu_hours"] + a["sync_wait_gpu_hours"])
