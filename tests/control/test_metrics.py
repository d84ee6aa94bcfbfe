"""/metrics, /alerts and /jobs/N/why over a real store, reconciler and API (a scripted backend).

The figures are parsed back with prometheus-client's own parser, so what is asserted
is what Prometheus would read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import FakeClock, lab_reconciler, make_token
from prometheus_client.parser import text_string_to_metric_families

from grace.backends.base import AttemptStatus
from grace.control.api import create_app
from grace.control.live.context import job_dirs
from grace.control.reconciler import Reconciler
from grace.control.store import tokens
from grace.control.store.db import Store
from grace.observe.gpu import GpuTelemetry
from grace.observe.hub import Observability


class FakeNvml:
    """NVML's call shapes (pynvml) for two GPUs; GPU 1 has GPM (SM activity), GPU 0 does not."""

    def __init__(self, gpus: int = 2) -> None:
        self.gpus = gpus
        self.samples = 0

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-{h:08d}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=[15, 97][h % 2], memory=30)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=10 * 2**30, free=70 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 312_500  # mW

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 61

    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        return SimpleNamespace(isSupportedDevice=h == 1)

    def nvmlGpmSampleAlloc(self) -> dict[str, int]:
        return {}

    def nvmlGpmSampleGet(self, h: int, sample: dict[str, int]) -> dict[str, int]:
        self.samples += 1
        sample["n"] = self.samples
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        pass

    def c_nvmlGpmMetricsGet_t(self) -> Any:
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None,
                               metrics=[SimpleNamespace(metricId=0, value=0.0)])

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        request.metrics[0].value = 42.0  # percent of SMs busy between the two samples
        return request


@dataclass
class Plane:
    client: TestClient
    store: Store
    rec: Reconciler
    obs: Observability
    clock: FakeClock
    state: Path
    admin: dict[str, str]

    def metrics(self, headers: dict[str, str] | None = None) -> dict[str, list[Any]]:
        r = self.client.get("/metrics", headers=headers or self.admin)
        assert r.status_code == 200, r.text
        out: dict[str, list[Any]] = {}
        for fam in text_string_to_metric_families(r.text):
            for sample in fam.samples:  # by sample name: a histogram's _count, _bucket ...
                out.setdefault(sample.name, []).append(sample)
        return out

    def submit(self, **body: Any) -> int:
        r = self.client.post("/jobs", json={"command": ["python", "train.py"], **body},
                             headers=self.admin)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def beat(self, job: int, records: list[dict[str, Any]], rank: int = 0, attempt: int = 1,
             node: str = "a100-00") -> None:
        with self.store.transaction() as s:
            token = tokens.job_token(s, job, attempt)
        job_dirs(self.store, self.state).attempt(job, attempt).mkdir(parents=True, exist_ok=True)
        r = self.client.post(f"/jobs/{job}/heartbeats", headers={"Authorization": f"Bearer {token}"},
                             json={"attempt": attempt, "rank": rank, "node": node, "records": records})
        assert r.status_code == 204, r.text


def value(samples: list[Any], **labels: str) -> float:
    found = [s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{labels}: {found} in {samples[:5]}"
    return float(found[0])


def record(step: int, at: float, step_s: float = 1.0, steps: int = 10, **phases: float) -> dict[str, Any]:
    return {"step": step, "loss": 2.0, "tokens_per_s": 100.0, "step_s": step_s, "steps": steps,
            "phases": phases, "at": at}


@pytest.fixture
def plane(store: Store, tmp_path: Path) -> Plane:
    clock = FakeClock()
    state = tmp_path / "state"
    rec = lab_reconciler(store, state, clock)
    topo = rec.topo
    obs = Observability(store, topo, state, clock, refresh_s=0.0,
                        gpus=GpuTelemetry(lambda: FakeNvml(), hostname="a100-00"))
    rec.on_cycle = obs.metrics.cycle_seconds.observe
    app = create_app(store, topo, state, rec, rec.backend, clock=clock, observability=obs)
    admin = {"Authorization": f"Bearer {make_token(store, 'admin')}"}
    return Plane(TestClient(app), store, rec, obs, clock, state, admin)


def test_gpus_jobs_and_pending_reasons_add_up_to_the_cluster(plane: Plane) -> None:
    ddp = plane.submit(name="ddp", tenant="a", nodes=2, gpus_per_node=4)
    big = plane.submit(name="big", tenant="b", gpus=8, gpus_per_node=4, nodes=2)
    plane.rec.cycle()
    m = plane.metrics()
    gpus = m["grace_gpus"]
    assert sum(s.value for s in gpus) == 12  # lab.yaml: 2 x 4 A100 + 1 x 4 L40S
    assert sum(s.value for s in gpus if s.labels["state"] == "allocated") == 8
    assert {s.labels["leaf"] for s in gpus} and all(s.labels["pool"] == "lab" for s in gpus)
    assert value(m["grace_jobs"], state="running", tenant="a") == 1
    assert value(m["grace_pending_jobs"], tenant="b", reason="waiting-for-capacity") == 1
    assert value(m["grace_job_gpus"], job=str(ddp), tenant="a") == 8
    assert value(m["grace_job_leaves"], job=str(ddp)) >= 1
    assert all(s.labels["job"] != str(big) for s in m["grace_job_gpus"])
    assert value(m["grace_tenant_gpus_held"], tenant="a") == 8
    assert value(m["grace_reconcile_cycle_seconds_count"]) == 1
    allocated = [s for s in m["grace_gpu_allocation"] if s.labels["job"] == str(ddp)]
    assert len(allocated) == 8 and {s.labels["tenant"] for s in allocated} == {"a"}


def test_phase_seconds_rise_with_heartbeats_and_shares_say_where_a_step_goes(plane: Plane) -> None:
    job = plane.submit(name="ddp", tenant="a", gpus=4)
    plane.rec.cycle()
    now = plane.clock.now
    plane.beat(job, [record(10, now, data=0.5, forward=0.2, allreduce=0.2)])
    m = plane.metrics()
    assert value(m["grace_job_phase_seconds_total"], job=str(job), phase="allreduce") == pytest.approx(2.0)
    assert value(m["grace_job_wait_share"], job=str(job), kind="io") == pytest.approx(0.5)
    assert value(m["grace_job_wait_share"], job=str(job), kind="sync") == pytest.approx(0.2)
    assert value(m["grace_job_phase_share"], job=str(job), phase="forward") == pytest.approx(0.2)
    assert value(m["grace_job_steps_per_second"], job=str(job)) == pytest.approx(1.0)
    plane.clock.advance(20)
    plane.beat(job, [record(20, now + 20, data=0.5, forward=0.2, allreduce=0.2)])
    m = plane.metrics()
    assert value(m["grace_job_phase_seconds_total"], job=str(job), phase="allreduce") == pytest.approx(4.0)
    # 20 steps of 1 s, each 0.3 s productive (1 - data 0.5 - allreduce 0.2), over 20 s of wall time
    assert value(m["grace_job_goodput_ratio"], job=str(job)) == pytest.approx(6.0 / 20.0)
    assert value(m["grace_job_heartbeat_age_seconds"], job=str(job)) == pytest.approx(0.0)


def test_checkpoint_saves_reported_in_heartbeats_fill_the_histograms(plane: Plane) -> None:
    job = plane.submit(name="ckpt", tenant="a", gpus=1)
    plane.rec.cycle()
    beat = record(5, plane.clock.now) | {"checkpoints": [{"step": 5, "seconds": 3.2, "bytes": 5 * 2**20}]}
    plane.beat(job, [beat])
    plane.beat(job, [record(5, plane.clock.now)], rank=1)  # another rank's record carries none
    m = plane.metrics()
    assert value(m["grace_checkpoint_save_seconds_count"]) == 1
    assert value(m["grace_checkpoint_save_seconds_bucket"], le="5.0") == 1
    assert value(m["grace_checkpoint_save_seconds_bucket"], le="2.5") == 0
    assert value(m["grace_checkpoint_size_bytes_sum"]) == 5 * 2**20


def test_a_drained_node_and_a_restart_are_counted(plane: Plane) -> None:
    job = plane.submit(name="one", tenant="a", gpus=4, gpu_model="A100-80GB")
    plane.rec.cycle()
    plane.clock.advance(900)  # a failure in its first seconds is the job's own: not retried
    plane.rec.backend.finish(job, AttemptStatus.FAILED)
    plane.rec.cycle()
    plane.rec.cycle()
    r = plane.client.post("/nodes/l40s-00/drain", json={"reason": "fan"}, headers=plane.admin)
    assert r.status_code == 200, r.text
    plane.rec.cycle()
    m = plane.metrics()
    assert sum(s.value for s in m["grace_restarts_total"]) == 1
    assert value(m["grace_node_state"], node="l40s-00") == 1
    assert [s.labels["state"] for s in m["grace_node_state"] if s.labels["node"] == "l40s-00"] == ["drained"]
    assert sum(s.value for s in m["grace_gpus"] if s.labels["state"] == "drained") == 4
    assert value(m["grace_api_request_duration_seconds_count"], method="POST",
                 route="/nodes/{name}/drain", code="200") == 1
    alerts = plane.client.get("/alerts", headers=plane.admin).json()
    drained = [a for a in alerts if a["rule"] == "NodeDrained"]
    assert drained and drained[0]["labels"]["node"] == "l40s-00" and drained[0]["state"] == "firing"
    assert drained[0]["action"]


def test_nvml_telemetry_is_named_as_dcgm_names_it_and_joined_to_the_holder(plane: Plane) -> None:
    job = plane.submit(name="mine", tenant="a", gpus=4, gpu_model="A100-80GB")
    plane.rec.cycle()
    holder = plane.client.get(f"/jobs/{job}", headers=plane.admin).json()["attempts"][0]["nodes"]
    m = plane.metrics()
    m = plane.metrics()  # GPM gives SM activity from the second sample on
    assert value(m["grace_gpu_telemetry_devices"]) == 2
    util = {s.labels["gpu"]: s for s in m["DCGM_FI_DEV_GPU_UTIL"]}
    assert util["1"].value == 97 and util["1"].labels["modelName"] == "NVIDIA A100-SXM4-80GB"
    if holder[0]["node"] == "a100-00":
        assert util["0"].labels["job"] == str(job) and util["0"].labels["tenant"] == "a"
    assert value(m["DCGM_FI_DEV_FB_USED"], gpu="0") == 10 * 1024
    assert value(m["DCGM_FI_DEV_POWER_USAGE"], gpu="0") == pytest.approx(312.5)
    assert value(m["DCGM_FI_PROF_SM_ACTIVE"], gpu="1") == pytest.approx(0.42)
    assert not [s for s in m.get("DCGM_FI_PROF_SM_ACTIVE", []) if s.labels["gpu"] == "0"]


def test_without_nvml_the_seam_reports_no_gpus() -> None:
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    seam = GpuTelemetry(missing, hostname="h")
    assert seam.sample() == [] and "pynvml" in seam.why_none

    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    seam = GpuTelemetry(lambda: NoDriver(), hostname="h")
    assert seam.sample() == [] and "did not start" in seam.why_none


def test_a_tenants_token_reads_its_own_series_only(plane: Plane) -> None:
    a = plane.submit(name="a-secret-run", tenant="a", gpus=4)
    b = plane.submit(name="b-run", tenant="b", gpus=4)
    plane.rec.cycle()
    plane.beat(a, [record(1, plane.clock.now, data=0.1)])
    member_b = {"Authorization": f"Bearer {make_token(plane.store, 'member', 'b')}"}
    m = plane.metrics(member_b)
    jobs = {s.labels.get("job") for fam in m.values() for s in fam if "job" in s.labels}
    assert str(a) not in jobs and str(b) in jobs
    assert {s.labels["tenant"] for s in m["grace_jobs"]} == {"b"}
    assert sum(s.value for s in m["grace_gpus"]) == 12  # the cluster itself is not a secret
    assert plane.client.get(f"/jobs/{a}/why", headers=member_b).status_code == 404


def test_why_names_the_pending_reason_and_the_running_bottleneck(plane: Plane) -> None:
    run = plane.submit(name="run", tenant="a", nodes=2, gpus_per_node=4)
    wait = plane.submit(name="wait", tenant="b", nodes=2, gpus_per_node=4)
    plane.rec.cycle()
    pending = plane.client.get(f"/jobs/{wait}/why", headers=plane.admin).json()
    assert pending["kind"] == "pending" and pending["reason"] == "waiting-for-capacity"
    assert "GPUs" in pending["action"] and pending["figures"]["free_gpus_by_model"]["L40S"] == 4
    no_beat = plane.client.get(f"/jobs/{run}/why", headers=plane.admin).json()
    assert no_beat["reason"] == "no-heartbeats-yet"
    plane.beat(run, [record(10, plane.clock.now, data=0.6, forward=0.2)])
    running = plane.client.get(f"/jobs/{run}/why", headers=plane.admin).json()
    assert running["reason"] == "input-bound" and running["rule"] == "DataWaitHigh"
    assert "NVMe" in running["action"] or "storage" in running["action"]
    plane.beat(run, [record(20, plane.clock.now, data=0.01, forward=0.5, backward=0.4)])
    assert plane.client.get(f"/jobs/{run}/why", headers=plane.admin).json()["reason"] == "compute-bound"

