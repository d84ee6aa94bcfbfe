"""The workflow gate (core.workflow) and Slurm's text for arrays and dependencies (spec)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from grace.core.decisions import NEXT_STEP, PendingReason
from grace.core.workflow import Dep, Outcome, Parent, WorkflowFacts, gate
from grace.spec.job import JobSpec
from grace.spec.units import parse_duration
from grace.spec.workflow import DependencyKind, compact_indices, parse_array, parse_dependency

K = DependencyKind
RUNNING = Parent(Outcome.NOT_ENDED, "is running")
DONE = Parent(Outcome.SUCCEEDED, "completed")
FAILED = Parent(Outcome.FAILED, "failed", "exit 1 in its first 5 minutes")


def after(kind: DependencyKind, parent: int = 1, job: int = 2) -> WorkflowFacts:
    return WorkflowFacts(job, dependencies=(Dep(kind, parent),))


# ---------------------------------------------------------------- dependencies
@pytest.mark.parametrize(("kind", "parent", "admitted"), [
    (K.AFTEROK, RUNNING, False), (K.AFTEROK, DONE, True),
    (K.AFTERANY, RUNNING, False), (K.AFTERANY, DONE, True), (K.AFTERANY, FAILED, True),
    (K.AFTERNOTOK, RUNNING, False), (K.AFTERNOTOK, FAILED, True),
    (K.PREFLIGHT, RUNNING, False), (K.PREFLIGHT, DONE, True),
])
def test_a_dependency_admits_its_job_once_the_parent_ended_as_it_asks(
        kind: DependencyKind, parent: Parent, admitted: bool) -> None:
    r = gate([after(kind)], {1: parent}, {})
    assert (r.admitted == [2]) is admitted
    assert r.never == []
    if not admitted:
        assert r.waiting == {2: PendingReason.DEPENDENCY}


def test_a_child_of_a_failed_parent_is_never_satisfiable_with_a_reason_naming_it() -> None:
    r = gate([after(K.AFTEROK)], {1: FAILED}, {})
    assert r.admitted == [] and r.waiting == {}
    [n] = r.never
    assert (n.job_id, n.parent, n.fail) == (2, 1, False)
    assert "afterok:1" in n.reason and "job 1" in n.reason and "failed" in n.reason


def test_afternotok_of_a_completed_parent_is_never_satisfiable() -> None:
    [n] = gate([after(K.AFTERNOTOK)], {1: DONE}, {}).never
    assert "completed" in n.reason and not n.fail


def test_a_failed_preflight_fails_its_job_with_the_parents_reason() -> None:
    [n] = gate([after(K.PREFLIGHT)], {1: FAILED}, {}).never
    assert n.fail and "preflight job 1 failed" in n.reason
    assert "exit 1 in its first 5 minutes" in n.reason


def test_a_parent_that_does_not_exist_is_never_satisfiable() -> None:
    [n] = gate([after(K.AFTERANY, parent=99)], {}, {}).never
    assert "99" in n.reason


def test_dependencies_are_all_of() -> None:
    both = WorkflowFacts(3, dependencies=(Dep(K.AFTEROK, 1), Dep(K.AFTERANY, 2)))
    assert gate([both], {1: DONE, 2: RUNNING}, {}).waiting == {3: PendingReason.DEPENDENCY}
    assert gate([both], {1: DONE, 2: FAILED}, {}).admitted == [3]


# ---------------------------------------------------------------- holds
def test_a_held_job_waits_as_held_even_while_its_dependency_is_unmet() -> None:
    held = WorkflowFacts(2, held=True, dependencies=(Dep(K.AFTEROK, 1),))
    assert gate([held], {1: RUNNING}, {}).waiting == {2: PendingReason.HELD}
    assert gate([WorkflowFacts(2, held=True)], {}, {}).waiting == {2: PendingReason.HELD}


def test_every_new_reason_says_what_happens_next() -> None:
    for r in (PendingReason.HELD, PendingReason.DEPENDENCY, PendingReason.ARRAY_LIMIT):
        assert NEXT_STEP[r]


# ---------------------------------------------------------------- arrays
def tasks(n: int, limit: int, group: int = 10) -> list[WorkflowFacts]:
    return [WorkflowFacts(group + i, group=group, index=i, max_parallel=limit)
            for i in range(n)]


def test_an_array_admits_up_to_its_limit_in_index_order() -> None:
    r = gate(list(reversed(tasks(10, 2))), {}, {})
    assert sorted(r.admitted) == [10, 11]
    assert set(r.waiting) == set(range(12, 20))
    assert set(r.waiting.values()) == {PendingReason.ARRAY_LIMIT}


def test_running_tasks_take_their_slots() -> None:
    assert gate(tasks(10, 2)[3:], {}, {10: 1}).admitted == [13]
    assert gate(tasks(10, 2)[3:], {}, {10: 2}).admitted == []


def test_a_held_task_takes_no_slot() -> None:
    group = tasks(4, 2)
    group[0] = WorkflowFacts(10, held=True, group=10, index=0, max_parallel=2)
    assert gate(group, {}, {}).admitted == [11, 12]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 30), limit=st.integers(1, 8), running=st.integers(0, 10),
       held=st.sets(st.integers(0, 29)))
def test_the_gate_never_admits_more_than_the_limit_less_the_running(
        n: int, limit: int, running: int, held: set[int]) -> None:
    group = [WorkflowFacts(100 + i, held=i in held, group=7, index=i, max_parallel=limit)
             for i in range(n)]
    r = gate(group, {}, {7: running})
    assert len(r.admitted) <= max(0, limit - running)
    ready = [f for f in group if not f.held]
    assert len(r.admitted) == min(len(ready), max(0, limit - running))
    # lowest indices first
    assert r.admitted == [f.job_id for f in ready][:len(r.admitted)]


# ---------------------------------------------------------------- Slurm's text
@pytest.mark.parametrize(("text", "indices", "limit"), [
    ("0-9", list(range(10)), None), ("0-99%8", list(range(100)), 8),
    ("1,3,5-7", [1, 3, 5, 6, 7], None), ("0-15:4", [0, 4, 8, 12], None), ("7", [7], None),
])
def test_parse_array_reads_slurms_syntax(text: str, indices: list[int], limit: int | None) -> None:
    a = parse_array(text)
    assert (a.indices, a.max_parallel) == (indices, limit)


@pytest.mark.parametrize("bad", ["", "5-1", "a-b", "0-9%0", "0-9%x", "1,1", "0-2000000"])
def test_parse_array_refuses_with_the_field_and_an_example(bad: str) -> None:
    with pytest.raises(ValueError, match="array") as e:
        parse_array(bad)
    assert "e.g." in str(e.value) or "once" in str(e.value) or "split" in str(e.value)


def test_parse_dependency_reads_slurms_syntax() -> None:
    deps = parse_dependency("afterok:12,afterany:13:14")
    assert [(d.kind, d.job) for d in deps] == [(K.AFTEROK, 12), (K.AFTERANY, 13),
                                               (K.AFTERANY, 14)]


@pytest.mark.parametrize("bad", ["", "after:1", "afterok", "afterok:x", "preflight:1",
                                 "afterok:1?afterany:2"])
def test_parse_dependency_refuses_with_the_field_and_the_fix(bad: str) -> None:
    with pytest.raises(ValueError, match="dependency"):
        parse_dependency(bad)


def test_a_job_spec_takes_the_same_fields_as_the_flags() -> None:
    spec = JobSpec(name="t", nodes=2, gpus_per_node=4, runtime_limit="1-02:00:00",
                   dependency="afterok:3", hold=True, array="0-9%2")
    assert spec.gpus == 8 and spec.runtime_limit == 26 * 3600
    assert spec.dependency[0].job == 3 and spec.hold
    assert spec.array is not None and spec.array.text() == "0-9%2"
    with pytest.raises(ValidationError, match="dependency"):
        JobSpec(name="t", gpus=1, dependency="afterok:nope")


def test_slurm_time_formats() -> None:
    assert parse_duration("02:00:00") == 7200
    assert parse_duration("90:00") == 5400  # MM:SS
    assert parse_duration("1-00:00") == 86400


def test_compact_indices_is_slurms_task_list() -> None:
    assert compact_indices([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
