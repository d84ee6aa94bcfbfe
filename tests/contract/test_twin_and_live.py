"""The contract between the two drivers of ``core``: every scenario decides alike in both.

Each scenario (``scenarios/*.yaml``, its ``why`` says what it proves) is played
by the twin and by the live reconciler (``harness``); their decisions must be
equal: which jobs started where and in what order, which were preempted, which
failed and why, each job's state at the end, every node's moves, breaker trips
and lemons. A scenario's ``expect`` pins the facts it is about, so a change that
broke both worlds alike still fails.

What exists in one world only, and why (docs/architecture.md keeps the list):

- live only: heartbeat hangs (the twin models no heartbeats), moving a job off a
  straggler (the twin models no per-step timings; the straggler *signal* and its
  health-table action are in scenario 11), planned drains with ``--evict``,
  launch errors and their budget, exclusions that heal when a node returns
  (the twin's restart policy may exclude, but nothing in the twin drains a node
  for good), operator actions;
- twin only: drawn failures and spot preemptions (live gets its failures from
  hardware and its preemptions from a cloud provider).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import SCENARIOS, Scenario, Trace, run_live, run_twin

FILES = sorted(SCENARIOS.glob("*.yaml"))


def test_there_are_at_least_twelve_scenarios() -> None:
    assert len(FILES) >= 12


def _check_expectations(sc: Scenario, trace: Trace) -> None:
    want = sc.expect
    if "preemptions" in want:
        assert len(trace.preempted) == want["preemptions"], trace.preempted
    for outcome in ("completed", "failed", "cancelled"):
        for job in want.get(outcome, ()):
            assert trace.outcomes[job] == outcome, (job, trace.outcomes)
    if "breaker_trips" in want:
        assert trace.breaker_trips == want["breaker_trips"]
    if "lemons" in want:
        assert trace.lemons == want["lemons"]
    for group, limit in (want.get("max_running") or {}).items():  # an array's %N held
        assert trace.max_running[group] == limit, trace.max_running
    for job, nodes in (want.get("placed_on") or {}).items():  # the nodes of its first start
        assert next(n for j, n in trace.starts if j == job) == tuple(nodes), trace.starts


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_the_twin_and_live_decide_alike(path: Path, tmp_path: Path) -> None:
    sc = Scenario.load(path)
    twin = run_twin(sc)
    live = run_live(sc, tmp_path)
    assert live.summary() == twin.summary(), f"{sc.name}: {sc.why}"
    _check_expectations(sc, twin)
