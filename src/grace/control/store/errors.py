"""What the store refuses, as exceptions the API can map to HTTP codes.

Each derives from the builtin a caller would naturally catch (``LookupError``
for a missing row, ``ValueError`` for a move the state machine forbids), so
code that knows nothing of the store still handles them sensibly.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of everything the store raises on purpose."""


class NotFound(StoreError, LookupError):
    """The job, attempt or node named does not exist (HTTP 404)."""


class IllegalJobTransition(StoreError, ValueError):
    """A job or attempt move the transition table forbids; nothing was written (HTTP 409)."""


class StaleWrite(StoreError):
    """Someone else changed the job since it was read; re-read and decide again (HTTP 409)."""


class Fenced(StoreError):
    """This control plane lost the leader lease: another one took over the store, so this
    one's write was rolled back and it must stop writing (HTTP 503). See ``store.lease``."""
