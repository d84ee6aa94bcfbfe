"""What a restart, a move and a refused launch must not break (issue 12), on the scripted backend.

Each test names the failure it guards against: state that lived only in the
reconciler's memory, an exclusion that never healed, a launch error retried
forever, a breaker no operator could see.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ScriptedBackend, event_kinds
from test_reconciler import Rig

from grace.backends.base import AttemptStatus
from grace.control.reconciler import Reconciler
from grace.control.store.db import Store
from grace.control.store.models import EndCause, JobState
from grace.core.policies import get_policy

L40S = "L40S"


@pytest.fixture
def rig(store: Store, tmp_path: Path) -> Rig:
    return Rig(store, tmp_path / "state")


def restarted(rig: Rig, backend: ScriptedBackend | None = None) -> Reconciler:
    """A new control plane on the same store and state dir (the old one died)."""
    rig.backend = backend or ScriptedBackend(rig.spec)
    rig.rec = Reconciler(rig.store, rig.backend, rig.topo, get_policy("grace"), rig.state_dir,
                         clock=rig.clock)
    return rig.rec


# ---------------------------------------------------------------- launch errors
def test_a_launch_the_backend_refuses_fails_the_job_after_three_attempts(rig: Rig) -> None:
    jid = rig.submit("refused", gpus=1)
    rig.backend.refuse_launch.add(jid)
    for _ in range(6):
        rig.cycle()
    job = rig.job(jid)
    assert job.state is JobState.FAILED and job.launch_failures == 3
    assert job.reason.startswith("launch-error: backend refused job")
    assert [a.state.value for a in job.attempts] == ["failed"] * 3
    assert event_kinds(rig.store, jid).count("launch-failed") == 3
    detail = rig.api.get(f"/jobs/{jid}").json()
    assert detail["launch_failures"] == 3 and detail["reason"].startswith("launch-error:")


def test_a_launch_that_fails_once_is_retried_and_runs(rig: Rig) -> None:
    jid = rig.submit("flaky", gpus=1)
    rig.backend.refuse_launch.add(jid)
    rig.cycle()
    rig.backend.refuse_launch.clear()
    rig.cycle()
    assert rig.job(jid).state is JobState.RUNNING and rig.job(jid).launch_failures == 1


# ---------------------------------------------------------------- exclusions that heal
def test_drain_evict_then_resume_brings_back_a_job_that_fits_only_on_that_node(rig: Rig) -> None:
    jid = rig.submit("l40s-only", gpus=4, gpu_model=L40S)
    rig.cycle()
    assert rig.node_of(jid) == {"l40s-00"}
    r = rig.api.post("/nodes/l40s-00/drain", json={"reason": "swap fan", "evict": True,
                                                   "actor": "ops"})
    assert r.status_code == 200
    rig.cycle()  # the move is requested, the scripted gang exits at once, the job requeues
    rig.cycle()
    job = rig.job(jid)
    assert job.state is JobState.PENDING and job.restarts == 0  # a move, not a failure
    shown = rig.api.get(f"/jobs/{jid}").json()["excluded_nodes"]
    assert [(e["node"], e["reason"]) for e in shown] == [
        ("l40s-00", "planned drain of l40s-00: swap fan")]
    nodes = {n["name"]: n for n in rig.api.get("/nodes").json()}
    assert [e["job"] for e in nodes["l40s-00"]["excluded_nodes"]] == [jid]
    assert rig.node("l40s-00").state == "drained"
    r = rig.api.post("/nodes/l40s-00/resume", params={"actor": "ops"})
    assert r.status_code == 200 and r.json()["state"] == "returned"
    assert rig.api.get(f"/jobs/{jid}").json()["excluded_nodes"] == []
    rig.cycle()
    assert rig.job(jid).state is JobState.RUNNING and rig.node_of(jid) == {"l40s-00"}
    rig.backend.finish(jid)
    rig.cycle()
    assert rig.job(jid).state is JobState.COMPLETED
    assert "exclusions-cleared" in event_kinds(rig.store, jid)


def test_an_operator_clears_a_jobs_exclusions(rig: Rig) -> None:
    jid = rig.submit("l40s-only", gpus=4, gpu_model=L40S)
    rig.cycle()
    rig.api.post("/nodes/l40s-00/drain", json={"reason": "check", "evict": True})
    rig.cycle()
    rig.cycle()
    r = rig.api.post(f"/jobs/{jid}/clear-exclusions", params={"actor": "ops"})
    assert r.status_code == 200 and r.json() == {"job": jid, "cleared": ["l40s-00"]}
    assert rig.api.get(f"/jobs/{jid}").json()["excluded_nodes"] == []


def test_an_exclusion_expires(rig: Rig) -> None:
    jid = rig.submit("l40s-only", gpus=4, gpu_model=L40S)
    rig.cycle()
    rig.api.post("/nodes/l40s-00/drain", json={"reason": "check", "evict": True})
    rig.cycle()
    rig.cycle()
    rig.api.post("/nodes/l40s-00/resume")  # back, but then excluded again by hand below
    with rig.store.transaction() as s:
        from grace.control.store import exclusions
        from grace.control.store import repository as repo

        exclusions.exclude(repo.require_job(s, jid), "l40s-00", "slow", "straggler",
                           rig.clock(), ttl_s=600)
    rig.cycle()
    assert rig.job(jid).state is JobState.PENDING
    rig.cycle(advance=601)
    assert rig.job(jid).state is JobState.RUNNING


# ---------------------------------------------------------------- nothing only in memory
def test_a_signal_posted_before_a_restart_is_handled_after_it(rig: Rig) -> None:
    jid = rig.submit("victim", gpus=4, gpu_model=L40S)
    rig.cycle()
    r = rig.api.post("/nodes/l40s-00/signals", json={"kind": "xid", "code": 79})
    assert r.status_code == 202
    restarted(rig, ScriptedBackend(rig.spec))
    rig.rec.recover()  # adopts the running attempt
    rig.cycle()
    assert rig.node("l40s-00").state in ("draining", "drained", "diagnosing")
    job = rig.job(jid)
    assert job.attempts[0].failure_kind == "node" and job.state is JobState.PENDING


def test_a_move_requested_before_a_restart_is_still_a_move_after_it(rig: Rig) -> None:
    rig.backend.slow_cancel = True  # the gang takes its time to checkpoint and exit
    jid = rig.submit("moving", gpus=4, gpu_model=L40S)
    rig.cycle()
    rig.api.post("/nodes/l40s-00/drain", json={"reason": "planned", "evict": True})
    rig.cycle()
    assert rig.job(jid).attempts[0].end_cause is EndCause.DRAIN
    backend = ScriptedBackend(rig.spec)
    restarted(rig, backend)
    rig.rec.recover()
    assert (jid, 1) in backend.cancels  # the end was asked again
    rig.cycle()
    job = rig.job(jid)
    assert job.state is JobState.PENDING and job.restarts == 0
    assert "moved" in event_kinds(rig.store, jid)


def test_a_cycle_does_not_wait_for_a_slow_exit(rig: Rig) -> None:
    rig.backend.slow_cancel = True
    mover = rig.submit("mover", gpus=4, gpu_model=L40S)
    rig.cycle()
    rig.api.post("/nodes/l40s-00/drain", json={"reason": "planned", "evict": True})
    rig.cycle()
    other = rig.submit("other", gpus=1, gpu_model="A100-80GB")
    report = rig.cycle()
    assert other in report.started  # placed in the very next cycle
    assert rig.job(mover).state is JobState.RUNNING  # its gang still exiting
    rig.backend.end_cancelled()
    rig.cycle()
    assert rig.job(mover).state is JobState.PENDING


# ---------------------------------------------------------------- the breaker, visible
def test_a_tripped_breaker_is_shown_and_a_person_resets_it(rig: Rig) -> None:
    # lab has 3 nodes: max(1, 20% of 3) = 1 automatic drain per 10 minutes
    for node in ("a100-00", "a100-01"):
        rig.api.post(f"/nodes/{node}/signals", json={"kind": "xid", "code": 79})
        rig.cycle()
    assert rig.node("a100-00").state in ("drained", "diagnosing")
    assert rig.node("a100-01").state == "degraded"  # held back by the open breaker
    page = rig.api.get("/health/breaker").json()
    assert page["open"] is True and "automatic draining stopped" in page["message"]
    assert all(n["breaker_open"] for n in rig.api.get("/nodes").json())
    assert rig.api.post("/health/breaker/reset", params={"actor": "ops"}).status_code == 200
    assert rig.api.get("/health/breaker").json() == {"open": False}
    rig.api.post("/nodes/l40s-00/signals", json={"kind": "xid", "code": 79})
    rig.cycle(advance=700)
    assert rig.node("l40s-00").state in ("drained", "diagnosing")


def test_a_node_grace_drained_returns_after_its_diagnostics(rig: Rig) -> None:
    rig.api.post("/nodes/l40s-00/signals", json={"kind": "xid", "code": 48})
    rig.cycle()
    assert rig.node("l40s-00").state == "diagnosing"
    rig.cycle(advance=130)  # level 2 passed: level 3 starts
    assert rig.node("l40s-00").diagnostic_level == 3
    rig.cycle(advance=910)
    assert rig.node("l40s-00").state == "returned"
    with rig.store.read() as s:
        from grace.control.store import repository as repo

        moves = [e.to_state.value for e in repo.node_events(s, "l40s-00")]
    assert moves == ["draining", "drained", "diagnosing", "returned"]


def test_a_finished_attempt_reported_lost_after_a_restart_is_not_a_failure_of_the_job(
        rig: Rig) -> None:
    jid = rig.submit("done", gpus=1)
    rig.cycle()
    rig.backend.finish(jid, AttemptStatus.SUCCEEDED)
    rig.cycle()
    assert rig.job(jid).state is JobState.COMPLETED


# ---------------------------------------------------------------- crash mid-launch
def test_an_attempt_whose_processes_survive_reap_holds_its_gpus_until_they_are_gone(
        rig: Rig) -> None:
    jid = rig.submit("cut-short", gpus=4, gpu_model=L40S)
    rig.backend.crash_on_launch.add(jid)
    from helpers import SimulatedCrash

    with pytest.raises(SimulatedCrash):
        rig.cycle()  # died after the attempt was recorded, before any handle
    backend = ScriptedBackend(rig.spec)
    backend.orphans[(jid, 1)] = 3  # processes no handle points to
    backend.reap_fails.add(jid)
    restarted(rig, backend)
    assert rig.rec.recover() == []
    other = rig.submit("wants-the-node", gpus=4, gpu_model=L40S)
    rig.cycle()
    assert rig.job(jid).attempts[0].is_live and rig.job(jid).state is JobState.RUNNING
    assert rig.job(other).state is JobState.PENDING  # the GPUs are still held
    backend.reap_fails.clear()
    report = rig.cycle()
    assert jid in report.requeued and backend.orphans == {}
    assert rig.job(jid).attempts[0].state.value == "lost"
    assert len(backend.reaps) >= 2


def test_a_spec_the_backend_can_never_launch_fails_at_once(rig: Rig) -> None:
    from grace.backends.base import LaunchSpecError

    jid = rig.submit("never", gpus=1)
    original = rig.backend.launch

    def refuse(spec):  # type: ignore[no-untyped-def]
        if spec.job_id == jid:
            raise LaunchSpecError("job 1: env name 'A=B' is not a variable name")
        return original(spec)

    rig.backend.launch = refuse  # type: ignore[method-assign]
    rig.cycle()
    job = rig.job(jid)
    assert job.state is JobState.FAILED and len(job.attempts) == 1
    assert job.reason.startswith("launch-error: job 1: env name") and "not retried" in job.reason
