"""A tiny data-parallel transformer language model: the job the live demo runs.

Launched by ``torchrun`` (the local backend starts one agent per node), it trains
a 2-layer causal transformer on synthetic sequences with
``DistributedDataParallel``: gloo on CPU, nccl when CUDA is available. It is
seeded so two runs print the same losses, and it is small on purpose: a
2-node x 2-process job of 60 steps has to finish in seconds on a 2-core laptop,
because the point is to exercise the control plane (gang launch, rendezvous,
failure, cancellation), not to train a model.

The synthetic task is learnable, so the loss visibly falls: every sequence is
an arithmetic progression modulo the vocabulary (``x[t+1] = x[t] + d``) with a
random start and a random stride ``d`` from a small set; after a few tokens the
model can infer ``d`` and predict the rest.

``--fail-at-step K`` makes rank 0 exit with code 3 at step K, so tests can
check how a failed rank is reported.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

#: Exit code of ``--fail-at-step``: distinct from Python's generic 1 so a test
#: can tell the injected failure from a crash.
FAIL_EXIT_CODE = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=16, help="sequences per rank per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10, help="print the loss every N steps")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument(
        "--fail-at-step", type=int, default=None, help="rank 0 exits with code 3 at this step (tests)"
    )
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: cuda + nccl when CUDA is available, else cpu + gloo",
    )
    p.add_argument("--sleep-per-step", type=float, default=0.0, help="seconds to sleep per step (tests)")
    return p.parse_args(argv)


class TinyLM(nn.Module):
    """Token + position embeddings, a causal transformer encoder, a linear head."""

    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=2 * d_model, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)
        self.register_buffer(
            "mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
        h = self.encoder(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(h)


def synthetic_batch(
    gen: torch.Generator, batch: int, seq_len: int, vocab: int, device: torch.device
) -> torch.Tensor:
    """Arithmetic progressions mod ``vocab``: learnable, so the loss falls."""
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    stride = torch.randint(1, 8, (batch, 1), generator=gen)
    seq = (start + stride * torch.arange(seq_len + 1)) % vocab
    return seq.to(device)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    print(
        f"rank {rank}/{world} local_rank {local_rank} node {os.environ.get('GRACE_NODE', '?')} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')} device {device}",
        flush=True,
    )

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = TinyLM(args.vocab, args.d_model, args.layers, args.heads, args.seq_len).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)  # each rank its own data shard

    # grace.runtime hook (a later issue): resume from $GRACE_CHECKPOINT_DIR here and
    # set ``first_step`` from the checkpoint; until then every attempt starts at step 1.
    first_step = 1
    started = time.monotonic()
    for step in range(first_step, args.steps + 1):
        if args.fail_at_step is not None and step == args.fail_at_step and rank == 0:
            print(f"rank 0: injected failure at step {step}", file=sys.stderr, flush=True)
            return FAIL_EXIT_CODE
        batch = synthetic_batch(gen, args.batch_size, args.seq_len, args.vocab, device)
        logits = ddp(batch[:, :-1])
        loss = loss_fn(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)
        # grace.runtime hook (a later issue): heartbeat(step, loss) and a periodic
        # checkpoint to $GRACE_CHECKPOINT_DIR go here.
        if step % args.log_every == 0 or step == args.steps:
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            if rank == 0:
                print(
                    f"step {step}/{args.steps} loss {mean.item() / world:.4f} "
                    f"({time.monotonic() - started:.1f}s)",
                    flush=True,
                )
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
