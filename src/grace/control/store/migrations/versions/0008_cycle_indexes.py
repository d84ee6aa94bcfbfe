"""What the incremental cycle still read by walking a table (issue 19).

- ``ix_job_events_kind_at``: each cycle reads the last hour's preemptions (core's
  per-tenant preemption budgets) by kind and time, not the whole history.
- ``ix_jobs_cancel_requested``, ``ix_jobs_requeue_requested``: partial indexes of the
  few jobs whose cancel or requeue a user asked for and the reconciler has not carried
  out yet. With 100,000 jobs in the store each query walked the table (23-25 ms a
  cycle on SQLite whenever one flag was set); now it reads the flagged rows only.
  Their conditions are written as the ORM renders ``.is_(True)`` on each dialect, so
  the planners match them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: index name -> flag column (each a partial index of jobs.id where the flag is set)
FLAGS = {"ix_jobs_cancel_requested": "cancel_requested",
         "ix_jobs_requeue_requested": "requeue_requested"}


def upgrade() -> None:
    op.create_index("ix_job_events_kind_at", "job_events", ["kind", "at"])
    for name, flag in FLAGS.items():
        op.create_index(name, "jobs", ["id"],
                        sqlite_where=sa.text(f"{flag} IS 1"),
                        postgresql_where=sa.text(f"{flag} IS true"))


def downgrade() -> None:
    for name in FLAGS:
        op.drop_index(name, table_name="jobs")
    op.drop_index("ix_job_events_kind_at", table_name="job_events")
