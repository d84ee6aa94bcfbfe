"""The workflow gate: which pending jobs ``decide`` may see this cycle (Slurm's workflows).

Before each cycle a driver (the twin or the live reconciler) passes the gate each
pending job's workflow facts (held, dependencies, array group and its limit), the
known outcomes of the jobs they depend on and how many tasks of each group hold
GPUs. The gate answers three lists:

- ``admitted``: offered to ``decide`` this cycle;
- ``waiting``: a typed ``PendingReason`` for each one that may not (``held``,
  ``dependency``, ``array-limit``), in the order a user must act: a held job says
  so even while it also waits on a dependency;
- ``never``: jobs whose dependency can never be satisfied (an ``afterok`` parent
  that failed, an ``afternotok`` parent that completed). The driver cancels them
  (Slurm's ``kill_invalid_depend``), or fails them for a ``preflight`` dependency,
  with the reason text given here.

Dependencies are ANDed, as Slurm's comma-separated list is. The array throttle
(Slurm's ``%N``) admits at most ``max_parallel - active`` ready tasks of a group
per cycle, lowest index first, where ``active`` counts the group's tasks that
hold GPUs (the live driver) or were already offered and not ended (the twin, whose
state keeps an offered job queued): so no more than ``max_parallel`` ever run.
Pure: no clock, no I/O; the caller owns both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from grace.core.decisions import PendingReason
from grace.spec.workflow import DependencyKind


class Outcome(StrEnum):
    """What the gate needs to know of a parent job."""

    NOT_ENDED = "not-ended"  # pending or running (or requeued)
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # failed, cancelled, timed out, diverged: ended without success


@dataclass(frozen=True, slots=True)
class Parent:
    """A parent's outcome, with its state's name and reason for the texts the gate writes."""

    outcome: Outcome
    state: str = ""
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Dep:
    kind: DependencyKind
    job: int


@dataclass(frozen=True, slots=True)
class WorkflowFacts:
    """One pending job as the gate sees it; ``group`` is its array (or sweep) id."""

    job_id: int
    held: bool = False
    dependencies: tuple[Dep, ...] = ()
    group: int | None = None
    index: int = 0
    max_parallel: int | None = None


@dataclass(frozen=True, slots=True)
class NeverSatisfied:
    """A job whose dependency cannot be met any more; ``fail``: fail it, not cancel it."""

    job_id: int
    parent: int
    kind: DependencyKind
    reason: str
    fail: bool


@dataclass
class GateResult:
    admitted: list[int] = field(default_factory=list)
    waiting: dict[int, PendingReason] = field(default_factory=dict)
    never: list[NeverSatisfied] = field(default_factory=list)


def _missing(job: int) -> str:
    return f"dependency never satisfied: job {job} does not exist"


def _dependency_state(dep: Dep, parent: Parent) -> bool | None:
    """True: satisfied; False: never satisfiable; None: not yet known."""
    if parent.outcome is Outcome.NOT_ENDED:
        return None
    if dep.kind is DependencyKind.AFTERANY:
        return True
    ok = parent.outcome is Outcome.SUCCEEDED
    return not ok if dep.kind is DependencyKind.AFTERNOTOK else ok


def _never(job_id: int, dep: Dep, parent: Parent) -> NeverSatisfied:
    if dep.kind is DependencyKind.PREFLIGHT:
        why = f"preflight job {dep.job} {parent.state}"
        text = f"{why}: {parent.reason}" if parent.reason else why
        return NeverSatisfied(job_id, dep.job, dep.kind, text, fail=True)
    want = "failed" if dep.kind is DependencyKind.AFTERNOTOK else "succeeded"
    text = (f"dependency never satisfied: {dep.kind}:{dep.job} needs job {dep.job} to end "
            f"{want}, and it {parent.state}")
    return NeverSatisfied(job_id, dep.job, dep.kind, text, fail=False)


def gate(pending: Iterable[WorkflowFacts], parents: Mapping[int, Parent],
         active_in_group: Mapping[int, int]) -> GateResult:
    """Sort ``pending`` into admitted, waiting (with a reason) and never satisfiable.

    ``parents`` holds the outcome of every job a dependency names (one not in it is
    taken as gone: never satisfiable); ``active_in_group`` how many of a group's tasks
    hold GPUs now. Jobs come back in ``pending``'s order, except that a group's ready
    tasks are admitted lowest index first.
    """
    out = GateResult()
    ready: list[WorkflowFacts] = []
    for f in pending:
        blocked: NeverSatisfied | None = None
        unmet = False
        for dep in f.dependencies:
            parent = parents.get(dep.job)
            if parent is None:  # gone: nothing will ever end as asked
                blocked = NeverSatisfied(f.job_id, dep.job, dep.kind, _missing(dep.job),
                                         dep.kind is DependencyKind.PREFLIGHT)
                break
            met = _dependency_state(dep, parent)
            if met is False:
                blocked = _never(f.job_id, dep, parent)
                break
            unmet = unmet or met is None
        if blocked is not None:
            out.never.append(blocked)
        elif f.held:
            out.waiting[f.job_id] = PendingReason.HELD
        elif unmet:
            out.waiting[f.job_id] = PendingReason.DEPENDENCY
        else:
            ready.append(f)
    slots: dict[int, int] = {}
    throttled: set[int] = set()
    for f in sorted((f for f in ready if f.group is not None and f.max_parallel is not None),
                    key=lambda f: (f.group, f.index, f.job_id)):
        assert f.group is not None and f.max_parallel is not None
        left = slots.setdefault(f.group, f.max_parallel - active_in_group.get(f.group, 0))
        if left > 0:
            slots[f.group] = left - 1
        else:
            throttled.add(f.job_id)
            out.waiting[f.job_id] = PendingReason.ARRAY_LIMIT
    out.admitted = [f.job_id for f in ready if f.job_id not in throttled]
    return out


__all__ = ["Dep", "DependencyKind", "GateResult", "NeverSatisfied", "Outcome", "Parent",
           "WorkflowFacts", "gate"]
