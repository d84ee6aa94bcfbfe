"""Alembic environment, run in code by ``grace.control.store.db.migrate``.

``migrate`` hands over an open connection (``config.attributes["connection"]``)
so the upgrade uses Grace's engine settings and runs inside one transaction.
Running the ``alembic`` command by hand also works: give it ``sqlalchemy.url``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from grace.control.store.db import make_engine
from grace.control.store.models import Base

#: pg_advisory_xact_lock key: two control planes starting at once upgrade one after the other
_PG_MIGRATION_LOCK = 0x6772616365  # "grace"


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things; batch mode recreates the table instead
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                               {"key": _PG_MIGRATION_LOCK})
        context.run_migrations()


def run() -> None:
    if context.is_offline_mode():
        raise SystemExit("Grace migrations run online only (grace.control.store.db.migrate)")
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(context.config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


run()
