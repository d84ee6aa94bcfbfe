"""The Slurm backend: Grace decides, a real Slurm executes.

Grace keeps every decision (placement, right-sizing, fair share, restarts,
checkpoint interval); Slurm keeps what it is good at (gang allocation, process
tracking, accounting). One attempt is one ``sbatch``:

    sbatch --job-name=grace-<job>-<attempt> --comment="grace job J attempt A of <instance>"
           --nodes=N --nodelist=<exactly Grace's nodes> --gres=gpu:K --time=M
           --signal=TERM@S --output=<attempt dir>/slurm-%j.out --export=ALL  <attempt dir>/job.sh

``job.sh`` exports the attempt's environment (checkpoint dir and interval,
``GRACE_URL`` for heartbeats, Grace's ids) except its secrets, and runs ``srun``
with one task per node; each task (``node.sh``) runs ``torchrun`` with the static rendezvous on the
first node of ``$SLURM_JOB_NODELIST`` at a port derived from the Slurm job id,
so two jobs sharing a node never pick the same one. Each rank runs under the
local backend's ``rank`` shim, which records its exit code, node and end time
under ``ranks/``: that is how a failure names the node and rank that failed
*first* (Slurm only knows that the step failed). GPUs are the ones Slurm
allocates (``CUDA_VISIBLE_DEVICES`` from ``--gres``); Grace's GPU slots only
count them.

The two ids are linked both ways: the handle Grace stores holds the Slurm job
id, and the Slurm job's name and comment hold Grace's job and attempt, so
``squeue``/``sacct`` users see whose job it is, and launch finds a job that a
crashed control plane submitted but never recorded. The comment also names
the control plane (a hash of its state directory), so two Grace instances on
one Slurm never take each other's jobs for their own.

Slurm being unreachable is not the same as a job being gone: a failed
``squeue`` leaves every attempt RUNNING for that cycle (a slurmctld restart
must not requeue the whole cluster); only "Invalid job id" means unknown.

Observation: ``squeue -t all`` for every tracked job in one call; for a job
that ended, ``scontrol show job`` (kept ``MinJobAge`` seconds), else the
completion record ``sacct -c``. Cancel sends SIGTERM to the job's steps (the
training processes: the runtime checkpoints and exits 143) with
``scancel --signal=TERM`` and returns; ``grace_s`` later a background worker
sends ``scancel --full --signal=KILL`` and ``scancel`` if Slurm still lists the
job live, so a long grace never holds up the reconcile cycle. The batch shell
itself is not signalled: it only waits for ``srun``, and a signalled ``srun``
would forward a second SIGTERM to the ranks.

Secrets (``base.SECRET_ENV``: the attempt's job token, the checkpoint data key)
are never written to ``job.sh``, ``launch.json``, a log or the handle: they are
in the environment of the ``sbatch`` process only, which ``--export=ALL`` hands
to the batch script and ``srun --export=ALL`` to every step. The control plane's
own values of those names are dropped first, so a job never inherits, say, the
admin token of the shell that ran ``grace up``. What remains, and Grace cannot
change: slurmctld keeps a batch job's environment in its state
(``<StateSaveLocation>/hash.<n>/job.<id>/environment``, mode 0700, SlurmUser's)
from submit until it purges the job record (``MinJobAge`` after the end), and
sites with ``AccountingStoreFlags=job_env`` also store it in slurmdbd, where
``sacct --env-vars -j <id>`` shows it to the job's owner and admins
(``scontrol show job -dd`` does not show it). The job's processes carry it, so
root and the job's own Unix user can read it in ``/proc/<pid>/environ``: all of
one control plane's jobs run as that one user.

Isolation is Slurm's, not Grace's (docs/security.md, "Isolation"): memory, CPU and
GPU-device limits and ending every process of a step come from Slurm's
``task/cgroup`` and ``proctrack/cgroup`` plugins where the site configures them, and
every attempt runs as the user that runs ``grace up`` (the one that calls ``sbatch``),
not as a uid per tenant as on the local backend.

Reap ends an attempt Grace may hold no handle for: the Slurm jobs named
``grace-<job>-<attempt>`` with this instance's comment, and the one its
``launch.json`` names, get ``scancel --full --signal=KILL`` and ``scancel``, and
reap waits until Slurm no longer lists them live. Launch of attempt n reaps
attempts 1..n-1 of the job first, so two attempts never hold nodes at once.

On disk, under the job's ``workdir``::

    attempt-<n>/launch.json        the handle
    attempt-<n>/job.sh, node.sh    the batch script and the per-node step
    attempt-<n>/slurm-<id>.out     the batch script's output
    attempt-<n>/<node>.log         torchrun's output on that node, every rank teed in
    attempt-<n>/ranks/rank-<r>.exit  each rank's exit code, node and end time
    attempt-<n>/cancel.json        written by cancel() before it signals anything
    checkpoints/                   $GRACE_CHECKPOINT_DIR, shared by all attempts
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grace
from grace.backends import local_agent
from grace.backends.base import (
    SECRET_ENV,
    AttemptStatus,
    Deadlines,
    LaunchSpec,
    Observation,
    ReapError,
    adopt_recorded,
    split_secret_env,
)
from grace.backends.local_agent import read_json, write_json_atomic
from grace.backends.slurm_cli import (
    SlurmCli,
    SlurmError,
    expand_hostlist,
    parse_exit_code,
    parse_record,
    parse_table,
)
from grace.backends.slurm_inventory import (
    DEFAULT_GPU,
    GRACE_REASON_PREFIX,
    SlurmNode,
    import_cluster,
    read_nodes,
)
from grace.spec.cluster import ClusterSpec

log = logging.getLogger(__name__)

HANDLE_VERSION = 1
#: Rendezvous ports are RDZV_PORT_BASE + (Slurm job id mod RDZV_PORT_SPAN).
RDZV_PORT_BASE, RDZV_PORT_SPAN = 20000, 20000
#: Slurm job states in which the job still holds (or will hold) its nodes.
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                         "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                         "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
#: Variables of the control plane's environment that must not reach torchrun.
_SCRUB = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
          "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", local_agent.TOKEN_ENV)
DETAIL_LINES = 20
#: Seconds reap() waits for Slurm to stop listing a scancelled job (ReapError after that).
REAP_TIMEOUT_S = 60.0
#: Seconds after the final scancel of a cancel before a job still live is logged (and scancelled again).
CANCEL_CHECK_S = 60.0


def job_name(job_id: int, attempt: int) -> str:
    """The Slurm job name of an attempt: how ``squeue`` users (and launch) find it."""
    return f"grace-{job_id}-{attempt}"


@dataclass
class _Attempt:
    job_id: int
    attempt: int
    slurm_id: str
    dir: Path
    handle: str


@dataclass(frozen=True)
class SlurmJobInfo:
    """What Slurm says about one job."""

    slurm_id: str
    state: str  # upper case, as Slurm prints it: RUNNING, COMPLETED, NODE_FAIL, ...
    exit_code: int = 0
    signal: int = 0
    nodes: str = ""
    reason: str = ""

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


def _tail(path: Path, lines: int = DETAIL_LINES) -> str:
    try:
        text = path.read_bytes()[-64 * 1024:].decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-4000:]


class SlurmBackend:
    """Launches each attempt as one Slurm batch job; survives control-plane restarts.

    ``cluster`` is the spec Grace schedules on; by default it is imported from
    Slurm itself. ``partition`` and ``account`` go to sbatch when given;
    ``cwd`` is where jobs run (relative script paths resolve there).
    """

    name = "slurm"
    capabilities: frozenset[str] = frozenset({"launch", "cancel", "adopt", "poll", "reap", "drain",
                                              "node_states", "inject"})

    def __init__(self, state_dir: Path, *, cluster: ClusterSpec | None = None,
                 cli: SlurmCli | None = None, cwd: Path | None = None,
                 partition: str | None = None, account: str | None = None,
                 default_gpu: str = DEFAULT_GPU) -> None:
        self.cli = cli or SlurmCli()
        self._state_dir = Path(state_dir)
        (self._state_dir / "attempts").mkdir(parents=True, exist_ok=True)
        self._cwd = Path(cwd) if cwd is not None else Path.cwd()
        self._partition = partition
        self._account = account
        self._inventory = cluster or import_cluster(self.cli, default_gpu=default_gpu,
                                                    partition=partition)
        self._attempts: dict[tuple[int, int], _Attempt] = {}
        self._lock = threading.RLock()
        self.instance = hashlib.sha1(str(self._state_dir.resolve()).encode()).hexdigest()[:10]
        self._kills = Deadlines(f"grace-slurm-kills-{self.instance}")  # cancel's kill after grace

    # ------------------------------------------------------------------ protocol

    def inventory(self) -> ClusterSpec:
        return self._inventory

    def launch(self, spec: LaunchSpec) -> str:
        """Submit one sbatch; idempotent per (job, attempt), like the local backend.

        An attempt this or an earlier control plane already submitted (its
        ``launch.json`` names a job Slurm still knows) is adopted instead of
        submitted twice. A live Slurm job of this attempt with no ``launch.json``
        (the control plane died between sbatch and writing it) is cancelled
        first, as the local backend kills a half-started gang: it may hold
        nodes Grace has since planned for other work.
        """
        spec.check()
        key = (spec.job_id, spec.attempt)
        workdir = Path(spec.workdir).resolve()
        with self._lock:
            if spec.attempt > 1:  # an earlier attempt Grace lost track of must not share nodes
                ended = self._reap(spec.job_id, set(range(1, spec.attempt)), workdir)
                if ended:
                    log.warning("job %s: cancelled %d Slurm job(s) of attempts before %s "
                                "before launching it", spec.job_id, ended, spec.attempt)
            if key in self._attempts:
                return self._attempts[key].handle
            attempt_dir = workdir / f"attempt-{spec.attempt}"
            adopted = adopt_recorded(self, spec, attempt_dir)
            if adopted is not None:
                return adopted
            # submitted by a control plane that died before writing launch.json: end it,
            # it may be on nodes Grace has since given to someone else
            self._reap(spec.job_id, {spec.attempt}, workdir)
            if attempt_dir.exists():
                attempt_dir.rename(attempt_dir.with_name(f"{attempt_dir.name}.stale-{time.time():.0f}"))
            return self._submit(spec, attempt_dir)

    def poll(self) -> list[Observation]:
        """RUNNING for live attempts; each ended attempt reported exactly once, then forgotten."""
        with self._lock:
            attempts = list(self._attempts.values())
            if not attempts:
                return []
            try:
                info = self._query([a.slurm_id for a in attempts])
            except SlurmError as e:  # unreachable, not ended: they keep their nodes
                log.warning("cannot observe Slurm jobs this cycle: %s", e)
                return [Observation(a.job_id, a.attempt, AttemptStatus.RUNNING) for a in attempts]
            out = []
            for a in attempts:
                obs = self._observe(a, info.get(a.slurm_id))
                out.append(obs)
                if obs.status is not AttemptStatus.RUNNING:
                    del self._attempts[(a.job_id, a.attempt)]
                    self._registry(a.job_id, a.attempt).unlink(missing_ok=True)
                    self._kills.drop((a.job_id, a.attempt))
            return out

    def cancel(self, job_id: int, attempt: int, grace_s: float = 10.0) -> None:
        """SIGTERM the job's steps now; kill and cancel the job after ``grace_s``.

        Returns at once (one ``squeue`` and one ``scancel``): the kill comes from
        this backend's worker when the grace ends, if Slurm still lists the job
        live; ``poll`` reports CANCELLED, once, when Slurm says it ended. A job not
        yet running (pending, configuring) has nothing to checkpoint and is
        scancelled at once. The ``cancel.json`` marker makes the outcome CANCELLED
        even if the control plane dies mid-cancel (``adopt`` re-arms the kill).
        Cancelling again only brings the kill forward; unknown or already-ended
        attempts are left alone.
        """
        with self._lock:
            a = self._attempts.get((job_id, attempt))
        if a is None:
            return
        info = self._query([a.slurm_id]).get(a.slurm_id)
        if info is None or not info.live:
            return
        marker = a.dir / "cancel.json"
        first = not marker.exists()
        if first:
            write_json_atomic(marker, {"at": time.time(), "grace_s": grace_s})
        if info.state != "RUNNING":
            self.cli.run("scancel", a.slurm_id, check=False)
            self._kills.at((job_id, attempt), time.monotonic() + CANCEL_CHECK_S,
                           self._check_ended(a))
            return
        if first or (job_id, attempt) not in self._kills.due():
            self.cli.run("scancel", "--signal=TERM", a.slurm_id, check=False)
        self._kills.at((job_id, attempt), time.monotonic() + max(0.0, grace_s), self._kill_after_grace(a))

    def _kill_after_grace(self, a: _Attempt) -> Callable[[], float | None]:
        """The worker's step when a cancel's grace ends: kill and cancel what still runs,
        then check on it CANCEL_CHECK_S later."""

        def kill() -> float | None:
            if not self._still_live(a):
                return None
            log.info("job %s attempt %s: Slurm job %s outlived its grace; killing it",
                     a.job_id, a.attempt, a.slurm_id)
            self.cli.run("scancel", "--full", "--signal=KILL", a.slurm_id, check=False)
            self.cli.run("scancel", a.slurm_id, check=False)
            self._kills.at((a.job_id, a.attempt), time.monotonic() + CANCEL_CHECK_S,
                           self._check_ended(a))
            return None

        return kill

    def _check_ended(self, a: _Attempt) -> Callable[[], float | None]:
        """The worker's step after a final scancel: a job Slurm still lists live is logged
        and scancelled again, every CANCEL_CHECK_S, until it ends."""

        def check() -> float | None:
            if not self._still_live(a):
                return None
            log.error("job %s attempt %s: Slurm job %s has not ended %.0f s after scancel; "
                      "cancelling again", a.job_id, a.attempt, a.slurm_id, CANCEL_CHECK_S)
            self.cli.run("scancel", a.slurm_id, check=False)
            return time.monotonic() + CANCEL_CHECK_S

        return check

    def _still_live(self, a: _Attempt) -> bool:
        """Does Slurm list the job live? Unreachable counts as live (try again later)."""
        try:
            info = self._query([a.slurm_id]).get(a.slurm_id)
        except SlurmError as e:
            log.warning("job %s attempt %s: cannot ask Slurm about job %s: %s",
                        a.job_id, a.attempt, a.slurm_id, e)
            return True
        return info is not None and info.live

    def adopt(self, job_id: int, attempt: int, handle: str) -> bool:
        """Re-attach to the Slurm job the handle names; False if Slurm no longer knows it.

        A job Slurm still knows, running or ended, is adopted: the next poll
        reports how it ended. The job's name must be this attempt's, so a
        handle pointing at someone else's job (ids are reused after a
        slurmctld state wipe) is refused.
        """
        try:
            data = json.loads(handle)
            if data.get("v") != HANDLE_VERSION or data.get("backend") != self.name:
                raise ValueError(f"not a slurm backend handle (v{data.get('v')})")
            if (data["job_id"], data["attempt"]) != (job_id, attempt):
                raise ValueError(f"handle is for job {data['job_id']} attempt {data['attempt']}")
            slurm_id = str(data["slurm_job_id"])
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"job {job_id} attempt {attempt}: bad handle: {e}") from e
        found = self._lookup(slurm_id)
        if found is None:
            return False
        name, _ = found
        if name and name != job_name(job_id, attempt):
            log.warning("Slurm job %s is %r, not job %s attempt %s", slurm_id, name, job_id, attempt)
            return False
        a = _Attempt(job_id, attempt, slurm_id, Path(data["dir"]), handle)
        with self._lock:
            self._attempts[(job_id, attempt)] = a
        cancel = read_json(a.dir / "cancel.json")
        if cancel is not None and found[1].live:
            # cancelled by a control plane that died before the kill: keep its deadline
            left = float(cancel.get("at", 0.0)) + float(cancel.get("grace_s", 0.0)) - time.time()
            self._kills.at((job_id, attempt), time.monotonic() + max(0.0, left),
                           self._kill_after_grace(a))
        return True

    def reap(self, job_id: int, attempt: int, workdir: Path) -> int:
        """Kill and cancel every live Slurm job of the attempt, handle or not; returns how many.

        Found by name and this instance's comment (``squeue --name``), and by the
        Slurm job ``attempt-<n>/launch.json``, the state dir's record or a watched
        attempt names (if its name is the attempt's: ids are reused). Waits until
        Slurm no longer lists them live, for at most REAP_TIMEOUT_S (ReapError
        after that). A watched attempt stays watched: ``poll`` reports its end once.
        """
        with self._lock:
            return self._reap(job_id, {attempt}, Path(workdir).resolve())

    def drain(self, node: str, reason: str) -> None:
        """``scontrol update state=drain``; the reason (prefixed ``grace:``) shows in ``sinfo -R``."""
        text = reason if reason.startswith(GRACE_REASON_PREFIX) else f"{GRACE_REASON_PREFIX} {reason}"
        self.cli.run("scontrol", "update", f"nodename={node}", "state=drain",
                     f"reason={_one_line(text)}")

    def resume(self, node: str) -> None:
        """Return a node Grace drained to service in Slurm too."""
        self.cli.run("scontrol", "update", f"nodename={node}", "state=resume")

    def node_states(self) -> list[SlurmNode]:
        """Every node's Slurm state and reason (one ``scontrol`` call)."""
        return read_nodes(self.cli)

    # ------------------------------------------------------------------ extras

    def slurm_job_id(self, job_id: int, attempt: int) -> str | None:
        with self._lock:
            a = self._attempts.get((job_id, attempt))
        return a.slurm_id if a else None

    def inject(self, job_id: int, attempt: int, fault: str, rank: int = 0) -> list[int]:
        """``kill-rank`` SIGKILLs global rank ``rank``'s training process, ``hang-rank``
        SIGSTOPs it (tests, drills). All nodes of the test cluster share this host, so
        the process is found by its environment, as the local backend does."""
        sig = {"kill-rank": signal.SIGKILL, "hang-rank": signal.SIGSTOP}.get(fault)
        if sig is None:
            raise ValueError(f"unknown fault {fault!r}; the slurm backend injects kill-rank, hang-rank")
        with self._lock:
            a = self._attempts.get((job_id, attempt))
        if a is None:
            raise ValueError(f"job {job_id} attempt {attempt} is not running here")
        hit = []
        marker = f"GRACE_SLURM_ATTEMPT={a.dir}".encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                env = (proc / "environ").read_bytes().split(b"\0")
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in env and f"RANK={rank}".encode() in env \
                    and local_agent.__name__.encode() not in cmd and b"torch.distributed.run" not in cmd:
                try:
                    os.kill(int(proc.name), sig)
                    hit.append(int(proc.name))
                except ProcessLookupError:
                    pass
        if not hit:
            raise ValueError(f"no training process of rank {rank} found for job {job_id} on this host")
        return hit

    def recorded_handles(self) -> dict[tuple[int, int], str]:
        """Handles of attempts submitted from this state_dir and not yet reported ended."""
        found: dict[tuple[int, int], str] = {}
        for path in (self._state_dir / "attempts").glob("*.json"):
            data = read_json(path)
            if data is not None:
                found[(int(data["job_id"]), int(data["attempt"]))] = json.dumps(data, sort_keys=True)
        return found

    # ------------------------------------------------------------------ submit

    def sbatch_args(self, spec: LaunchSpec, attempt_dir: Path) -> list[str]:
        """The sbatch command line of an attempt (its script path last)."""
        gpus = max(len(n.gpus) for n in spec.nodes)
        args = [
            "sbatch", "--parsable",
            f"--job-name={job_name(spec.job_id, spec.attempt)}",
            f"--comment={self._comment(spec.job_id, spec.attempt)}",
            f"--nodes={len(spec.nodes)}", f"--nodelist={','.join(n.node for n in spec.nodes)}",
            "--ntasks-per-node=1", f"--chdir={self._cwd}",
            f"--output={attempt_dir}/slurm-%j.out",
            "--no-requeue",  # a retry is Grace's decision, with a new attempt number
            # the secrets travel in sbatch's environment (sbatch_env); explicit, so a
            # site's SBATCH_EXPORT=NONE cannot drop them
            "--export=ALL",
        ]
        if gpus:
            args.append(f"--gres=gpu:{gpus}")
        if spec.time_limit_s is not None:
            minutes = max(1, math.ceil(spec.time_limit_s / 60))
            # SIGTERM this long before the limit, so the runtime checkpoints before the kill
            args += [f"--time={minutes}", f"--signal=TERM@{min(60, minutes * 30)}"]
        if self._partition:
            args.append(f"--partition={self._partition}")
        if self._account:
            args.append(f"--account={self._account}")
        return [*args, str(attempt_dir / "job.sh")]

    def sbatch_env(self, spec: LaunchSpec) -> dict[str, str]:
        """The ``sbatch`` process's environment: the control plane's, less any SECRET_ENV
        value of its own, plus the attempt's secrets (the only way they reach the job)."""
        _, secrets = split_secret_env(spec.env)
        inherited = {k: v for k, v in self.cli.env().items() if k not in SECRET_ENV}
        return {**inherited, **secrets}

    def _scripts(self, spec: LaunchSpec, attempt_dir: Path) -> tuple[str, str]:
        """(job.sh, node.sh): the batch script and the per-node step it sruns; neither
        holds a SECRET_ENV value (see ``sbatch_env``)."""
        workdir = Path(spec.workdir).resolve()
        src = str(Path(grace.__file__).resolve().parent.parent)
        env, _ = split_secret_env(spec.env)
        env.update(
            GRACE_JOB_ID=str(spec.job_id), GRACE_ATTEMPT=str(spec.attempt),
            GRACE_WORKDIR=str(workdir), GRACE_CHECKPOINT_DIR=str(workdir / "checkpoints"),
            GRACE_SLURM_ATTEMPT=str(attempt_dir),
            PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p),
        )
        env.setdefault("PYTHONUNBUFFERED", "1")
        if os.environ.get("GRACE_URL"):
            env.setdefault("GRACE_URL", os.environ["GRACE_URL"])
        exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        py = shlex.quote(sys.executable)
        command = [sys.executable if c in ("python", "python3") and i == 0 else c
                   for i, c in enumerate(spec.command)]
        gpus = max(len(n.gpus) for n in spec.nodes)
        q = shlex.quote
        job_sh = f"""#!/bin/bash
# Grace job {spec.job_id} attempt {spec.attempt}, written by grace.backends.slurm.
unset {' '.join(_SCRUB)}
{exports}
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$(( {RDZV_PORT_BASE} + SLURM_JOB_ID % {RDZV_PORT_SPAN} ))
echo "grace: job $GRACE_JOB_ID attempt $GRACE_ATTEMPT = slurm job $SLURM_JOB_ID" \\
     "on $SLURM_JOB_NODELIST, rendezvous $head:$port"
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 --export=ALL \\
     --output={q(str(attempt_dir))}/%N.log bash {q(str(attempt_dir / 'node.sh'))} "$head" "$port" &
step=$!
# SIGTERM from scancel or the time limit goes to the step (the ranks checkpoint);
# this shell only waits for it to end and reports its exit code
trap 'echo "grace: SIGTERM, waiting for the ranks to checkpoint and exit"' TERM
while true; do wait $step; rc=$?; kill -0 $step 2> /dev/null || break; done
echo "grace: srun exited $rc"
exit $rc
"""
        node_sh = f"""#!/bin/bash
# One per node of Grace job {spec.job_id} attempt {spec.attempt}: torchrun for this node's ranks.
export GRACE_NODE=$SLURMD_NODENAME
exec {py} -m torch.distributed.run --nnodes="$SLURM_JOB_NUM_NODES" --node-rank="$SLURM_NODEID" \\
  --nproc-per-node={max(1, gpus)} --rdzv-backend=static --master-addr="$1" --master-port="$2" \\
  --rdzv-id={spec.job_id}-{spec.attempt} --max-restarts=0 \\
  --log-dir={q(str(attempt_dir / 'ranks'))}/"$SLURMD_NODENAME" --tee=3 --no-python -- \\
  {py} -m {local_agent.__name__} rank --attempt-dir {q(str(attempt_dir))} -- {shlex.join(command)}
"""
        return job_sh, node_sh

    def _submit(self, spec: LaunchSpec, attempt_dir: Path) -> str:
        workdir = Path(spec.workdir).resolve()
        (attempt_dir / "ranks").mkdir(parents=True)
        (workdir / "checkpoints").mkdir(parents=True, exist_ok=True)
        job_sh, node_sh = self._scripts(spec, attempt_dir)
        (attempt_dir / "job.sh").write_text(job_sh)
        (attempt_dir / "node.sh").write_text(node_sh)
        out = self.cli.run(*self.sbatch_args(spec, attempt_dir), env=self.sbatch_env(spec))
        slurm_id = out.strip().split(";")[0]
        if not slurm_id.isdigit():
            raise SlurmError(f"sbatch printed {out.strip()!r}, not a job id")
        data = {"v": HANDLE_VERSION, "backend": self.name, "job_id": spec.job_id,
                "attempt": spec.attempt, "slurm_job_id": slurm_id, "dir": str(attempt_dir),
                "nodes": [n.node for n in spec.nodes]}
        handle = json.dumps(data, sort_keys=True)
        write_json_atomic(attempt_dir / "launch.json", data)
        write_json_atomic(self._registry(spec.job_id, spec.attempt), data)
        self._attempts[(spec.job_id, spec.attempt)] = _Attempt(
            spec.job_id, spec.attempt, slurm_id, attempt_dir, handle)
        log.info("job %s attempt %s: Slurm job %s on %s", spec.job_id, spec.attempt, slurm_id,
                 ",".join(n.node for n in spec.nodes))
        return handle

    # ------------------------------------------------------------------ observe

    def _registry(self, job_id: int, attempt: int) -> Path:
        return self._state_dir / "attempts" / f"{job_id}-{attempt}.json"

    def _comment(self, job_id: int, attempt: int) -> str:
        return f"grace job {job_id} attempt {attempt} of {self.instance}"

    def _live_by_name(self, job_id: int, attempt: int) -> list[str]:
        """Live Slurm jobs of this attempt submitted by this control plane (name and comment)."""
        return sorted(self._live_of(job_id, {attempt}))

    def _live_of(self, job_id: int, attempts: set[int],
                 recorded: dict[str, int] | None = None) -> dict[str, int]:
        """``{slurm id: attempt}`` of live Slurm jobs of these attempts: by name with this
        instance's comment, and the ``recorded`` ids whose name is their attempt's."""
        found: dict[str, int] = {}
        names = {job_name(job_id, k): k for k in sorted(attempts)}
        out = self.cli.run("squeue", "-h", f"--name={','.join(names)}", "-o", "%i|%j|%k|%T")
        for r in parse_table(out, ("id", "name", "comment", "state")):
            k = names.get(r["name"])
            if k is not None and r["comment"] == self._comment(job_id, k) and (
                    not r["state"] or r["state"] in LIVE_STATES):
                found[r["id"]] = k
        ids = sorted(set(recorded or {}) - set(found))
        if ids:
            out = self._run_lenient("squeue", "-h", "-t", "all", "-j", ",".join(ids),
                                    "-o", "%i|%j|%k|%T")
            for r in parse_table(out, ("id", "name", "comment", "state")):
                k = (recorded or {}).get(r["id"])
                if k is not None and r["name"] == job_name(job_id, k) and r["state"] in LIVE_STATES:
                    found[r["id"]] = k
        return found

    def _reap(self, job_id: int, attempts: set[int], workdir: Path) -> int:
        """Reap these attempts of a job (see ``reap``); the caller holds ``self._lock``."""
        recorded: dict[str, int] = {}
        for k in attempts:
            a = self._attempts.get((job_id, k))
            if a is not None:
                recorded[a.slurm_id] = k
            for path in (self._registry(job_id, k), workdir / f"attempt-{k}" / "launch.json"):
                data = read_json(path)
                if data is not None and str(data.get("slurm_job_id", "")).isdigit():
                    recorded[str(data["slurm_job_id"])] = k
        live = self._live_of(job_id, attempts, recorded)
        for sid, k in sorted(live.items()):
            log.warning("job %s attempt %s: reaping Slurm job %s", job_id, k, sid)
            self.cli.run("scancel", "--full", "--signal=KILL", sid, check=False)
            self.cli.run("scancel", sid, check=False)
        deadline = time.monotonic() + REAP_TIMEOUT_S
        left = set(live)
        while left:
            info = self._query(sorted(left))
            left = {sid for sid in left if sid in info and info[sid].live}
            if not left:
                break
            if time.monotonic() > deadline:
                raise ReapError(f"job {job_id}: Slurm still lists {sorted(left)} live "
                                f"{REAP_TIMEOUT_S:g}s after scancel")
            time.sleep(0.5)
        for k in attempts:
            if (job_id, k) not in self._attempts:
                self._registry(job_id, k).unlink(missing_ok=True)
        return len(live)

    def _run_lenient(self, *args: str) -> str:
        """stdout; "Invalid job id" (purged, never existed) is an empty answer, anything
        else (slurmctld down) raises SlurmError."""
        try:
            return self.cli.run(*args)
        except SlurmError as e:
            if "Invalid job id" in str(e):
                return ""
            raise

    def _query(self, slurm_ids: list[str]) -> dict[str, SlurmJobInfo]:
        """States of many jobs in one squeue call; ended ones are completed by scontrol/sacct."""
        out = self._run_lenient("squeue", "-h", "-t", "all", "-j", ",".join(slurm_ids),
                                "-o", "%i|%T|%N|%r")
        found: dict[str, SlurmJobInfo] = {}
        for row in parse_table(out, ("id", "state", "nodes", "reason")):
            found[row["id"]] = SlurmJobInfo(row["id"], row["state"], nodes=row["nodes"],
                                            reason=row["reason"])
        for sid in slurm_ids:
            info = found.get(sid)
            if info is None or not info.live:  # exit code and final state: ask once it ended
                detail = self._ended(sid)
                if detail is not None:
                    found[sid] = detail
        return found

    def _ended(self, slurm_id: str) -> SlurmJobInfo | None:
        """The final state of an ended job: ``scontrol show job``, else ``sacct -c``."""
        looked = self._lookup(slurm_id)
        return None if looked is None else looked[1]

    def _lookup(self, slurm_id: str) -> tuple[str, SlurmJobInfo] | None:
        """(job name, info) from slurmctld's memory, else accounting; None if unknown."""
        text = self._run_lenient("scontrol", "-o", "show", "job", slurm_id)
        if text.startswith("JobId="):
            rec = parse_record(text.splitlines()[0])
            code, sig = parse_exit_code(rec.get("ExitCode", "0:0"))
            return rec.get("JobName", ""), SlurmJobInfo(
                slurm_id, rec.get("JobState", "UNKNOWN"), code, sig, rec.get("NodeList", ""),
                rec.get("Reason", ""))
        # accounting: slurmdbd's (plain sacct), else the completion records (sacct -c);
        # neither configured means Slurm has forgotten the job
        fields = ("id", "name", "state", "exit", "nodes")
        rows = []
        for source in ("-X", "-c"):
            try:
                out = self.cli.run("sacct", source, "-n", "-P", "-j", slurm_id, "-o",
                                   "JobID,JobName,State,ExitCode,NodeList")
            except SlurmError:
                continue
            rows = [r for r in parse_table(out, fields) if r["id"] == slurm_id]
            if rows:
                break
        if not rows:
            return None
        r = rows[-1]
        code, sig = parse_exit_code(r["exit"])
        return r["name"], SlurmJobInfo(slurm_id, r["state"].split()[0], code, sig, r["nodes"])

    def _wait_ended(self, slurm_id: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            info = self._query([slurm_id]).get(slurm_id)
            if info is None or not info.live:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def _first_failed_rank(self, a: _Attempt) -> dict[str, Any] | None:
        ranks = [r for r in (read_json(p) for p in (a.dir / "ranks").glob("rank-*.exit")) if r]
        bad = [r for r in ranks if r.get("exit_code") not in (0, None)]
        return min(bad, key=lambda r: float(r.get("ended_at", 0.0))) if bad else None

    def _rank_log(self, a: _Attempt, rank: dict[str, Any]) -> str:
        node, local = rank.get("node", ""), rank.get("local_rank", -1)
        for err in sorted((a.dir / "ranks" / str(node)).glob(f"*/attempt_*/{local}/stderr.log")):
            text = _tail(err)
            if text:
                return text
        return _tail(a.dir / f"{node}.log")

    def _observe(self, a: _Attempt, info: SlurmJobInfo | None) -> Observation:
        def obs(status: AttemptStatus, **kw: Any) -> Observation:
            return Observation(a.job_id, a.attempt, status, **kw)

        if info is None:
            return obs(AttemptStatus.LOST, detail=f"Slurm no longer knows job {a.slurm_id}")
        if info.live:
            return obs(AttemptStatus.RUNNING)
        if (a.dir / "cancel.json").exists():
            return obs(AttemptStatus.CANCELLED, detail=f"cancelled (Slurm job {a.slurm_id}: {info.state})")
        where = f"Slurm job {a.slurm_id} {info.state} {info.exit_code}:{info.signal}"
        if info.state == "COMPLETED" and info.exit_code == 0:
            return obs(AttemptStatus.SUCCEEDED, exit_code=0, detail=where)
        if info.state in ("NODE_FAIL", "PREEMPTED", "BOOT_FAIL"):
            node = self._down_node(info.nodes)
            return obs(AttemptStatus.LOST, failed_node=node,
                       detail=f"{where}" + (f": node {node} failed" if node else ""))
        if info.state == "CANCELLED":  # by someone else (scancel by a person, an admin)
            return obs(AttemptStatus.CANCELLED, detail=f"{where}: cancelled outside Grace")
        rank = self._first_failed_rank(a)
        if info.state in ("TIMEOUT", "DEADLINE"):
            return obs(AttemptStatus.FAILED, exit_code=info.exit_code or (-info.signal or 143),
                       failed_node=rank.get("node") if rank else None,
                       detail=f"{where}: reached its time limit")
        if rank is not None:
            return obs(AttemptStatus.FAILED, exit_code=int(rank["exit_code"]), failed_node=rank["node"],
                       detail=f"rank {rank.get('rank')} on node {rank['node']} exited "
                              f"{rank['exit_code']} ({where})\n{self._rank_log(a, rank)}")
        code = -info.signal if info.signal else info.exit_code
        if info.state == "OUT_OF_MEMORY":
            return obs(AttemptStatus.FAILED, exit_code=code or 137, detail=f"{where}: out of memory")
        return obs(AttemptStatus.FAILED, exit_code=code,
                   detail=f"{where}\n{_tail(a.dir / f'slurm-{a.slurm_id}.out')}")

    def _down_node(self, nodelist: str) -> str | None:
        """The first node of a failed job that Slurm now has down or failing."""
        names = set(expand_hostlist(nodelist))
        try:
            for n in self.node_states():
                if n.name in names and n.out_of_service:
                    return n.name
        except SlurmError:
            pass
        return None


def _one_line(text: str, limit: int = 200) -> str:
    """Slurm keeps a reason on one line; long ones are cut, never rejected."""
    return " ".join(text.split())[:limit]
