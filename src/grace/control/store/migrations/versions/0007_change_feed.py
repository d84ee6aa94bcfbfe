"""What issue 19 adds for the incremental reconcile cycle: a change feed of jobs.

- ``jobs.change_seq``: the store's change sequence at the last commit that wrote
  the job or one of its attempts (``grace.control.store.changes``). The
  reconciler reads only the jobs whose number passed the last one it saw,
  instead of every live and pending job each cycle.
- ``ix_jobs_state_id``, ``ix_jobs_tenant_id``: ``GET /jobs`` pages newest first by id
  (``?after=ID``) within a state or a tenant without sorting the table.
- ``change_clock``: one row, the sequence itself. A writer bumps it last in its
  transaction, so the row lock orders commits: every number below one a reader
  sees is already committed (a PostgreSQL sequence would not promise that).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("change_seq", sa.BigInteger(), nullable=False,
                               server_default="0"))
        b.create_index("ix_jobs_change_seq", ["change_seq"])
        # listings newest first within a state or a tenant, paged by id (GET /jobs?after=ID)
        b.create_index("ix_jobs_state_id", ["state", "id"])
        b.create_index("ix_jobs_tenant_id", ["tenant", "id"])
    clock = op.create_table("change_clock",
                            sa.Column("id", sa.Integer(), primary_key=True),
                            sa.Column("seq", sa.BigInteger(), nullable=False))
    op.bulk_insert(clock, [{"id": 1, "seq": 0}])


def downgrade() -> None:
    op.drop_table("change_clock")
    with op.batch_alter_table("jobs") as b:
        b.drop_index("ix_jobs_tenant_id")
        b.drop_index("ix_jobs_state_id")
        b.drop_index("ix_jobs_change_seq")
        b.drop_column("change_seq")
