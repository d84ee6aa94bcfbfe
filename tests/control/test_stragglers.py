"""Moving jobs off a node live: stragglers (heartbeat files -> windows -> core's rule)
and planned drains with ``evict``; both checkpoint on SIGTERM and requeue without the node.

The watch is fed files written the way ``grace.runtime`` writes them; the
reconciler runs with a scripted backend and a fake clock (the real-process
drill, ``grace inject --fault straggler``, is in test_recovery.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import authed, event_kinds
from test_reconciler import A100, Rig

from grace.control.api import create_app
from grace.control.store.db import Store
from grace.control.store.models import AttemptState, JobState
from grace.control.stragglers import StragglerWatch, own_work_s

FOUR_NODES = Path(__file__).parent / "data" / "four_nodes.yaml"
T0 = 1_700_000_000.0
DDP_PHASES = {"data": 0.002, "h2d": 0.001, "forward": 0.010, "backward": 0.030, "optimizer": 0.007}


def test_own_work_leaves_out_the_phases_that_wait_on_peers() -> None:
    # DDP: the all-reduce hides in backward, so backward is waiting, not work
    assert own_work_s(DDP_PHASES) == pytest.approx(0.002 + 0.001 + 0.010 + 0.007)
    # the runtime's own agreement and the comm hook's all-reduce span wait too;
    # a phase the job names itself counts as its work
    assert own_work_s({"forward": 0.01, "backward": 0.02, "allreduce": 0.5, "sync": 0.1,
                       "checkpoint": 3.0, "tokenize": 0.004}) == pytest.approx(0.014)
    assert own_work_s({}) is None
    assert own_work_s({"backward": 0.2, "checkpoint": 1.0}) is None


def write_records(attempt_dir: Path, rank: int, node: str, start: float, seconds: int,
                  slow: float = 1.0, partial_tail: bool = False) -> None:
    """One heartbeat line a second for ``seconds``, as the runtime writes them; ``slow``
    scales the rank's own work (forward, data, optimizer), not the waiting in backward."""
    lines = []
    for t in range(seconds):
        phases = {k: v * (slow if k != "backward" else 1.0) for k, v in DDP_PHASES.items()}
        lines.append(json.dumps({"node": node, "step": t * 20, "steps": 20, "step_s": 0.05,
                                 "phases": phases, "at": start + t + 0.5}))
    attempt_dir.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    if partial_tail:
        text += '{"node": "' + node  # a line the runtime is half-way through appending
    with open(attempt_dir / f"heartbeats-rank{rank}.jsonl", "a") as f:
        f.write(text)


def gang_files(adir: Path, nodes: list[str], start: float, seconds: int, slow: dict[str, float],
               ranks_per_node: int = 2) -> None:
    for i, node in enumerate(nodes):
        for r in range(ranks_per_node):
            # one slow GPU is enough: only the node's first rank is slowed
            write_records(adir, i * ranks_per_node + r, node, start, seconds,
                          slow.get(node, 1.0) if r == 0 else 1.0)


def test_a_node_slower_than_the_median_for_three_windows_is_reported_once(tmp_path: Path) -> None:
    nodes = ["n0", "n1", "n2"]
    gang_files(tmp_path, nodes, T0, 40, {"n1": 1.5})
    watch = StragglerWatch(window_s=5, lag_s=2)
    assert watch.observe("job", tmp_path, nodes, T0, T0 + 16) == []  # windows 0, 1 closed
    [found] = watch.observe("job", tmp_path, nodes, T0, T0 + 17.5)  # window 2 closed
    assert found.node == "n1" and found.slowdown == pytest.approx(0.5) and found.windows == 3
    assert watch.observe("job", tmp_path, nodes, T0, T0 + 60) == []  # the same episode


def test_a_gang_slow_everywhere_or_too_small_blames_nobody(tmp_path: Path) -> None:
    nodes = ["n0", "n1", "n2", "n3"]
    gang_files(tmp_path / "all", nodes, T0, 40, dict.fromkeys(nodes, 2.0))
    gang_files(tmp_path / "half", nodes, T0, 40, {"n0": 2.0, "n1": 2.0})
    gang_files(tmp_path / "two", nodes[:2], T0, 40, {"n0": 2.0})
    watch = StragglerWatch(window_s=5, lag_s=0)
    assert watch.observe("all", tmp_path / "all", nodes, T0, T0 + 40) == []
    assert watch.observe("half", tmp_path / "half", nodes, T0, T0 + 40) == []
    assert watch.observe("two", tmp_path / "two", nodes[:2], T0, T0 + 40) == []


def test_a_window_with_a_node_missing_breaks_the_streak(tmp_path: Path) -> None:
    nodes = ["n0", "n1", "n2"]
    gang_files(tmp_path, ["n0", "n2"], T0, 30, {})
    # n1 reports in windows 0-1 and 3-4 only (window 2: a checkpoint pause, say)
    write_records(tmp_path, 2, "n1", T0, 10, slow=1.5)
    write_records(tmp_path, 2, "n1", T0 + 15, 10, slow=1.5)
    watch = StragglerWatch(window_s=5, lag_s=0)
    assert watch.observe("job", tmp_path, nodes, T0, T0 + 25) == []
    # two more slow windows after the gap make three in a row
    write_records(tmp_path, 2, "n1", T0 + 25, 5, slow=1.5)
    assert [s.node for s in watch.observe("job", tmp_path, nodes, T0, T0 + 30)] == ["n1"]


def test_a_half_written_line_is_read_once_it_is_whole(tmp_path: Path) -> None:
    nodes = ["n0", "n1", "n2"]
    gang_files(tmp_path, nodes, T0, 10, {"n2": 1.5})
    write_records(tmp_path, 0, "n0", T0 + 10, 0, partial_tail=True)
    watch = StragglerWatch(window_s=5, lag_s=0)
    assert watch.observe("job", tmp_path, nodes, T0, T0 + 10) == []  # no error on the torn line
    offsets = dict(watch._attempts["job"].offsets)
    assert all(p.read_bytes()[:n].endswith(b"\n") for p, n in offsets.items())


# --------------------------------------------------------------------- the reconciler


@pytest.fixture
def rig4(store: Store, tmp_path: Path) -> Rig:
    rig = Rig(store, tmp_path / "state", cluster=FOUR_NODES)
    rig.rec.stragglers = StragglerWatch(window_s=5, lag_s=0)
    return rig


def _run_straggler(rig: Rig, jid: int, slow_pick: int = 1) -> tuple[list[str], str]:
    rig.cycle()
    job = rig.job(jid)
    nodes = [e["node"] for e in job.attempts[0].placement_json]
    slow = nodes[slow_pick]
    adir = rig.rec.ctx.dirs.attempt(jid, 1)
    gang_files(adir, nodes, job.attempts[0].started_at, 30, {slow: 1.6})
    for _ in range(20):
        rig.cycle(advance=1.0)
    return nodes, slow


def test_a_straggler_moves_its_job_off_the_node_from_a_checkpoint(rig4: Rig) -> None:
    jid = rig4.submit("train", gpus=None, nodes=3, gpus_per_node=2, gpu_model=A100)
    nodes, slow = _run_straggler(rig4, jid)
    assert rig4.backend.cancels == [(jid, 1)]  # one graceful stop (SIGTERM: checkpoint, exit)
    job = rig4.job(jid)
    first = job.attempts[0]
    assert first.state == AttemptState.CANCELLED and first.failure_kind == "straggler"
    assert first.failed_node == slow and "slower than the gang median" in first.detail
    assert [e["node"] for e in job.exclude_nodes] == [slow] and job.restarts == 0  # not the job's fault
    assert "moved" in event_kinds(rig4.store, jid)
    assert job.state == JobState.RUNNING and len(job.attempts) == 2
    assert slow not in rig4.node_of(jid, 2)
    node = rig4.node(slow)
    assert str(node.state) == "degraded" and "straggler" in node.reason
    assert {str(rig4.node(n).state) for n in nodes if n != slow} == {"healthy"}


def test_a_straggler_with_nowhere_else_to_go_is_marked_but_not_moved(rig4: Rig) -> None:
    jid = rig4.submit("wide", gpus=None, nodes=4, gpus_per_node=2, gpu_model=A100)
    _, slow = _run_straggler(rig4, jid)
    assert rig4.backend.cancels == []
    job = rig4.job(jid)
    assert job.state == JobState.RUNNING and len(job.attempts) == 1
    assert str(rig4.node(slow).state) == "degraded"


def test_a_planned_drain_with_evict_moves_its_jobs_off_from_a_checkpoint(rig4: Rig) -> None:
    jid = rig4.submit("train", gpus=None, nodes=2, gpus_per_node=2, gpu_model=A100)
    rig4.cycle()
    node = sorted(rig4.node_of(jid))[0]
    api = authed(create_app(rig4.store, rig4.topo, rig4.state_dir, rig4.rec, rig4.backend,
                            allow_inject=True), rig4.store)
    r = api.post(f"/nodes/{node}/drain", json={"reason": "firmware update", "evict": True})
    assert r.status_code == 200 and r.json()["evict"] is True
    rig4.cycle()
    assert rig4.backend.cancels == [(jid, 1)]  # SIGTERM: the runtime checkpoints and exits
    rig4.cycle()
    job = rig4.job(jid)
    first = job.attempts[0]
    assert first.state == AttemptState.CANCELLED and first.failure_kind == "drain"
    assert "planned drain" in first.detail and "firmware update" in first.detail
    assert [e["node"] for e in job.exclude_nodes] == [node] and job.restarts == 0
    assert node not in rig4.node_of(jid, 2)
    assert str(rig4.node(node).state) == "drained"  # its last job left


def test_a_plain_drain_lets_the_job_finish_where_it_is(rig4: Rig) -> None:
    jid = rig4.submit("train", gpus=None, nodes=2, gpus_per_node=2, gpu_model=A100)
    rig4.cycle()
    node = sorted(rig4.node_of(jid))[0]
    api = authed(create_app(rig4.store, rig4.topo, rig4.state_dir, rig4.rec, rig4.backend,
                            allow_inject=True), rig4.store)
    assert api.post(f"/nodes/{node}/drain", json={"reason": "later"}).status_code == 200
    rig4.cycle()
    rig4.cycle()
    assert rig4.backend.cancels == [] and len(rig4.job(jid).attempts) == 1
    assert str(rig4.node(node).state) == "draining"
