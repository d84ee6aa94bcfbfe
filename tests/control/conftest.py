"""Store fixtures: every store test runs on SQLite and on a real PostgreSQL.

SQLite needs nothing. PostgreSQL comes from ``GRACE_TEST_DATABASE_URL``
(``.ci/postgres-up.sh`` starts one); without it those tests are skipped here,
but fail under CI (``CI`` set) so CI can never pass by silently skipping them.
Each PostgreSQL test gets a fresh schema of its own (via ``search_path`` in
the URL), dropped afterwards, so tests never see each other's rows.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from grace.control.store.db import Store, make_engine

HOW_TO = ('start one with  export "$(bash .ci/postgres-up.sh)"; '
          'export GRACE_TEST_DATABASE_URL=$DATABASE_URL  (stop: bash .ci/postgres-down.sh)')


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The server the PostgreSQL tests use; skip (or, in CI, fail) when none is given."""
    url = os.environ.get("GRACE_TEST_DATABASE_URL", "").strip()
    if not url:
        if _in_ci():
            pytest.fail(f"CI is set but GRACE_TEST_DATABASE_URL is not: {HOW_TO}", pytrace=False)
        pytest.skip(f"PostgreSQL store tests need GRACE_TEST_DATABASE_URL; {HOW_TO}")
    return url


def _fresh_schema(server_url: str) -> Iterator[str]:
    schema = f"grace_test_{uuid.uuid4().hex[:12]}"
    admin = make_engine(server_url)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(server_url).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL to an empty database: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state' / 'grace.sqlite'}"
        return
    yield from _fresh_schema(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A migrated store on each backend."""
    s = Store.open(db_url)
    try:
        yield s
    finally:
        s.close()
