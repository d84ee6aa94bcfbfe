"""The delivery worker: the leader sends what the outbox holds, at least once.

One pass (``Deliverer.run_once``) reads the due rows, sends each outside any
transaction (a slow receiver must not hold the store's write lock), then
records the outcome in a short transaction of its own. A row is retried with
exponential backoff (``first_retry_s`` doubling up to ``max_retry_s``; the
schedule is the row's ``next_try_at``, so it survives a restart, which an
in-process retry library's would not) and marked failed after ``max_tries``
or at once when another try cannot help (``senders.SendError.retry``).

Only the leader delivers (``NotifyLoop`` checks ``Leadership``, and the
outcome's write is fenced like every other): a standby that delivered too
would double every notification. A process that dies after a send and before
its mark sends again on the next start: receivers drop repeats by the
``Grace-Notification-Id`` header.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from grace.control.notify import outbox
from grace.control.notify.senders import SendError, post_webhook, send_mail
from grace.control.notify.signing import load_or_create_key
from grace.control.store.db import Store
from grace.control.store.errors import Fenced
from grace.control.store.lease import Leadership
from grace.control.store.notifications import Channel, Origin
from grace.spec.notify import DeliverySpec, NotifyConfig, host_allowed

log = logging.getLogger("grace.notify")


@dataclass(frozen=True)
class _Due:
    """A row as read, detached from its session (the send runs outside any transaction)."""

    id: int
    channel: Channel
    origin: Origin
    destination: str
    payload: dict[str, Any]
    tries: int


def backoff_s(delivery: DeliverySpec, tries: int) -> float:
    """Seconds before try ``tries + 1`` after ``tries`` failed ones: 5, 10, 20, ... capped."""
    return float(min(delivery.first_retry_s * 2 ** max(tries - 1, 0), delivery.max_retry_s))


class Deliverer:
    """Sends due notifications of one store; ``config`` None sends with the defaults (a
    store's rows outlive the file that enabled them: they are sent or failed, not lost)."""

    def __init__(self, store: Store, config: NotifyConfig | None, key: bytes, base_url: str,
                 clock: Callable[[], float] = time.time,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.store = store
        self.config = config or NotifyConfig()
        self.key = key
        self.base_url = base_url.rstrip("/")
        self.clock = clock
        self.transport = transport
        self.client = httpx.Client(timeout=self.config.delivery.timeout_s, follow_redirects=False,
                                   transport=transport)

    @classmethod
    def for_server(cls, store: Store, config: NotifyConfig | None, state_dir: Path,
                   base_url: str) -> Deliverer:
        """``base_url``: grace up's own address, unless the file's ``link_url`` says where
        users reach it (behind a proxy, or when it listens on 0.0.0.0)."""
        link = config.link_url if config is not None and config.link_url else base_url
        return cls(store, config, load_or_create_key(state_dir), link)

    def close(self) -> None:
        self.client.close()

    def run_once(self, limit: int = 100) -> int:
        """One pass over the due rows; returns how many were tried."""
        with self.store.read() as s:
            rows = [_Due(r.id, r.channel, r.origin, r.destination, dict(r.payload), r.tries)
                    for r in outbox.due(s, self.clock(), limit)]
        for row in rows:
            error = self._send(row)
            now = self.clock()
            tries = row.tries + 1
            retry_at = None
            if error is not None and error.retry and tries < self.config.delivery.max_tries:
                retry_at = now + backoff_s(self.config.delivery, tries)
            with self.store.transaction() as s:
                outbox.mark(s, row.id, now, None if error is None else str(error), retry_at)
            if error is not None:
                log.warning("notification %s to %s: try %d failed (%s)%s", row.id,
                            row.destination, tries, error,
                            "" if retry_at else "; giving up")
        return len(rows)

    def _send(self, row: _Due) -> SendError | None:
        payload = {**row.payload, "url": f"{self.base_url}/jobs/{row.payload['job']['id']}"}
        try:
            if row.channel is Channel.WEBHOOK:
                # the list may have shrunk since submit (a restart with a new file)
                if row.origin is Origin.JOB and not host_allowed(row.destination,
                                                                 self.config.allow_hosts):
                    raise SendError("its host is no longer on the server's allow_hosts",
                                    retry=False)
                # job URLs: the resolved address is checked; the operator's (tenant) are not
                post_webhook(self.client, row.destination, payload, self.key,
                             self.config.delivery.timeout_s,
                             self.config.allow_hosts if row.origin is Origin.JOB else None,
                             pin=self.transport is None)
            else:
                smtp = self.config.smtp
                if smtp is None:
                    raise SendError("this server has no smtp: relay in its --notify file",
                                    retry=False)
                send_mail(smtp, row.destination, payload, self.config.delivery.timeout_s)
        except SendError as e:
            return e
        except Exception as e:  # one row a sender chokes on (a URL httpx cannot encode)
            log.exception("notification %s: cannot be sent", row.id)  # must not block the rest
            return SendError(f"cannot be sent: {type(e).__name__}: {e}"[:300], retry=False)
        return None


class NotifyLoop(threading.Thread):
    """``run_once`` every ``interval_s`` while this process leads (always, without a
    ``leadership``: tests and tools). A failed pass is logged and retried next time."""

    def __init__(self, deliverer: Deliverer, leadership: Leadership | None = None,
                 interval_s: float = 1.0) -> None:
        super().__init__(name="notify", daemon=True)
        self.deliverer = deliverer
        self.leadership = leadership
        self.interval_s = interval_s
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            if self.leadership is None or self.leadership.leading:
                try:
                    self.deliverer.run_once()
                except Fenced:
                    log.info("notify: no longer the leader; the new leader delivers")
                except Exception:
                    log.exception("notify: a delivery pass failed; retrying")
            self.stopping.wait(self.interval_s)

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=30)
        self.deliverer.close()


__all__ = ["Deliverer", "NotifyLoop", "backoff_s"]
