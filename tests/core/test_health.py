"""Node health as a specification: what each signal does, how nodes move, and the guards on draining."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core.health import (
    GRACE,
    TRANSITIONS,
    Action,
    BreakerConfig,
    BreakerTripped,
    DrainNode,
    HealthMonitor,
    HealthTable,
    IllegalTransition,
    LemonConfig,
    LemonFlagged,
    MarkDegraded,
    NodeState,
    RestartJobs,
    ReturnNode,
    RunDiagnostic,
    Signal,
    SignalKind,
    check_transition,
)
from grace.spec.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
MIN, HOUR, DAY = 60.0, 3600.0, 86400.0


def nodes(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def monitor(n: int = 10, **kw) -> HealthMonitor:
    return HealthMonitor(nodes(n), **kw)


def xid(node: str, code: int | None, at: float = 0.0) -> Signal:
    return Signal(node, SignalKind.XID, at, code)


def types(decisions) -> list[type]:
    return [type(d) for d in decisions]


def drain_and_pass(m: HealthMonitor, node: str, now: float) -> list:
    """Driver plays along: jobs leave, level 2 passes, level 3 passes."""
    assert m.jobs_left(node, now) == [RunDiagnostic(node, 2, reset_first=m._rec(node).reset)]
    assert m.diagnostic_result(node, True, now + 2 * MIN, level=2) == [RunDiagnostic(node, 3)]
    return m.diagnostic_result(node, True, now + 17 * MIN, level=3)


# ------------------------------------------------------------------ the table


def test_fatal_xid_79_drains_with_a_reset_and_restarts_the_jobs_elsewhere():
    m = monitor()
    out = m.observe(xid("n0", 79))
    assert types(out) == [DrainNode, RestartJobs]  # cordon first, so the restart lands elsewhere
    assert out[0].reset and "reboot" in out[0].reason
    assert m.state("n0") is NodeState.DRAINING and not m.is_schedulable("n0")
    assert m.jobs_left("n0", 60) == [RunDiagnostic("n0", 2, reset_first=True)]


def test_application_xid_13_only_restarts_the_job_and_the_node_stays():
    m = monitor()
    assert types(m.observe(xid("n0", 13))) == [RestartJobs]
    assert m.state("n0") is NodeState.HEALTHY and m.is_schedulable("n0")


def test_xid_48_drains_and_diagnoses_without_a_reset():
    m = monitor()
    out = m.observe(xid("n0", 48))
    assert out[0] == DrainNode("n0", out[0].reason, reset=False)
    assert m.jobs_left("n0", 10) == [RunDiagnostic("n0", 2, reset_first=False)]


@pytest.mark.parametrize("code", [43, 63, 92])
def test_informational_xids_are_ignored(code):
    m = monitor()
    assert m.observe(xid("n0", code)) == []
    assert m.state("n0") is NodeState.HEALTHY and m.history("n0") == ()


def test_an_unknown_xid_drains_conservatively():
    m = monitor()
    out = m.observe(xid("n0", 4242))
    assert isinstance(out[0], DrainNode) and out[0].reason.startswith("xid:4242: an Xid not in this table")


@pytest.mark.parametrize("kind", [SignalKind.THERMAL_THROTTLE, SignalKind.POWER_THROTTLE])
def test_throttling_marks_degraded_but_the_node_stays_schedulable(kind):
    m = monitor()
    assert types(m.observe(Signal("n0", kind, 0.0))) == [MarkDegraded]
    assert m.observe(Signal("n0", kind, 5.0)) == []  # same episode: said once
    assert m.state("n0") is NodeState.DEGRADED and m.is_schedulable("n0")
    m.clear_degraded("n0", 60)
    assert m.state("n0") is NodeState.HEALTHY


@pytest.mark.parametrize(("kind", "action"), [
    (SignalKind.HEARTBEAT_MISSING, Action.RESTART_JOB),
    (SignalKind.JOB_CRASHED, Action.RESTART_JOB),
    (SignalKind.PREFLIGHT_FAILED, Action.DRAIN_AND_DIAGNOSE),
    (SignalKind.NVLINK_DOWN, Action.DRAIN_AND_DIAGNOSE),
    (SignalKind.NVLINK_CRC, Action.DRAIN_AND_DIAGNOSE),
    (SignalKind.ROW_REMAP_FAILURE, Action.DRAIN_AND_DIAGNOSE),
    (SignalKind.ECC_DOUBLE_BIT, Action.DRAIN_AND_DIAGNOSE),
])
def test_non_xid_signals_follow_the_documented_defaults(kind, action):
    assert HealthTable.default().rule_for(Signal("n0", kind, 0.0)).action is action


def test_every_signal_and_listed_xid_has_a_rule_with_a_reason():
    table = HealthTable.default()
    keys = {row[0] for row in table.describe()}
    assert {k.value for k in SignalKind if k is not SignalKind.XID} <= keys
    assert {f"xid:{c}" for c in (13, 31, 43, 46, 48, 62, 63, 64, 74, 79, 92, 94, 95, 109, 110, 119,
                                 120, 140)} | {"xid:unknown"} <= keys
    assert all(reason for *_, reason in table.describe())


def test_describe_lists_xids_in_number_order_then_the_other_signals():
    keys = [row[0] for row in HealthTable.default().describe()]
    xids = keys[:keys.index("xid:unknown")]
    assert xids == sorted(xids, key=lambda k: int(k[4:])) and keys[0] == "xid:13"


def test_docs_render_the_default_table_exactly():
    doc = (ROOT / "docs" / "health.md").read_text()
    for key, action, _origin, reason in HealthTable.default().describe():
        assert f"| `{key}` | {action} | {reason} |" in doc, key


# ---------------------------------------------------------- table overrides


def test_an_override_from_yaml_replaces_only_the_named_rules():
    table = HealthTable.from_yaml(ROOT / "examples" / "health.yaml")
    assert table.rule_for(xid("n0", 94)).action is Action.DRAIN_AND_DIAGNOSE
    assert table.rule_for(xid("n0", 94)).origin.endswith("health.yaml")
    assert table.rule_for(xid("n0", 79)) == HealthTable.default().rule_for(xid("n0", 79))
    m = HealthMonitor(nodes(4), table)
    assert isinstance(m.observe(xid("n0", 94))[0], DrainNode)


def test_override_short_and_long_forms(tmp_path):
    f = tmp_path / "h.yaml"
    f.write_text("kind: health\nrules:\n  xid:13: ignore\n  nvlink-crc:\n"
                 "    action: mark-degraded\n    reason: our racks report CRC bursts that clear\n")
    table = HealthTable.from_yaml(f)
    assert table.rule_for(xid("n0", 13)).action is Action.IGNORE
    crc = table.rule_for(Signal("n0", SignalKind.NVLINK_CRC, 0.0))
    assert (crc.action, crc.reason) == (Action.MARK_DEGRADED, "our racks report CRC bursts that clear")


def test_a_bad_action_is_a_spec_error_naming_the_key_and_the_allowed_actions():
    with pytest.raises(SpecError) as err:
        HealthTable.from_dict({"rules": {"xid:79": "reboot"}}, "h.yaml")
    (problem,) = err.value.problems
    assert problem.path == "rules.xid:79"
    assert "'reboot'" in problem.message
    assert all(a.value in problem.message for a in Action)


def test_bad_keys_are_all_reported_at_once_each_by_name():
    with pytest.raises(SpecError) as err:
        HealthTable.from_dict({"rules": {"nvlink_crc": "ignore", 79: "ignore",
                                         "xid:48": {"action": "explode"}}})
    by_path = {p.path: p.message for p in err.value.problems}
    assert set(by_path) == {"rules.nvlink_crc", "rules.79", "rules.xid:48.action"}
    assert "nvlink-crc" in by_path["rules.nvlink_crc"]  # the hint lists the valid names
    assert "'xid:79'" in by_path["rules.79"]


def test_a_wrong_kind_or_unknown_top_level_field_is_refused():
    with pytest.raises(SpecError) as err:
        HealthTable.from_dict({"kind": "job", "rule": {}})
    assert {p.path for p in err.value.problems} == {"kind", "rule"}


def test_a_duplicate_key_in_yaml_is_refused(tmp_path):
    f = tmp_path / "h.yaml"
    f.write_text("rules:\n  xid:13: ignore\n  xid:13: restart-job\n")
    with pytest.raises(SpecError, match="duplicate key 'xid:13'"):
        HealthTable.from_yaml(f)


# ---------------------------------------------------- the node state machine


def test_a_drained_node_returns_only_after_passing_a_level_3_diagnostic():
    m = monitor()
    m.observe(xid("n0", 48, at=0))
    assert m.jobs_left("n0", 30) == [RunDiagnostic("n0", 2)]
    assert m.diagnostic_result("n0", True, 150, level=2) == [RunDiagnostic("n0", 3)]
    assert m.state("n0") is NodeState.DIAGNOSING and not m.is_schedulable("n0")
    assert m.diagnostic_result("n0", True, 1050, level=3) == [ReturnNode("n0")]
    assert m.state("n0") is NodeState.RETURNED and m.is_schedulable("n0")
    assert [(t.from_state, t.to_state) for t in m.history("n0")] == [
        (NodeState.HEALTHY, NodeState.DRAINING), (NodeState.DRAINING, NodeState.DRAINED),
        (NodeState.DRAINED, NodeState.DIAGNOSING), (NodeState.DIAGNOSING, NodeState.RETURNED)]
    assert all(t.actor == GRACE for t in m.history("n0"))


@pytest.mark.parametrize("level", [2, 3])
def test_a_node_that_fails_a_diagnostic_stays_out_until_a_person_acts(level):
    m = monitor()
    m.observe(xid("n0", 79))
    m.jobs_left("n0", 30)
    if level == 3:
        m.diagnostic_result("n0", True, 150, level=2)
    assert m.diagnostic_result("n0", False, 1000, level=level) == []
    assert m.state("n0") is NodeState.DRAINED and not m.is_schedulable("n0")
    assert "needs repair" in m.history("n0")[-1].reason
    assert m.jobs_left("n0", 2000) == [] and m.state("n0") is NodeState.DRAINED  # nothing automatic
    # after the repair a person undrains it; it still has to pass level 3
    assert m.undrain("n0", "alice", 5000) == [RunDiagnostic("n0", 3, reset_first=True)]
    assert m.diagnostic_result("n0", True, 6000) == [ReturnNode("n0")]


def test_a_node_drained_by_a_person_is_not_undrained_by_a_passing_diagnostic():
    m = monitor()
    m.observe(xid("n0", 48, at=0))
    m.jobs_left("n0", 30)
    assert m.drain("n0", "RMA ticket 123: keep out", "alice", 60) == []  # takes over the drain
    m.diagnostic_result("n0", True, 150, level=2)
    assert m.diagnostic_result("n0", True, 1050, level=3) == []
    assert m.state("n0") is NodeState.DRAINED and m.holder("n0") == "alice"
    assert "alice holds it" in m.history("n0")[-1].reason
    # only alice (or another person) brings it back, and still through a diagnostic
    assert m.undrain("n0", "alice", 2000) == [RunDiagnostic("n0", 3)]
    assert m.diagnostic_result("n0", True, 3000) == [ReturnNode("n0")]


def test_a_manual_drain_lets_jobs_finish_and_waits_for_a_person():
    m = monitor()
    out = m.drain("n3", "firmware upgrade", "bob", 0)
    assert out == [DrainNode("n3", "drained by bob: firmware upgrade", reset=False)]  # no restart
    assert m.jobs_left("n3", 3600) == []  # no automatic diagnostic on a person's drain
    assert m.state("n3") is NodeState.DRAINED and m.holder("n3") == "bob"
    assert m.history("n3")[0].actor == "bob"


def test_a_person_can_force_a_node_back_and_that_is_recorded():
    m = monitor()
    m.observe(xid("n0", 48))
    m.jobs_left("n0", 30)
    assert m.undrain("n0", "carol", 60, force=True) == [ReturnNode("n0")]
    assert m.state("n0") is NodeState.RETURNED and m.history("n0")[-1].actor == "carol"
    assert m.diagnostic_result("n0", False, 100) == []  # the abandoned run's result is ignored
    assert m.state("n0") is NodeState.RETURNED


def test_a_returned_node_behaves_like_a_healthy_one():
    m = monitor()
    m.observe(xid("n0", 48))
    drain_and_pass(m, "n0", 30)
    assert types(m.observe(xid("n0", 48, at=DAY))) == [DrainNode, RestartJobs]


def test_signals_on_an_out_of_service_node_are_part_of_the_same_incident():
    m = monitor()
    m.observe(xid("n0", 74))
    assert types(m.observe(xid("n0", 79, at=1))) == [RestartJobs]  # what still ran there died; no 2nd drain
    assert m.jobs_left("n0", 30) == [RunDiagnostic("n0", 2, reset_first=True)]  # 79 asked for a reset
    assert m.observe(xid("n0", 79, at=40)) == []  # nothing runs there to restart
    assert m.observe(Signal("n0", SignalKind.JOB_CRASHED, 41)) == []
    assert m.lemons() == [] and len(m._rec("n0").failures) == 1  # one incident, one failure


def test_illegal_transitions_raise():
    with pytest.raises(IllegalTransition, match="healthy -> returned"):
        check_transition("n0", NodeState.HEALTHY, NodeState.RETURNED)
    with pytest.raises(IllegalTransition, match="drained -> healthy"):
        check_transition("n0", NodeState.DRAINED, NodeState.HEALTHY)
    m = monitor()
    with pytest.raises(IllegalTransition, match="not drained"):
        m.undrain("n0", "alice", 0)
    with pytest.raises(IllegalTransition, match="healthy -> healthy"):
        m.clear_degraded("n0", 0)


def test_unknown_nodes_are_refused():
    with pytest.raises(KeyError, match="n99"):
        monitor().observe(xid("n99", 79))


# ------------------------------------------------------------- the breaker


def test_breaker_trips_when_drains_in_10_minutes_would_exceed_20_percent():
    m = monitor(10)  # 20% of 10 nodes: two automatic drains allowed per 10 minutes
    assert types(m.observe(xid("n0", 79, at=0))) == [DrainNode, RestartJobs]
    assert types(m.observe(xid("n1", 79, at=60))) == [DrainNode, RestartJobs]
    out = m.observe(xid("n2", 79, at=120))
    assert types(out) == [BreakerTripped, MarkDegraded, RestartJobs]  # loud first, then the fallback
    trip = out[0]
    assert trip.drained_share == pytest.approx(0.3) and trip.window_s == 600
    assert "reset_breaker" in trip.message and "3 of 10" in trip.message
    assert m.breaker_open and m.state("n2") is NodeState.DEGRADED and m.is_schedulable("n2")
    # stays open, and says so only once
    assert types(m.observe(xid("n3", 48, at=2 * HOUR))) == [MarkDegraded, RestartJobs]
    assert m.deferred_drains == ["n2", "n3"]
    # a person resets it: draining works again
    m.reset_breaker("alice", 3 * HOUR)
    assert types(m.observe(xid("n4", 79, at=3 * HOUR + 1))) == [DrainNode, RestartJobs]
    # and a deferred node's next fatal signal drains it
    assert types(m.observe(xid("n2", 79, at=3 * HOUR + 2))) == [DrainNode, RestartJobs]
    assert m.deferred_drains == ["n3"]
    assert [e[1:] for e in m.breaker_log] == [(GRACE, "tripped"), ("alice", "reset")]


def test_drains_older_than_the_window_do_not_count():
    m = monitor(10)
    m.observe(xid("n0", 79, at=0))
    m.observe(xid("n1", 79, at=60))
    assert types(m.observe(xid("n2", 79, at=60 + 10 * MIN))) == [DrainNode, RestartJobs]
    assert not m.breaker_open


def test_manual_drains_do_not_count_toward_the_breaker():
    m = monitor(10)
    for i in range(5):
        m.drain(f"n{i}", "maintenance", "bob", i)
    assert types(m.observe(xid("n8", 79, at=10))) == [DrainNode, RestartJobs]


def test_breaker_thresholds_are_configurable_and_a_small_cluster_can_drain_one_node():
    m = monitor(4)  # 20% of 4 is under one node: the first drain in a window is still allowed
    assert types(m.observe(xid("n0", 79))) == [DrainNode, RestartJobs]
    assert isinstance(m.observe(xid("n1", 79, at=1))[0], BreakerTripped)
    m = monitor(10, breaker=BreakerConfig(max_share=0.5, window_s=60))
    assert all(isinstance(m.observe(xid(f"n{i}", 79, at=i))[0], DrainNode) for i in range(5))
    with pytest.raises(ValueError):
        BreakerConfig(max_share=0)


# ------------------------------------------------------------------- lemons


def test_a_flapping_node_with_three_app_xids_in_a_day_becomes_a_lemon_flagged_once():
    m = monitor()
    assert types(m.observe(xid("n5", 13, at=0))) == [RestartJobs]
    assert types(m.observe(xid("n5", 31, at=8 * HOUR))) == [RestartJobs]
    out = m.observe(xid("n5", 94, at=20 * HOUR))
    assert out[-1] == LemonFlagged("n5", 3, 7 * DAY)
    assert m.lemons() == ["n5"]
    assert types(m.observe(xid("n5", 13, at=21 * HOUR))) == [RestartJobs]  # flagged once
    assert m.state("n5") is NodeState.HEALTHY  # a report for a person, not a drain
    m.clear_lemon("n5", "alice", 2 * DAY)
    assert m.lemons() == []


def test_failures_spread_wider_than_the_window_do_not_make_a_lemon():
    m = monitor()
    for day in (0, 4, 8, 12):
        assert LemonFlagged not in types(m.observe(xid("n1", 13, at=day * DAY)))
    assert m.lemons() == []


def test_lemon_rule_is_configurable_and_ignored_signals_do_not_count():
    m = monitor(lemons=LemonConfig(failures=2, window_s=HOUR))
    m.observe(xid("n0", 43, at=0))
    m.observe(xid("n0", 63, at=1))
    assert m.lemons() == []
    m.observe(Signal("n0", SignalKind.JOB_CRASHED, 2))
    assert types(m.observe(Signal("n0", SignalKind.HEARTBEAT_MISSING, 3)))[-1] is LemonFlagged


def test_a_drain_counts_toward_lemons_but_its_echoes_do_not():
    m = monitor()
    m.observe(xid("n0", 48, at=0))
    m.observe(xid("n0", 63, at=1))
    m.observe(xid("n0", 79, at=2))  # out of service: same incident
    drain_and_pass(m, "n0", 10)
    m.observe(xid("n0", 13, at=HOUR))
    assert m.lemons() == []
    assert types(m.observe(xid("n0", 13, at=2 * HOUR)))[-1] is LemonFlagged


# --------------------------------------------------------------- properties

EVENT = st.one_of(
    st.tuples(st.just("signal"), st.integers(0, 5), st.sampled_from(
        [13, 31, 43, 48, 74, 79, 94, 999, *[k.value for k in SignalKind if k is not SignalKind.XID]])),
    st.tuples(st.sampled_from(["jobs_left", "pass2", "pass3", "fail", "drain", "undrain", "force"]),
              st.integers(0, 5), st.none()),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(EVENT, st.floats(0, 300)), max_size=60))
def test_any_sequence_keeps_the_state_machine_and_the_breaker_honest(events):
    m = monitor(6)  # one automatic drain allowed per 10 minutes
    now, drains, lemon_flags = 0.0, [], []
    for (op, i, arg), dt in events:
        now += dt
        node = f"n{i}"
        if op == "signal":
            kind = SignalKind.XID if isinstance(arg, int) else SignalKind(arg)
            out = m.observe(Signal(node, kind, now, arg if isinstance(arg, int) else None))
        elif op == "jobs_left":
            out = m.jobs_left(node, now)
        elif op in ("pass2", "pass3", "fail"):
            out = m.diagnostic_result(node, op != "fail", now, level=2 if op == "pass2" else 3)
        elif op == "drain":
            out = m.drain(node, "test", "alice", now)
        elif m.state(node) in (NodeState.HEALTHY, NodeState.DEGRADED, NodeState.RETURNED):
            continue
        else:
            out = m.undrain(node, "alice", now, force=op == "force")
        drains += [now for d in out if isinstance(d, DrainNode) and not d.reason.startswith("drained by")]
        lemon_flags += [d.node for d in out if isinstance(d, LemonFlagged)]
        assert sum(isinstance(d, BreakerTripped) for d in out) <= 1
    for node in nodes(6):
        hist = m.history(node)
        state = NodeState.HEALTHY
        for t in hist:
            assert t.from_state is state
            assert t.from_state is t.to_state or (t.from_state, t.to_state) in TRANSITIONS
            state = t.to_state
        assert state is m.state(node)
        assert m.is_schedulable(node) == (state in (NodeState.HEALTHY, NodeState.DEGRADED,
                                                    NodeState.RETURNED))
        if state is NodeState.RETURNED:  # returned by a diagnostic or by a named person's force
            last = hist[-1]
            assert last.actor != GRACE or last.reason == "passed level-3 diagnostic"
    for t in drains:  # never more automatic drains in a window than the breaker allows
        assert sum(t - 600 < u <= t for u in drains) <= 1
    assert len(lemon_flags) == len(set(lemon_flags)) and sorted(set(lemon_flags)) == m.lemons()


def test_signal_keys_match_the_table_format():
    assert xid("n0", 79).key == "xid:79" and xid("n0", None).key == "xid:unknown"
    assert all(re.fullmatch(r"xid:(\d+|unknown)|[a-z-]+", r[0]) for r in HealthTable.default().describe())
