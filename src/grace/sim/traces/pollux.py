"""Pollux's evaluation workloads (OSDI'21 artifact): ``name,time,application,num_replicas,batch_size``.

Each row is a training job: the model (a directory of ``app-profiles/``), when it
was submitted (seconds into the 8-hour window; the simulator's clock starts at 0,
so times are kept as written, not shifted to the first submission), the GPUs the
submitter asked for and the total batch size. How long it runs is not in the
file: the goodput runtime model derives it from the placement it gets. Each
job's ``duration_s`` is its run time on a packed placement of the GPUs it asked
for, what an exact estimate would say.

``elastic=True`` declares every job elastic between 1 GPU and twice its ask
(Pollux's own rule for how far it scales a job), NCF (a one-GPU model in the
artifact) excepted.
"""

from __future__ import annotations

import csv
from pathlib import Path

from grace.sim.goodput.profiles import AppProfile
from grace.sim.goodput.progress import GoodputClock, JobProgress, plan_batch
from grace.sim.traces.model import LoadReport, Trace, TraceJob

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
GPUS_PER_NODE = 4  # the Pollux testbed's nodes


def packed(gpus: int, per_node: int = GPUS_PER_NODE) -> tuple[int, ...]:
    """GPUs per node of the tightest placement of ``gpus``."""
    full, rest = divmod(gpus, per_node)
    return (per_node,) * full + ((rest,) if rest else ())


def load_pollux(path: Path | str, profiles: dict[str, AppProfile], elastic: bool = False) -> Trace:
    src = Path(path)
    report = LoadReport(str(src))
    if not src.is_file():
        raise ValueError(f"--trace {src}: no such file; pass a Pollux workload CSV "
                         "(workloads/workload-1.csv)")
    clock = GoodputClock()
    jobs: list[TraceJob] = []
    with src.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"--trace {src}: missing column(s) {missing}; a Pollux workload has "
                             f"{', '.join(COLUMNS)}")
        for row in reader:
            report.rows += 1
            app = row["application"].strip()
            profile = profiles.get(app)
            if profile is None:
                report.skip(f"no profile for application {app!r}")
                continue
            try:
                submit = float(row["time"])
                gpus = int(row["num_replicas"])
                batch = int(row["batch_size"])
            except ValueError:
                report.skip("time, num_replicas or batch_size is not a number")
                continue
            if gpus < 1 or submit < 0 or not profile.init_batch_size <= batch <= profile.max_batch_size:
                report.skip("num_replicas < 1, negative time or batch size outside the profile")
                continue
            state = JobProgress()
            clock.allocate(state)
            duration = clock.time_to_finish(state, profile, plan_batch(profile, batch, gpus),
                                            packed(gpus))
            span = None
            if elastic and app != "ncf":
                span = (1, max(gpus, min(2 * gpus, profile.max_batch_size // profile.min_local_bsz)))
            jobs.append(TraceJob(job_id=row["name"].strip(), submit_s=submit, duration_s=duration,
                                 gpus=gpus, application=app, batch_size=batch, elastic=span))
            report.kept += 1
    jobs.sort(key=lambda j: j.submit_s)
    return Trace(jobs, report)
