"""Every example file loads, and the named clusters have the sizes their comments claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from grace.spec import ClusterSpec, JobSpec, PoolKind, WorkloadClass
from grace.spec.loader import detect_kind, load_cluster, load_jobs, load_sweep, read_yaml

# Parametrization needs the file lists at collection time, before fixtures exist.
_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLUSTER_FILES = sorted((_EXAMPLES / "clusters").glob("*.yaml"))
JOB_FILES = sorted((_EXAMPLES / "jobs").glob("*.yaml"))


def _names(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_expected_examples_exist() -> None:
    assert {"lab", "philly", "philly-busy", "h100-16k", "gb200-nvl72", "hybrid"} <= set(
        _names(CLUSTER_FILES)
    )
    assert {
        "experiment", "sweep", "fine-tune", "full-run", "mig-inference", "train-ddp"
    } <= set(_names(JOB_FILES))


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=_names(CLUSTER_FILES))
def test_cluster_example_loads(path: Path, load_spec) -> None:
    assert detect_kind(read_yaml(path)) == "cluster"
    spec = load_spec(path)
    assert isinstance(spec, ClusterSpec)
    assert spec.total_gpus > 0
    assert load_cluster(path) == spec


@pytest.mark.parametrize("path", JOB_FILES, ids=_names(JOB_FILES))
def test_job_example_loads(path: Path, load_spec) -> None:
    if detect_kind(read_yaml(path)) == "sweep":  # kind: sweep expands to its trials' jobs
        assert all(isinstance(j, JobSpec) for j in load_sweep(path).expand())
        return
    assert detect_kind(read_yaml(path)) == "job"
    jobs = load_spec(path)
    assert jobs and all(isinstance(j, JobSpec) for j in jobs)
    assert load_jobs(path) == jobs


@pytest.mark.parametrize("path", CLUSTER_FILES + JOB_FILES, ids=_names(CLUSTER_FILES + JOB_FILES))
def test_example_starts_with_a_comment_header(path: Path) -> None:
    assert path.read_text().startswith("# "), f"{path.name}: start with a comment saying what it models"


# --- clusters ---------------------------------------------------------------


def test_h100_16k_is_16384_gpus_in_a_few_lines(examples: Path) -> None:
    path = examples / "clusters" / "h100-16k.yaml"
    spec = load_cluster(path)
    assert spec.total_gpus == 16_384
    assert spec.total_nodes == 2048
    group = spec.node_groups[0]
    assert (group.gpu, group.gpus_per_node, group.nodes_per_leaf, group.leaves_per_pod) == (
        "H100-SXM", 8, 32, 16
    )
    assert group.count // group.nodes_per_leaf // group.leaves_per_pod == 4  # pods
    assert spec.network.pod_oversubscription == 2.0
    content = [
        line for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert len(content) <= 15, "the fat-tree shorthand should keep this file to a few lines"


def test_philly_sizes_match_the_trace(examples: Path, repo_root: Path) -> None:
    clusters = examples / "clusters"
    philly = load_cluster(clusters / "philly.yaml")
    assert philly.total_gpus == 2816
    assert philly.total_nodes == 352
    # 352 is the sum of the VC sizes Helios used for its Philly simulation.
    for shared in (repo_root / "shared", repo_root.parent / "shared"):
        vc_csv = shared / "traces" / "helios" / "philly_vc.csv"
        if not vc_csv.exists():
            continue
        rows = vc_csv.read_text().strip().splitlines()[1:]
        assert sum(int(r.split(",")[1]) for r in rows) == philly.total_nodes

    busy = load_cluster(clusters / "philly-busy.yaml")
    assert busy.total_gpus == 512
    assert busy.node_groups[0].gpu == philly.node_groups[0].gpu


def test_lab_is_small_and_can_slice_a100s(examples: Path) -> None:
    lab = load_cluster(examples / "clusters" / "lab.yaml")
    assert lab.total_gpus <= 12
    assert [p.name for p in lab.pools] == ["lab"]
    by_name = {g.name: g for g in lab.node_groups}
    catalog = lab.catalog()
    assert by_name["a100"].mig_gpus_per_node == 1
    assert catalog[by_name["a100"].gpu].supports_mig
    assert by_name["l40s"].mig_gpus_per_node == 0
    assert all(lab.pool_of(g) == "lab" for g in lab.node_groups)
    assert by_name["a100"].node_names() == ["a100-00", "a100-01"]


def test_gb200_racks_are_nvlink_domains_under_one_leaf(examples: Path) -> None:
    spec = load_cluster(examples / "clusters" / "gb200-nvl72.yaml")
    group = spec.node_groups[0]
    assert group.gpu == "B200"
    assert group.nvlink_domain_nodes * group.gpus_per_node == 72
    assert group.nodes_per_leaf == group.nvlink_domain_nodes
    assert spec.total_gpus == 288


def test_hybrid_has_an_on_prem_and_a_cloud_pool(examples: Path) -> None:
    spec = load_cluster(examples / "clusters" / "hybrid.yaml")
    kinds = {p.name: p.kind for p in spec.pools}
    assert kinds == {"on-prem": PoolKind.ON_PREM, "cloud-spot": PoolKind.CLOUD}
    gpu_by_pool = {spec.pool_of(g): g.gpu for g in spec.node_groups}
    assert gpu_by_pool == {"on-prem": "H100-SXM", "cloud-spot": "A100-80GB"}


# --- jobs -------------------------------------------------------------------


def _one(name: str) -> JobSpec:
    (job,) = load_jobs(_EXAMPLES / "jobs" / f"{name}.yaml")
    return job


def test_experiment_is_short_single_gpu_and_preemptible() -> None:
    job = _one("experiment")
    assert job.workload_class is WorkloadClass.EXPERIMENT
    assert job.gpus == 1 and job.preemptible
    assert job.runtime_limit is not None and job.runtime_limit <= 3600


def test_sweep_is_sixteen_mig_sized_research_trials(examples: Path) -> None:
    jobs = load_sweep(examples / "jobs" / "sweep.yaml").expand()
    assert len(jobs) == 16
    assert len({j.name for j in jobs}) == 16
    assert all(j.tenant == "research" for j in jobs)
    assert all(j.workload_class is WorkloadClass.SWEEP and j.is_sub_gpu for j in jobs)


def test_fine_tune_gives_a_model_for_vram_estimation() -> None:
    job = _one("fine-tune")
    assert job.workload_class is WorkloadClass.FINE_TUNE
    assert job.gpu_model is None and job.min_vram_gb is None
    assert job.model is not None
    assert (job.model.params_b, job.model.lora) == (7, True)


def test_full_run_is_a_first_in_line_gang_that_checkpoints() -> None:
    job = _one("full-run")  # sized for the lab cluster: tests/examples runs it there
    assert job.workload_class is WorkloadClass.FULL_RUN
    assert (job.nodes, job.gpus_per_node, job.gpus) == (2, 2, 4)
    assert job.gpu_model == "A100-80GB"
    assert job.priority > 0 and not job.preemptible
    assert job.command is not None and "--checkpoint-every" in job.command


def test_mig_inference_is_a_sub_gpu_job() -> None:
    job = _one("mig-inference")
    assert job.is_sub_gpu and job.whole_gpus == 0
    assert job.min_vram_gb is not None and job.min_vram_gb <= 10


def test_train_ddp_is_the_demo_gang() -> None:
    job = _one("train-ddp")
    assert (job.nodes, job.gpus_per_node, job.gpus) == (2, 2, 4)
    assert job.tenant == "demo"
    assert job.workload_class is WorkloadClass.EXPERIMENT
    assert job.runtime_estimate == 120
    assert job.command == ["python", "examples/train_ddp.py", "--steps", "60"]


def test_train_ddp_fits_the_lab_cluster(examples: Path) -> None:
    lab = load_cluster(examples / "clusters" / "lab.yaml")
    job = _one("train-ddp")
    assert job.nodes is not None and job.gpus_per_node is not None
    hosts = [g for g in lab.node_groups if g.gpus_per_node >= job.gpus_per_node]
    assert sum(g.count for g in hosts) >= job.nodes
