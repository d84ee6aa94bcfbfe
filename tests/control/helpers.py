"""Test doubles for the control plane: a scripted backend and a clock the test moves.

``ScriptedBackend`` implements the ``Backend`` protocol in memory. It is a thin
seam for the reconciler's logic, not a model of a real backend: it records
every launch, cancel and adopt, reports each attempt it watches as RUNNING
until the test scripts an outcome (``finish``), and turns a ``cancel`` into a
CANCELLED report on the next ``poll``, as ``LocalBackend`` does. The real
backend is exercised end to end in ``test_e2e.py``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grace.backends.base import AttemptStatus, LaunchSpec, Observation, ReapError
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.spec.cluster import ClusterSpec
from grace.spec.job import JobSpec
from grace.spec.loader import load_cluster

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "examples" / "clusters" / "lab.yaml"


class SimulatedCrash(BaseException):
    """The control plane dies mid-cycle (a BaseException: the reconciler's ``except Exception``
    does not swallow it, as it would not swallow a SIGKILL)."""


class FakeClock:
    """``time.time`` for the reconciler, moved by the test."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class ScriptedBackend:
    """An in-memory ``Backend``: outcomes come from the test, nothing runs.

    - ``launch`` records the LaunchSpec and watches the attempt; it raises
      ``SimulatedCrash`` for jobs in ``crash_on_launch`` before recording anything,
      and ``RuntimeError`` for jobs in ``refuse_launch``;
    - ``poll`` reports RUNNING for watched attempts, or the outcome scripted
      with ``finish`` (once; the attempt is then forgotten);
    - ``cancel`` records the call and, unless ``slow_cancel``, makes the next
      poll report CANCELLED;
    - ``adopt`` answers ``alive_on_adopt.get(job_id, True)`` and raises
      ValueError for a handle it cannot read (as LocalBackend does);
    - ``reap`` records the call and ends the attempt's scripted ``orphans`` (processes
      no handle points to, e.g. left by a crash mid-launch) and, if it watches the
      attempt, the attempt itself: the next poll reports it LOST, once, as
      LocalBackend does. It returns how many processes that ended (a watched
      attempt counts as one); ``reap_fails`` makes it raise ReapError instead;
    - ``launch`` of attempt n first reaps attempts 1..n-1 of the job, as every real
      backend does (recorded in ``launch_reaps``).
    """

    cluster: ClusterSpec | None = None
    name: str = "scripted"
    capabilities: frozenset[str] = frozenset({"launch", "cancel", "poll", "adopt", "reap", "drain"})
    alive_on_adopt: dict[int, bool] = field(default_factory=dict)
    crash_on_launch: set[int] = field(default_factory=set)
    refuse_launch: set[int] = field(default_factory=set)
    slow_cancel: bool = False
    launches: list[LaunchSpec] = field(default_factory=list)
    cancels: list[tuple[int, int]] = field(default_factory=list)
    adopts: list[tuple[int, int, str]] = field(default_factory=list)
    drains: list[tuple[str, str]] = field(default_factory=list)
    reaps: list[tuple[int, int, Path]] = field(default_factory=list)
    launch_reaps: list[tuple[int, int]] = field(default_factory=list)  # (job, attempt) ended by a launch
    orphans: dict[tuple[int, int], int] = field(default_factory=dict)  # processes without a handle
    reap_fails: set[int] = field(default_factory=set)  # jobs whose reap raises ReapError
    polls: int = 0
    watching: dict[tuple[int, int], str] = field(default_factory=dict)
    outcomes: dict[tuple[int, int], Observation] = field(default_factory=dict)

    # ------------------------------------------------------------------ protocol
    def inventory(self) -> ClusterSpec:
        return self.cluster if self.cluster is not None else load_cluster(LAB)

    def launch(self, spec: LaunchSpec) -> str:
        if spec.job_id in self.crash_on_launch:
            raise SimulatedCrash(f"control plane died launching job {spec.job_id}")
        if spec.job_id in self.refuse_launch:
            raise RuntimeError(f"backend refused job {spec.job_id}")
        for earlier in range(1, spec.attempt):
            if self._end(spec.job_id, earlier):
                self.launch_reaps.append((spec.job_id, earlier))
        self.launches.append(spec)
        handle = json.dumps({"backend": self.name, "job_id": spec.job_id,
                             "attempt": spec.attempt})
        self.watching[(spec.job_id, spec.attempt)] = handle
        return handle

    def poll(self) -> list[Observation]:
        self.polls += 1
        out: list[Observation] = []
        for key in list(self.watching):
            obs = self.outcomes.pop(key, None)
            if obs is None:
                out.append(Observation(key[0], key[1], AttemptStatus.RUNNING))
            else:
                out.append(obs)
                del self.watching[key]
        return out

    def cancel(self, job_id: int, attempt: int, grace_s: float = 10.0) -> None:
        self.cancels.append((job_id, attempt))
        key = (job_id, attempt)
        if key in self.watching and key not in self.outcomes and not self.slow_cancel:
            self.outcomes[key] = Observation(job_id, attempt, AttemptStatus.CANCELLED,
                                             detail="cancelled")

    def adopt(self, job_id: int, attempt: int, handle: str) -> bool:
        self.adopts.append((job_id, attempt, handle))
        try:
            data = json.loads(handle)
            if (data["job_id"], data["attempt"]) != (job_id, attempt):
                raise ValueError("handle of another attempt")
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"job {job_id} attempt {attempt}: bad handle {handle!r}: {e}") from e
        alive = self.alive_on_adopt.get(job_id, True)
        if alive:
            self.watching[(job_id, attempt)] = handle
        return alive

    def reap(self, job_id: int, attempt: int, workdir: Path) -> int:
        self.reaps.append((job_id, attempt, Path(workdir)))
        if job_id in self.reap_fails:
            raise ReapError(f"job {job_id} attempt {attempt}: processes survive (scripted)")
        return self._end(job_id, attempt)

    def _end(self, job_id: int, attempt: int) -> int:
        """SIGKILL, in effect: orphans vanish, a watched attempt is reported LOST next poll."""
        if job_id in self.reap_fails:
            raise ReapError(f"job {job_id} attempt {attempt}: processes survive (scripted)")
        key = (job_id, attempt)
        ended = self.orphans.pop(key, 0)
        if key in self.watching and key not in self.outcomes:
            self.outcomes[key] = Observation(job_id, attempt, AttemptStatus.LOST,
                                             detail="ended by reap()")
            ended += 1
        return ended

    def drain(self, node: str, reason: str) -> None:
        self.drains.append((node, reason))

    # ------------------------------------------------------------------ scripting
    def finish(self, job_id: int, status: AttemptStatus = AttemptStatus.SUCCEEDED,
               attempt: int | None = None, exit_code: int | None = None, detail: str = "",
               failed_node: str | None = None) -> None:
        """The next poll reports this outcome for the job's (latest watched) attempt."""
        if attempt is None:
            attempt = max(a for j, a in self.watching if j == job_id)
        if exit_code is None:
            exit_code = {AttemptStatus.SUCCEEDED: 0, AttemptStatus.FAILED: 1}.get(status)
        self.outcomes[(job_id, attempt)] = Observation(job_id, attempt, status, exit_code,
                                                       detail, failed_node)

    def end_cancelled(self) -> None:
        """With ``slow_cancel``: the processes of every cancelled attempt have now ended."""
        for job_id, attempt in self.cancels:
            if (job_id, attempt) in self.watching:
                self.outcomes[(job_id, attempt)] = Observation(
                    job_id, attempt, AttemptStatus.CANCELLED, detail="cancelled")

    def launches_of(self, job_id: int) -> list[LaunchSpec]:
        return [s for s in self.launches if s.job_id == job_id]


def job_spec(name: str = "job", gpus: float | None = 1, **kw: Any) -> JobSpec:
    body: dict[str, Any] = {"name": name, "command": ["python", "train.py"], **kw}
    if gpus is not None:
        body["gpus"] = gpus
    return JobSpec.model_validate(body)


def add_job(store: Store, now: float, name: str = "job", gpus: float | None = 1,
            **kw: Any) -> int:
    """Store a job the way the API does (validated spec, pending), at the fake ``now``."""
    with store.transaction() as s:
        return repo.add_job(s, job_spec(name, gpus, **kw), now).id


def event_kinds(store: Store, job_id: int) -> list[str]:
    with store.read() as s:
        return [e.kind.value for e in repo.events(s, job_id)]


def job_dir(state_dir: Path, job_id: int) -> Path:
    """A job's directory under a control plane's state dir (``jobs/<store id>-<job id>``):
    the tests use one store per state dir, so the job id alone finds it."""
    found = sorted((Path(state_dir) / "jobs").glob(f"*-{job_id}"))
    if len(found) > 1:
        raise AssertionError(f"several stores' job {job_id} under {state_dir}: {found}")
    if found:
        return found[0]
    # not launched yet: where it will be, from the store's id (grace up's default SQLite file)
    import sqlite3

    db = Path(state_dir) / "grace.sqlite"
    if not db.exists():
        raise AssertionError(f"no directory for job {job_id} under {state_dir} and no store")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (store_id,) = conn.execute("SELECT value FROM store_meta WHERE key = 'store_id'").fetchone()
    return Path(state_dir) / "jobs" / f"{store_id[:12]}-{job_id}"


def make_token(store: Store, role: str = "admin", tenant: str | None = None,
               name: str | None = None, expires_at: float | None = None) -> str:
    """A real API token in ``store`` (what ``grace token create`` makes through the API)."""
    from grace.control.store import tokens
    from grace.control.store.models import Role

    with store.transaction() as s:
        if tenant is not None:
            repo.ensure_tenant(s, tenant)
        _, text = tokens.create(s, name=name or f"{role}-{tenant or 'all'}", role=Role(role),
                                tenant=tenant, created_by="test", now=1.0,
                                expires_at=expires_at)
    return text


def authed(app: Any, store: Store, role: str = "admin", tenant: str | None = None,
           name: str | None = None) -> Any:
    """A TestClient over ``app`` that sends a fresh token of ``role`` with every request."""
    from fastapi.testclient import TestClient

    token = make_token(store, role, tenant, name)
    return TestClient(app, headers={"Authorization": f"Bearer {token}"})


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` on a real uvicorn server on a free loopback port, in a thread; its URL."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def lab_reconciler(store: Store, state_dir: Path, clock: FakeClock) -> Any:
    """A reconciler on the lab cluster over ``store``, a scripted backend and ``clock``: the
    world the API's role, dashboard and metrics tests build their app on."""
    from grace.control.reconciler import Reconciler
    from grace.core.policies import get_policy
    from grace.core.topology import Topology

    spec = load_cluster(LAB)
    return Reconciler(store, ScriptedBackend(spec), Topology.from_spec(spec), get_policy("grace"),
                      state_dir, clock=clock)
