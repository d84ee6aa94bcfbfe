"""Grace on a real Slurm (issue 8): import, placement, DDP training through srun/torchrun,
accounting, drains both ways, and a killed rank resumed through a new sbatch.

Needs the 4-node Slurm of ``.ci/slurm-up.sh`` (n1-n4, 8 fake GPUs each, leaf1 =
n[1-2], leaf2 = n[3-4]); skipped without it (see conftest.py). One ``grace up
--backend slurm`` serves the whole module, on the cluster ``grace slurm-import``
wrote, so the import is what the scheduler places on. The parsers get fast
tests of their own at the end, with Slurm's real output as input.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import pytest

from grace.backends.base import AttemptStatus, LaunchSpec, NodeAssignment
from grace.backends.slurm import SlurmBackend
from grace.backends.slurm_cli import SlurmCli, expand_hostlist, parse_exit_code, parse_record
from grace.backends.slurm_inventory import catalog_gpu, cluster_spec, parse_gres, parse_node, parse_topology
from grace.core.topology import Topology
from grace.spec import load_cluster

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "control"))  # the e2e tests' `grace up` driver
from helpers import job_dir  # noqa: E402
from test_contract import wait_until_ended  # noqa: E402
from test_e2e import Server  # noqa: E402

T = TypeVar("T")

TINY = ["python", "examples/train_ddp.py", "--device", "cpu", "--batch-size", "2", "--seq-len", "8",
        "--d-model", "16", "--layers", "1", "--heads", "2"]


@pytest.fixture(scope="module")
def imported(slurm: SlurmCli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("import") / "cluster.yaml"
    subprocess.run([sys.executable, "-m", "grace.cli.main", "slurm-import", "--out", str(out),
                    "--name", "ci"], cwd=REPO, check=True, capture_output=True, env=slurm.env())
    return out


@pytest.fixture(scope="module")
def server(imported: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("grace") / "state", cluster=imported,
                 extra_args=("--backend", "slurm")).start()
    try:
        yield srv
    finally:
        srv.stop()


def sacct(slurm: SlurmCli, srv: Server, job: int, attempt: int) -> dict[str, str]:
    """Slurm's completion record of an attempt: the Slurm job its handle names, which must
    carry the attempt's name (the link back)."""
    adir = job_dir(srv.state_dir, job) / f"attempt-{attempt}"
    slurm_id = json.loads((adir / "launch.json").read_text())["slurm_job_id"]
    fields = ["JobID", "JobName", "State", "ExitCode", "NNodes", "NodeList", "Start", "End", "Elapsed"]
    out = slurm.run("sacct", "-c", "-n", "-P", "-j", slurm_id, "-o", ",".join(fields))
    (record,) = [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines() if line]
    assert record["JobName"] == f"grace-{job}-{attempt}"
    return record


def wait_for(what: str, check: Callable[[], T], timeout: float = 30.0) -> T:
    """``check()``'s first truthy value, polled every 0.3 s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def slurm_node(slurm: SlurmCli, name: str) -> tuple[str, str]:
    """(state with flags, reason) as ``sinfo`` shows them."""
    state, _, reason = slurm.run("sinfo", "-h", "-N", "-n", name, "-o", "%T|%E").strip().partition("|")
    return state, reason


def grace_node(srv: Server, name: str) -> dict:
    return next(n for n in srv.get("/nodes") if n["name"] == name)


# ---------------------------------------------------------------- slow: the real cluster


@pytest.mark.slow
def test_import_gives_four_nodes_under_two_leaves(imported: Path) -> None:
    spec = load_cluster(imported)
    assert spec.total_nodes == 4 and spec.total_gpus == 32
    topo = Topology.from_spec(spec)
    leaves = {}
    for n in topo.nodes:
        leaves.setdefault(n.leaf, []).append(n.name)
        assert (n.gpus, n.gpu_model) == (8, "A100-80GB")  # untyped GRES: the default model
    assert sorted(leaves.values()) == [["n1", "n2"], ["n3", "n4"]]


@pytest.mark.slow
def test_a_2x8_ddp_job_runs_under_one_switch_and_matches_slurm_accounting(
        server: Server, slurm: SlurmCli) -> None:
    job = server.submit({"name": "ddp-2x8", "tenant": "slurm", "nodes": 2, "gpus_per_node": 8,
                         "runtime_limit": "10m", "env": {"OMP_NUM_THREADS": "1"},
                         "command": [*TINY, "--steps", "3", "--log-every", "1"]})
    done = server.wait(job, {"completed", "failed"}, timeout=150)
    assert done["state"] == "completed", json.dumps(done)[:3000]
    (attempt,) = done["attempts"]
    nodes = sorted(n["node"] for n in attempt["nodes"])
    assert nodes in (["n1", "n2"], ["n3", "n4"]), nodes  # both under one leaf switch
    assert attempt["state"] == "succeeded" and attempt["exit_code"] == 0
    adir = job_dir(server.state_dir, job) / "attempt-1"
    log = (adir / f"{nodes[0]}.log").read_text()
    assert "step 3/3" in log and "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in log
    record = sacct(slurm, server, job, 1)
    assert (record["State"], record["ExitCode"], record["NNodes"]) == ("COMPLETED", "0:0", "2")
    assert expand_hostlist(record["NodeList"]) == nodes
    start = datetime.fromisoformat(record["Start"]).timestamp()
    end = datetime.fromisoformat(record["End"]).timestamp()
    h, m, s = (int(x) for x in record["Elapsed"].split(":"))
    assert h * 3600 + m * 60 + s == end - start
    # Grace's attempt spans Slurm's job, give or take a scheduler tick and a poll
    assert attempt["started_at"] - 1 <= start <= attempt["started_at"] + 5
    assert attempt["ended_at"] - 5 <= end <= attempt["ended_at"] + 1


@pytest.mark.slow
def test_a_killed_rank_resumes_from_its_checkpoint_through_a_new_sbatch(
        server: Server, slurm: SlurmCli) -> None:
    job = server.submit({"name": "kill-rank", "tenant": "slurm", "nodes": 2, "gpus_per_node": 1,
                         "runtime_limit": "10m", "env": {"OMP_NUM_THREADS": "1"},
                         "command": [*TINY, "--steps", "150", "--sleep-per-step", "0.05",
                                     "--checkpoint-every", "10", "--log-every", "10"]})
    root = job_dir(server.state_dir, job) / "checkpoints"
    wait_for("a committed checkpoint", lambda: root.is_dir() and any(
        (p / "MANIFEST.json").exists() for p in root.iterdir()), timeout=90)
    r = server.post(f"/jobs/{job}/inject", json={"fault": "kill-rank", "rank": 1}, timeout=30)
    assert r.status_code == 200, r.text
    done = server.wait(job, {"completed", "failed"}, timeout=150)
    assert done["state"] == "completed", json.dumps(done)[:3000]
    first, second = done["attempts"]
    assert first["state"] == "failed" and second["state"] == "succeeded"
    assert second["resumed_from"], "the retry must resume from a committed checkpoint"
    one, two = sacct(slurm, server, job, 1), sacct(slurm, server, job, 2)
    assert one["JobID"] != two["JobID"]  # a new sbatch, not a Slurm requeue
    assert (one["State"], two["State"]) == ("FAILED", "COMPLETED")


@pytest.mark.slow
def test_drains_flow_both_ways_with_their_reasons(server: Server, slurm: SlurmCli) -> None:
    # Grace drains n4 (an operator token named ops): Slurm shows it drained, with the reason
    made = server.post("/tokens", json={"name": "ops", "role": "operator"})
    assert made.status_code == 201, made.text
    ops = {"Authorization": f"Bearer {made.json()['token']}"}
    r = server.post("/nodes/n4/drain", json={"reason": "fan failing"}, headers=ops)
    assert r.status_code == 200, r.text
    state = wait_for("n4 drained in Slurm", lambda: (s := slurm_node(slurm, "n4"))[0]
                     in ("drained", "draining") and s)
    assert state[1] == "grace: drained by ops: fan failing"
    assert "grace: drained by ops: fan failing" in slurm.run("sinfo", "-R", "-h", "-o", "%E|%N")
    # ... and resumed in Grace: resumed in Slurm
    server.post("/nodes/n4/resume", timeout=30).raise_for_status()
    wait_for("n4 idle in Slurm", lambda: slurm_node(slurm, "n4")[0] == "idle")
    # A person drains n3 in Slurm: Grace takes it out, with Slurm's reason
    slurm.run("scontrol", "update", "nodename=n3", "state=drain", "reason=admin: reseat cable")
    try:
        node = wait_for("n3 out in Grace", lambda: (n := grace_node(server, "n3"))["state"]
                        in ("draining", "drained") and n)
        assert node["actor"] == "slurm" and "admin: reseat cable" in node["reason"]
        assert slurm_node(slurm, "n3")[1] == "admin: reseat cable"  # Grace did not overwrite it
    finally:
        slurm.run("scontrol", "update", "nodename=n3", "state=resume")
    wait_for("n3 back in Grace", lambda: grace_node(server, "n3")["state"] == "returned")


@pytest.mark.slow
def test_an_unreachable_slurmctld_is_not_a_lost_job(slurm: SlurmCli, tmp_path: Path) -> None:
    """A slurmctld restart must not make Grace requeue every running job."""
    b = SlurmBackend(tmp_path / "state", cluster=load_cluster(REPO / "examples/clusters/lab.yaml"),
                     cli=slurm, cwd=REPO)
    b.launch(LaunchSpec(job_id=1, attempt=1, name="sleeper", command=("sleep", "60"),
                        nodes=(NodeAssignment("n4", (0,)),), workdir=tmp_path / "job-1"))
    b.cli = SlurmCli(conf=str(tmp_path / "no-such-slurm.conf"), timeout_s=1.0)
    assert [o.status for o in b.poll()] == [AttemptStatus.RUNNING]
    b.cli = slurm
    b.cancel(1, 1, grace_s=2.0)  # returns at once; the backend's worker kills after the grace
    assert wait_until_ended(b, 1, timeout=60).status is AttemptStatus.CANCELLED


#: Each rank writes the sha256 of the secrets it sees (never the secrets) to seen-<rank>.json.
SHOW_SECRETS = """
import hashlib, json, os
seen = {k: hashlib.sha256(os.environ[k].encode()).hexdigest() if k in os.environ else None
        for k in ("GRACE_TOKEN", "GRACE_CHECKPOINT_KEY")}
path = os.path.join(os.environ["GRACE_WORKDIR"], "seen-" + os.environ["RANK"] + ".json")
open(path, "w").write(json.dumps(seen))
"""


@pytest.mark.slow
def test_secrets_reach_every_rank_and_no_file_of_the_attempt(slurm: SlurmCli, tmp_path: Path) -> None:
    """GRACE_TOKEN and GRACE_CHECKPOINT_KEY go through sbatch's environment to the ranks
    on both nodes (srun's steps), and appear in no file under the job or state dir."""
    token, key = "gjob_slurm-secret-test-7f3a9c", "c2x1cm0tc2VjcmV0LXRlc3Qta2V5LTMyLWJ5dGVzLi4u"
    b = SlurmBackend(tmp_path / "state", cluster=load_cluster(REPO / "examples/clusters/lab.yaml"),
                     cli=slurm, cwd=REPO)
    workdir = tmp_path / "job-1"
    b.launch(LaunchSpec(job_id=1, attempt=1, name="secrets", command=("python", "-c", SHOW_SECRETS),
                        nodes=(NodeAssignment("n3", (0,)), NodeAssignment("n4", (0,))),
                        workdir=workdir, env={"GRACE_TOKEN": token, "GRACE_CHECKPOINT_KEY": key,
                                              "OMP_NUM_THREADS": "1"}))
    obs = wait_until_ended(b, 1, timeout=120)
    assert obs.status is AttemptStatus.SUCCEEDED, obs.detail
    want = {"GRACE_TOKEN": hashlib.sha256(token.encode()).hexdigest(),
            "GRACE_CHECKPOINT_KEY": hashlib.sha256(key.encode()).hexdigest()}
    seen = {p.name: json.loads(p.read_text()) for p in workdir.glob("seen-*.json")}
    assert seen == {"seen-0.json": want, "seen-1.json": want}
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "job.sh" for p in files) and any(p.name.endswith(".log") for p in files)
    leaks = [(str(p), s) for p in files for s in (token, key) if s.encode() in p.read_bytes()]
    assert leaks == []
    assert token not in obs.detail and key not in obs.detail


# ---------------------------------------------------------------- fast: the parsers


def test_hostlists_expand_as_slurm_writes_them() -> None:
    assert expand_hostlist("n[1-3,7],gpu[08-10],login") == [
        "n1", "n2", "n3", "n7", "gpu08", "gpu09", "gpu10", "login"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("") == []


def test_node_lines_parse_with_free_text_reasons() -> None:
    line = ("NodeName=n4 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=8 Gres=gpu:h100:8(S:0-1) "
            "NodeAddr=127.0.0.1 RealMemory=16000 State=IDLE+DRAIN Partitions=gpu,debug "
            "Reason=someone: bad fan=x [root@2026-11-29T19:07:43]")
    n = parse_node(line)
    assert (n.name, n.state, n.flags, n.reason) == ("n4", "idle", {"DRAIN"}, "someone: bad fan=x")
    assert (n.gpus, n.gpu_type, n.cpus, n.memory_mb, n.partitions) == (8, "h100", 8, 16000, ("gpu", "debug"))
    assert n.out_of_service and not n.drained_by_grace
    assert parse_gres("gpu:2,gpu:a100:4(S:0)") == (6, "a100")
    assert parse_gres("(null)") == (0, None)
    assert parse_exit_code("3:0") == (3, 0) and parse_exit_code("0:9") == (0, 9)
    assert parse_record("JobId=7 JobName=grace-1-2 JobState=NODE_FAIL")["JobState"] == "NODE_FAIL"


def test_gres_types_map_to_catalog_models() -> None:
    assert catalog_gpu(None, "A100-80GB") == "A100-80GB"
    assert catalog_gpu("h100", "A100-80GB") == "H100-SXM"
    assert catalog_gpu("a100_40gb", "A100-80GB") == "A100-40GB"
    assert catalog_gpu("l40s", "A100-80GB") == "L40S"
    assert catalog_gpu("tpu", "A100-80GB") == "A100-80GB"  # unknown: the default


def test_switch_tree_becomes_one_group_per_leaf_and_shape() -> None:
    topo = parse_topology("SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=n[1-2]\n"
                          "SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=n[3-4]\n"
                          "SwitchName=spine Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=leaf[1-2]\n")
    base = "CPUTot=8 RealMemory=16000 State=IDLE Partitions=gpu"
    nodes = [parse_node(f"NodeName={n} Gres={g} {base}")
             for n, g in (("n1", "gpu:8"), ("n2", "gpu:8"), ("n3", "gpu:h100:4"), ("n4", "gpu:8"),
                          ("n5", "gpu:8"), ("cpu1", "(null)"))]
    spec = cluster_spec(nodes, topo, "t")
    got = {g.name: (g.names, g.gpu, g.gpus_per_node) for g in spec.node_groups}
    assert got == {"leaf1": (["n1", "n2"], "A100-80GB", 8),
                   "leaf2-a100-80gb-8": (["n4"], "A100-80GB", 8),
                   "leaf2-h100-sxm-4": (["n3"], "H100-SXM", 4),
                   "flat": (["n5"], "A100-80GB", 8)}
    leaves = {n.name: n.leaf for n in Topology.from_spec(spec).nodes}
    assert leaves["n1"] == leaves["n2"] and leaves["n1"] != leaves["n4"]
