"""The first schema: tenants, jobs, attempts, nodes, node and job events.

Written out in full rather than imported from ``models``: a migration must
keep describing the schema of its day after the models move on. A test checks
that migrating to head yields exactly what the models declare.

Revision ID: 0001
Revises:
Create Date: 2026-05-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NODE_STATES = "'healthy', 'degraded', 'draining', 'drained', 'diagnosing', 'returned'"
_JOB_STATES = "'pending', 'running', 'completed', 'failed', 'cancelled', 'diverged'"
_ATTEMPT_STATES = "'starting', 'running', 'succeeded', 'failed', 'cancelled', 'lost'"
_LIVE_ATTEMPT = "state IN ('running', 'starting')"


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer(), autoincrement=True, nullable=False)


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("guaranteed_gpus", sa.Double(), nullable=True),
        sa.Column("borrow_limit_gpus", sa.Double(), nullable=True),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("preemptions_per_hour", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tenants")),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(length=200), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=True),
        sa.Column("updated_at", sa.Double(), nullable=True),
        sa.CheckConstraint(f"state IN ({_NODE_STATES})", name=op.f("ck_nodes_state")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "jobs",
        _id(),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("spec_json", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("workload_class", sa.String(length=32), nullable=False),
        sa.Column("gpus", sa.Double(), nullable=False),
        sa.Column("submitted_at", sa.Double(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.Column("attempts_count", sa.Integer(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("stalled_restarts", sa.Integer(), nullable=False),
        sa.Column("exclude_nodes", sa.JSON(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.CheckConstraint(f"state IN ({_JOB_STATES})", name=op.f("ck_jobs_state")),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"], name=op.f("fk_jobs_tenant_tenants")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_jobs_state"), "jobs", ["state"], unique=False)
    op.create_index(op.f("ix_jobs_tenant"), "jobs", ["tenant"], unique=False)
    op.create_table(
        "attempts",
        _id(),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("placement_json", sa.JSON(), nullable=False),
        sa.Column("gpus", sa.Double(), nullable=False),
        sa.Column("backend", sa.String(length=64), nullable=False),
        sa.Column("handle", sa.Text(), nullable=True),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("failure_kind", sa.String(length=32), nullable=True),
        sa.Column("failed_node", sa.String(length=200), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("resumed_from", sa.Text(), nullable=True),
        sa.CheckConstraint(f"state IN ({_ATTEMPT_STATES})", name=op.f("ck_attempts_state")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_attempts_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("job_id", "number", name=op.f("uq_attempts_job_id_number")),
    )
    # at most one live attempt per job: the database itself refuses to run a job twice
    op.create_index("uq_attempts_live_job_id", "attempts", ["job_id"], unique=True,
                    sqlite_where=sa.text(_LIVE_ATTEMPT), postgresql_where=sa.text(_LIVE_ATTEMPT))
    op.create_table(
        "node_events",
        _id(),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("from_state", sa.String(length=32), nullable=True),
        sa.Column("to_state", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.name"], name=op.f("fk_node_events_node_nodes")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_events")),
    )
    op.create_index(op.f("ix_node_events_node"), "node_events", ["node"], unique=False)
    op.create_table(
        "job_events",
        _id(),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    op.create_index(op.f("ix_job_events_job_id"), "job_events", ["job_id"], unique=False)


def downgrade() -> None:
    for table in ("job_events", "node_events", "attempts", "jobs", "nodes", "tenants"):
        op.drop_table(table)
