"""The dashboard's browser sessions: a random id in a cookie, the token it stands for here.

Why a session and not the token itself in a cookie: the token is a credential the
person also uses with the CLI; a cookie is sent with every request to this host
and lives in the browser's profile. A session id is worth nothing elsewhere, ends
after :data:`MAX_AGE_S` whatever the token's own expiry, and ends with the token
(``control.auth`` drops a session whose token is refused). Kept in memory only:
a control plane that restarts signs every browser out, which costs a person one
click on the link with ``?token=`` again.

Bounded: at most :data:`MAX_SESSIONS` live at once (the oldest end first), so a
script that signs in in a loop cannot grow the process.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass

#: A session lasts this long at most (a working day and then some), then signs in again.
MAX_AGE_S = 12 * 3600.0
MAX_SESSIONS = 10_000


@dataclass(frozen=True, slots=True)
class _Session:
    token: str
    created_at: float


class Sessions:
    """Session id -> token text; thread-safe (the API answers from a thread pool)."""

    def __init__(self, max_age_s: float = MAX_AGE_S, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_age_s = max_age_s
        self.max_sessions = max_sessions
        self._live: OrderedDict[str, _Session] = OrderedDict()  # oldest first
        self._lock = threading.Lock()

    def create(self, token: str, now: float) -> str:
        """A new session for ``token`` (already checked by the caller); its id, 256 bits."""
        session_id = secrets.token_urlsafe(32)
        with self._lock:
            self._live[session_id] = _Session(token, now)
            while len(self._live) > self.max_sessions:
                self._live.popitem(last=False)
        return session_id

    def token_for(self, session_id: str, now: float) -> str | None:
        """The token a live session stands for; None for an unknown or expired one."""
        with self._lock:
            found = self._live.get(session_id)
            if found is None:
                return None
            if now - found.created_at >= self.max_age_s or now < found.created_at:
                del self._live[session_id]  # a clock that went back ends it too: re-sign in
                return None
            return found.token

    def end(self, session_id: str) -> None:
        with self._lock:
            self._live.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)


__all__ = ["MAX_AGE_S", "MAX_SESSIONS", "Sessions"]
