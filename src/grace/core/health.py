"""Node health: what each signal means, what state a node is in, and the guards on draining.

At 16k GPUs something fails every few hours (Llama 3: one unexpected
interruption every ~3.1 h), so the response must be automatic, but automatic
draining is also how a control plane takes down its own cluster. Hence:

- one ``HealthTable`` maps every signal to an ``Action``; users read it
  (``describe``) and override it (``from_yaml``) instead of patching code;
- nodes move through an explicit state machine whose every move is recorded
  with who made it, and only Grace's own drains are undone automatically;
- a circuit breaker stops automatic drains when too many happen at once (a
  switch, driver or power event looks like many bad nodes);
- nodes that keep failing, even with "only restart the job" errors, are
  flagged as lemons, because removing those is what cut large-job failures.

Pure like the rest of ``grace.core``: time comes in as ``now``/``Signal.at``;
methods return decisions the driver carries out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from grace.spec.errors import SpecError, SpecProblem

GRACE = "grace"  # the actor name for everything Grace does by itself


class SignalKind(StrEnum):
    XID = "xid"
    ECC_DOUBLE_BIT = "ecc-double-bit"
    ROW_REMAP_FAILURE = "row-remap-failure"
    NVLINK_DOWN = "nvlink-down"
    NVLINK_CRC = "nvlink-crc"
    THERMAL_THROTTLE = "thermal-throttle"
    POWER_THROTTLE = "power-throttle"
    HEARTBEAT_MISSING = "heartbeat-missing"
    PREFLIGHT_FAILED = "preflight-failed"
    JOB_CRASHED = "job-crashed"  # the runtime says a rank died, with no hardware signal
    STRAGGLER = "straggler"  # slower than its gang's median for several windows (core.stragglers)


@dataclass(frozen=True, slots=True)
class Signal:
    node: str
    kind: SignalKind
    at: float
    code: int | None = None  # the Xid number for kind == xid
    detail: str = ""

    @property
    def key(self) -> str:
        """The table key: ``xid:79``, ``xid:unknown`` (no code) or the kind's name."""
        if self.kind is SignalKind.XID:
            return "xid:unknown" if self.code is None else f"xid:{self.code}"
        return self.kind.value


class Action(StrEnum):
    IGNORE = "ignore"
    RESTART_JOB = "restart-job"  # application-level: restart the job, the node stays
    MARK_DEGRADED = "mark-degraded"
    DRAIN_AND_DIAGNOSE = "drain-and-diagnose"  # cordon, diagnose, return only if it passes
    DRAIN_AND_RESET = "drain-and-reset"  # cordon, reset the GPU or reboot, then diagnose


@dataclass(frozen=True, slots=True)
class HealthRule:
    key: str
    action: Action
    reason: str
    origin: str = "default"  # or the file the override came from


_R, _D, _A = Action.DRAIN_AND_RESET, Action.DRAIN_AND_DIAGNOSE, Action.RESTART_JOB
# NVIDIA's Xid catalog as mapped by NVSentinel (shared/REFERENCES.md, "Health signals").
DEFAULT_RULES: tuple[HealthRule, ...] = (
    HealthRule("xid:13", _A, "graphics engine exception, usually the application's own bug"),
    HealthRule("xid:31", _A, "GPU memory page fault, usually an illegal address in the application"),
    HealthRule("xid:43", Action.IGNORE, "informational: the application stopped, the GPU is fine"),
    HealthRule("xid:46", _R, "GPU stopped processing: reset the GPU, then diagnose"),
    HealthRule("xid:48", _D, "double-bit ECC error: cordon and diagnose memory"),
    HealthRule("xid:62", _R, "internal micro-controller halt: reset the GPU, then diagnose"),
    HealthRule("xid:63", Action.IGNORE, "informational: a page retirement or row remap was recorded"),
    HealthRule("xid:64", _R, "page retirement or row remap recording failed: reset, then diagnose"),
    HealthRule("xid:74", _D, "NVLink error: cordon and diagnose the links"),
    HealthRule("xid:79", _R, "GPU has fallen off the bus: reboot the node, then diagnose"),
    HealthRule("xid:92", Action.IGNORE, "informational: high single-bit ECC rate, corrected"),
    HealthRule("xid:94", _A, "contained ECC error: restart the job; counted toward lemon detection"),
    HealthRule("xid:95", _R, "uncontained ECC error: reset the GPU, then diagnose"),
    HealthRule("xid:109", _R, "context switch timeout: reset the GPU, then diagnose"),
    HealthRule("xid:110", _R, "security fault: reset the GPU, then diagnose"),
    HealthRule("xid:119", _R, "GSP RPC timeout: reset the GPU, then diagnose"),
    HealthRule("xid:120", _R, "GSP error: reset the GPU, then diagnose"),
    HealthRule("xid:140", _R, "unrecovered ECC error: reset the GPU, then diagnose"),
    HealthRule("xid:unknown", _D, "an Xid not in this table: cordon and diagnose (conservative)"),
    HealthRule("ecc-double-bit", _D, "double-bit ECC error reported by DCGM: cordon and diagnose"),
    HealthRule("row-remap-failure", _D, "HBM row remapping failed: cordon and diagnose"),
    HealthRule("nvlink-down", _D, "an NVLink is down: cordon and diagnose"),
    HealthRule("nvlink-crc", _D, "NVLink CRC errors over threshold: cordon and diagnose"),
    HealthRule("thermal-throttle", Action.MARK_DEGRADED, "clocks held down by temperature"),
    HealthRule("power-throttle", Action.MARK_DEGRADED, "clocks held down by the power limit"),
    HealthRule("heartbeat-missing", _A, "ranks stopped reporting progress (a hang): restart the job"),
    HealthRule("preflight-failed", _D, "the job-start check (DCGM level 1) failed: cordon and diagnose"),
    HealthRule("job-crashed", _A, "a rank died with no hardware signal: restart the job"),
    HealthRule("straggler", Action.MARK_DEGRADED,
               "held its gang back; the job moves off it at a checkpoint (MegaScale)"),
)
_SIGNAL_KEYS = tuple(k.value for k in SignalKind if k is not SignalKind.XID)
DESCRIBE_COLUMNS = ("signal", "action", "origin", "reason")


def _sort_key(key: str) -> tuple[int, int]:
    if key.startswith("xid:"):
        return (0, int(key[4:])) if key[4:].isdigit() else (1, 0)
    return (2, _SIGNAL_KEYS.index(key))


def _normal_key(key: object) -> tuple[str | None, str]:
    """(normalised key, or None and what is wrong with it)."""
    hint = f"use 'xid:<number>', 'xid:unknown' or one of {list(_SIGNAL_KEYS)}"
    if isinstance(key, int) and not isinstance(key, bool):
        return None, f"write the key as 'xid:{key}'"
    if isinstance(key, str):
        if key.startswith("xid:") and (key[4:] == "unknown" or key[4:].isdigit()):
            return (key if key[4:] == "unknown" else f"xid:{int(key[4:])}"), ""
        if key in _SIGNAL_KEYS:
            return key, ""
    return None, f"unknown signal {key!r}; {hint}"


@dataclass(frozen=True)
class HealthTable:
    """The one table from signal to action. ``default()`` is the cited table."""

    rules: Mapping[str, HealthRule]

    @classmethod
    def default(cls) -> HealthTable:
        return cls(MappingProxyType({r.key: r for r in DEFAULT_RULES}))

    def rule_for(self, signal: Signal) -> HealthRule:
        """The signal's rule; an Xid with no rule of its own gets ``xid:unknown``."""
        rule = self.rules.get(signal.key)
        return rule if rule is not None else self.rules["xid:unknown"]

    def with_overrides(self, rules: Any, source: str = "<health>") -> HealthTable:
        """This table with ``rules`` ({key: action} or {key: {action, reason}}) replacing entries.

        Every bad entry is reported at once, as one ``SpecError``.
        """
        if not isinstance(rules, Mapping):
            raise SpecError(source, [SpecProblem("rules", "must be a mapping of signal key to action")])
        allowed = [a.value for a in Action]
        out = dict(self.rules)
        problems: list[SpecProblem] = []
        for raw_key, value in rules.items():
            key, why = _normal_key(raw_key)
            path = f"rules.{raw_key}"
            if key is None:
                problems.append(SpecProblem(path, why))
                continue
            reason = f"overridden in {source}"
            if isinstance(value, Mapping):
                extra = sorted(set(value) - {"action", "reason"})
                if extra:
                    problems.append(SpecProblem(f"{path}.{extra[0]}", "unknown field; use action and reason"))
                if not isinstance(value.get("reason", ""), str):
                    problems.append(SpecProblem(f"{path}.reason", "must be text"))
                reason = str(value.get("reason") or reason)
                path, value = f"{path}.action", value.get("action")
            if value not in allowed:
                problems.append(SpecProblem(path, f"unknown action {value!r}; use one of {allowed}"))
                continue
            out[key] = HealthRule(key, Action(value), reason, origin=source)
        if problems:
            raise SpecError(source, problems)
        return HealthTable(MappingProxyType(out))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<health>") -> HealthTable:
        """The default table overridden by a document ``{kind: health, rules: {...}}``."""
        if not isinstance(data, Mapping):
            raise SpecError(source, [SpecProblem("", "expected a mapping with a 'rules' field")])
        problems = [SpecProblem(str(k), "unknown field; use kind and rules")
                    for k in data if k not in ("kind", "rules")]
        if str(data.get("kind", "health")).lower() != "health":
            problems.append(SpecProblem("kind", f"expected kind 'health', got {data['kind']!r}"))
        if problems:
            raise SpecError(source, problems)
        return cls.default().with_overrides(data.get("rules", {}), source)

    @classmethod
    def from_yaml(cls, path: Path | str) -> HealthTable:
        from grace.spec.loader import read_yaml  # the only I/O here, kept out of import time

        return cls.from_dict(read_yaml(path), str(path))

    def describe(self) -> list[tuple[str, str, str, str]]:
        """Rows of ``DESCRIBE_COLUMNS``, Xids in number order, then the other signals."""
        return [(r.key, r.action.value, r.origin, r.reason)
                for r in sorted(self.rules.values(), key=lambda r: _sort_key(r.key))]


class NodeState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DRAINING = "draining"  # cordoned, jobs still on it
    DRAINED = "drained"
    DIAGNOSING = "diagnosing"
    RETURNED = "returned"  # passed diagnostics, back in service; behaves like healthy


_S = NodeState
IN_SERVICE = frozenset({_S.HEALTHY, _S.DEGRADED, _S.RETURNED})
# Every allowed move and when it happens. Anything else raises IllegalTransition.
TRANSITIONS: dict[tuple[NodeState, NodeState], str] = {
    (_S.HEALTHY, _S.DEGRADED): "a throttle signal, or a drain held back by the open breaker",
    (_S.HEALTHY, _S.DRAINING): "a drain signal, or a person drains it",
    (_S.RETURNED, _S.DEGRADED): "as from healthy",
    (_S.RETURNED, _S.DRAINING): "as from healthy",
    (_S.DEGRADED, _S.HEALTHY): "the degrading condition cleared",
    (_S.DEGRADED, _S.DRAINING): "a drain signal, or a person drains it",
    (_S.DRAINING, _S.DRAINED): "its last job left",
    (_S.DRAINED, _S.DIAGNOSING): "Grace drained it and its jobs left, or a person undrained it",
    (_S.DIAGNOSING, _S.RETURNED): "passed level 3 and no person holds it",
    (_S.DIAGNOSING, _S.DRAINED): "failed a diagnostic, or passed while a person holds it",
    (_S.DRAINING, _S.RETURNED): "a person forced it back without diagnostics",
    (_S.DRAINED, _S.RETURNED): "a person forced it back without diagnostics",
}


class IllegalTransition(ValueError):
    """A move the state machine does not allow; the message lists the allowed ones."""


def check_transition(node: str, frm: NodeState, to: NodeState) -> None:
    if (frm, to) not in TRANSITIONS:
        allowed = sorted(t.value for f, t in TRANSITIONS if f is frm)
        raise IllegalTransition(f"node {node}: {frm} -> {to} is not allowed; from {frm}: {allowed}")


@dataclass(frozen=True, slots=True)
class Transition:
    """One entry of a node's history. Equal states record a change of holder, not of state."""

    at: float
    from_state: NodeState
    to_state: NodeState
    reason: str
    actor: str


# ----------------------------------------------------------------- decisions
@dataclass(frozen=True, slots=True)
class RestartJobs:
    """Restart the node's jobs from their last checkpoint (elsewhere, if it is cordoned).

    ``node_at_fault``: this signal drained the node, so its jobs failed because of the
    node (``FailureKind.NODE``: not held against their budget, the node excluded);
    otherwise the failure is the application's.
    """

    node: str
    reason: str
    node_at_fault: bool = False


@dataclass(frozen=True, slots=True)
class DrainNode:
    """Cordon the node; call ``jobs_left`` once no job runs on it."""

    node: str
    reason: str
    reset: bool  # reset the GPU (or reboot, per reason) before diagnosing


@dataclass(frozen=True, slots=True)
class RunDiagnostic:
    """Run DCGM diagnostics at ``level`` and report with ``diagnostic_result``."""

    node: str
    level: int
    reset_first: bool = False


@dataclass(frozen=True, slots=True)
class ReturnNode:
    node: str


@dataclass(frozen=True, slots=True)
class MarkDegraded:
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class BreakerTripped:
    """Loud: automatic draining has stopped until a person resets the breaker."""

    drained_share: float
    window_s: float
    message: str


@dataclass(frozen=True, slots=True)
class LemonFlagged:
    node: str
    failures: int
    window_s: float


HealthDecision = (RestartJobs | DrainNode | RunDiagnostic | ReturnNode | MarkDegraded
                  | BreakerTripped | LemonFlagged)


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """NVSentinel's breaker: stop when automatic drains in ``window_s`` exceed ``max_share``.

    The first drain in a window is always allowed, so a cluster of fewer than
    1/max_share nodes can still drain one bad node.
    """

    max_share: float = 0.20
    window_s: float = 600.0

    def __post_init__(self) -> None:
        if not (0 < self.max_share <= 1 and self.window_s > 0):
            raise ValueError("breaker needs 0 < max_share <= 1 and window_s > 0")


@dataclass(frozen=True, slots=True)
class LemonConfig:
    """``failures`` in ``window_s`` make a lemon (default 3 in 7 days; Kokolis et al., HPCA'25)."""

    failures: int = 3
    window_s: float = 7 * 86400.0

    def __post_init__(self) -> None:
        if self.failures < 1 or self.window_s <= 0:
            raise ValueError("lemon rule needs failures >= 1 and window_s > 0")


@dataclass
class _Node:
    state: NodeState = NodeState.HEALTHY
    history: list[Transition] = field(default_factory=list)
    holder: str | None = None  # who drained it; None while in service
    reset: bool = False
    failures: deque[float] = field(default_factory=deque)
    lemon: bool = False


@dataclass(frozen=True, slots=True)
class NodeHealthRecord:
    """All a monitor remembers of one node besides its history: what a driver that
    does not live as long as the cluster (a control plane that restarts) persists
    and gives back to ``HealthMonitor.restore``."""

    state: NodeState = NodeState.HEALTHY
    holder: str | None = None
    reset: bool = False
    failures: tuple[float, ...] = ()  # times of failures counted toward the lemon rule
    lemon: bool = False
    deferred: bool = False  # a drain the open breaker held back


@dataclass(frozen=True, slots=True)
class BreakerRecord:
    """The breaker's memory: open or not, and Grace's automatic drains still in its window."""

    open: bool = False
    auto_drains: tuple[float, ...] = ()


class HealthMonitor:
    """Turns signals and driver reports into decisions; the driver owns and applies them."""

    def __init__(self, nodes: Iterable[str], table: HealthTable | None = None,
                 breaker: BreakerConfig | None = None, lemons: LemonConfig | None = None) -> None:
        self.table = table or HealthTable.default()
        self.breaker = breaker or BreakerConfig()
        self.lemon_rule = lemons or LemonConfig()
        self._nodes = {n: _Node() for n in nodes}
        self._auto_drains: deque[float] = deque()
        self._deferred: list[str] = []
        self.breaker_open = False
        self.breaker_log: list[tuple[float, str, str]] = []  # (at, actor, what)

    # ------------------------------------------------------------- persistence
    @classmethod
    def restore(cls, records: Mapping[str, NodeHealthRecord], breaker_state: BreakerRecord,
                table: HealthTable | None = None, breaker: BreakerConfig | None = None,
                lemons: LemonConfig | None = None) -> HealthMonitor:
        """A monitor that remembers what ``records``/``breaker_state`` say (its history
        starts empty: the driver keeps the old one). ``restore(m.records(), m.breaker_record())``
        decides exactly as ``m`` would."""
        monitor = cls(records, table, breaker, lemons)
        for name, r in records.items():
            rec = monitor._nodes[name]
            rec.state, rec.holder, rec.reset, rec.lemon = r.state, r.holder, r.reset, r.lemon
            rec.failures = deque(sorted(r.failures))
            if r.deferred:
                monitor._deferred.append(name)
        monitor.breaker_open = breaker_state.open
        monitor._auto_drains = deque(sorted(breaker_state.auto_drains))
        return monitor

    def record(self, node: str) -> NodeHealthRecord:
        rec = self._rec(node)
        return NodeHealthRecord(rec.state, rec.holder, rec.reset, tuple(rec.failures), rec.lemon,
                                node in self._deferred)

    def records(self) -> dict[str, NodeHealthRecord]:
        return {n: self.record(n) for n in self._nodes}

    def breaker_record(self) -> BreakerRecord:
        return BreakerRecord(self.breaker_open, tuple(self._auto_drains))

    # ------------------------------------------------------------- queries
    def state(self, node: str) -> NodeState:
        return self._rec(node).state

    def history(self, node: str) -> tuple[Transition, ...]:
        return tuple(self._rec(node).history)

    def holder(self, node: str) -> str | None:
        """Who drained the node (``GRACE`` or a person); None while in service."""
        return self._rec(node).holder

    def is_schedulable(self, node: str) -> bool:
        return self._rec(node).state in IN_SERVICE

    def lemons(self) -> list[str]:
        return sorted(n for n, r in self._nodes.items() if r.lemon)

    @property
    def deferred_drains(self) -> list[str]:
        """Nodes the open breaker kept in service (degraded) instead of draining."""
        return [n for n in self._deferred if self._nodes[n].state is NodeState.DEGRADED]

    # ------------------------------------------------------------- signals
    def observe(self, signal: Signal) -> list[HealthDecision]:
        """Apply the table's rule for ``signal``, behind the breaker; count it toward lemons."""
        rec, now, node = self._rec(signal.node), signal.at, signal.node
        rule = self.table.rule_for(signal)
        if rule.action is Action.IGNORE:
            return []
        what = f"{signal.key}: {rule.reason}" + (f" ({signal.detail})" if signal.detail else "")
        in_service = rec.state in IN_SERVICE
        has_jobs = in_service or rec.state is NodeState.DRAINING
        # Only in-service failures count: what an out-of-service node reports belongs to the
        # incident already being handled, and a throttle on a degraded node is the same episode.
        counts = in_service and not (rule.action is Action.MARK_DEGRADED
                                     and rec.state is NodeState.DEGRADED)
        out: list[HealthDecision] = []
        if rule.action is Action.RESTART_JOB:
            out += [RestartJobs(node, what)] if has_jobs else []
        elif rule.action is Action.MARK_DEGRADED:
            if rec.state is not NodeState.DEGRADED and in_service:
                self._move(node, NodeState.DEGRADED, now, what, GRACE)
                out.append(MarkDegraded(node, what))
        elif not in_service:
            rec.reset = rec.reset or rule.action is Action.DRAIN_AND_RESET
            out += [RestartJobs(node, what)] if has_jobs else []
        elif self.breaker_open or self._would_trip(now):
            if not self.breaker_open:
                out.append(self._trip(now))
            if node not in self._deferred:
                self._deferred.append(node)
            if rec.state is not NodeState.DEGRADED:
                held = f"breaker open, not drained: {what}"
                self._move(node, NodeState.DEGRADED, now, held, GRACE)
                out.append(MarkDegraded(node, held))
            out.append(RestartJobs(node, what))
        else:
            self._auto_drains.append(now)
            reset = rule.action is Action.DRAIN_AND_RESET
            self._move(node, NodeState.DRAINING, now, what, GRACE)
            rec.holder, rec.reset = GRACE, reset
            out += [DrainNode(node, what, reset), RestartJobs(node, what, node_at_fault=True)]
        if counts:
            out += self._count_failure(node, now)
        return out

    # ----------------------------------------------------- driver reports
    def jobs_left(self, node: str, now: float) -> list[HealthDecision]:
        """The last job left a draining node; Grace's own drains go on to diagnostics.

        Level 2 first (about 2 min, after a failure) so a broken node fails fast,
        then level 3 (about 15 min) before return. Repeated calls are harmless.
        """
        rec = self._rec(node)
        if rec.state is not NodeState.DRAINING:
            return []
        self._move(node, NodeState.DRAINED, now, "no jobs left on it", GRACE)
        if rec.holder != GRACE:
            return []
        self._move(node, NodeState.DIAGNOSING, now, "drained by grace: diagnose before return", GRACE)
        return [RunDiagnostic(node, 2, reset_first=rec.reset)]

    def diagnostic_result(self, node: str, passed: bool, now: float,
                          level: int = 3) -> list[HealthDecision]:
        """A diagnostic finished. Only a passed level 3 returns a node, and only one Grace holds.

        A result for a node no longer diagnosing (a person forced it back) is ignored.
        """
        rec = self._rec(node)
        if rec.state is not NodeState.DIAGNOSING:
            return []
        if not passed:
            why = f"failed level-{level} diagnostic: needs repair, then a person undrains it"
            self._move(node, NodeState.DRAINED, now, why, GRACE)
            return []
        if level < 3:
            return [RunDiagnostic(node, 3)]
        if rec.holder != GRACE:
            why = f"passed level-3 diagnostic, but {rec.holder} holds it: stays drained until undrained"
            self._move(node, NodeState.DRAINED, now, why, GRACE)
            return []
        self._move(node, NodeState.RETURNED, now, "passed level-3 diagnostic", GRACE)
        rec.holder, rec.reset = None, False
        return [ReturnNode(node)]

    # ---------------------------------------------------- operator actions
    def drain(self, node: str, reason: str, actor: str, now: float) -> list[HealthDecision]:
        """A person drains a node: its jobs finish (not restarted), and it stays out until undrained.

        On a node already out of service the person takes it over, so no passing
        diagnostic returns it without them. Not counted by the breaker.
        """
        rec = self._rec(node)
        why = f"drained by {actor}: {reason}"
        rec.holder = actor
        if rec.state in IN_SERVICE:
            self._move(node, NodeState.DRAINING, now, why, actor)
            return [DrainNode(node, why, reset=False)]
        self._note(node, now, why, actor)
        return []

    def undrain(self, node: str, actor: str, now: float, force: bool = False) -> list[HealthDecision]:
        """A person releases a node. It returns after passing a level-3 diagnostic, or now if ``force``."""
        rec = self._rec(node)
        if rec.state in IN_SERVICE:
            raise IllegalTransition(f"node {node} is {rec.state}, not drained: nothing to undrain")
        if force:
            if rec.state is NodeState.DIAGNOSING:  # abandon the run: its result will be ignored
                self._move(node, NodeState.DRAINED, now, f"diagnostic abandoned by {actor}", actor)
            self._move(node, NodeState.RETURNED, now, f"forced back by {actor} without diagnostics", actor)
            rec.holder, rec.reset = None, False
            return [ReturnNode(node)]
        rec.holder = GRACE
        why = f"undrained by {actor}: returns after passing a level-3 diagnostic"
        if rec.state is not NodeState.DRAINED:
            self._note(node, now, why, actor)
            return []
        self._move(node, NodeState.DIAGNOSING, now, why, actor)
        return [RunDiagnostic(node, 3, reset_first=rec.reset)]

    def clear_degraded(self, node: str, now: float, actor: str = GRACE) -> None:
        """The throttle (or whatever degraded the node) is gone."""
        self._move(node, NodeState.HEALTHY, now, "degrading condition cleared", actor)

    def reset_breaker(self, actor: str, now: float) -> None:
        """A person re-enables automatic draining; drains before now no longer count."""
        self.breaker_open = False
        self._auto_drains.clear()
        self.breaker_log.append((now, actor, "reset"))

    def clear_lemon(self, node: str, actor: str, now: float) -> None:
        """After repair: forget the node's failures and its lemon flag."""
        rec = self._rec(node)
        rec.lemon = False
        rec.failures.clear()
        self._note(node, now, "lemon flag cleared after repair", actor)

    # ----------------------------------------------------------- internals
    def _rec(self, node: str) -> _Node:
        rec = self._nodes.get(node)
        if rec is None:
            raise KeyError(f"unknown node {node!r}; the monitor was built without it")
        return rec

    def _move(self, node: str, to: NodeState, now: float, reason: str, actor: str) -> None:
        rec = self._nodes[node]
        check_transition(node, rec.state, to)
        rec.history.append(Transition(now, rec.state, to, reason, actor))
        rec.state = to

    def _note(self, node: str, now: float, reason: str, actor: str) -> None:
        rec = self._nodes[node]
        rec.history.append(Transition(now, rec.state, rec.state, reason, actor))

    def _allowed_drains(self) -> int:
        return max(1, int(self.breaker.max_share * len(self._nodes) + 1e-9))

    def _would_trip(self, now: float) -> bool:
        while self._auto_drains and self._auto_drains[0] <= now - self.breaker.window_s:
            self._auto_drains.popleft()
        return len(self._auto_drains) + 1 > self._allowed_drains()

    def _trip(self, now: float) -> BreakerTripped:
        self.breaker_open = True
        n, k = len(self._nodes), len(self._auto_drains) + 1
        share, minutes = k / n, self.breaker.window_s / 60
        msg = (f"automatic draining stopped: draining another node would make {k} of {n} nodes "
               f"({share:.0%}) in {minutes:g} min, over the {self.breaker.max_share:.0%} limit. "
               "That many at once usually has one cause (switch, driver, firmware, power, a bad "
               "rollout), not that many bad nodes. Until a person resets the breaker, failing nodes "
               "are marked degraded and their jobs restarted (see deferred_drains). Find the common "
               "cause, drain what is really broken by hand, then reset_breaker().")
        self.breaker_log.append((now, GRACE, "tripped"))
        return BreakerTripped(share, self.breaker.window_s, msg)

    def _count_failure(self, node: str, now: float) -> list[HealthDecision]:
        rec, rule = self._nodes[node], self.lemon_rule
        rec.failures.append(now)
        while rec.failures[0] <= now - rule.window_s:
            rec.failures.popleft()
        if rec.lemon or len(rec.failures) < rule.failures:
            return []
        rec.lemon = True
        return [LemonFlagged(node, len(rec.failures), rule.window_s)]
