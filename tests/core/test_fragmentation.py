"""Fragmentation-aware packing on tiny clusters where the right answer is obvious."""

from __future__ import annotations

from grace.core import JobId, PendingJob, Placement, SchedulerState, Slice, get_policy
from grace.core.capacity import FreeCapacity
from grace.core.fragmentation import DemandModel, FragmentationIndex
from grace.core.placement import SliceRequest, WholeRequest
from grace.core.scheduler import decide
from grace.core.topology import MILLI_UNITS, NodeInfo, Topology
from grace.spec import BUILTIN_GPUS

H100 = "H100-SXM"


def _cluster(*nodes: tuple[int, int], shareable: bool = True, memory_gb: float = 0.0) -> Topology:
    """One node per (GPUs, CPU cores); GPUs shared in thousandths when ``shareable``."""
    infos, base = [], 0
    for i, (gpus, cores) in enumerate(nodes):
        infos.append(NodeInfo(index=i, name=f"n{i}", group="g", gpu_model=H100, gpus=gpus,
                              gpu_base=base, domain=i, leaf=0, pod=0, pool="p",
                              shareable_gpus=gpus if shareable else 0, cpu_cores=cores,
                              memory_gb=memory_gb))
        base += gpus
    return Topology(name="t", nodes=infos, catalog=dict(BUILTIN_GPUS), slice_units=MILLI_UNITS)


def _job(i: int, gpus: int = 0, milli: int = 0, cpu: int = 0, exclude: tuple[int, ...] = (),
         per_node: int | None = None) -> PendingJob:
    if milli:
        return PendingJob(id=JobId(i), tenant="t", submit_s=0.0, whole=None,
                          slices={H100: SliceRequest(milli, milli)}, models=(H100,),
                          cpu_milli=cpu, exclude_nodes=frozenset(exclude))
    return PendingJob(id=JobId(i), tenant="t", submit_s=0.0, whole=WholeRequest(gpus, per_node),
                      slices={}, models=(H100,), cpu_milli=cpu, exclude_nodes=frozenset(exclude))


def _index(topo: Topology, seen: list[tuple[int, int, int]]) -> FragmentationIndex:
    """An index whose request mix is ``seen`` (GPU units, CPU milli, MiB), equally weighted."""
    demand = DemandModel(half_life=1e9)
    for kind in seen:
        demand.observe(*kind)
    return FragmentationIndex(FreeCapacity(topo), demand)


def _groups(index: FragmentationIndex) -> list:
    return [(g.key[1], g) for g in index.cap.groups.values()]


def _node(index: FragmentationIndex, p: Placement) -> int:
    return index.topo.gpu_node[p.slices[0].gpu if p.slices else p.gpus[0]]


def test_demand_model_decays_old_requests():
    demand = DemandModel(half_life=10)
    for _ in range(10):
        demand.observe(1000)
    for _ in range(10):
        demand.observe(500)
    mix = dict(demand.mix())

    assert abs(sum(mix.values()) - 1) < 1e-9
    assert abs(mix[(1000, 0, 0)] / mix[(500, 0, 0)] - 0.5) < 1e-9  # ten requests older: half


def test_a_share_goes_where_the_common_request_still_fits_after():
    """Two split GPUs, 700 and 900 free, on two nodes; most requests want 600. A 300 share on
    the 900 GPU leaves 700 and 600, room for two of them; best fit (the 700 GPU) leaves one."""
    topo = _cluster((1, 0), (1, 0))
    index = _index(topo, [(600, 0, 0)] * 9 + [(300, 0, 0)])
    index.cap.allocate(Placement(slices=(Slice(0, 300, 300), Slice(1, 100, 100))))

    p = index.place(_job(1, milli=300), _groups(index))

    assert p is not None and p.slices == (Slice(1, 300, 300),)


def test_a_share_fills_a_sliver_nobody_else_can_use():
    """A 200 share fits exactly in the 200 left on GPU 0; opening a fresh GPU would turn it
    into an 800 sliver that the common 1-GPU requests cannot use."""
    topo = _cluster((2, 0))
    index = _index(topo, [(1000, 0, 0)] * 8 + [(200, 0, 0)] * 2)
    index.cap.allocate(Placement(slices=(Slice(0, 800, 800),)))

    p = index.place(_job(1, milli=200), _groups(index))

    assert p is not None and p.slices[0].gpu == 0


def test_a_light_job_goes_to_the_node_short_of_cpu():
    """Same free GPUs; node 0 has CPU for the common 1-GPU x 8-core request, node 1 has not.
    A job needing little CPU goes to node 1, keeping node 0's GPUs usable."""
    topo = _cluster((2, 64), (2, 4))
    index = _index(topo, [(1000, 8000, 0)] * 9 + [(1000, 1000, 0)])

    p = index.place(_job(1, gpus=1, cpu=1000), _groups(index))

    assert p is not None and _node(index, p) == 1


def test_a_cpu_hungry_share_does_not_strand_a_node_full_of_gpus():
    """Node 0 has 8 free GPUs and 24 cores; node 1 has 1 free GPU and 24 cores. A 0.5-GPU
    share asking 20 cores on node 0 would leave its 7 GPUs without CPU for the common
    1-GPU x 8-core request."""
    topo = _cluster((8, 24), (2, 24))
    index = _index(topo, [(1000, 8000, 0)] * 9 + [(500, 20000, 0)])
    index.cap.allocate(Placement(gpus=(9,)))

    p = index.place(_job(1, milli=500, cpu=20000), _groups(index))

    assert p is not None and _node(index, p) == 1


def test_whole_gpus_keep_room_for_the_common_gang():
    """Unsplittable 8-GPU nodes with 3 and 2 GPUs free; the mix is 2-GPU jobs. One GPU taken
    from the 3 leaves 2 + 2 (two gangs); best fit would take it from the 2 (one gang)."""
    topo = _cluster((8, 0), (8, 0), shareable=False)
    index = _index(topo, [(2000, 0, 0)] * 9 + [(1000, 0, 0)])
    index.cap.allocate(Placement(gpus=(0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13)))

    p = index.place(_job(1, gpus=1), _groups(index))

    assert p is not None and _node(index, p) == 0


def test_ties_go_to_the_fuller_node_and_excluded_nodes_are_never_used():
    topo = _cluster((8, 0), (8, 0), (8, 0), shareable=False)
    index = _index(topo, [(1000, 0, 0)])
    index.cap.allocate(Placement(gpus=(8, 9, 10, 16, 17)))  # node 1: 5 free, node 2: 6 free

    assert _node(index, index.place(_job(1, gpus=1), _groups(index))) == 1
    assert _node(index, index.place(_job(2, gpus=1, exclude=(1,)), _groups(index))) == 2
    assert index.place(_job(3, gpus=1, exclude=(0, 1, 2)), _groups(index)) is None


def test_gangs_over_nodes_are_left_to_the_topology_aware_path():
    topo = _cluster((8, 0), (8, 0), shareable=False)
    index = _index(topo, [(1000, 0, 0)])

    assert index.place(_job(1, gpus=16), _groups(index)) is None
    assert index.place(_job(2, gpus=8, per_node=4), _groups(index)) is None


def test_the_index_follows_trials_rollbacks_and_host_use():
    topo = _cluster((4, 32), (4, 32), (2, 16))
    state = SchedulerState(topo, get_policy("grace"))
    packer = state.packer
    assert packer is not None
    for i, job in enumerate([_job(1, milli=300, cpu=4000), _job(2, gpus=2, cpu=8000),
                             _job(3, milli=700, cpu=2000), _job(4, gpus=1, cpu=16000)]):
        state.submit(job)
        with state.capacity.trial():  # a trial drain, seen by the index, then undone
            state.capacity.set_usable(i % 3, False)
            p = packer.place(_job(100 + i, milli=100), _groups(packer))
            assert p is not None and _node(packer, p) != i % 3
        result = decide(state, 0.0)
        state.apply(result, 0.0)
        packer.check()
    used = {n: 32000 - int(packer.cpu_free[n]) for n in (0, 1)}
    assert sum(used.values()) + 16000 - int(packer.cpu_free[2]) == 30000
    for job_id in list(state.running):
        state.finish(job_id, 1.0)
    packer.check()
    assert [int(c) for c in packer.cpu_free] == [32000, 32000, 16000]


def test_only_the_grace_policy_packs_by_fragmentation():
    topo = _cluster((2, 0))
    assert SchedulerState(topo, get_policy("grace")).packer is not None
    for name in ("fifo", "easy-backfill", "priority", "las"):
        assert SchedulerState(topo, get_policy(name)).packer is None
