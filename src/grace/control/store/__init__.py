"""The control plane's durable state: SQLite by default, PostgreSQL when given a URL.

The reconciler and API open ``Store.transaction()`` and call the functions in
``repository`` inside it; the schema evolves only through the Alembic
migrations shipped in ``migrations/``, which ``Store.open`` applies first.
"""

from grace.control.store.db import Store, default_url, make_engine, migrate
from grace.control.store.errors import IllegalJobTransition, NotFound, StaleWrite, StoreError
from grace.control.store.models import AttemptState, JobEventKind, JobState

__all__ = [
    "AttemptState",
    "IllegalJobTransition",
    "JobEventKind",
    "JobState",
    "NotFound",
    "StaleWrite",
    "Store",
    "StoreError",
    "default_url",
    "make_engine",
    "migrate",
]
