"""Where a pod that asks for no GPU goes, in the packing experiment (``sim.packing``).

The scheduler's ``decide`` places GPU requests; a CPU-only pod asks for none, so
``core.decide`` has nothing to place. Yet FGD's experiment keeps these pods (13% of
openb's), and they matter: their CPU and memory on a GPU node can leave that
node's free GPUs without the host resources a GPU pod needs. So the packing
experiment places them itself, one node each, by the policy's packing rule:

- ``fragmentation`` (Grace): the node whose usable GPU capacity drops the least
  (``FragmentationIndex.place_host``);
- ``best-fit``: the fullest node that holds the pod, fullness being the sum of the
  node's free CPU, memory and GPU, each as a share of the node's size, after the
  pod (the best fit of FGD's baseline, which weighs every resource dimension).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from grace.core.state import SchedulerState

IntArray = npt.NDArray[np.int64]


def place_cpu_only(state: SchedulerState, cpu_free: IntArray, mem_free: IntArray,
                   cpu_milli: int, memory_mib: int) -> int | None:
    """The node for a CPU-only pod under ``state``'s policy, or None when none holds it.

    ``cpu_free``/``mem_free``: host room per node (the driver's books; only nodes with
    room for the pod are candidates)."""
    fits = (cpu_free >= cpu_milli) & (mem_free >= memory_mib) & np.array(state.capacity.usable)
    if state.packer is not None:
        return state.packer.place_host(cpu_milli, memory_mib, frozenset(np.flatnonzero(~fits).tolist()))
    return best_fit_host(state, cpu_free, mem_free, fits, cpu_milli, memory_mib)


def best_fit_host(state: SchedulerState, cpu_free: IntArray, mem_free: IntArray, fits: npt.NDArray[np.bool_],
                  cpu_milli: int, memory_mib: int) -> int | None:
    """The fullest node that holds the pod: least free CPU + memory + GPU share after it."""
    idx = np.flatnonzero(fits)
    if idx.size == 0:
        return None
    topo = state.topo
    cap = state.capacity
    cpu_size = np.array([max(1, topo.nodes[x].cpu_cores * 1000) for x in idx], dtype=np.float64)
    mem_size = np.array([max(1.0, topo.nodes[x].memory_gb * 1024) for x in idx], dtype=np.float64)
    units = topo.slice_units[0]
    gpu_free = np.array(cap.free_count, dtype=np.float64) * units
    for gpu, (compute, _memory) in cap.slice_free.items():  # what is left of split GPUs
        gpu_free[topo.gpu_node[gpu]] += compute
    gpus = np.array([max(1, topo.nodes[x].gpus) * units for x in idx], dtype=np.float64)
    left = ((cpu_free[idx] - cpu_milli) / cpu_size + (mem_free[idx] - memory_mib) / mem_size
            + gpu_free[idx] / gpus)
    return int(idx[int(np.argmin(left))])
