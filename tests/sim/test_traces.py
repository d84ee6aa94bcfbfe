"""Trace loaders against the real public files, plus bad-input and synthetic-load checks.

Expected counts come from each trace folder's README (``shared/traces/*/README.md``);
where the data disagrees with its README the test says so.
"""

from __future__ import annotations

import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from grace.sim.traces import (
    FORMATS,
    LoadReport,
    Trace,
    generate,
    load_chronus,
    load_csv,
    load_openb_nodes,
    load_openb_pods,
    load_pai_machines,
    load_philly,
    load_tiresias,
    load_trace,
    pai_cluster_spec,
    parse_column_map,
)
from grace.sim.traces.openb import OPENB_GPU_MODELS
from grace.sim.traces.pai import PAI_GPU_MODELS
from grace.spec.gpus import BUILTIN_GPUS
from grace.spec.job import WorkloadClass
from grace.spec.loader import parse_cluster

DAY = 86400.0


def assert_well_formed(trace: Trace) -> None:
    """Invariants every loader promises: all rows accounted, sorted, zero-based, unique ids."""
    r = trace.report
    assert r.kept == len(trace.jobs)
    assert r.kept + r.skipped_total == r.rows
    submits = [j.submit_s for j in trace.jobs]
    assert submits == sorted(submits)
    if submits:
        assert submits[0] == 0.0
    assert len({j.job_id for j in trace.jobs}) == len(trace.jobs)
    assert all(j.duration_s > 0 and j.gpus >= 1 for j in trace.jobs)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- Philly -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def philly(traces_dir: Path) -> tuple[Trace, float]:
    start = time.perf_counter()
    trace = load_philly(traces_dir / "philly-pollux" / "philly.csv")
    return trace, time.perf_counter() - start


def test_philly_full_file_matches_readme(philly: tuple[Trace, float]) -> None:
    trace, _ = philly
    assert_well_formed(trace)
    assert trace.report.rows == 82_247
    assert trace.report.kept == 82_247, trace.report.summary()  # the file has no bad rows
    assert Counter(j.gpus for j in trace.jobs) == {
        1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3
    }
    per_vc = Counter(j.tenant for j in trace.jobs)
    assert len(per_vc) == 15  # 11 real VCs and 4 with fewer than 10 jobs
    assert sum(1 for n in per_vc.values() if n >= 10) == 11
    assert per_vc["6214e9"] == 41_226 and per_vc["e13805"] == 374
    # 2017-09-04 10:30:41 .. 2017-12-22 08:02:11
    assert trace.jobs[-1].submit_s == pytest.approx(108 * DAY + 21 * 3600 + 31 * 60 + 30)
    gpu_hours = sum(j.gpus * j.duration_s for j in trace.jobs) / 3600
    assert gpu_hours == pytest.approx(978_078, rel=1e-4)


def test_philly_workload_classes_follow_the_documented_heuristic(philly: tuple[Trace, float]) -> None:
    """The loader labels only arrival bursts (sweeps); every other class is guessed at replay
    time from the requested limit, never from the true duration (test_no_lookahead.py)."""
    trace, _ = philly
    by_class = Counter(j.workload_class for j in trace.jobs)
    assert set(by_class) == {None, WorkloadClass.SWEEP}
    assert 40_000 < by_class[WorkloadClass.SWEEP] < 54_646  # the causal rule labels fewer
    assert all(j.gpus == 1 for j in trace.jobs if j.workload_class is WorkloadClass.SWEEP)


def test_philly_bad_rows_are_counted_not_raised(tmp_path: Path) -> None:
    p = write(tmp_path, "philly.csv", (
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,vcA\n"
        "2017-10-09 07:00:55,120,2,240,vcB\n"
        "not a time,66.0,1,66.0,vcA\n"
        "2017-10-09 07:01:55,,1,0,vcA\n"
        "2017-10-09 07:01:55,-5,1,-5,vcA\n"
        "2017-10-09 07:01:55,nan,1,0,vcA\n"
        "2017-10-09 07:01:55,66,0,0,vcA\n"
        "2017-10-09 07:01:55,66,x,0,vcA\n"
        "2017-10-09 07:01:55,66\n"
        "\n"
    ))
    trace = load_philly(p)
    assert_well_formed(trace)
    assert trace.report.rows == 9
    assert [j.job_id for j in trace.jobs] == ["philly-1", "philly-0"]  # sorted by submit
    assert trace.jobs[1].submit_s == 60.0
    assert trace.report.skipped == {
        "unparseable timestamp": 1, "missing duration": 1, "negative duration": 1,
        "unparseable duration": 1, "zero GPUs": 1, "unparseable GPU count": 1, "too few fields": 1,
    }


def test_missing_file_and_column_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.csv does not exist"):
        load_philly(tmp_path / "nope.csv")
    p = write(tmp_path, "t.csv", "timestamp,duration,gpus,cluster\n2017-10-09 07:01:55,1,1,a\n")
    with pytest.raises(ValueError, match=r"t\.csv has no column 'num_gpus'.*\['timestamp', 'duration'"):
        load_philly(p)
    with pytest.raises(ValueError, match="is empty"):
        load_philly(write(tmp_path, "empty.csv", ""))


# --- openb ------------------------------------------------------------------------------------


def test_openb_default_pods(traces_dir: Path) -> None:
    trace = load_openb_pods(traces_dir / "alibaba-gpu-v2023-openb" / "csv" / "openb_pod_list_default.csv")
    assert_well_formed(trace)
    r = trace.report
    assert r.rows == 8_152
    # README: 1,088 CPU-only pods; one more (openb-pod-7285, a pending 0.23-GPU pod) has
    # creation_time == deletion_time, so 3,077 of the README's 3,078 sharing pods remain.
    assert r.skipped == {"cpu_only": 1_088, "zero duration": 1}
    fractional = [j for j in trace.jobs if j.gpu_milli is not None]
    assert len(fractional) == 3_077
    assert all(1 <= j.gpu_milli <= 999 and j.gpus == 1 for j in fractional if j.gpu_milli is not None)
    assert Counter(j.gpus for j in trace.jobs if j.gpus > 1) == {2: 16, 4: 15, 8: 44}
    assert trace.jobs[-1].submit_s / DAY == pytest.approx(149.3, abs=0.05)
    qos = Counter((j.priority, j.preemptible) for j in trace.jobs)
    assert set(qos) <= {(2, False), (1, True), (0, True)}


def test_openb_gpu_spec_maps_single_models_and_keeps_raw(traces_dir: Path) -> None:
    trace = load_openb_pods(traces_dir / "alibaba-gpu-v2023-openb" / "csv" / "openb_pod_list_gpuspec33.csv")
    assert_well_formed(trace)
    specs = {j.gpu_spec: j.gpu_model for j in trace.jobs}
    assert specs["T4"] == "T4"
    assert specs["P100"] == "P100"
    assert specs["G2"] is None  # undisclosed model: raw name only
    assert specs["V100M16|V100M32"] is None  # a choice of models is not one model
    assert specs[None] is None


def test_openb_variant_without_times_is_refused(traces_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"creation_time.*columns are"):
        load_openb_pods(traces_dir / "alibaba-gpu-v2023-openb" / "csv" / "openb_pod_list_multigpu20.csv")


def test_openb_nodes(traces_dir: Path) -> None:
    csv_dir = traces_dir / "alibaba-gpu-v2023-openb" / "csv"
    report = LoadReport(source="all")
    nodes = load_openb_nodes(csv_dir / "openb_node_list_all_node.csv", report)
    assert report.rows == 1_523
    assert report.skipped == {"no GPU": 310}
    assert len(nodes) == 1_213 == len(load_openb_nodes(csv_dir / "openb_node_list_gpu_node.csv"))
    assert sum(n.gpus for n in nodes) == 6_212
    assert Counter(n.model for n in nodes) == {
        "G2": 549, "T4": 404, "P100": 134, "V100M16": 55, "G3": 39, "V100M32": 30, "A10": 2
    }
    v100 = next(n for n in nodes if n.model == "V100M16")
    assert v100.catalog_model == "V100-16GB"
    g2 = next(n for n in nodes if n.model == "G2")
    assert g2.catalog_model is None and g2.gpus == 8


def test_gpu_model_maps_point_into_the_catalog() -> None:
    for name in (*OPENB_GPU_MODELS.values(), *PAI_GPU_MODELS.values()):
        assert name is None or name in BUILTIN_GPUS


# --- PAI --------------------------------------------------------------------------------------


def test_pai_machines_and_cluster_spec(traces_dir: Path) -> None:
    report = LoadReport(source="pai")
    machines = load_pai_machines(traces_dir / "alibaba-gpu-v2020-pai" / "pai_machine_spec.tar.gz", report)
    # The README says 1,896 rows, but its own per-type counts sum to 1,897, as does the file.
    assert report.rows == len(machines) == 1_897
    assert Counter(m.gpu_type for m in machines) == {
        "P100": 798, "T4": 497, "MISC": 280, "V100M32": 135, "V100": 104, "CPU": 83
    }
    assert sum(m.gpus for m in machines) == 6_742

    spec = parse_cluster(pai_cluster_spec(machines), "pai")
    assert spec.total_gpus == 6_742 - 2_240  # MISC has no catalog model: left out
    assert {g.gpu for g in spec.node_groups} == {"P100", "T4", "V100-16GB", "V100-32GB"}
    assert sum(g.count for g in spec.node_groups if g.gpu == "V100-16GB") == 104

    with_misc = parse_cluster(pai_cluster_spec(machines, unknown_gpu="P100"), "pai")
    assert with_misc.total_gpus == 6_742
    assert with_misc.total_nodes == 1_897 - 83  # CPU-only machines never become node groups


def test_pai_reads_an_extracted_csv_too(tmp_path: Path) -> None:
    p = write(tmp_path, "pai_machine_spec.csv", "m1,T4,96,512,2\nm2,V100,96,512,x\nm3,CPU,96,512,0\n")
    report = LoadReport(source="pai")
    machines = load_pai_machines(p, report)
    assert [m.name for m in machines] == ["m1", "m3"]
    assert report.skipped == {"unparseable cap_gpu": 1}
    with pytest.raises(ValueError, match="unknown_gpu"):
        pai_cluster_spec([m for m in machines if m.gpu_type == "CPU"])


# --- Chronus and Tiresias ---------------------------------------------------------------------


def test_chronus_mix1(traces_dir: Path) -> None:
    trace = load_chronus(traces_dir / "chronus-philly" / "trace_job_Philly_MIX1.csv")
    assert_well_formed(trace)
    assert trace.report.rows == 30_940
    assert trace.report.skipped == {"zero GPUs": 184}
    assert len({j.tenant for j in trace.jobs}) == 11
    best_effort = [j for j in trace.jobs if j.preemptible]
    assert best_effort and all(
        j.workload_class is WorkloadClass.EXPERIMENT and j.priority == 0 for j in best_effort
    )
    assert all(j.priority == 2 for j in trace.jobs if not j.preemptible)  # MIX1 deadlines are strict
    # minutes: submit_time 1..20,151 is two weeks
    assert trace.jobs[-1].submit_s == 20_150 * 60


def test_tiresias(traces_dir: Path) -> None:
    trace = load_tiresias(traces_dir / "tiresias" / "60_job.csv")
    assert_well_formed(trace)
    assert trace.report.rows == trace.report.kept == 60
    assert Counter(j.gpus for j in trace.jobs) == {1: 30, 2: 10, 4: 10, 8: 10}
    tf = load_tiresias(traces_dir / "tiresias" / "tf_job.csv")  # repeats job id 10
    assert [j.job_id for j in tf.jobs] == ["tiresias-10", "tiresias-10#2"]


# --- generic CSV ------------------------------------------------------------------------------


SACCT = (
    "JobID|Submit|Elapsed|AllocTRES|Account\n"
    "101|2024-03-01T10:00:00|00:30:00|billing=8,cpu=8,gres/gpu=2,mem=64G|ml\n"
    "102|2024-03-01T10:05:00|1-02:00:00|cpu=4,gres/gpu:a100=8,mem=1T|ml\n"
    "103|2024-03-01T09:55:00|45:10|cpu=2,mem=8G|ml\n"
    "104|2024-03-01T10:10:00|UNLIMITED|gres/gpu=1|ml\n"
    "105|yesterday|00:10:00|gres/gpu=1|ml\n"
    "106|2024-03-01T10:11:00|00:00:00|gres/gpu=1|ml\n"
)


def test_generic_csv_reads_slurm_sacct(tmp_path: Path) -> None:
    cols = parse_column_map("submit=Submit,duration=Elapsed,gpus=AllocTRES,tenant=Account,id=JobID")
    trace = load_csv(write(tmp_path, "sacct.txt", SACCT), cols)
    assert_well_formed(trace)
    assert [(j.job_id, j.gpus, j.duration_s, j.submit_s) for j in trace.jobs] == [
        ("101", 2, 1800.0, 0.0), ("102", 8, 26 * 3600.0, 300.0)
    ]
    assert trace.report.skipped == {
        "zero GPUs": 1, "unparseable duration": 1, "unparseable timestamp": 1, "zero duration": 1
    }


def test_generic_csv_counts_bad_rows_and_never_raises(tmp_path: Path) -> None:
    p = write(tmp_path, "jobs.csv", (
        "t,len,n,who\n"
        "10,2,4,a\n"
        "5,1.5,1,b\n"
        "7,,1,a\n"
        "8,3,four,a\n"
        "9,3,1.5,a\n"
        ",3,1,a\n"
        "2024-01-01T00:00:00,3,1,a\n"
        "11,-1,1,a\n"
        "12,01:00:00,2.0,\n"
    ))
    trace = load_csv(p, {"submit": "t", "duration": "len", "gpus": "n", "tenant": "who"}, time_unit="h")
    assert_well_formed(trace)
    assert trace.report.rows == 9
    assert [(j.job_id, j.submit_s, j.duration_s, j.gpus, j.tenant) for j in trace.jobs] == [
        ("1", 0.0, 1.5 * 3600, 1, "b"),
        ("0", 5 * 3600.0, 2 * 3600.0, 4, "a"),
        ("8", 7 * 3600.0, 3600.0, 2, "default"),  # Elapsed is absolute, not scaled by time_unit
    ]
    assert trace.report.skipped == {
        "missing duration": 1, "unparseable GPU count": 1, "fractional GPU count": 1,
        "missing submit time": 1, "submit format differs from earlier rows": 1, "negative duration": 1,
    }


def test_generic_csv_structural_errors(tmp_path: Path) -> None:
    p = write(tmp_path, "jobs.csv", "t,len,n\n1,2,3\n")
    with pytest.raises(ValueError, match=r"no column 'Account'.*\['t', 'len', 'n'\]"):
        load_csv(p, {"submit": "t", "duration": "len", "gpus": "n", "tenant": "Account"})
    with pytest.raises(ValueError, match="lacks required role"):
        load_csv(p, {"submit": "t", "duration": "len"})
    with pytest.raises(ValueError, match="unknown time_unit 'weeks'"):
        load_csv(p, {"submit": "t", "duration": "len", "gpus": "n"}, time_unit="weeks")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("submit=Submit,duration", r"part 'duration' is not role=column"),
        ("submit=S,duration=E,gpus=G,user=U", r"unknown role 'user'.*submit, duration, gpus"),
        ("submit=S,submit=T,duration=E,gpus=G", r"role 'submit' given twice"),
        ("submit=S,duration=E", r"lacks required role\(s\) \['gpus'\]"),
        ("submit=,duration=E,gpus=G", r"part 'submit=' is not role=column"),
    ],
)
def test_parse_column_map_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_column_map(text)


def test_parse_column_map_accepts_spaces() -> None:
    assert parse_column_map(" submit = Submit , duration=Elapsed,gpus=NGPU,tenant=Account ") == {
        "submit": "Submit", "duration": "Elapsed", "gpus": "NGPU", "tenant": "Account"
    }


# --- dispatcher -------------------------------------------------------------------------------


def test_load_trace_dispatches_and_refuses_unknown_formats(tmp_path: Path, traces_dir: Path) -> None:
    assert load_trace(traces_dir / "tiresias" / "60_job.csv", "tiresias").report.kept == 60
    p = write(tmp_path, "jobs.csv", "a,b,c\n0,60,1\n")
    assert load_trace(p, "csv", "submit=a,duration=b,gpus=c").jobs[0].duration_s == 60.0
    with pytest.raises(ValueError, match=r"unknown trace format 'slurm'.*'philly'.*'csv'"):
        load_trace(p, "slurm")
    with pytest.raises(ValueError, match="needs a column map"):
        load_trace(p, "csv")
    with pytest.raises(ValueError, match="only applies to format 'csv'"):
        load_trace(p, "philly", columns="submit=a,duration=b,gpus=c")
    assert set(FORMATS) == {"philly", "openb", "csv", "chronus", "tiresias"}


# --- synthetic --------------------------------------------------------------------------------


def test_synthetic_is_deterministic_per_seed() -> None:
    a = generate(500, seed=7, cluster_gpus=512)
    assert a.jobs == generate(500, seed=7, cluster_gpus=512).jobs
    assert a.jobs != generate(500, seed=8, cluster_gpus=512).jobs
    assert_well_formed(a)
    assert len(a.jobs) == a.report.rows == 500


def test_synthetic_offered_load_matches_target() -> None:
    gpus, load = 2048, 0.8
    trace = generate(20_000, seed=0, cluster_gpus=gpus, load=load)
    span = trace.jobs[-1].submit_s
    work = sum(j.gpus * j.duration_s for j in trace.jobs)
    assert work / (span * gpus) == pytest.approx(load, rel=0.2)
    # and not front- or back-loaded: each half of the horizon carries its share
    for lo, hi in ((0.0, 0.5), (0.5, 1.0)):
        half = sum(j.gpus * j.duration_s for j in trace.jobs if lo * span <= j.submit_s < hi * span)
        assert half / (span / 2 * gpus) == pytest.approx(load, rel=0.2)


def test_synthetic_class_shapes() -> None:
    trace = generate(3_000, seed=1, cluster_gpus=256)
    by_class: dict[WorkloadClass, list] = {}
    for j in trace.jobs:
        by_class.setdefault(j.workload_class, []).append(j)
    assert set(by_class) == set(WorkloadClass)
    assert all(j.gpus <= 256 for j in trace.jobs)  # full-runs capped at the cluster
    assert all(1 <= j.gpus <= 8 for j in by_class[WorkloadClass.EXPERIMENT])
    assert all(j.gpus == 1 for j in by_class[WorkloadClass.SWEEP])
    assert all(8 <= j.gpus <= 64 and j.duration_s >= 3600 for j in by_class[WorkloadClass.FINE_TUNE])
    assert all(j.gpus >= 64 and j.duration_s >= DAY for j in by_class[WorkloadClass.FULL_RUN])
    # sweeps arrive in single-tenant bursts: most sweep jobs have a same-tenant sweep neighbour
    sweeps = by_class[WorkloadClass.SWEEP]
    close = sum(1 for a, b in pairwise(sweeps)
                if a.tenant == b.tenant and b.submit_s - a.submit_s <= 120)
    assert close > 0.8 * len(sweeps)


def test_synthetic_classes_argument() -> None:
    only = generate(200, seed=3, cluster_gpus=64, classes={"experiment": 1})
    assert {j.workload_class for j in only.jobs} == {WorkloadClass.EXPERIMENT}
    with pytest.raises(ValueError, match="unknown workload class 'training'"):
        generate(10, seed=0, cluster_gpus=8, classes={"training": 1.0})
    with pytest.raises(ValueError, match="must not all be zero"):
        generate(10, seed=0, cluster_gpus=8, classes={"sweep": 0})
