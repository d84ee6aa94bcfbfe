"""Pollux's workloads in the twin: profiles, the goodput runtime model, the tiresias policy.

The fidelity target is the published simulator's per-job results
(``reference-results/results-jobload/tiresias-<load>/summary.json``); one
workload is replayed here job for job, the 32 in ``benchmarks/twin_pollux.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.sim.goodput import ProfileError, load_profiles, plan_batch
from grace.sim.goodput.profiles import canonical_placement
from grace.sim.runner import load_input, replay

ROOT = Path(__file__).resolve().parents[2]
POLLUX = ROOT.parent / "shared" / "traces" / "philly-pollux"
PROFILES = POLLUX / "app-profiles"
CLUSTER = ROOT / "examples" / "clusters" / "pollux-64.yaml"
WORKLOAD_1 = POLLUX / "workloads" / "workload-1.csv"

pytestmark = pytest.mark.skipif(not PROFILES.is_dir(), reason="shared Pollux traces not present")


@pytest.fixture(scope="module")
def profiles():
    return load_profiles(PROFILES)


def test_profiles_load_every_model(profiles) -> None:
    assert set(profiles) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    cifar = profiles["cifar10"]
    assert cifar.epochs > 0 and cifar.min_local_bsz <= cifar.max_local_bsz
    step, sync = cifar.step_time((4,), cifar.min_local_bsz)
    assert step > 0 and sync >= 0


def test_bad_profiles_folder_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="--profiles"):
        load_profiles(tmp_path / "missing")
    broken = tmp_path / "app-profiles" / "cifar10"
    shutil.copytree(PROFILES / "cifar10", broken)
    (broken / "placements.csv").unlink()
    with pytest.raises(ProfileError, match=r"placements\.csv"):
        load_profiles(tmp_path / "app-profiles")


def test_canonical_placement_is_largest_first_smallest_rotation() -> None:
    assert canonical_placement((1, 4, 0, 2)) == (1, 4, 2)
    assert canonical_placement((4, 4)) == (4, 4)
    with pytest.raises(ProfileError):
        canonical_placement((0, 0))


def test_plan_batch_accumulates_only_what_a_gpu_cannot_hold(profiles) -> None:
    cifar = profiles["cifar10"]
    assert cifar.max_batch_size >= cifar.max_local_bsz * 4
    fits = plan_batch(cifar, cifar.max_local_bsz * 2, 2)
    assert (fits.atomic_bsz, fits.accum_steps) == (cifar.max_local_bsz, 0)
    over = plan_batch(cifar, cifar.max_local_bsz * 4, 2)
    assert (over.atomic_bsz, over.accum_steps) == (cifar.max_local_bsz, 1)
    assert over.batch_size == cifar.max_local_bsz * 4
    # never more than the largest measured total batch
    capped = plan_batch(cifar, cifar.max_batch_size * 2, 2)
    assert capped.batch_size <= cifar.max_batch_size
    # one GPU asked for more than the smallest batch always accumulates (the simulator's rule)
    assert plan_batch(cifar, cifar.init_batch_size * 2, 1).accum_steps >= 1


def test_tiresias_reproduces_a_published_workload_job_for_job() -> None:
    inp = load_input(CLUSTER, WORKLOAD_1, "pollux", None, profiles=PROFILES)
    inp.round_s, inp.per_job = 60.0, True
    result = replay(inp, "tiresias")
    published = json.loads((POLLUX / "reference-results" / "results-jobload" / "tiresias-1.0"
                            / "summary.json").read_text())["jcts"]["workload-1"]
    ours = result.summary["per_job"]
    assert set(ours) == set(published)
    within = [abs(ours[k] - v) / v <= 0.05 for k, v in published.items()]
    assert sum(within) / len(within) >= 0.9
    assert result.summary["round_s"] == 60.0


def test_grace_beats_published_tiresias_on_a_workload() -> None:
    inp = load_input(CLUSTER, WORKLOAD_1, "pollux", None, profiles=PROFILES)
    result = replay(inp, "grace")
    published = json.loads((POLLUX / "reference-results" / "results-jobload" / "tiresias-1.0"
                            / "summary.json").read_text())["avgs"]["workload-1"]
    assert result.summary["avg_jct_s"] < published
    assert result.summary["estimates"].startswith("user")


def test_cli_pollux_needs_profiles_and_writes_per_job(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["simulate", "--cluster", str(CLUSTER), "--format", "pollux", "--trace", str(WORKLOAD_1)]
    missing = runner.invoke(app, base)
    assert missing.exit_code != 0
    assert "--profiles" in missing.output
    out = tmp_path / "out.json"
    ok = runner.invoke(app, [*base, "--profiles", str(PROFILES), "--policy", "tiresias",
                             "--round-s", "60", "--per-job", "--json", str(out)])
    assert ok.exit_code == 0, ok.output
    summary = json.loads(out.read_text())
    assert summary["per_job"]["cifar10-0"] > 0
    assert summary["round_s"] == 60
