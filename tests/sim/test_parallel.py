"""Replays in parallel processes give the results the same replays give one after another."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.sim.metrics import SimResult
from grace.sim.parallel import ReplayRun, can_fork, default_workers, replay_many
from grace.sim.runner import ReplayInput, load_input

#: Timing, which differs run to run; everything else must match.
TIMING = ("wall_s", "events_per_s")

pytestmark = pytest.mark.skipif(not can_fork(), reason="parallel replays fork (Linux)")


def _input(scene: list[str]) -> ReplayInput:
    """The scene's files, parsed once, as ``grace compare`` parses them."""
    flags = dict(zip(scene[::2], scene[1::2], strict=True))
    return load_input(Path(flags["--cluster"]), Path(flags["--trace"]), "csv", flags["--columns"])


def _comparable(r: SimResult) -> str:
    summary = {k: v for k, v in r.summary.items() if k not in TIMING}
    return json.dumps([summary, r.series, r.jct_s.tolist(), r.queue_s.tolist(), r.tenants,
                       r.tenant_series], sort_keys=True, default=str)


def test_parallel_replays_equal_the_same_replays_one_after_another(sweep_scene: list[str]) -> None:
    runs = [ReplayRun(p, p, seed) for p in ("fifo", "easy-backfill", "grace", "las")
            for seed in (0, 3)]
    seen: dict[int, list[float]] = {}
    parallel = replay_many(_input(sweep_scene), runs, workers=2,
                           progress=lambda i, f: seen.setdefault(i, []).append(f))
    one_by_one = replay_many(_input(sweep_scene), runs, workers=1)
    assert [r.summary["policy"] for r in parallel] == [r.policy for r in runs]
    assert [r.summary["seed"] for r in parallel] == [r.seed for r in runs]
    assert [_comparable(r) for r in parallel] == [_comparable(r) for r in one_by_one]
    # the policies differ, so equality above is not every replay giving one answer
    assert len({_comparable(r) for r in parallel}) > 1
    # progress came back from the workers, in order, for every run
    assert set(seen) == set(range(len(runs)))
    assert all(v == sorted(v) and 0 < v[-1] <= 1 for v in seen.values())


def test_the_workers_ran_in_other_processes(sweep_scene: list[str]) -> None:
    pids: list[int] = []
    runs = [ReplayRun(p, p) for p in ("fifo", "grace")]
    import grace.sim.parallel as parallel

    real = parallel._one

    def spy(inp: ReplayInput, run: ReplayRun, progress: object) -> SimResult:
        result = real(inp, run, progress)  # type: ignore[arg-type]
        result.summary["pid"] = os.getpid()
        return result

    parallel._one = spy  # type: ignore[assignment]
    try:
        pids = [r.summary["pid"] for r in replay_many(_input(sweep_scene), runs, workers=2)]
    finally:
        parallel._one = real  # type: ignore[assignment]
    assert os.getpid() not in pids and len(set(pids)) >= 1


def test_a_failing_replay_raises_in_the_caller(sweep_scene: list[str]) -> None:
    runs = [ReplayRun("fifo", "fifo"), ReplayRun("nope", "no-such-policy")]
    with pytest.raises(ValueError, match="unknown policy 'no-such-policy'"):
        replay_many(_input(sweep_scene), runs, workers=2)


def test_default_workers_is_one_per_run_at_most_one_per_core() -> None:
    assert default_workers(1) == 1
    assert 1 <= default_workers(64) <= (os.cpu_count() or 1)


def test_compare_gives_the_same_json_with_one_worker_and_with_several(
        tmp_path: Path, sweep_scene: list[str]) -> None:
    scene = sweep_scene
    outs = []
    for workers in ("1", "3"):
        out = tmp_path / f"w{workers}.json"
        r = CliRunner().invoke(app, ["compare", *scene, "--policies", "fifo,easy-backfill,grace",
                                     "--workers", workers, "--json", str(out)])
        assert r.exit_code == 0, r.output
        data = json.loads(out.read_text())
        outs.append({p: {k: v for k, v in s.items() if k not in TIMING} for p, s in data.items()})
    assert outs[0] == outs[1] and set(outs[0]) == {"fifo", "easy-backfill", "grace"}


@pytest.mark.parametrize(("policies", "message"), [
    ("fifo,fifo", "fifo named twice"), (" , ", "no policy named"),
    ("fifo,nope", "unknown policy 'nope'")])
def test_compare_refuses_a_bad_policy_list(sweep_scene: list[str], policies: str, message: str) -> None:
    r = CliRunner().invoke(app, ["compare", *sweep_scene, "--policies", policies])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output


def _without_timing(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in TIMING}


def test_a_sweep_of_policies_seeds_and_variants_equals_each_replay_run_alone(
        tmp_path: Path, sweep_scene: list[str]) -> None:
    """What an array task runs (grace simulate with the replay's flags) gives the summary
    the local sweep gives, so a Slurm sweep and a local one agree."""
    scene = sweep_scene
    out = tmp_path / "sweep.json"
    r = CliRunner().invoke(app, ["compare", *scene, "--policies", "fifo,grace", "--seeds", "0,5",
                                 "--fewer-nodes", "0,25", "--json", str(out)])
    assert r.exit_code == 0, r.output
    sweep = json.loads(out.read_text())
    assert len(sweep) == 8 and "grace seed 5 -25% nodes" in sweep
    for label, summary in sweep.items():
        policy, seed, percent = summary["policy"], summary["seed"], summary["fewer_nodes_percent"]
        assert label.startswith(f"{policy} seed {seed} ")
        alone = tmp_path / "alone.json"
        r = CliRunner().invoke(app, ["simulate", *scene, "--policy", policy, "--seed", str(seed),
                                     "--fewer-nodes", f"{percent:g}", "--json", str(alone)])
        assert r.exit_code == 0, r.output
        assert _without_timing(json.loads(alone.read_text())) == _without_timing(summary), label
    # a quarter of the nodes fewer: a quarter of the GPUs, and the queue grows
    assert sweep["grace seed 0 -25% nodes"]["cluster_gpus"] == 24
    assert sweep["grace seed 0 all nodes"]["cluster_gpus"] == 32
    assert (sweep["grace seed 0 -25% nodes"]["avg_queue_s"]
            > sweep["grace seed 0 all nodes"]["avg_queue_s"])


@pytest.mark.parametrize(("extra", "message"), [
    (["--seeds", "1,x"], "'x' is not a seed"), (["--seeds", "2,2"], "2 given twice"),
    (["--fewer-nodes", "120"], "outside 0 to 90"),
    (["--sweep-dir", "d"], "--sweep-dir with --on local: they apply to --on slurm"),
    (["--on", "slurm", "--html", "r.html"], "--html with --on slurm"),
    (["--on", "slurm", "--workers", "2"], "--workers with --on slurm"),
    (["--on", "cloud"], "'cloud'")])
def test_compare_refuses_bad_sweep_flags(sweep_scene: list[str], extra: list[str], message: str) -> None:
    r = CliRunner().invoke(app, ["compare", *sweep_scene, "--policies", "fifo", *extra])
    assert r.exit_code == 2 and message in " ".join(r.output.split()), r.output


def test_job_records_come_back_unless_left_out(sweep_scene: list[str]) -> None:
    runs = [ReplayRun(p, p) for p in ("fifo", "grace")]
    kept = replay_many(_input(sweep_scene), runs, workers=2)
    left = replay_many(_input(sweep_scene), runs, workers=2, keep_jobs=False)
    assert [len(r.jobs) for r in kept] == [80, 80] and [r.jobs for r in left] == [[], []]
    assert [_comparable(r) for r in kept] == [_comparable(r) for r in left]


def test_a_variant_of_a_node_list_cluster_is_refused(tmp_path: Path) -> None:
    from grace.sim.clusters import load_topology

    with pytest.raises(ValueError, match="--fewer-nodes applies to a cluster YAML"):
        load_topology(tmp_path / "openb_node_list.csv", "openb", 10.0)
