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

It uses ``grace.runtime`` the way any training script would (``init``,
``resume``, ``phase``, ``step_done``, ``finish``): checkpoints to
``$GRACE_CHECKPOINT_DIR`` (DCP, async, atomic, verified on resume), phase
timers and heartbeats, the divergence guard, checkpoint-and-exit on SIGTERM.
The data order is part of the checkpoint (each rank's ``torch.Generator``), so
a resumed run continues exactly where the interrupted one stopped: its final
parameters are bitwise identical to an uninterrupted run of the same seed.

Flags for tests: ``--fail-at-step K`` makes rank 0 die with code 3 at step K
(on attempt 1 only, so the retry resumes and finishes), ``--diverge-at-step K``
turns the loss into NaN at step K (the runtime ends the run with code 86),
``--save-params PATH`` writes the final parameters (rank 0, ``torch.save``),
``--data-delay-ms MS`` makes every batch wait MS milliseconds inside the ``data``
phase, a dataloader starved by slow storage (the control plane should then name the
job input-bound: ``core.constraint``).

Without torchrun (no ``WORLD_SIZE`` in the environment) it trains in one
process, without a process group.
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

import grace.runtime

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
        "--fail-at-step",
        type=int,
        default=None,
        help="rank 0 dies with code 3 at this step, on attempt 1 only (tests)",
    )
    p.add_argument("--diverge-at-step", type=int, default=None, help="make the loss NaN at this step (tests)")
    p.add_argument(
        "--checkpoint-interval-s",
        type=float,
        default=None,
        help="seconds between checkpoints (default: $GRACE_CHECKPOINT_INTERVAL_S, the control plane's)",
    )
    p.add_argument("--checkpoint-every", type=int, default=None, help="also checkpoint every N steps")
    p.add_argument("--keep", type=int, default=3, help="committed checkpoints to keep")
    p.add_argument("--save-params", default=None, help="rank 0 saves the final parameters here")
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: cuda + nccl when CUDA is available, else cpu + gloo",
    )
    p.add_argument("--sleep-per-step", type=float, default=0.0, help="seconds to sleep per step (tests)")
    p.add_argument(
        "--data-delay-ms",
        type=float,
        default=0.0,
        help="a slow dataloader: wait this long for each batch, inside the data phase, as a "
        "reader starved by storage would (tests of input-bound verdicts; default 0: none)",
    )
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
    distributed = "WORLD_SIZE" in os.environ  # started by torchrun
    if distributed:
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
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
    if distributed:
        # the only buffer is a constant mask: broadcasting it every forward would cost a
        # collective per step and hide a slow rank's forward inside the wait for it
        model = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None,
                                        broadcast_buffers=False)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)  # each rank its own data shard

    # grace.runtime: checkpoints (with the data position), timers, heartbeats, guard, SIGTERM.
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
            os._exit(FAIL_EXIT_CODE)  # a crash: no cleanup, no pending checkpoint finished
        with rt.phase("data"):
            if args.data_delay_ms > 0:
                time.sleep(args.data_delay_ms / 1000.0)  # the batch is late, the step waits
            batch = synthetic_batch(gen, args.batch_size, args.seq_len, args.vocab, torch.device("cpu"))
        with rt.phase("h2d"):
            batch = batch.to(device, non_blocking=True)
        with rt.phase("forward"):
            logits = model(batch[:, :-1])
            loss = loss_fn(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
            if args.diverge_at_step == step:
                loss = loss * float("nan")
        with rt.phase("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here
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
        grace.runtime.save_params(model, args.save_params)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without C++ static destructors: now and then a gloo or store thread torn
    # down during interpreter exit aborts the process ("terminate called without an
    # active exception", SIGABRT) after training succeeded, and the rank would be
    # reported failed. It also keeps --fail-at-step's exit code from being replaced
    # by a crash while the other ranks' connections are still open.
    os._exit(code)
