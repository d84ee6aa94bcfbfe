"""Heartbeats: step, loss, throughput and phase breakdown, batched to the control plane.

:class:`StepWindow` folds steps into one record per ``record_s`` seconds (and
one for the first step, so a starting job shows life at once)::

    {"step": 120, "loss": 2.31, "tokens_per_s": 20480.0, "step_s": 0.05, "steps": 20,
     "phases": {"data": 0.001, "forward": 0.012, ...}, "at": 1767000000.0}

``step`` and ``loss`` are the last step's (the loss is the mean over ranks),
``tokens_per_s`` this rank's over the window, ``step_s`` and ``phases`` the
mean seconds per step over the window. In a synchronous gang every rank's
``step_s`` is the same (all wait for the slowest), so straggler detection
compares the phases that do not wait on peers (see ``grace.control.stragglers``).
Non-finite losses are sent as ``null``. Lines of the jsonl file also carry
the rank's ``node``.

:class:`HeartbeatSender` owns a daemon thread that, every ``flush_s`` seconds
(or sooner when ``max_batch`` records wait), appends the new records to
``<workdir>/attempt-<n>/heartbeats-rank<r>.jsonl`` and POSTs them to
``{GRACE_URL}/jobs/{GRACE_JOB_ID}/heartbeats`` as
``{"attempt", "node", "rank", "records": [...]}`` with the attempt's own token
(``GRACE_TOKEN``, which may post this attempt's heartbeats and nothing else) as
its bearer token. Training never waits on
either: ``add`` only appends to a buffer. When the control plane is
unreachable or slow (``timeout_s`` per request) records stay buffered and the
thread backs off (doubling to ``max_backoff_s``); past ``max_buffer`` records
the oldest are dropped and counted in ``dropped``. A 4xx answer other than
408/429 drops that batch (sending it again would not help).
"""

from __future__ import annotations

import json
import math
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any


def _tls_context() -> ssl.SSLContext | None:
    """An https GRACE_URL is verified against ``GRACE_CA_FILE`` when set (``grace up
    --tls-cert`` with a private CA), else against the system's CAs (None)."""
    ca_file = os.environ.get("GRACE_CA_FILE", "").strip()
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:  # training goes on; heartbeats will fail to verify
        print(f"grace.runtime: cannot use GRACE_CA_FILE={ca_file} ({e}); heartbeats verify "
              "against the system's CAs", file=sys.stderr)
        return None


class StepWindow:
    """Folds per-step figures into heartbeat records."""

    def __init__(self, record_s: float = 1.0) -> None:
        self.record_s = record_s
        self._start: float | None = None
        self._steps = 0
        self._tokens = 0.0
        self._step_s = 0.0
        self._phases: dict[str, float] = {}
        self._emitted_first = False
        self._last_step = 0
        self._last_loss: float | None = None

    def add(
        self,
        step: int,
        loss: float | None,
        tokens: float,
        step_s: float,
        phases: dict[str, float],
        now: float,
    ) -> dict[str, Any] | None:
        """Account one step; returns a record when the window is due, else None."""
        if self._start is None:
            self._start = now - step_s
        self._steps += 1
        self._last_step, self._last_loss = step, loss
        self._tokens += tokens
        self._step_s += step_s
        for k, v in phases.items():
            self._phases[k] = self._phases.get(k, 0.0) + v
        if self._emitted_first and now - self._start < self.record_s:
            return None
        self._emitted_first = True
        return self._emit(step, loss, now)

    def flush(self, now: float) -> dict[str, Any] | None:
        """The record of the steps accounted since the last one, if any (at the end of a run)."""
        if not self._steps:
            return None
        return self._emit(self._last_step, self._last_loss, now)

    def _emit(self, step: int, loss: float | None, now: float) -> dict[str, Any]:
        assert self._start is not None
        n = self._steps
        wall = max(now - self._start, 1e-9)
        record = {
            "step": step,
            "loss": loss if loss is not None and math.isfinite(loss) else None,
            "tokens_per_s": self._tokens / wall,
            "step_s": self._step_s / n,
            "steps": n,
            "phases": {k: v / n for k, v in self._phases.items()},
            "at": time.time(),
        }
        self._start, self._steps, self._tokens, self._step_s = now, 0, 0.0, 0.0
        self._phases = {}
        return record


class HeartbeatSender:
    """Buffers records; a daemon thread writes them to jsonl and POSTs them in batches."""

    def __init__(
        self,
        *,
        jsonl_path: Path | None,
        url: str | None,
        job_id: str | None,
        attempt: int,
        node: str,
        rank: int,
        flush_s: float = 5.0,
        timeout_s: float = 2.0,
        max_buffer: int = 10_000,
        max_batch: int = 500,
        max_backoff_s: float = 60.0,
        token: str | None = None,
    ) -> None:
        self.endpoint = f"{url.rstrip('/')}/jobs/{job_id}/heartbeats" if url and job_id else None
        token = token if token is not None else os.environ.get("GRACE_TOKEN")
        self._headers = {"Content-Type": "application/json",
                         **({"Authorization": f"Bearer {token}"} if token else {})}
        self._tls = _tls_context()
        self._head = {"attempt": attempt, "node": node, "rank": rank}
        self.jsonl_path = jsonl_path
        self.flush_s = flush_s
        self.timeout_s = timeout_s
        self.max_batch = max_batch
        self.max_backoff_s = max_backoff_s
        self._http: deque[tuple[int, dict[str, Any]]] = deque(maxlen=max_buffer)  # (seq, record)
        self._seq = 0
        self._file: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._flushed = threading.Condition(self._lock)
        self._started = 0  # cycles begun
        self._done = 0  # number of the last cycle finished
        self._stop = False
        self._final_deadline = 0.0  # set by close(): the last cycle tries until then
        self._next_post = 0.0
        self._backoff = 0.0
        self._warned = False
        # counters, for tests and the final summary
        self.posts = 0
        self.sent = 0
        self.dropped = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="grace-heartbeats", daemon=True)
        self._thread.start()

    def add(self, record: dict[str, Any]) -> None:
        """Never blocks on I/O: appends to the buffers, wakes the thread for a full batch."""
        with self._lock:
            if self.endpoint is not None:
                if len(self._http) == self._http.maxlen:
                    self.dropped += 1
                self._seq += 1
                self._http.append((self._seq, record))
            if self.jsonl_path is not None:
                self._file.append(record)
            full = len(self._http) >= self.max_batch or len(self._file) >= self.max_batch
        if full:
            self._wake.set()

    def flush(self, timeout: float = 5.0) -> bool:
        """Ask for a cycle now and wait (at most ``timeout``) until one has run."""
        with self._lock:
            target = self._started + 1  # a cycle that begins after this call
            self._wake.set()
            return self._flushed.wait_for(
                lambda: self._done >= target or not self._thread.is_alive(), timeout
            )

    def close(self, timeout: float = 10.0) -> None:
        """Last cycle, then stop the thread; bounded by ``timeout``.

        The last records carry what only they carry (a sweep trial's final metric, the
        final checkpoint's save): on a busy control plane one 2 s POST may not be answered,
        so the last cycle tries again, with longer reads, until ``timeout`` is nearly spent.
        A job whose control plane is down waits that long at exit, once."""
        with self._lock:
            self._stop = True
            self._final_deadline = time.monotonic() + max(timeout - 0.5, 0.0)
        self._next_post = 0.0
        self._wake.set()
        self._thread.join(timeout)

    @property
    def buffered(self) -> int:
        with self._lock:
            return len(self._http)

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            with self._lock:
                stopping = self._stop
                self._started += 1
                number = self._started
            try:
                self._cycle(final=stopping)
            except Exception as e:  # never let the thread die: heartbeats are best effort
                self._warn(f"heartbeat cycle failed: {e!r}")
            with self._lock:
                self._done = number
                self._flushed.notify_all()
            if stopping:
                return

    def _cycle(self, final: bool) -> None:
        with self._lock:
            lines, self._file = self._file, []
        if lines and self.jsonl_path is not None:
            try:
                self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.jsonl_path, "a") as f:
                    # the node rides along so a reader of the file alone can tell ranks' nodes
                    # apart (straggler detection compares nodes, grace.control.stragglers)
                    f.write("".join(json.dumps({"node": self._head["node"], **r}, allow_nan=False)
                                    + "\n" for r in lines))
            except (OSError, ValueError) as e:
                self._warn(f"cannot write {self.jsonl_path}: {e}")
        if self.endpoint is None or time.monotonic() < self._next_post:
            return
        for _ in range(100):
            with self._lock:
                items = [self._http[i] for i in range(min(self.max_batch, len(self._http)))]
            if not items:
                return
            batch = [r for _, r in items]
            left = self._final_deadline - time.monotonic()
            if final and left <= 0:
                return
            outcome = self._post(batch, min(left, 5.0) if final else self.timeout_s)
            if outcome in ("retry", "down"):
                self.failures += 1
                if final and outcome == "retry" and self._final_deadline - time.monotonic() > 0.5:
                    time.sleep(0.2)
                    continue
                self._backoff = min(self.max_backoff_s, max(self.flush_s, self._backoff * 2))
                self._next_post = time.monotonic() + self._backoff
                return
            last = items[-1][0]
            with self._lock:  # sent, or refused for good: either way these leave the buffer
                while self._http and self._http[0][0] <= last:
                    self._http.popleft()
            if outcome == "sent":
                self.sent += len(batch)
                self._backoff = 0.0
            else:
                self.dropped += len(batch)

    def _post(self, batch: list[dict[str, Any]], timeout_s: float) -> str:
        assert self.endpoint is not None
        try:
            body = json.dumps({**self._head, "records": batch}, allow_nan=False).encode()
        except ValueError:  # a NaN or infinite loss: sent as null (the API refuses NaN), and
            # the thread lives on: a dead sender would look like a hang to the control plane
            body = json.dumps({**self._head, "records": _finite(batch)}, allow_nan=False).encode()
        req = urllib.request.Request(
            self.endpoint, data=body, method="POST", headers=self._headers
        )
        self.posts += 1
        try:
            with urllib.request.urlopen(req, timeout=timeout_s, context=self._tls) as resp:
                resp.read()
            return "sent"
        except urllib.error.HTTPError as e:
            if 400 <= e.code < 500 and e.code not in (408, 429):
                self._warn(f"control plane refused heartbeats: HTTP {e.code}")
                return "refused"
            return "retry"
        except urllib.error.URLError as e:
            # nothing listens (a control plane that is down): the last cycle does not wait
            return "down" if isinstance(e.reason, ConnectionRefusedError) else "retry"
        except (OSError, ValueError):  # timeouts, resets
            return "retry"

    def _warn(self, msg: str) -> None:
        if not self._warned:
            self._warned = True
            print(f"grace.runtime: {msg} (further heartbeat problems are not reported)", file=sys.stderr)


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
