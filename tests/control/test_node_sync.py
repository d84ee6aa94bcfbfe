"""Node states both ways between the store and an executing system with states of its own.

The executing system here is a table of node states the test writes, as
``scontrol show node`` would report them; the real Slurm case runs end to end in
``tests/backends/test_slurm.py``. Each case is one cycle of ``sync_node_states``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grace.backends.slurm_cli import SlurmError
from grace.backends.slurm_inventory import SlurmNode
from grace.control.node_sync import sync_node_states
from grace.control.store import repository as repo
from grace.control.store.db import Store


def node(name: str, state: str = "idle", flags: tuple[str, ...] = (), reason: str = "") -> SlurmNode:
    return SlurmNode(name, state, frozenset(flags), reason, 8, None, 8, 16000, ("gpu",))


@dataclass
class NodeTable:
    """Node states of an executing system; drain/resume change them as Slurm would."""

    nodes: dict[str, SlurmNode]
    refuse: bool = False
    name: str = "slurm"
    capabilities: frozenset[str] = frozenset({"node_states", "drain"})
    calls: list[tuple[str, str]] = field(default_factory=list)

    def node_states(self) -> list[SlurmNode]:
        return list(self.nodes.values())

    def drain(self, name: str, reason: str) -> None:
        self.calls.append(("drain", name))
        if self.refuse:
            raise SlurmError("scontrol update exited 1: Invalid user id")
        self.nodes[name] = node(name, flags=("DRAIN",), reason=f"grace: {reason}")

    def resume(self, name: str) -> None:
        self.calls.append(("resume", name))
        self.nodes[name] = node(name)


def states(store: Store) -> dict[str, tuple[str, str | None, str | None]]:
    with store.read() as s:
        return {n.name: (str(n.state), n.actor, n.reason) for n in repo.nodes(s)}


def setup(store: Store) -> NodeTable:
    with store.transaction() as s:
        for n in ("n1", "n2"):
            repo.upsert_node(s, n, 8, "A100-80GB")
    return NodeTable({"n1": node("n1"), "n2": node("n2")})


def test_a_drain_made_in_slurm_takes_the_node_out_and_its_resume_brings_it_back(store: Store) -> None:
    table = setup(store)
    table.nodes["n2"] = node("n2", flags=("DRAIN",), reason="admin: reseat cable")
    sync_node_states(store, table, 1.0)
    assert states(store)["n2"] == ("draining", "slurm", "drained by slurm: idle+DRAIN: admin: reseat cable")
    assert states(store)["n1"][0] == "healthy"
    assert table.calls == []  # Slurm's own drain is never written back
    sync_node_states(store, table, 2.0)  # steady: nothing moves
    assert states(store)["n2"][0] == "draining" and table.calls == []
    table.nodes["n2"] = node("n2")
    sync_node_states(store, table, 3.0)
    assert states(store)["n2"][:2] == ("returned", "slurm")


def test_a_down_node_is_taken_out_too(store: Store) -> None:
    table = setup(store)
    table.nodes["n1"] = node("n1", state="down", flags=("NOT_RESPONDING",), reason="Not responding")
    sync_node_states(store, table, 1.0)
    assert states(store)["n1"] == ("draining", "slurm",
                                   "drained by slurm: down+NOT_RESPONDING: Not responding")


def test_graces_drain_reaches_slurm_with_its_reason_and_its_resume_too(store: Store) -> None:
    table = setup(store)
    with store.transaction() as s:
        repo.set_node_state(s, "n1", "draining", "xid:79: fell off the bus", "grace", 1.0)
    sync_node_states(store, table, 2.0)
    assert table.nodes["n1"].reason == "grace: xid:79: fell off the bus"
    sync_node_states(store, table, 3.0)  # ours now: not drained twice, not taken for Slurm's
    assert table.calls == [("drain", "n1")] and states(store)["n1"][:2] == ("draining", "grace")
    with store.transaction() as s:
        repo.set_node_state(s, "n1", "returned", "resumed by an operator", "api", 4.0)
    sync_node_states(store, table, 5.0)
    assert table.calls[-1] == ("resume", "n1") and not table.nodes["n1"].out_of_service


def test_a_refused_drain_is_retried_and_does_not_raise(store: Store) -> None:
    table = setup(store)
    table.refuse = True
    with store.transaction() as s:
        repo.set_node_state(s, "n2", "draining", "nvlink-down", "grace", 1.0)
    sync_node_states(store, table, 2.0)
    sync_node_states(store, table, 3.0)
    assert table.calls == [("drain", "n2"), ("drain", "n2")]
    assert states(store)["n2"][0] == "draining"  # Grace keeps it out regardless


def test_backends_without_node_states_are_left_alone(store: Store) -> None:
    table = setup(store)
    table.capabilities = frozenset({"drain"})
    table.nodes["n1"] = node("n1", flags=("DRAIN",), reason="admin")
    sync_node_states(store, table, 1.0)
    assert states(store)["n1"][0] == "healthy"
