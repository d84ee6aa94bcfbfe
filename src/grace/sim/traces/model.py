"""The one record every trace loader produces, and the report of what it skipped."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from grace.spec.job import WorkloadClass


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job from a trace, times in seconds from the trace's first submission.

    ``gpus`` is a whole GPU count; ``gpu_milli`` (1..999) marks a job that asks
    for a fraction of one GPU (Alibaba GPU sharing), in which case ``gpus`` is 1.
    ``gpu_model`` is a catalog name when the trace pins one known model;
    ``gpu_spec`` keeps the trace's raw GPU-type constraint (``"V100M16|V100M32"``,
    ``"G2"``) because a set of models or an undisclosed one has no catalog name.

    ``duration_s`` is how long the job really ran: only the runtime model (and the
    user model of ``sim.estimates``, standing for the submitter) may read it; every
    decision sees what a submitter declares (``limit_s``, size, name).
    """

    job_id: str
    submit_s: float
    duration_s: float
    gpus: int
    tenant: str = "default"
    gpu_milli: int | None = None
    gpu_model: str | None = None
    # None: the trace does not say; the twin guesses it at replay time from what the
    # submitter declared (size, requested limit, name: ``traces._common.classify``)
    workload_class: WorkloadClass | None = None
    priority: int = 0
    preemptible: bool = True
    gpu_spec: str | None = None
    cpu_milli: int = 0  # host CPU the job asks for, where the trace says (openb)
    memory_mib: int = 0
    # the time limit the user asked for, where the trace records it (sacct Timelimit);
    # math.inf for UNLIMITED; None: the trace does not say (``sim.estimates`` draws one)
    limit_s: float | None = None
    name: str | None = None  # the job's name, where the trace has one (class patterns)
    # a training job the goodput runtime model plays (Pollux workloads): the model's
    # profile name and the total batch size the submitter asked for; ``duration_s`` is
    # then only the run time on a packed placement of ``gpus`` (what an exact estimate
    # would say), the runtime model computes the real one from the placement it gets
    application: str | None = None
    batch_size: int | None = None
    # elastic: the submitter lets Grace choose between min and max GPUs (sim.goodput)
    elastic: tuple[int, int] | None = None
    # Slurm's workflows (core.workflow's gate; what a submitter declares, so the twin may
    # read them): dependencies as (kind, trace job_id), e.g. (("afterok", "a"),); held
    # until ``release_s`` (math.inf: never released); a job array's group, index and %N
    after: tuple[tuple[str, str], ...] = ()
    release_s: float | None = None
    array_group: str | None = None
    array_index: int = 0
    array_limit: int | None = None
    # the data path (read only by the twin's opt-in model, ``sim.data_path``); None: the
    # trace does not say, and ``data_path.job_facts`` fills the documented defaults.
    # model_gb: checkpoint size (weights + optimizer state); grad_gb_per_step: gradient
    # bytes each rank all-reduces per step; read_gbps_per_gpu: input the loader reads per
    # GPU at full speed; step_compute_s: a step's compute on the reference GPU model
    model_gb: float | None = None
    grad_gb_per_step: float | None = None
    read_gbps_per_gpu: float | None = None
    step_compute_s: float | None = None


@dataclass
class LoadReport:
    """What a loader read: rows kept, rows skipped and why (a bad row never crashes a load)."""

    source: str
    rows: int = 0
    kept: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def skip(self, why: str) -> None:
        self.skipped[why] += 1

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        parts = ", ".join(f"{n} {why}" for why, n in self.skipped.most_common())
        return f"{self.source}: {self.kept} of {self.rows} rows kept" + (
            f"; skipped {parts}" if parts else ""
        )


@dataclass
class Trace:
    jobs: list[TraceJob]
    report: LoadReport
