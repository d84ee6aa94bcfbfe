"""Restart policy: resume from checkpoint, exclude bad nodes, stop what keeps failing."""

from __future__ import annotations

from grace.core.jobs import JobId, PendingJob
from grace.core.placement import WholeRequest
from grace.core.restart import (
    FailedAttempt,
    FailureKind,
    RestartPolicy,
    RestartVerdict,
    on_failure,
)


def job(exclude: frozenset[int] = frozenset()) -> PendingJob:
    return PendingJob(JobId(1), "a", 0.0, WholeRequest(16), {}, ("H100-SXM",),
                      exclude_nodes=exclude)


def attempt(kind: FailureKind, ran: float = 3600, first: bool = False, progressed: bool = True,
            stalled: int = 0, node: int | None = 5) -> FailedAttempt:
    return FailedAttempt(kind, node, ran, first, progressed, stalled)


def test_node_failure_restarts_elsewhere_keeping_the_shape():
    d = on_failure(job(), attempt(FailureKind.NODE))
    assert d.verdict is RestartVerdict.RESTART
    assert d.job is not None and d.job.exclude_nodes == {5}
    assert d.job.whole == WholeRequest(16) and d.job.restarts == 1
    assert d.job.shape != job().shape  # excluded nodes are part of how it places


def test_application_error_in_the_first_minutes_is_a_user_error():
    d = on_failure(job(), attempt(FailureKind.APPLICATION, ran=40, first=True))
    assert d.verdict is RestartVerdict.GIVE_UP_USER_ERROR and d.job is None
    assert "not retried" in d.reason


def test_application_error_later_on_is_retried_in_place():
    d = on_failure(job(), attempt(FailureKind.APPLICATION, ran=4000, first=True))
    assert d.verdict is RestartVerdict.RESTART
    assert d.job is not None and d.job.exclude_nodes == frozenset()


def test_restart_budget_stops_a_job_failing_without_progress():
    policy = RestartPolicy(max_restarts_without_progress=3)
    ok = on_failure(job(), attempt(FailureKind.APPLICATION, progressed=False, stalled=2), policy)
    assert ok.verdict is RestartVerdict.RESTART
    out = on_failure(job(), attempt(FailureKind.APPLICATION, progressed=False, stalled=3), policy)
    assert out.verdict is RestartVerdict.GIVE_UP_BUDGET


def test_progress_resets_the_budget_and_node_faults_never_spend_it():
    policy = RestartPolicy(max_restarts_without_progress=1)
    assert on_failure(job(), attempt(FailureKind.APPLICATION, progressed=True, stalled=9),
                      policy).verdict is RestartVerdict.RESTART
    assert on_failure(job(), attempt(FailureKind.NODE, progressed=False, stalled=1),
                      policy).verdict is RestartVerdict.RESTART
    assert on_failure(job(), attempt(FailureKind.APPLICATION, progressed=False, stalled=1),
                      policy).verdict is RestartVerdict.GIVE_UP_BUDGET


def test_excluding_the_failed_node_can_be_turned_off():
    d = on_failure(job(), attempt(FailureKind.NODE), RestartPolicy(exclude_failed_node=False))
    assert d.job is not None and d.job.exclude_nodes == frozenset()
