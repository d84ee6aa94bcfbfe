"""What issue 16 adds for Slurm's workflows: holds, requeues and job arrays.

- ``jobs.held``: submitted held, or held by a user; never offered to the scheduler
  until released (``core.workflow``'s gate);
- ``jobs.requeue_requested``: a user asked to requeue a running job; the reconciler
  carries it out (SIGTERM, checkpoint, pending again), as it does a cancel request;
- ``jobs.array_id``, ``array_index``, ``array_limit``, ``array_kind``: the job's array
  (or sweep): its first task's id, this task's index, the group's ``%N`` limit and
  what made the group (``array`` or ``sweep``). Dependencies need no column: they are
  in the spec, which never changes after submit.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("held", sa.Boolean(), nullable=False, server_default=sa.false()))
        b.add_column(sa.Column("requeue_requested", sa.Boolean(), nullable=False,
                               server_default=sa.false()))
        b.add_column(sa.Column("array_id", sa.Integer(), nullable=True))
        b.add_column(sa.Column("array_index", sa.Integer(), nullable=True))
        b.add_column(sa.Column("array_limit", sa.Integer(), nullable=True))
        b.add_column(sa.Column("array_kind", sa.String(length=16), nullable=True))
        b.create_index(b.f("ix_jobs_array_id"), ["array_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.drop_index(b.f("ix_jobs_array_id"))
        for c in ("array_kind", "array_limit", "array_index", "array_id", "requeue_requested",
                  "held"):
            b.drop_column(c)
