"""The same tiny language model as ``train_ddp.py``, sharded with FSDP (``fully_shard``).

Each transformer layer and then the whole model are wrapped with FSDP2's
``fully_shard``: every rank holds a shard of each parameter and of the
optimizer state, and ``grace.runtime`` checkpoints those shards with DCP (each
rank writes its own; a resume on another world size reshards them). The
training loop and the runtime calls are the same as in ``train_ddp.py``; only
the wrapping differs. gloo on CPU, nccl on CUDA.

Without torchrun it starts a process group of one (FSDP needs one).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_ddp import FAIL_EXIT_CODE, TinyLM, parse_args, synthetic_batch

import grace.runtime


def _single_process_group(backend: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    backend = "cpu:gloo,cuda:nccl" if use_cuda else "gloo"  # async checkpoints need a CPU backend
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend=backend)
    else:
        _single_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(local_rank)
    print(f"rank {rank}/{world} local_rank {local_rank} device {device} (FSDP)", flush=True)

    torch.manual_seed(args.seed)
    model = TinyLM(args.vocab, args.d_model, args.layers, args.heads, args.seq_len).to(device)
    for layer in model.encoder.layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)

    rt = grace.runtime.init(
        model,
        opt,
        data_state=gen,
        checkpoint_interval_s=args.checkpoint_interval_s,
        checkpoint_every_steps=args.checkpoint_every,
        keep=args.keep,
    )
    first_step = rt.resume()
    started = time.monotonic()
    for step in range(first_step, args.steps + 1):
        if args.fail_at_step == step and rank == 0 and rt.env.attempt == 1:
            print(f"rank 0: injected failure at step {step}", file=sys.stderr, flush=True)
            os._exit(FAIL_EXIT_CODE)
        with rt.phase("data"):
            batch = synthetic_batch(gen, args.batch_size, args.seq_len, args.vocab, torch.device("cpu"))
        with rt.phase("h2d"):
            batch = batch.to(device, non_blocking=True)
        with rt.phase("forward"):  # FSDP all-gathers each layer's parameters here
            logits = model(batch[:, :-1])
            loss = loss_fn(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
            if args.diverge_at_step == step:
                loss = loss * float("nan")
        with rt.phase("backward"):  # ... and reduce-scatters the gradients here
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with rt.phase("optimizer"):
            opt.step()
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)
        rt.step_done(loss=loss, tokens=batch.shape[0] * args.seq_len)
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(
                f"step {step}/{args.steps} loss {rt.last_loss:.4f} ({time.monotonic() - started:.1f}s)",
                flush=True,
            )
    rt.finish()
    if args.save_params:
        grace.runtime.save_params(model, args.save_params)  # gathers the full parameters
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
