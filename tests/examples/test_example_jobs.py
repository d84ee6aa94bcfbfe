"""Every example job file can run: its script exists and it starts on the cluster it names.

The cluster a file is for is the first ``examples/clusters/<name>.yaml`` its
header comment names (``lab.yaml`` if it names none); ``test_examples_run.py``
submits each file to a real control plane on that cluster. Here, without
processes: the command's script is a file in the repository, the job compiles
against the cluster (GPU model, VRAM, slices) and, alone on the empty cluster,
the scheduler starts it in its first cycle, so it is never refused or stuck.

``sweep.yaml`` is a ``kind: sweep`` file with tests of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grace.core import get_policy
from grace.core.jobs import compile_job
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.core.topology import Topology
from grace.spec import JobSpec
from grace.spec.loader import load_cluster, load_jobs

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "examples" / "jobs"
#: H2's kind: sweep file, checked by the sweep tests
NOT_HERE = {"sweep.yaml"}
JOB_FILES = sorted(p for p in JOBS.glob("*.yaml") if p.name not in NOT_HERE)
CLUSTER_REF = re.compile(r"examples/clusters/[\w.-]+\.yaml")
#: interpreters a job's command may start its script with
INTERPRETERS = {"python", "python3"}


def cluster_for(job_file: Path) -> Path:
    """The example cluster a job file says it is for: the first one its header names."""
    header = []
    for line in job_file.read_text().splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    found = [m.group(0) for line in header for m in CLUSTER_REF.finditer(line)]
    return REPO / (found[0] if found else "examples/clusters/lab.yaml")


def script_of(spec: JobSpec) -> Path:
    """The script a job's command runs: ``python SCRIPT ...`` (torchrun is Grace's to start)."""
    assert spec.command, f"{spec.name}: no command"
    interpreter, *rest = spec.command
    assert interpreter in INTERPRETERS and rest, (
        f"{spec.name}: the command should be `python SCRIPT ARGS`, not {spec.command}; "
        "the backend starts torchrun itself")
    return REPO / rest[0]


def test_there_are_example_jobs() -> None:
    assert {p.stem for p in JOB_FILES} >= {
        "experiment", "fine-tune", "full-run", "mig-inference", "train-ddp", "demo"}


@pytest.mark.parametrize("job_file", JOB_FILES, ids=[p.stem for p in JOB_FILES])
def test_every_job_names_a_script_that_exists(job_file: Path) -> None:
    for spec in load_jobs(job_file):
        script = script_of(spec)
        assert script.is_file(), f"{job_file.name}: job {spec.name} runs {script}, which is missing"
        assert "grace.runtime" in script.read_text(), f"{script.name} should use grace.runtime"


@pytest.mark.parametrize("job_file", JOB_FILES, ids=[p.stem for p in JOB_FILES])
def test_every_job_starts_alone_on_the_cluster_it_names(job_file: Path) -> None:
    cluster = cluster_for(job_file)
    assert cluster.is_file(), f"{job_file.name} names {cluster}, which is missing"
    topo = Topology.from_spec(load_cluster(cluster))
    for i, spec in enumerate(load_jobs(job_file), start=1):
        job = compile_job(spec, i, 0.0, topo)  # raises JobCompileError: refused at submit
        state = SchedulerState(topo, get_policy("grace"))
        state.submit(job)
        result = decide(state, 0.0)
        assert [s.job_id for s in result.starts] == [i], (
            f"{job_file.name}: {spec.name} does not start on an empty {cluster.name}: "
            f"{result.reason_for(job)}")


def test_the_cluster_is_read_from_the_header(tmp_path: Path) -> None:
    named = tmp_path / "a.yaml"
    named.write_text("# for a bigger cluster,\n# examples/clusters/h100-16k.yaml\nkind: job\n"
                     "# examples/clusters/hybrid.yaml\n")
    plain = tmp_path / "b.yaml"
    plain.write_text("# no cluster named\nkind: job\n")
    assert cluster_for(named) == REPO / "examples/clusters/h100-16k.yaml"
    assert cluster_for(plain) == REPO / "examples/clusters/lab.yaml"
