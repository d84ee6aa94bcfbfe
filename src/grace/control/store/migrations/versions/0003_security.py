"""What issue 13 adds: who may do what, who did what, and the keys of a job's data.

- ``api_tokens``: one row per API token; only the SHA-256 of its secret is kept
  (the secret is 256 random bits, so a plain hash cannot be brute-forced), with
  its role, tenant, expiry and revocation;
- ``audit_entries`` and ``audit_head``: the audit trail, a hash chain (each entry
  carries the previous entry's hash and its own); ``audit_head`` is one row whose
  update serializes appends on every backend (its row lock on PostgreSQL, the
  write lock on SQLite);
- ``jobs.owner``: the token id that submitted the job; ``jobs.data_key``: the
  job's data key wrapped by the KMS (checkpoint encryption); ``jobs.admission``:
  the digests the admission rules checked at submit, checked again at launch;
- ``job_events.actor``: who caused the event (a token id and name, or ``grace``).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=True),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=True),
        sa.Column("revoked_at", sa.Double(), nullable=True),
        sa.Column("last_used_at", sa.Double(), nullable=True),
        sa.CheckConstraint("role IN ('admin', 'operator', 'member', 'viewer')",
                           name=op.f("ck_api_tokens_role")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
    )
    op.create_table(
        "audit_entries",
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("token_id", sa.String(length=32), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=400), nullable=False),
        sa.Column("outcome", sa.String(length=64), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_audit_entries")),
    )
    op.create_index(op.f("ix_audit_entries_at"), "audit_entries", ["at"], unique=False)
    head = op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_head")),
    )
    op.bulk_insert(head, [{"id": 1, "seq": 0, "hash": "0" * 64}])
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("owner", sa.String(length=32), nullable=True))
        b.add_column(sa.Column("data_key", sa.Text(), nullable=True))
        b.add_column(sa.Column("admission", sa.JSON(), nullable=True))
    with op.batch_alter_table("job_events") as b:
        b.add_column(sa.Column("actor", sa.String(length=200), nullable=False,
                               server_default="grace"))


def downgrade() -> None:
    with op.batch_alter_table("job_events") as b:
        b.drop_column("actor")
    with op.batch_alter_table("jobs") as b:
        for c in ("admission", "data_key", "owner"):
            b.drop_column(c)
    for table in ("audit_head", "audit_entries", "api_tokens"):
        op.drop_table(table)
