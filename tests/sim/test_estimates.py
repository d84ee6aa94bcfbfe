"""Runtime estimates as users give them (``sim.estimates``): the user model, trace limits,
timeouts, requeues, the summary's ``estimates`` and the CLI's ``--estimates``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from grace.cli.main import app
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.sim.engine import SimConfig, Simulation
from grace.sim.estimates import (
    DAY,
    HOUR,
    ROUND_LIMITS_S,
    USER_LIMITS,
    WEEK,
    EstimateModel,
    UserLimits,
    declare,
    parse_estimate_model,
    round_down,
    round_up,
)
from grace.sim.runner import ReplayInput, replay
from grace.sim.traces._common import RowError, time_limit_s
from grace.sim.traces.generic_csv import load_csv
from grace.sim.traces.model import LoadReport, Trace, TraceJob
from grace.spec.loader import parse_cluster

CLUSTER = {"name": "t", "node_groups": [{"name": "n", "count": 1, "gpu": "H100-SXM",
                                         "gpus_per_node": 8, "nodes_per_leaf": 1}]}
TOPO = Topology.from_spec(parse_cluster(CLUSTER))


def limits(durations: np.ndarray, seed: int = 0, model: UserLimits = USER_LIMITS) -> np.ndarray:
    return np.array([model.draw(float(d), seed, f"j{i}") for i, d in enumerate(durations)])


# ------------------------------------------------------------------ the user model
def test_the_user_model_is_deterministic_per_seed_and_job_whatever_else_is_in_the_trace():
    d = np.full(2000, 3 * HOUR)
    a, b, c = limits(d, seed=1), limits(d, seed=1), limits(d, seed=2)
    assert (a == b).all()
    assert (a != c).mean() > 0.3
    # keyed by the job, not by its position in a draw sequence
    assert USER_LIMITS.draw(3 * HOUR, 1, "j7") == a[7]


def test_requested_limits_are_round_values():
    rng = np.random.default_rng(0)
    d = np.exp(rng.uniform(np.log(30.0), np.log(40 * DAY), 20_000))
    for limit in limits(d):
        assert limit in ROUND_LIMITS_S or (limit > ROUND_LIMITS_S[-1] and limit % WEEK == 0)
    assert round_up(5 * HOUR) == 8 * HOUR and round_up(HOUR) == HOUR
    assert round_up(20 * DAY) == 3 * WEEK and round_down(50 * 60.0) == 30 * 60.0
    assert round_down(10 * 60.0) is None


def test_the_model_has_the_shape_docs_twin_md_states():
    """Jobs of 10 minutes: none can round up to the 1-day default, so the share at the
    default is the share that keeps it (20%); the underestimating share (5%) cannot get
    a round value under 10 minutes and overestimates instead."""
    d = np.full(20_000, 600.0)
    lim = limits(d)
    assert abs((lim == DAY).mean() - 0.20) < 0.01
    assert (lim < d).mean() == 0.0
    explicit = lim[lim != DAY] / 600.0
    assert np.median(explicit) == 3.0  # 1,143 s median request (factor 1.9) -> 30 min
    # 6-hour jobs: the underestimating 5% ask for 4 h and time out; a day is what the
    # keepers have and what requests of 12-24 h round up to (accuracy 0.25-0.5: 26% of
    # the 75% who overestimate); the factor median sits between the unrounded 1.9 and 4
    d = np.full(20_000, 6 * HOUR)
    lim = limits(d)
    assert abs((lim < d).mean() - 0.05) < 0.01
    assert abs((lim == DAY).mean() - (0.20 + 0.75 * 0.25 / 0.95)) < 0.015
    over = lim[(lim >= d) & (lim != DAY)] / (6 * HOUR)
    assert 1.9 <= float(np.median(over)) <= 4.0


def test_a_job_longer_than_the_default_asks_for_its_own_limit():
    """Nobody keeps a 1-day default for a 2-day job: 5% ask too little (1 day, a round
    value under it), the rest at least 2 days."""
    d = np.full(5000, 2 * DAY)
    lim = limits(d)
    assert abs((lim < d).mean() - 0.05) < 0.01
    assert (lim[lim < d] == DAY).all()


def test_model_parameters_are_checked():
    with pytest.raises(ValueError, match="keep_default_share"):
        UserLimits(keep_default_share=1.5)
    with pytest.raises(ValueError, match="at most 1"):
        UserLimits(keep_default_share=0.7, under_share=0.5)
    with pytest.raises(ValueError, match="exact, none, user"):
        parse_estimate_model("perfect")
    assert parse_estimate_model(" USER ") is EstimateModel.USER


def test_declare_per_model():
    tj = TraceJob("a", 0.0, 5000.0, 1)
    assert declare(EstimateModel.EXACT, tj, 0) == declare(EstimateModel.EXACT, tj, 9)
    assert declare(EstimateModel.EXACT, tj, 0).estimate_s == 5000.0
    assert declare(EstimateModel.NONE, tj, 0).estimate_s is None
    user = declare(EstimateModel.USER, tj, 0)
    assert user.estimate_s == user.limit_s == USER_LIMITS.draw(5000.0, 0, "a")
    assert declare(EstimateModel.USER, tj, 0, enforce_limits=False).limit_s is None
    traced = declare(EstimateModel.USER, TraceJob("a", 0.0, 5000.0, 1, limit_s=7200.0), 0)
    assert (traced.estimate_s, traced.limit_s, traced.from_trace) == (7200.0, 7200.0, True)
    free = declare(EstimateModel.USER, TraceJob("a", 0.0, 5000.0, 1, limit_s=math.inf), 0)
    assert (free.estimate_s, free.limit_s) == (None, None)


# ------------------------------------------------------------------ limit=COL
@pytest.mark.parametrize(("text", "seconds"), [
    ("3600", 3600.0), ("90.5", 90.5), ("02:00:00", 7200.0), ("30:00", 1800.0),
    ("1-00:00:00", DAY), ("2-12", 2 * DAY + 12 * HOUR), ("1-02:30", DAY + 2 * HOUR + 1800),
    ("UNLIMITED", math.inf), ("", None), ("Partition_Limit", None),
])
def test_time_limits_in_seconds_and_slurm_forms(text: str, seconds: float | None) -> None:
    assert time_limit_s(text, 1.0, "Timelimit") == seconds


@pytest.mark.parametrize("text", ["soon", "-5", "0", "1:2:3:4", "1-xx", "nan"])
def test_a_bad_time_limit_names_the_column(text: str) -> None:
    with pytest.raises(RowError, match="column 'Timelimit'"):
        time_limit_s(text, 1.0, "Timelimit")


def test_the_csv_loader_takes_limits_and_names(tmp_path: Path) -> None:
    p = tmp_path / "sacct.txt"
    p.write_text("JobID|Submit|Elapsed|NGPU|Timelimit|JobName\n"
                 "1|0|00:30:00|1|01:00:00|finetune-llama\n"
                 "2|10|00:30:00|8|UNLIMITED|x\n"
                 "3|20|00:30:00|8|whenever|y\n"
                 "4|30|00:30:00|8||z\n")
    trace = load_csv(p, {"submit": "Submit", "duration": "Elapsed", "gpus": "NGPU",
                         "id": "JobID", "limit": "Timelimit", "name": "JobName"})
    by_id = {j.job_id: j for j in trace.jobs}
    assert by_id["1"].limit_s == HOUR and by_id["1"].name == "finetune-llama"
    assert by_id["2"].limit_s == math.inf and by_id["4"].limit_s is None
    assert "3" not in by_id
    (reason,) = trace.report.skipped
    assert "column 'Timelimit'" in reason


# ------------------------------------------------------------------ in a replay
def _sim(jobs: list[TraceJob], **config: object) -> Simulation:
    sim = Simulation(TOPO, jobs, SimConfig(policy=get_policy("grace"), **config))  # type: ignore[arg-type]
    sim.metrics.set_horizon(1.0)
    sim.result = sim.run()  # type: ignore[attr-defined]
    return sim


def test_a_job_that_outruns_its_limit_ends_timeout_unless_limits_are_not_enforced():
    jobs = [TraceJob("long", 0.0, 2 * HOUR, 8, limit_s=HOUR)]
    sim = _sim(jobs)
    j = sim.jobs[next(iter(sim.jobs))]
    assert (j.outcome, j.end_s) == ("timeout", HOUR)
    assert sim.result.summary["jobs_timed_out"] == 1  # type: ignore[attr-defined]
    free = _sim(jobs, enforce_limits=False)
    j = free.jobs[next(iter(free.jobs))]
    assert (j.outcome, j.end_s) == ("completed", 2 * HOUR)
    oracle = _sim(jobs, estimates=EstimateModel.EXACT)
    assert oracle.jobs[next(iter(oracle.jobs))].outcome == "completed"


def test_a_requeued_job_keeps_its_user_limit_and_only_the_oracle_learns_the_rest():
    """A preemptible job is preempted for a higher-priority one; its next attempt gets
    the same limit as estimate and limit (Slurm keeps --time); exact knows the rest."""
    jobs = [TraceJob("low", 0.0, 4 * HOUR, 8, priority=0, preemptible=True, limit_s=8 * HOUR),
            TraceJob("high", 1800.0, HOUR, 8, priority=5, preemptible=False, limit_s=2 * HOUR)]
    seen: dict[EstimateModel, list[tuple[float | None, float | None]]] = {}
    for model in (EstimateModel.USER, EstimateModel.EXACT):
        sim = Simulation(TOPO, jobs, SimConfig(policy=get_policy("grace"), estimates=model))
        low = sim.jobs[next(jid for jid, j in sim.jobs.items() if j.trace.job_id == "low")]
        attempts: list[tuple[float | None, float | None]] = []
        apply = sim._apply

        def recording(result, now, apply=apply, low=low, attempts=attempts):  # type: ignore[no-untyped-def]
            apply(result, now)
            if any(s.job_id == low.pending.id for s in result.starts):
                attempts.append((low.pending.estimate_s, low.pending.limit_s))

        sim._apply = recording  # type: ignore[method-assign]
        sim.metrics.set_horizon(1.0)
        sim.run()
        assert low.preemptions == 1 and low.outcome == "completed"
        seen[model] = attempts
    assert seen[EstimateModel.USER] == [(8 * HOUR, 8 * HOUR), (8 * HOUR, 8 * HOUR)]
    (first, _), (second, _) = seen[EstimateModel.EXACT]
    assert first == 4 * HOUR and second == pytest.approx(3.5 * HOUR)


@pytest.mark.parametrize(("given", "label"), [
    ([HOUR, HOUR], "user:trace"), ([HOUR, None], "user:trace+model"), ([None, None], "user")])
def test_the_summary_names_the_estimate_model(given: list[float | None], label: str) -> None:
    jobs = [TraceJob(str(i), 0.0, 600.0, 1, limit_s=lim) for i, lim in enumerate(given)]
    inp = ReplayInput(TOPO, Trace(jobs, LoadReport("t")), "c", "t")
    assert replay(inp, "fifo").summary["estimates"] == label
    assert replay(inp, "fifo", estimates="exact").summary["estimates"] == "exact"
    assert replay(inp, "fifo", estimates=EstimateModel.NONE).summary["estimates"] == "none"
    with pytest.raises(TypeError, match="EstimateModel"):
        replay(inp, "fifo", estimates=True)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the CLI
def test_simulate_takes_estimates_by_name_bare_or_negated(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,duration,gpus,limit\n0,600,1,3600\n60,600,1,\n")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump({"kind": "cluster", **CLUSTER}))
    out = tmp_path / "s.json"
    base = ["simulate", "--cluster", str(cluster), "--trace", str(trace), "--format", "csv",
            "--columns", "submit=submit,duration=duration,gpus=gpus,limit=limit"]

    def estimates(*extra: str) -> str:
        r = CliRunner().invoke(app, [*base, *extra, "--json", str(out)])
        assert r.exit_code == 0, r.output
        return str(json.loads(out.read_text())["estimates"])

    assert estimates() == "user:trace+model"
    assert estimates("--estimates", "exact") == "exact"
    assert estimates("--estimates") == "exact"  # the old flag, bare, last
    assert estimates("--estimates", "--seed", "1") == "exact"  # bare, before another option
    assert estimates("--no-estimates") == "none"
    assert estimates("--estimates=user", "--no-enforce-limits") == "user:trace+model"
    r = CliRunner().invoke(app, [*base, "--estimates", "perfect"])
    assert r.exit_code == 2 and "exact, none, user" in " ".join(r.output.split())
    r = CliRunner().invoke(app, [*base, "--estimates", "user", "--no-estimates"])
    assert r.exit_code == 2 and "keep one" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["compare", *base[1:], "--policies", "fifo", "--estimates", "none",
                                 "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["fifo"]["estimates"] == "none"
