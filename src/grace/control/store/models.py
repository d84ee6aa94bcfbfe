"""The control plane's tables: what must survive a crash of the control plane.

Everything the reconciler needs to resume lives here: the jobs and their specs,
every attempt with the backend handle to re-attach to it, node states with
their history, tenant quotas, and a per-job event history. ``core`` keeps its
own in-memory ``SchedulerState``; it is rebuilt from these rows each cycle, so
the rows, not memory, are the truth.

Shapes chosen on purpose:

- times are ``float`` epoch seconds (``Double``), the same ``now`` that
  ``core`` takes, so no time zone or clock conversion sits between the two;
- enums are stored as their string values (``VARCHAR`` plus a CHECK on the
  state columns), readable in ``psql``/``sqlite3`` and identical on SQLite and
  PostgreSQL; the Python side gets the ``StrEnum`` back;
- ``Job.version`` is SQLAlchemy's ``version_id_col``: every UPDATE of a job
  carries ``WHERE version = <what we read>`` and bumps it, so two writers that
  read the same job cannot silently overwrite each other (the loser gets
  ``StaleWrite``);
- a partial unique index allows at most one live (starting or running)
  attempt per job, so the database itself refuses to run a job twice.

JSON columns are not tracked for in-place mutation: assign a new list or dict
(``job.exclude_nodes = [*job.exclude_nodes, node]``), never ``.append``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from grace.core.health import NodeState
from grace.spec.job import JobSpec
from grace.spec.text_limits import STORED

E = TypeVar("E", bound=StrEnum)

#: Constraint names are fixed by convention so Alembic migrations (and SQLite's
#: batch mode, which recreates tables) can find them by name on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class JobState(StrEnum):
    PENDING = "pending"  # waiting to be placed (also after a restart or preemption)
    RUNNING = "running"  # placed: its live attempt is starting or running
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DIVERGED = "diverged"  # stopped by the runtime's loss-divergence guard; not retried


TERMINAL_JOB_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.DIVERGED})


class AttemptState(StrEnum):
    STARTING = "starting"  # recorded before the backend launch; handle may be unknown
    RUNNING = "running"  # launched; ``handle`` re-attaches to it
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"  # its processes were gone (e.g. after a control-plane restart)


LIVE_ATTEMPT_STATES = frozenset({AttemptState.STARTING, AttemptState.RUNNING})


class JobEventKind(StrEnum):
    SUBMITTED = "submitted"
    PLACED = "placed"
    STARTED = "started"
    FAILED = "failed"
    RESTARTED = "restarted"
    PREEMPTED = "preempted"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    DIVERGED = "diverged"
    TIMEOUT = "timeout"
    ADOPTED = "adopted"
    REQUEUED = "requeued"
    HEARTBEAT_LOST = "heartbeat-lost"
    MOVED = "moved"  # off a straggling node, from its checkpoint; not a failure
    LAUNCH_FAILED = "launch-failed"  # the backend refused to start an attempt
    EXCLUSIONS_CLEARED = "exclusions-cleared"  # a node came back, or an operator cleared them
    EARLY_STOPPED = "early-stopped"  # a sweep trial ended by its stopping rule (completed)
    HELD = "held"  # a user held a pending job (Slurm's scontrol hold)
    RELEASED = "released"  # a user released a held job


class EndCause(StrEnum):
    """Why the control plane asked an attempt to end (``Attempt.end_cause``).

    The request is written before the backend is told, so a restarted control
    plane still knows that an attempt it finds ended was ended on purpose, and why.
    """

    HANG = "hang"  # heartbeats stopped: a failure of the job
    NODE = "node"  # its node went bad: a failure of the node, the job resumes elsewhere
    APPLICATION = "application"  # the health table said restart the job
    STRAGGLER = "straggler"  # moved off a slow node from a checkpoint; not a failure
    DRAIN = "drain"  # moved off a node drained with --evict; not a failure
    CANCEL = "cancel"  # a user cancelled the job
    STOP = "stop"  # timeout: passed its runtime limit
    PREEMPT = "preempt"  # the scheduler took its GPUs; requeued
    UNPLACEABLE = "unplaceable"  # its job can no longer run on this cluster
    EARLY_STOP = "early-stop"  # a sweep's stopping rule ended a weak trial; not a failure
    REQUEUE = "requeue"  # a user requeued it (scontrol requeue): checkpoint, queue again


#: Ends that move a job off a node without counting against its restart budget.
MOVE_CAUSES = frozenset({EndCause.STRAGGLER, EndCause.DRAIN})
#: Ends the job is blamed for (or its node is), turned into a failed attempt.
FAIL_CAUSES = frozenset({EndCause.HANG, EndCause.NODE, EndCause.APPLICATION})


class StrEnumType(TypeDecorator[E], Generic[E]):
    """A ``StrEnum`` stored as its value in a VARCHAR; unknown values fail at flush."""

    impl = String(32)
    cache_ok = True

    def __init__(self, enum_cls: type[E]) -> None:
        super().__init__(length=32)
        self.enum_cls = enum_cls

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else self.enum_cls(value).value

    def process_result_value(self, value: Any, dialect: Dialect) -> E | None:
        return None if value is None else self.enum_cls(value)


def _in(column: str, enum_cls: type[StrEnum]) -> str:
    """SQL text ``column IN ('a', 'b')``: the CHECK that keeps raw SQL writers honest too."""
    return f"{column} IN ({', '.join(repr(e.value) for e in enum_cls)})"


def _live_attempt() -> str:
    return f"state IN ({', '.join(repr(s.value) for s in sorted(LIVE_ATTEMPT_STATES))})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        float: Double(), dict[str, Any]: JSON(), list[Any]: JSON()}


class Tenant(Base):
    """A tenant and its quota; NULL guaranteed/borrow means unlimited (``math.inf`` in core)."""

    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    guaranteed_gpus: Mapped[float | None]
    borrow_limit_gpus: Mapped[float | None]
    weight: Mapped[float] = mapped_column(default=1.0)
    preemptions_per_hour: Mapped[int] = mapped_column(default=20)


class StoreMeta(Base):
    """Facts about the store itself; ``store_id`` is a UUID made when it was created."""

    __tablename__ = "store_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class ChangeClock(Base):
    """One row: the store's change sequence (store.changes). Bumped last in a writing
    transaction, so its row lock orders commits and a reader never skips a number."""

    __tablename__ = "change_clock"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)


class Lease(Base):
    """Who may write: the active control plane holds ``leader`` and renews it.

    ``epoch`` grows by one at every takeover; the holder's write transactions
    check it, so a leader that lost its lease (paused, partitioned) cannot write.
    """

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(200))  # host:pid
    epoch: Mapped[int]
    acquired_at: Mapped[float]
    renewed_at: Mapped[float]
    expires_at: Mapped[float]


class HealthSignalRow(Base):
    """A health signal waiting for (or handled by) the reconciler; the API only writes here."""

    __tablename__ = "health_signals"
    __table_args__ = (Index(None, "handled_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(32))  # a core.health.SignalKind value
    code: Mapped[int | None]
    detail: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[float]
    actor: Mapped[str] = mapped_column(String(200), default="grace")
    handled_at: Mapped[float | None]


class BreakerEvent(Base):
    """The health monitor's circuit breaker: ``tripped`` or ``reset``, by whom, and why."""

    __tablename__ = "breaker_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float]
    actor: Mapped[str] = mapped_column(String(200))
    what: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text, default="")


class Job(Base):
    """One submitted job; its validated spec is kept whole, the columns are for queries."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(_in("state", JobState), name="state"),
        Index(None, "state"),
        Index(None, "tenant"),
        Index(None, "change_seq"),
        # listings page newest first within a state or a tenant (GET /jobs?after=ID)
        Index(None, "state", "id"),
        Index(None, "tenant", "id"),
        # the few jobs whose cancel or requeue waits for the reconciler (migration 0008)
        *(Index(f"ix_jobs_{flag}", "id", sqlite_where=text(f"{flag} IS 1"),
                postgresql_where=text(f"{flag} IS true"))
          for flag in ("cancel_requested", "requeue_requested")),
        # never reuse an id, even of a rolled-back insert's successor: ids name job directories
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    tenant: Mapped[str] = mapped_column(String(200), ForeignKey("tenants.name"))
    spec_json: Mapped[dict[str, Any]]  # JobSpec.model_dump(mode="json")
    state: Mapped[JobState] = mapped_column(StrEnumType(JobState), default=JobState.PENDING)
    priority: Mapped[int] = mapped_column(default=0)
    workload_class: Mapped[str] = mapped_column(String(32))
    gpus: Mapped[float]
    submitted_at: Mapped[float]
    started_at: Mapped[float | None]  # first start; each attempt keeps its own
    ended_at: Mapped[float | None]
    attempts_count: Mapped[int] = mapped_column(default=0)
    restarts: Mapped[int] = mapped_column(default=0)  # automatic restarts after failures
    # restarts in a row without a new checkpoint: core.restart's budget must survive a restart
    stalled_restarts: Mapped[int] = mapped_column(default=0)
    # nodes this job must avoid: [{node, reason, cause, at, until}]; until None = until the
    # node is back in service (see repository.active_exclusions)
    exclude_nodes: Mapped[list[Any]] = mapped_column(default=list)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    reason: Mapped[str | None] = mapped_column(Text)  # why it waits, or why it ended
    launch_failures: Mapped[int] = mapped_column(default=0)  # launches the backend refused
    owner: Mapped[str | None] = mapped_column(String(32))  # the token id that submitted it
    data_key: Mapped[str | None] = mapped_column(Text)  # its data key, wrapped by the KMS
    admission: Mapped[dict[str, Any] | None]  # what the admission rules checked at submit
    # Slurm's workflows (migration 0004; the gate: core.workflow): held until released; a
    # running job's requeue asked for (the reconciler carries it out, as a cancel); the
    # job's array or sweep (its first task's id), its index there and the group's %N limit
    held: Mapped[bool] = mapped_column(Boolean, default=False)
    requeue_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    array_id: Mapped[int | None] = mapped_column(Integer, index=True)
    array_index: Mapped[int | None]
    array_limit: Mapped[int | None]
    array_kind: Mapped[str | None] = mapped_column(String(16))  # "array" or "sweep"
    version: Mapped[int] = mapped_column(default=1)
    # the change clock's value at the last commit that wrote the job or an attempt of it
    # (store.changes stamps it; the reconciler reads only jobs changed since its last cycle)
    change_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")

    attempts: Mapped[list[Attempt]] = relationship(
        back_populates="job", order_by="Attempt.number")

    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012 - SQLAlchemy's own attribute

    @property
    def spec(self) -> JobSpec:
        # accepted at submit: the edge checks added since must not break a stored job
        return JobSpec.model_validate(self.spec_json, context=STORED)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_JOB_STATES


class Attempt(Base):
    """One try at running a job: where, on which backend, and how to re-attach to it."""

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("job_id", "number"),
        CheckConstraint(_in("state", AttemptState), name="state"),
        Index("uq_attempts_live_job_id", "job_id", unique=True,
              sqlite_where=_live_attempt(), postgresql_where=_live_attempt()),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    number: Mapped[int]  # 1, 2, ... per job
    state: Mapped[AttemptState] = mapped_column(StrEnumType(AttemptState))
    placement_json: Mapped[list[Any]]  # [{"node": "n1", "gpus": [0, 1, ...]}, ...]
    gpus: Mapped[float]  # GPUs held (the job's, at start); what GPU-hours are counted on
    backend: Mapped[str] = mapped_column(String(64))
    handle: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[float]
    ended_at: Mapped[float | None]
    exit_code: Mapped[int | None]
    failure_kind: Mapped[str | None] = mapped_column(String(32))
    failed_node: Mapped[str | None] = mapped_column(String(200))
    detail: Mapped[str | None] = mapped_column(Text)
    resumed_from: Mapped[str | None] = mapped_column(Text)  # checkpoint path it started from
    # an end the control plane asked for, written before the backend is told (EndCause)
    end_cause: Mapped[EndCause | None] = mapped_column(StrEnumType(EndCause))
    end_node: Mapped[str | None] = mapped_column(String(200))  # the node to blame or leave
    end_detail: Mapped[str | None] = mapped_column(Text)
    end_requested_at: Mapped[float | None]
    end_grace_s: Mapped[float | None]  # SIGTERM to SIGKILL
    # core started it above its tenant's guarantee (StartJob.borrowing): quota reclaim may
    # preempt it; a snapshot that forgot it would never give the GPUs back
    borrowing: Mapped[bool] = mapped_column(Boolean, default=False)
    # the checkpoint schedule pushed to it (core.checkpoint_stagger): later starts are
    # phased against it; None: no phase (no file-system bandwidth configured)
    checkpoint_interval_s: Mapped[float | None]
    checkpoint_phase_s: Mapped[float | None]

    job: Mapped[Job] = relationship(back_populates="attempts")

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_ATTEMPT_STATES


class Node(Base):
    """A node's current health state and who put it there (history in ``NodeEvent``)."""

    __tablename__ = "nodes"
    __table_args__ = (CheckConstraint(_in("state", NodeState), name="state"),)

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    state: Mapped[NodeState] = mapped_column(StrEnumType(NodeState), default=NodeState.HEALTHY)
    reason: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str | None] = mapped_column(String(200))
    gpus: Mapped[int]
    gpu_model: Mapped[str | None] = mapped_column(String(64))
    updated_at: Mapped[float | None]
    # core.health.HealthMonitor's memory of the node, so it survives a restart
    holder: Mapped[str | None] = mapped_column(String(200))  # who drained it
    reset_pending: Mapped[bool] = mapped_column(Boolean, default=False)
    lemon: Mapped[bool] = mapped_column(Boolean, default=False)
    failure_times: Mapped[list[Any]] = mapped_column(default=list)  # counted toward lemons
    deferred: Mapped[bool] = mapped_column(Boolean, default=False)  # kept by the open breaker
    evict_reason: Mapped[str | None] = mapped_column(Text)  # drain --evict not yet carried out
    diagnostic_level: Mapped[int | None]  # the diagnostic running now, if any
    diagnostic_due: Mapped[float | None]  # when its result is expected


class NodeEvent(Base):
    """One move of a node (or a note, when from_state == to_state), like core's Transition."""

    __tablename__ = "node_events"
    __table_args__ = (Index(None, "node"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(200), ForeignKey("nodes.name"))
    at: Mapped[float]
    from_state: Mapped[NodeState | None] = mapped_column(StrEnumType(NodeState))
    to_state: Mapped[NodeState] = mapped_column(StrEnumType(NodeState))
    reason: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(200))


class JobEvent(Base):
    """One line of a job's history; ``id`` order is the order things happened in the store."""

    __tablename__ = "job_events"
    # (kind, at): each cycle reads the last hour's preemptions (core's per-tenant budgets)
    __table_args__ = (Index(None, "job_id"), Index(None, "kind", "at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    at: Mapped[float]
    kind: Mapped[JobEventKind] = mapped_column(StrEnumType(JobEventKind))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    actor: Mapped[str] = mapped_column(String(200), default="grace", server_default="grace")


class Role(StrEnum):
    """What a token may do; each role may do everything the ones after it may."""

    ADMIN = "admin"  # everything, tokens and the audit trail included
    OPERATOR = "operator"  # nodes, drains, quotas, any tenant's jobs
    MEMBER = "member"  # submit and manage its own tenant's jobs
    VIEWER = "viewer"  # read its tenant's jobs (every tenant's with no tenant set)


class ApiToken(Base):
    """An API token: only the SHA-256 of its secret is stored (``grace token create``)."""

    __tablename__ = "api_tokens"
    __table_args__ = (CheckConstraint(_in("role", Role), name="role"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    role: Mapped[Role] = mapped_column(StrEnumType(Role))
    tenant: Mapped[str | None] = mapped_column(String(200))
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float]
    created_by: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[float | None]
    revoked_at: Mapped[float | None]
    last_used_at: Mapped[float | None]


class AuditEntry(Base):
    """One entry of the audit trail; ``hash`` covers every other column and ``prev_hash``."""

    __tablename__ = "audit_entries"
    __table_args__ = (Index(None, "at"),)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    at: Mapped[float]
    actor: Mapped[str] = mapped_column(String(200))
    token_id: Mapped[str | None] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(400))
    outcome: Mapped[str] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class AuditHead(Base):
    """The chain's newest ``seq`` and ``hash``: one row, updated by every append, so two
    appends never read the same head (row lock on PostgreSQL, write lock on SQLite)."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    seq: Mapped[int]
    hash: Mapped[str] = mapped_column(String(64))


__all__ = [
    "FAIL_CAUSES",
    "LIVE_ATTEMPT_STATES",
    "MOVE_CAUSES",
    "TERMINAL_JOB_STATES",
    "ApiToken",
    "Attempt",
    "AttemptState",
    "AuditEntry",
    "AuditHead",
    "Base",
    "BreakerEvent",
    "EndCause",
    "HealthSignalRow",
    "Job",
    "JobEvent",
    "JobEventKind",
    "JobState",
    "Lease",
    "Node",
    "NodeEvent",
    "NodeState",
    "Role",
    "StoreMeta",
    "Tenant",
]
