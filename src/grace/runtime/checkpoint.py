"""Checkpoints on PyTorch Distributed Checkpoint (DCP), committed atomically.

Layout under the checkpoint root (``$GRACE_CHECKPOINT_DIR``)::

    step-000000120/            committed: MANIFEST.json + DCP's files
        .metadata              DCP's plan (rank 0)
        __0_0.distcp           rank 0's shard: its slice of model and optimizer,
        __1_0.distcp           and its own pickled rank state (RNG, data position)
        MANIFEST.json          step, world size, job_uid, size and sha256 of every file
    .staging/step-000000130-a1-7/   a save in progress (never read)
    .corrupt/step-000000110/   a checkpoint that failed verification, set aside

A checkpoint exists iff ``step-<9 digits>/MANIFEST.json`` exists: the control
plane (``grace.control.live.files.latest_checkpoint``) and :func:`committed`
agree on that, and names sort by step. The commit protocol:

1. every rank writes its shards into the staging directory (DCP, files fsynced);
2. every rank hashes the files it wrote (sha256, fsync) and the hashes are
   gathered on rank 0;
3. rank 0 writes ``MANIFEST.json`` (fsync), fsyncs the directory, renames it to
   ``step-N`` (one atomic ``rename`` on the same filesystem) and fsyncs the root;
4. rank 0 deletes all but the newest ``keep`` checkpoints; a broadcast tells
   every rank the outcome.

A crash or an exception anywhere before step 3 leaves only a staging directory,
which nothing reads and the next run's ``init`` deletes.

An asynchronous save (``dcp.async_save``) blocks training only while the state
is copied to host memory; steps 1-4 then run on a background thread. It can be
*gated*: rank 0 renames only once the runtime calls :meth:`Checkpointer.release`
with ``ok=True``, which it does after the next step's loss passed the
divergence guard, so a checkpoint of parameters that turned out to produce a
NaN or a spike is never committed.

Resume walks the committed checkpoints newest first; every rank verifies its
share of the files (sizes for all, sha256 for every world_size-th file) and the
first one that verifies everywhere is loaded. One that does not is moved to
``.corrupt/`` by rank 0 and the one before it is tried.

Ownership: every manifest records the ``job_uid`` of the job that wrote it
(``GRACE_JOB_UID``, ``<store_id>:<job_id>``; null outside Grace). A job id alone
is only unique within one control-plane store, so a fresh store's job 1 could
otherwise "resume" an old store's job 1 and finish without training. Before
verifying anything, resume reads the manifests of every committed checkpoint
and, if one names another job, raises :class:`ForeignCheckpointError` on every
rank without loading, quarantining or deleting anything: a directory holding
another job's checkpoint is a misconfiguration to fix, not something to train
over from step 0. A manifest without a ``job_uid`` (written before it was
recorded, or outside Grace) is accepted, with a warning when this job has one;
a run without ``GRACE_JOB_UID`` accepts any checkpoint, as before.

Encryption at rest: given a data key (``GRACE_CHECKPOINT_KEY``, base64 of 32
bytes, which Grace's launch sets from the job's wrapped key; or ``key=`` here),
every file DCP writes is sealed with AES-256-GCM as it is written
(``grace.runtime.encrypted_dcp``, ``grace.runtime.encryption``): no plaintext
byte of a tensor, of the rank state or of DCP's ``.metadata`` reaches the disk,
staging included. ``MANIFEST.json`` stays plaintext (names, sizes, hashes: no
tensor data) and records ``encrypted``, ``cipher`` and ``key_id`` (a hash of the
key). Resume then checks every chunk's GCM tag of the files in this rank's
share, in the same pass as the sha256, so a flipped, truncated or swapped shard
fails verification and the fallback above applies. What resume refuses
(:class:`CheckpointKeyError` on every rank, like a foreign checkpoint, and for
the same reason: every checkpoint would "fail" and the run would restart from
step 0 over them): a committed checkpoint encrypted with another key (a wrong
KMS key file), and an encrypted checkpoint with no key given. A plaintext
checkpoint is loaded with a key given (one written before encryption was
turned on; said in the log): the next checkpoints are encrypted, and ``keep``
prunes the old ones.

Collectives run on a process group of their own (gloo), never the training
one: the background thread's collectives must not interleave with DDP's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grace.runtime.encryption import CIPHER, DataKey, EncryptionError, WrongKey, authenticate, is_encrypted

MANIFEST = "MANIFEST.json"
FORMAT = "grace-dcp/1"
STAGING = ".staging"
CORRUPT = ".corrupt"
_STEP_RE = re.compile(r"^step-(\d{9,})$")
_CHUNK = 8 << 20

# DCP warns on every save and load of a single process that it assumes one; we pass no_dist on purpose.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


class CheckpointError(RuntimeError):
    """A checkpoint problem that must stop the run rather than be worked around.

    Corrupt checkpoints are not among them: resume sets those aside and falls
    back to an older one. These are errors a person has to fix.
    """


class ForeignCheckpointError(CheckpointError):
    """The checkpoint directory holds a checkpoint written by another job.

    Raised by resume on every rank (so none hangs in a collective waiting for
    the others), before anything is loaded or moved. Uncaught, it ends the
    training process with exit code 1 and the message on stderr, which is where
    the control plane's logs pick it up.
    """

    def __init__(self, path: Path, owner: str, job_uid: str) -> None:
        self.path = Path(path)
        self.owner = owner
        self.job_uid = job_uid
        super().__init__(
            f"checkpoint {self.path} belongs to job {owner}, not to this job {job_uid}; "
            f"refusing to resume from it (and not starting from step 0 over it either): point "
            f"GRACE_CHECKPOINT_DIR at this job's own directory, or delete {self.path} if it is stale"
        )


class CheckpointKeyError(CheckpointError):
    """The checkpoints are encrypted with a key this run does not have.

    Raised by resume on every rank before anything is loaded or moved: with a
    wrong key every checkpoint would fail verification, and falling back
    through all of them would restart from step 0 and then prune them.
    """


def manifest_key_id(manifest: dict[str, Any]) -> str | None:
    """The key id an encrypted checkpoint was sealed with; None if it is plaintext."""
    return str(manifest.get("key_id")) if manifest.get("encrypted") else None


def key_problem(path: Path, manifest: dict[str, Any] | None, key: DataKey | None) -> str | None:
    """Why this run cannot read the checkpoint at ``path`` with ``key``; None if it can."""
    sealed = None if manifest is None else manifest_key_id(manifest)
    if sealed is None or (key is not None and key.id == sealed):
        return None
    if key is None:
        return (
            f"checkpoint {path} is encrypted (key {sealed}) and this run has no key: set "
            "GRACE_CHECKPOINT_KEY (Grace's launch sets it from the job's wrapped data key); refusing to "
            "resume without it (and not starting from step 0 over it either)"
        )
    return (
        f"checkpoint {path}: {WrongKey('it', sealed, key.id)}; refusing to resume (and not starting from "
        "step 0 over it either): start the control plane with the KMS key file that wrapped this job's key"
    )


def manifest_job_uid(manifest: dict[str, Any]) -> str | None:
    """The job that wrote a checkpoint; None if its manifest does not say (older, or outside Grace)."""
    uid = manifest.get("job_uid")
    return None if uid is None or uid == "" else str(uid)


def step_dirname(step: int) -> str:
    return f"step-{step:09d}"


def committed(root: Path) -> list[tuple[int, Path]]:
    """Committed checkpoints (a ``MANIFEST.json`` present), oldest first. Reads no tensor."""
    try:
        entries = list(Path(root).iterdir())
    except FileNotFoundError:
        return []
    found = []
    for p in entries:
        m = _STEP_RE.match(p.name)
        if m and (p / MANIFEST).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def sha256_file(path: Path, fsync: bool = False) -> tuple[str, int]:
    """(hex digest, size); ``fsync`` also forces the file to disk."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
        if fsync:
            os.fsync(f.fileno())
    return h.hexdigest(), size


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(path) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return None
    return data


def verify(path: Path, share: tuple[int, int] = (0, 1), key: DataKey | None = None) -> str | None:
    """None if the checkpoint at ``path`` is intact, else why not.

    Every caller checks the manifest and every file's presence and size; the
    sha256 is checked for the files ``share = (index, count)`` selects
    (``sorted(files)[index::count]``), so ranks split the reading. An
    encrypted checkpoint with ``key`` given also has every chunk's GCM tag of
    those files checked, in the same read; without a key only the hashes are.
    """
    path = Path(path)
    manifest = read_manifest(path)
    if manifest is None:
        return "no readable manifest"
    files: dict[str, dict[str, Any]] = manifest["files"]
    if ".metadata" not in files:
        return "manifest lists no .metadata"
    try:
        present = {p.name for p in path.iterdir() if p.name != MANIFEST}
    except OSError as e:
        return f"cannot list: {e}"
    if present != set(files):
        missing, extra = sorted(set(files) - present), sorted(present - set(files))
        return f"files differ from the manifest (missing {missing}, unexpected {extra})"
    for name, rec in files.items():
        try:
            size = (path / name).stat().st_size
        except OSError as e:
            return f"{name}: {e}"
        if size != rec.get("size"):
            return f"{name}: {size} bytes, manifest says {rec.get('size')}"
    sealed = manifest_key_id(manifest)
    if sealed is not None and key is not None and key.id != sealed:
        return str(WrongKey(path.name, sealed, key.id))
    if sealed is None and key is not None and is_encrypted(path / ".metadata"):
        return "the manifest says plaintext but .metadata is encrypted (the manifest was altered)"
    index, count = share
    for name in sorted(files)[index::count]:
        try:
            if sealed is not None and key is not None:
                digest, _ = authenticate(path / name, key, f"{path.name}/{name}")
            else:
                digest, _ = sha256_file(path / name)
        except EncryptionError as e:
            return f"{name}: {e}"
        except OSError as e:
            return f"{name}: {e}"
        if digest != files[name].get("sha256"):
            return f"{name}: sha256 mismatch"
    return None


def quarantine(root: Path, path: Path) -> Path:
    """Move a bad checkpoint out of sight (``.corrupt/``), keeping it for a person to inspect."""
    dest_root = Path(root) / CORRUPT
    dest_root.mkdir(exist_ok=True)
    dest = dest_root / path.name
    n = 1
    while dest.exists():
        n += 1
        dest = dest_root / f"{path.name}.{n}"
    os.replace(path, dest)
    fsync_dir(Path(root))
    return dest


def _remove(path: Path) -> None:
    """Uncommit first (the manifest goes), then delete: a half-deleted dir is never 'committed'."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path / MANIFEST)
    shutil.rmtree(path, ignore_errors=True)


def prune(root: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` committed checkpoints; returns what went."""
    gone = [p for _, p in committed(root)[:-keep]] if keep > 0 else []
    for p in gone:
        _remove(p)
    return gone


def clean_staging(root: Path) -> None:
    """Drop saves that never committed (a crash mid-save) and step dirs without a manifest."""
    shutil.rmtree(Path(root) / STAGING, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        for p in Path(root).iterdir():
            if _STEP_RE.match(p.name) and p.is_dir() and not (p / MANIFEST).exists():
                shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------------- saving and loading


def _cached_stager() -> Any:
    """An AsyncStager that copies into the same host buffers every time (None if torch lacks the API).

    DCP's default stager allocates a fresh host copy of the state per save,
    and on CPU first-touching that memory costs several times the copy itself
    (1.2 GB: ~0.7-3 s against ~0.2 s into buffers already mapped). The price is
    one host copy of the rank's state kept for the life of the run (pinned when
    CUDA is present, for faster device-to-host copies). Safe to reuse because a
    save waits for the previous one to finish before staging.
    """
    try:
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
        from torch.distributed.checkpoint.staging import AsyncStager
    except ImportError:
        return None

    class _CachedStager(AsyncStager):
        _synchronize_after_execute = False  # staging is done when stage() returns

        def __init__(self) -> None:
            self._cache: dict[str, Any] | None = None

        def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
            if self._cache is not None:
                try:
                    return _copy_state_dict(state_dict, self._cache, non_blocking=False, type_check=False)
                except Exception:  # the state changed shape (new keys, new sizes): new buffers
                    self._cache = None
            import torch

            self._cache = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
            return _copy_state_dict(state_dict, self._cache, non_blocking=False, type_check=False)

        def warm(self, state_dict: dict[str, Any]) -> None:
            """Allocate the buffers and touch every page (off the training thread)."""
            import torch

            cache = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
            stack: list[Any] = [cache]
            while stack:
                x = stack.pop()
                if isinstance(x, dict):
                    stack.extend(x.values())
                elif isinstance(x, (list, tuple)):
                    stack.extend(x)
                elif isinstance(x, torch.Tensor):
                    getattr(x, "_local_tensor", x).zero_()  # a DTensor's local shard
            self._cache = cache

        def close(self) -> None:
            self._cache = None

    return _CachedStager()  # type: ignore[abstract]  # staging is synchronous: nothing to wait for


class _Group:
    """Collectives on the checkpoint process group, or trivial ones in a single process."""

    def __init__(self, pg: Any, rank: int, world_size: int) -> None:
        self.pg = pg
        self.rank = rank
        self.world_size = world_size

    def gather(self, obj: Any) -> list[Any]:
        if self.pg is None:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.pg)
        return out

    def from_rank0(self, obj: Any) -> Any:
        if self.pg is None:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self.pg, 0), group=self.pg)
        return box[0]


@dataclass
class _Save:
    step: int
    tmp: Path
    gate: threading.Event | None
    accepted: bool = True
    block_s: float = 0.0
    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    committed: bool = False
    error: str | None = None


class Checkpointer:
    """Saves and loads one model (and its optimizers) plus an opaque per-rank blob.

    ``pg`` is the checkpoint process group (None without torch.distributed).
    The per-rank blob (``rank_state``) carries what differs between ranks: RNG
    states and the data position; it is stored under ``rank_state/<rank>``.
    ``job_uid`` is written into every manifest and checked by :meth:`load_latest`.
    ``key`` (a :class:`~grace.runtime.encryption.DataKey`, or its 32 raw bytes)
    encrypts every checkpoint file (see the module docstring); None: plaintext.
    """

    def __init__(
        self,
        root: Path,
        model: Any,
        optimizers: Sequence[Any] = (),
        *,
        pg: Any = None,
        rank: int = 0,
        world_size: int = 1,
        keep: int = 3,
        attempt: int = 1,
        meta: dict[str, Any] | None = None,
        log: Callable[[str], None] | None = None,
        cache_staging: bool = True,
        job_uid: str | None = None,
        key: DataKey | bytes | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.root = Path(root)
        self.model = model
        self.optimizers = list(optimizers)
        self.group = _Group(pg, rank, world_size)
        self.rank = rank
        self.world_size = world_size
        self.keep = keep
        self.attempt = attempt
        self.meta = dict(meta or {})
        self.job_uid = job_uid or None
        self.key = DataKey(key) if isinstance(key, bytes) else key
        self.log = log or (lambda msg: print(f"grace.runtime: {msg}", file=sys.stderr, flush=True))
        self._seq = 0
        self._stager = _cached_stager() if cache_staging else None
        self._warming: threading.Thread | None = None
        self._pending: _Save | None = None
        self.last_committed: int | None = None
        self.last_error: str | None = None
        # rank 0's committed saves not yet reported, {"step", "seconds", "bytes"}: the session
        # sends them in its next heartbeat (grace_checkpoint_save_seconds on /metrics)
        self.saves_to_report: list[dict[str, Any]] = []
        self.root.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ state dicts

    def _state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        if self.optimizers:
            msd, osd = get_state_dict(self.model, self.optimizers)
            return {"model": msd, "optim": osd}
        return {"model": get_model_state_dict(self.model)}

    def _apply(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        if self.optimizers:
            set_state_dict(
                self.model, self.optimizers, model_state_dict=state["model"], optim_state_dict=state["optim"]
            )
        else:
            set_model_state_dict(self.model, state["model"])

    # ------------------------------------------------------------------ saving

    def warm_up(self) -> None:
        """Prepare the async staging buffers in the background, so no save pays their first touch.

        Call once the optimizer has state (after the first step); the first
        save waits for it if it is still running.
        """
        if self._warming is not None or self._stager is None or not hasattr(self._stager, "warm"):
            return
        if any(not opt.state for opt in self.optimizers):
            # get_state_dict would initialise an empty optimizer with a zero-lr step, which moves
            # Adam's step count: never do that behind the training's back. First save allocates.
            return
        state = self._state_dict()
        state[f"rank_state/{self.rank}"] = b""
        self._warming = threading.Thread(
            target=self._stager.warm, args=(state,), name="grace-checkpoint-warm", daemon=True
        )
        self._warming.start()

    @property
    def pending(self) -> bool:
        return self._pending is not None and not self._pending.done.is_set()

    def save(self, step: int, rank_state: bytes, *, block: bool = False, gated: bool = False) -> float:
        """Checkpoint now; every rank must call it at the same step. Returns the seconds it blocked.

        ``block=False`` returns after the copy to host memory and commits in the
        background; ``gated`` (async only) holds the commit until :meth:`release`.
        A previous save still in flight is waited for first (its gate released
        as accepted: asking for a new checkpoint means training is healthy).
        """
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

        t0 = time.perf_counter()
        self.release(True)
        self.wait()
        if self._warming is not None:
            self._warming.join()
        self._seq += 1
        tmp = self.root / STAGING / f"{step_dirname(step)}-a{self.attempt}-{self._seq}"
        tmp.mkdir(parents=True, exist_ok=True)
        state = self._state_dict()
        state[f"rank_state/{self.rank}"] = rank_state
        writer = self._writer(tmp, step)
        no_dist = self.group.pg is None
        job = _Save(step, tmp, threading.Event() if gated and not block else None)
        if block:
            err: BaseException | None = None
            try:
                dcp.save(state, storage_writer=writer, process_group=self.group.pg, no_dist=no_dist)
            except (Exception, CheckpointException) as e:
                err = e
            job.block_s = time.perf_counter() - t0
            self._pending = job
            self._commit(job, err)
            return time.perf_counter() - t0
        future = dcp.async_save(
            state,
            storage_writer=writer,
            process_group=self.group.pg,
            no_dist=no_dist,
            async_stager=self._stager,  # None: DCP's own (a fresh copy per save)
        )
        job.block_s = time.perf_counter() - t0
        self._pending = job
        threading.Thread(
            target=self._finish, args=(job, future), name="grace-checkpoint", daemon=True
        ).start()
        return job.block_s

    def _writer(self, tmp: Path, step: int) -> Any:
        """DCP's file writer into the staging dir; sealing every file when there is a key."""
        import torch.distributed.checkpoint as dcp

        if self.key is None:
            return dcp.FileSystemWriter(tmp, sync_files=True)
        from grace.runtime import encrypted_dcp

        # bound to the name it commits under, so a file cannot be moved to another checkpoint
        return encrypted_dcp.writer(tmp, self.key, step_dirname(step), sync_files=True)

    def _reader(self, path: Path, manifest: dict[str, Any]) -> Any:
        import torch.distributed.checkpoint as dcp

        if self.key is None or manifest_key_id(manifest) is None:
            return dcp.FileSystemReader(path)
        from grace.runtime import encrypted_dcp

        return encrypted_dcp.reader(path, self.key, path.name)

    def _encryption_fields(self) -> dict[str, Any]:
        if self.key is None:
            return {"encrypted": False}
        return {"encrypted": True, "cipher": CIPHER, "key_id": self.key.id}

    def take_saves(self) -> list[dict[str, Any]]:
        """The committed saves since the last call (rank 0's; empty on the others)."""
        taken, self.saves_to_report = self.saves_to_report, []
        return taken

    def release(self, ok: bool) -> None:
        """Resolve the pending save's gate: commit it (``ok``) or throw it away."""
        job = self._pending
        if job is not None and job.gate is not None and not job.gate.is_set():
            job.accepted = ok
            job.gate.set()

    @property
    def gate_open(self) -> bool:
        """True when no save waits on its gate."""
        job = self._pending
        return job is None or job.gate is None or job.gate.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the save in flight (if any); False on timeout. Release its gate first."""
        job = self._pending
        if job is None:
            return True
        if job.gate is not None and not job.gate.is_set():
            raise RuntimeError("waiting on a gated checkpoint nobody released")
        return job.done.wait(timeout)

    def _finish(self, job: _Save, future: Any) -> None:
        err: BaseException | None = None
        try:
            future.result()
        except BaseException as e:  # CheckpointException is one; nothing may escape this thread
            err = e
        self._commit(job, err)

    def _own_files(self, tmp: Path) -> dict[str, dict[str, Any]]:
        """Hash (and fsync) the files this rank wrote: DCP names them ``__<rank>_<n>.distcp``."""
        out = {}
        for p in sorted(tmp.iterdir()):
            mine = p.name.startswith(f"__{self.rank}_") or (self.rank == 0 and p.name == ".metadata")
            if mine and p.is_file():
                digest, size = sha256_file(p, fsync=True)
                out[p.name] = {"size": size, "sha256": digest}
        return out

    def _commit(self, job: _Save, err: BaseException | None) -> None:
        """Steps 2-4 of the protocol; every rank calls it; never raises."""
        try:
            files: dict[str, dict[str, Any]] = {}
            if err is None:
                try:
                    files = self._own_files(job.tmp)
                except Exception as e:
                    err = e
            reports = self.group.gather((None if err is None else repr(err), files))
            errors = [f"rank {r}: {e}" for r, (e, _) in enumerate(reports) if e is not None]
            outcome: tuple[bool, str | None] = (False, "; ".join(errors) or None)
            if self.rank == 0:
                outcome = self._rank0_commit(job, errors, reports)
            outcome = self.group.from_rank0(outcome)
        except Exception as e:  # a broken process group, a full disk: this checkpoint is lost
            outcome = (False, repr(e))
            if self.rank == 0:
                shutil.rmtree(job.tmp, ignore_errors=True)
        job.committed, job.error = outcome
        if job.committed:
            self.last_committed = job.step
        elif job.error:
            self.last_error = job.error
            if self.rank == 0:
                self.log(f"checkpoint of step {job.step} not committed: {job.error}")
        job.done.set()

    def _rank0_commit(
        self, job: _Save, errors: list[str], reports: list[tuple[str | None, dict[str, Any]]]
    ) -> tuple[bool, str | None]:
        if not errors and job.gate is not None:
            job.gate.wait()
        if errors or not job.accepted:
            shutil.rmtree(job.tmp, ignore_errors=True)
            return False, "; ".join(errors) if errors else None
        try:
            files: dict[str, dict[str, Any]] = {}
            for _, f in reports:
                files.update(f)
            for p in job.tmp.iterdir():  # anything DCP named differently: hash it here
                if p.name not in files and p.is_file():
                    digest, size = sha256_file(p, fsync=True)
                    files[p.name] = {"size": size, "sha256": digest}
            manifest = {
                "format": FORMAT,
                "step": job.step,
                "world_size": self.world_size,
                "attempt": self.attempt,
                "created_at": time.time(),
                "block_s": round(job.block_s, 6),
                "save_s": round(time.monotonic() - job.started, 6),
                "files": dict(sorted(files.items())),
                "job_uid": self.job_uid,
                **self._encryption_fields(),
                **self.meta,
            }
            with open(job.tmp / MANIFEST, "w") as out:
                json.dump(manifest, out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            fsync_dir(job.tmp)
            final = self.root / step_dirname(job.step)
            if final.exists():  # the same step saved again (a resumed run passing it): replace
                old = self.root / STAGING / f"old-{final.name}-{self._seq}"
                os.replace(final, old)
                os.replace(job.tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(job.tmp, final)
            fsync_dir(self.root)
        except Exception as e:
            shutil.rmtree(job.tmp, ignore_errors=True)
            return False, repr(e)
        prune(self.root, self.keep)
        self.saves_to_report.append({"step": job.step, "seconds": manifest["save_s"],
                                     "bytes": sum(int(f["size"]) for f in files.values())})
        return True, None

    # ------------------------------------------------------------------ loading

    def load_latest(self) -> tuple[int, bytes | None] | None:
        """Load the newest checkpoint that verifies; (step, this rank's blob) or None.

        The blob is None when the checkpoint was written by another world size
        and has none for this rank (the model and optimizer still load, resharded).
        Raises :class:`ForeignCheckpointError` on every rank if any committed
        checkpoint names another job, and :class:`CheckpointKeyError` if one is
        encrypted with another key or with none given (see the module docstring).
        """
        import torch.distributed.checkpoint as dcp

        # Rank 0 lists and judges ownership and keys; everyone acts on its answer, so all ranks raise
        # together.
        listing: tuple[list[str], tuple[str, str, str] | None, str | None] = ([], None, None)
        if self.rank == 0:
            paths = [p for _, p in reversed(committed(self.root))]
            listing = ([str(p) for p in paths], self._foreign(paths), self._key_problem(paths))
        candidates, foreign, key_err = self.group.from_rank0(listing)
        if foreign is not None:
            err: CheckpointError = ForeignCheckpointError(Path(foreign[0]), foreign[1], foreign[2])
            if self.rank == 0:
                self.log(str(err))
            raise err
        if key_err is not None:
            err = CheckpointKeyError(key_err)
            if self.rank == 0:
                self.log(str(err))
            raise err
        for path_s in candidates:
            path = Path(path_s)
            reason = verify(path, (self.rank, self.world_size), self.key)
            reasons = [r for r in self.group.gather(reason) if r is not None]
            if reasons:
                if self.rank == 0:
                    self.log(f"checkpoint {path.name} failed verification ({reasons[0]}); trying older")
                    with contextlib.suppress(OSError):
                        quarantine(self.root, path)
                continue
            manifest = read_manifest(path) or {}
            if self.rank == 0:
                self._note_owner(path, manifest_job_uid(manifest))
                if self.key is not None and manifest_key_id(manifest) is None:
                    self.log(
                        f"checkpoint {path.name} is not encrypted (written before encryption was on); "
                        "resuming from it, and the next checkpoints are encrypted"
                    )
            reader = self._reader(path, manifest)
            keys = reader.read_metadata().state_dict_metadata
            state = self._state_dict()
            key = f"rank_state/{self.rank}"
            if key in keys:
                state[key] = b""
            dcp.load(
                state,
                storage_reader=self._reader(path, manifest),
                process_group=self.group.pg,
                no_dist=self.group.pg is None,
            )
            self._apply(state)
            step = int(manifest["step"])
            self.last_committed = step
            return step, state.get(key)
        return None

    def _foreign(self, paths: Sequence[Path]) -> tuple[str, str, str] | None:
        """(path, owner, this job's uid) of the newest checkpoint whose manifest names another job, else None.

        Every committed one is checked, not only the one resume would load: a
        directory holding another job's checkpoint is misconfigured whichever
        step is newest, and this job's saves would prune that job's files. An
        unreadable manifest is left to verification (quarantine) as before.
        """
        if self.job_uid is None:
            return None
        for path in paths:
            manifest = read_manifest(path)
            owner = None if manifest is None else manifest_job_uid(manifest)
            if owner is not None and owner != self.job_uid:
                return str(path), owner, self.job_uid
        return None

    def _key_problem(self, paths: Sequence[Path]) -> str | None:
        """Why this run cannot read one of the committed checkpoints (newest first), else None.

        Every one is checked, as for ownership: a checkpoint sealed with another
        key means the control plane handed this job the wrong key (its KMS key
        file changed), not that the checkpoint is corrupt.
        """
        for path in paths:
            problem = key_problem(path, read_manifest(path), self.key)
            if problem is not None:
                return problem
        return None

    def _note_owner(self, path: Path, owner: str | None) -> None:
        """Say so when the checkpoint about to be loaded cannot be tied to this job."""
        if self.job_uid is not None and owner is None:
            self.log(
                f"warning: checkpoint {path} records no job_uid (written before Grace recorded one, or "
                f"outside Grace); resuming from it as this job's ({self.job_uid})"
            )
        elif self.job_uid is None and owner is not None:
            self.log(
                f"checkpoint {path} was written by job {owner}; this run has no GRACE_JOB_UID, "
                "so whose it is goes unchecked"
            )
