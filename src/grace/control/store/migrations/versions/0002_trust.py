"""What issue 12 moves out of the reconciler's memory into the store.

- ``store_meta``: the store's own id (a UUID made once), so job directories and
  checkpoints are keyed by something unique to a job *in this store*;
- ``leases``: one row per lease (``leader``) with a fencing epoch; the active
  control plane renews it and every write transaction checks its epoch;
- ``health_signals``: signals posted to the API wait here, not in a list in
  memory, until the reconciler has handled them;
- ``breaker_events``: the health monitor's circuit breaker (tripped, reset);
- ``nodes`` gain the monitor's per-node memory (holder, reset, lemon,
  counted failure times, drains deferred by the breaker), a pending planned
  eviction and the diagnostic in progress;
- ``jobs.launch_failures``: launches the backend refused, against a budget;
- ``attempts.end_*``: an end the control plane asked for (a hang, a bad node,
  a move, a cancel) and why, so the request survives a restart and a worker,
  not the cycle, waits for the processes to exit; ``attempts.borrowing``: core
  started it on GPUs above its tenant's guarantee (what quota reclaim preempts).

``jobs.exclude_nodes`` entries become objects ``{node, reason, cause, at,
until}`` (were plain names) so an exclusion can say why and heal.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id() -> sa.Column[int]:
    return sa.Column("id", sa.Integer(), autoincrement=True, nullable=False)


def upgrade() -> None:
    meta = op.create_table(
        "store_meta",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_store_meta")),
    )
    op.bulk_insert(meta, [{"key": "store_id", "value": uuid.uuid4().hex}])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("acquired_at", sa.Double(), nullable=False),
        sa.Column("renewed_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_leases")),
    )
    op.create_table(
        "health_signals",
        _id(),
        sa.Column("node", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("code", sa.Integer(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("handled_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_health_signals")),
    )
    op.create_index(op.f("ix_health_signals_handled_at"), "health_signals", ["handled_at"],
                    unique=False)
    op.create_table(
        "breaker_events",
        _id(),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("what", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_breaker_events")),
    )
    with op.batch_alter_table("nodes") as b:
        b.add_column(sa.Column("holder", sa.String(length=200), nullable=True))
        b.add_column(sa.Column("reset_pending", sa.Boolean(), nullable=False,
                               server_default=sa.false()))
        b.add_column(sa.Column("lemon", sa.Boolean(), nullable=False, server_default=sa.false()))
        b.add_column(sa.Column("failure_times", sa.JSON(), nullable=False, server_default="[]"))
        b.add_column(sa.Column("deferred", sa.Boolean(), nullable=False,
                               server_default=sa.false()))
        b.add_column(sa.Column("evict_reason", sa.Text(), nullable=True))
        b.add_column(sa.Column("diagnostic_level", sa.Integer(), nullable=True))
        b.add_column(sa.Column("diagnostic_due", sa.Double(), nullable=True))
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("launch_failures", sa.Integer(), nullable=False,
                               server_default="0"))
    with op.batch_alter_table("attempts") as b:
        b.add_column(sa.Column("end_cause", sa.String(length=32), nullable=True))
        b.add_column(sa.Column("end_node", sa.String(length=200), nullable=True))
        b.add_column(sa.Column("end_detail", sa.Text(), nullable=True))
        b.add_column(sa.Column("end_requested_at", sa.Double(), nullable=True))
        b.add_column(sa.Column("end_grace_s", sa.Double(), nullable=True))
        b.add_column(sa.Column("borrowing", sa.Boolean(), nullable=False,
                               server_default=sa.false()))
    # a drained node's holder was its actor; plain-name exclusions become objects
    bind = op.get_bind()
    bind.execute(sa.text("UPDATE nodes SET holder = actor WHERE state NOT IN "
                         "('healthy', 'degraded', 'returned')"))
    rows = bind.execute(sa.text("SELECT id, exclude_nodes FROM jobs")).fetchall()
    for job_id, raw in rows:
        entries = json.loads(raw) if isinstance(raw, str) else (raw or [])
        if not entries or all(isinstance(e, dict) for e in entries):
            continue
        new = [e if isinstance(e, dict) else
               {"node": e, "reason": "excluded before this version", "cause": "node",
                "at": None, "until": None} for e in entries]
        bind.execute(sa.text("UPDATE jobs SET exclude_nodes = :v WHERE id = :i"),
                     {"v": json.dumps(new), "i": job_id})


def downgrade() -> None:
    with op.batch_alter_table("attempts") as b:
        for c in ("borrowing", "end_grace_s", "end_requested_at", "end_detail", "end_node", "end_cause"):
            b.drop_column(c)
    with op.batch_alter_table("jobs") as b:
        b.drop_column("launch_failures")
    with op.batch_alter_table("nodes") as b:
        for c in ("diagnostic_due", "diagnostic_level", "evict_reason", "deferred",
                  "failure_times", "lemon", "reset_pending", "holder"):
            b.drop_column(c)
    for table in ("breaker_events", "health_signals", "leases", "store_meta"):
        op.drop_table(table)
