"""``kind: sweep``: deterministic expansion, parameters as flags and env, field-named errors,
and trials small enough to pack into the lab cluster's MIG slices."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.core.jobs import compile_job
from grace.core.topology import Topology
from grace.spec.errors import SpecError
from grace.spec.loader import load_cluster, load_sweep, parse_sweep
from grace.spec.sweep import Search
from grace.spec.trial import Mode, Rule

REPO = Path(__file__).resolve().parents[2]
BASE = {"gpus": 0.25, "command": ["python", "train.py"]}


def sweep(**fields: object) -> dict:
    return {"kind": "sweep", "name": "s", "job": dict(BASE), **fields}


def test_grid_is_every_combination_in_written_order() -> None:
    spec = parse_sweep(sweep(parameters={"lr": [0.1, 0.01], "width": [16, 32, 64]}))
    assert spec.search is Search.GRID
    trials = spec.expand()
    assert [t.sweep.params for t in trials if t.sweep] == [
        {"lr": lr, "width": w} for lr in (0.1, 0.01) for w in (16, 32, 64)]
    assert [t.name for t in trials] == [f"s-{i}" for i in range(6)]
    first = trials[0]
    assert first.command == ["python", "train.py", "--lr=0.1", "--width=16"]
    assert first.env["GRACE_PARAM_LR"] == "0.1" and first.env["GRACE_PARAM_WIDTH"] == "16"
    assert first.workload_class == "sweep" and first.is_sub_gpu


def test_random_search_is_seeded_and_within_bounds() -> None:
    body = sweep(parameters={"lr": {"loguniform": [1e-4, 1e-1]}, "opt": ["adam", "sgd"],
                             "drop": {"uniform": [0.0, 0.5]}}, trials=12, seed=7)
    a, b = parse_sweep(body).expand(), parse_sweep(body).expand()
    assert [t.command for t in a] == [t.command for t in b]  # same file, same trials
    other = parse_sweep({**body, "seed": 8}).expand()
    assert [t.command for t in a] != [t.command for t in other]
    for t in a:
        assert t.sweep is not None
        p = t.sweep.params
        assert 1e-4 <= float(p["lr"]) <= 1e-1 and p["opt"] in ("adam", "sgd")
        assert 0.0 <= float(p["drop"]) <= 0.5
        assert f"--opt={p['opt']}" in (t.command or [])
    assert len(a) == 12 and len({t.name for t in a}) == 12
    assert [t.name for t in a][:2] == ["s-00", "s-01"]  # padded: they sort in trial order


def test_metric_and_stopping_rule_reach_every_trial() -> None:
    spec = parse_sweep(sweep(parameters={"lr": [1, 2]}, metric={"name": "acc", "mode": "max"},
                             early_stopping={"rule": "successive-halving", "eta": 2}))
    for t in spec.expand():
        assert t.sweep is not None and t.sweep.metric.mode is Mode.MAX
        assert t.sweep.early_stopping is not None
        assert t.sweep.early_stopping.config().rule is Rule.SUCCESSIVE_HALVING


@pytest.mark.parametrize(("fields", "where", "says"), [
    ({"parameters": {"lr": {"loguniform": [1e-4, 1]}}}, "", "trials"),
    ({"parameters": {"lr": [1, 2]}, "trials": 3}, "", "drop trials"),
    ({"parameters": {"lr": {"uniform": [1, 0]}}, "trials": 2}, "parameters.lr", "low must"),
    ({"parameters": {"lr": {"uniform": [0, 1], "choice": [1]}}, "trials": 2},
     "parameters.lr", "exactly one"),
    ({"parameters": {"9lr": [1]}}, "", "parameter '9lr'"),
    ({"parameters": {"a": list(range(40)), "b": list(range(40))}}, "", "1600 combinations"),
    ({"parameters": {"lr": [1]}, "metric": {"name": "x", "mode": "up"}}, "metric.mode", "min"),
    ({"parameters": {"lr": [1]}, "early_stopping": {"rule": "bogus"}},
     "early_stopping.rule", "median"),
    ({"parameters": {"lr": [1]}, "max_parallel": 0}, "max_parallel", "greater"),
    ({"parameters": {}}, "parameters", "at least 1"),
])
def test_bad_sweeps_name_the_field(fields: dict, where: str, says: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_sweep(sweep(**fields))
    assert any(p.path.startswith(where) and says in p.message for p in e.value.problems), \
        e.value.problems


def test_base_job_errors_are_under_job() -> None:
    body = sweep(parameters={"lr": [1]})
    body["job"] = {"gpus": 2.5, "command": ["python", "x.py"]}
    with pytest.raises(SpecError) as e:
        parse_sweep(body)
    assert any(p.path == "job" and "fractional" in p.message for p in e.value.problems)


def test_the_example_packs_into_the_lab_clusters_mig_slices() -> None:
    """Each trial of examples/jobs/sweep.yaml asks for a quarter GPU: on lab.yaml it
    compiles to a MIG slice of an A100, not to a whole GPU."""
    topo = Topology.from_spec(load_cluster(REPO / "examples" / "clusters" / "lab.yaml"))
    spec = load_sweep(REPO / "examples" / "jobs" / "sweep.yaml")
    for i, trial in enumerate(spec.expand()):
        job = compile_job(trial, i, 0.0, topo)
        assert job.slices, f"{trial.name} does not pack into a slice"
        assert set(job.slices) == {"A100-80GB"}


def test_grace_validate_accepts_and_rejects_sweeps(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(app, ["validate", str(REPO / "examples" / "jobs" / "sweep.yaml")])
    assert ok.exit_code == 0, ok.output
    assert "16 trial(s)" in " ".join(ok.output.split()) and "median" in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: sweep\nname: b\njob: {gpus: 1, command: [python, x.py]}\n"
                   "parameters: {lr: {loguniform: [0, 1]}}\ntrials: 2\n")
    out = runner.invoke(app, ["validate", str(bad)])
    assert out.exit_code == 1
    text = " ".join(out.output.split())
    assert "parameters.lr" in text and "above 0" in text
