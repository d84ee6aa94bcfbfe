"""What issue 16 adds for notifications: the outbox of webhooks and mails.

- ``notifications``: one row per (job event, destination), written in the same
  transaction as the job's event, so a crash never loses one or half-writes it;
  the leader's delivery worker sends pending rows and marks them delivered or
  failed (``grace.control.store.notifications``, ``grace.control.notify``).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("channel", sa.String(length=32), nullable=False),
        sa.Column("origin", sa.String(length=32), nullable=False),
        sa.Column("destination", sa.Text(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("next_try_at", sa.Double(), nullable=False),
        sa.Column("delivered_at", sa.Double(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint("status IN ('pending', 'delivered', 'failed')",
                           name=op.f("ck_notifications_status")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"],
                                name=op.f("fk_notifications_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
        sa.UniqueConstraint("key", name=op.f("uq_notifications_key")),
    )
    op.create_index(op.f("ix_notifications_job_id"), "notifications", ["job_id"], unique=False)
    op.create_index(op.f("ix_notifications_status_next_try_at"), "notifications",
                    ["status", "next_try_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_notifications_status_next_try_at"), table_name="notifications")
    op.drop_index(op.f("ix_notifications_job_id"), table_name="notifications")
    op.drop_table("notifications")
