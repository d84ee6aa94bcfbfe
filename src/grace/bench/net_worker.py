"""One rank of ``grace bench net``: ``python -m grace.bench.net_worker --out F ...``.

Started by :mod:`grace.bench.launch` (local processes or ``srun``), it joins the
process group from the environment (``MASTER_ADDR``/``MASTER_PORT`` and ``RANK``/
``WORLD_SIZE``/``LOCAL_RANK``, or Slurm's ``SLURM_PROCID``/``SLURM_NTASKS``/
``SLURM_LOCALID`` under ``srun``), runs every (op, size), and rank 0 writes the median
seconds per op as JSON to ``--out``; the parent turns them into algbw/busbw
(:class:`grace.bench.net.NetResult`).

Timing: each rank times each of its calls (after ``torch.cuda.synchronize`` on a GPU:
a NCCL call returns before the transfer ends); the per-iteration times are maxed over
the ranks with one all-reduce after the loop, outside the timed region, and the median
is taken. Large CPU messages take seconds each, so the timed iterations are capped to
fit :data:`BUDGET_S` per (op, size) (at least :data:`MIN_ITERS`); the count used is
reported per row.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
import warnings
from typing import Any

from grace.bench.net import Op, element_count

#: Seconds of timed iterations per (op, size) before ``--iters`` is cut down.
BUDGET_S = 2.0
MIN_ITERS = 3


def _env_int(*names: str, default: int | None = None) -> int:
    for name in names:
        value = os.environ.get(name)
        if value:
            return int(value)
    if default is None:
        raise SystemExit(f"net_worker: none of {', '.join(names)} is set: start it through "
                         "grace bench net (grace.bench.launch)")
    return default


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="one rank of grace bench net")
    p.add_argument("--ops", required=True, help="comma list of grace.bench.net.Op values")
    p.add_argument("--sizes", required=True, help="comma list of sizes in bytes")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--backend", choices=["gloo", "nccl"], required=True)
    p.add_argument("--out", required=True, help="rank 0 writes its JSON here")
    return p.parse_args(argv)


def _collective(op: Op, dist: Any, send: Any, recv: Any) -> None:
    if op is Op.ALLREDUCE:
        dist.all_reduce(send)
    elif op is Op.ALLGATHER:
        dist.all_gather_into_tensor(recv, send)
    else:
        dist.reduce_scatter_tensor(recv, send)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # *_tensor names: still supported
    rank = _env_int("RANK", "SLURM_PROCID")
    world = _env_int("WORLD_SIZE", "SLURM_NTASKS")
    local_rank = _env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
    cuda = args.backend == "nccl"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, rank=rank, world_size=world,
                            device_id=device if cuda else None)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    names: list[Any] = [None] * world
    dist.all_gather_object(names, node)
    rows = []
    for op in [Op(o) for o in args.ops.split(",")]:
        for size in [int(s) for s in args.sizes.split(",")]:
            count = element_count(op, size, world)
            if op is Op.ALLREDUCE:
                send = torch.ones(count, dtype=torch.float32, device=device)
                recv = send
            elif op is Op.ALLGATHER:
                send = torch.ones(count // world, dtype=torch.float32, device=device)
                recv = torch.empty(count, dtype=torch.float32, device=device)
            else:
                send = torch.ones(count, dtype=torch.float32, device=device)
                recv = torch.empty(count // world, dtype=torch.float32, device=device)
            dist.barrier()
            t0 = time.perf_counter()
            _collective(op, dist, send, recv)
            sync()
            first = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
            dist.all_reduce(first, op=dist.ReduceOp.MAX)  # every rank picks the same counts
            per_op = max(float(first.item()), 1e-9)
            warmup = max(0, min(args.warmup - 1, int(BUDGET_S / 2 / per_op)))
            iters = max(MIN_ITERS, min(args.iters, int(BUDGET_S / per_op)))
            for _ in range(warmup):
                _collective(op, dist, send, recv)
            sync()
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                _collective(op, dist, send, recv)
                sync()
                times.append(time.perf_counter() - t0)
            slowest = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rows.append({"op": op.value, "bytes": count * 4, "requested_bytes": size,
                         "seconds": statistics.median(slowest.tolist()), "iters": iters})
            del send, recv
    if rank == 0:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"rows": rows, "world": world, "node_names": names,
                       "backend": args.backend}, f)
        os.replace(tmp, args.out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # as examples/train_ddp.py: leave without C++ static destructors, which now and then
    # abort a gloo process at exit after its work succeeded
    os._exit(code)
