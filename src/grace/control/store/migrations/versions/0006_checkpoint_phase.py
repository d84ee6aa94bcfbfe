"""What issue 17 adds for checkpoint staggering: each attempt's checkpoint schedule.

- ``attempts.checkpoint_interval_s`` and ``attempts.checkpoint_phase_s``: the
  interval and the common-clock phase pushed to the attempt
  (``GRACE_CHECKPOINT_INTERVAL_S``, ``GRACE_CHECKPOINT_PHASE_S``). A phase is
  chosen against the phases of the attempts already running
  (``core.checkpoint_stagger``), so it must outlive the cycle that chose it:
  later starts read it back as fixed. Null: no phase (no file-system bandwidth
  configured, or an attempt from before this version).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as b:
        b.add_column(sa.Column("checkpoint_interval_s", sa.Double(), nullable=True))
        b.add_column(sa.Column("checkpoint_phase_s", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as b:
        b.drop_column("checkpoint_phase_s")
        b.drop_column("checkpoint_interval_s")
