"""The policy engine: pure, clock-free scheduling decisions over a cluster snapshot."""

from grace.core.capacity import FreeCapacity, Placement, Slice
from grace.core.decisions import DecideResult, PendingReason, PreemptJob, StartJob, StopJob
from grace.core.jobs import JobCompileError, JobId, PendingJob, RunningJob, compile_job
from grace.core.policies import DEFAULT_POLICY, POLICIES, QueuePolicy, get_policy
from grace.core.quotas import TenantQuota
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.core.topology import Topology

__all__ = [
    "DEFAULT_POLICY", "POLICIES", "DecideResult", "FreeCapacity", "JobCompileError", "JobId",
    "PendingJob", "PendingReason", "Placement", "PreemptJob", "QueuePolicy", "RunningJob",
    "SchedulerState", "Slice", "StartJob", "StopJob", "TenantQuota", "Topology",
    "compile_job", "decide", "get_policy",
]
