"""LoRA fine-tune of the tiny language model of ``train_ddp.py``: the base is frozen.

What ``examples/jobs/fine-tune.yaml`` runs. The base model (``TinyLM``) is
loaded from ``--base`` (a file ``grace.runtime.save_params`` wrote, e.g. by
``train_ddp.py --save-params`` or the full run's job) or, without one, built
from ``--seed``; every base parameter is then frozen, and low-rank adapters
are added to the feed-forward layers and the output head. Only the adapters
train, so the optimizer state is a few percent of a full fine-tune's: that is
why ``fine-tune.yaml`` declares ``lora: true`` and Grace sizes its VRAM need
from weights plus adapters, not weights plus AdamW state for all of them.

LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models",
arXiv 2106.09685, sec. 4.1): ``W x + (alpha / r) B A x`` with ``A`` drawn from a
Gaussian and ``B`` zero, so the adapted model starts exactly as the base.

The synthetic task is ``train_ddp.py``'s (arithmetic progressions) with a
different seed, so the loss falls in a few dozen steps. It runs under
``torchrun`` with DDP (gloo on CPU) and uses ``grace.runtime`` like the other
examples: checkpoints of the adapters and their optimizer (with the data
position), phase timers, heartbeats, the divergence guard, SIGTERM.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_ddp import TinyLM, synthetic_batch

import grace.runtime


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable rank-``r`` update ``(alpha / r) B A``."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        base.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(rank))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.T @ self.lora_b.T) * self.scale


def add_adapters(model: TinyLM, rank: int, alpha: float) -> list[nn.Parameter]:
    """Freeze ``model`` and put adapters on each layer's feed-forward pair and the head.

    Attention projections are left alone: ``nn.MultiheadAttention`` reads its
    weights directly rather than calling a submodule, so they cannot be wrapped.
    Returns the adapters' parameters, the only ones to train.
    """
    model.requires_grad_(False)
    for layer in model.encoder.layers:
        layer.linear1 = LoRALinear(layer.linear1, rank, alpha)
        layer.linear2 = LoRALinear(layer.linear2, rank, alpha)
    model.head = LoRALinear(model.head, rank, alpha)
    return [p for name, p in model.named_parameters() if "lora_" in name]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default=None, help="base parameters (a save_params file)")
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lora-alpha", type=float, default=16.0)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=16, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--save-adapters", default=None, help="rank 0 saves the adapters here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    distributed = "WORLD_SIZE" in os.environ  # started by torchrun
    if distributed:
        dist.init_process_group(backend="gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)

    torch.manual_seed(args.seed)  # the same base and adapters on every rank
    model = TinyLM(args.vocab, args.d_model, args.layers, args.heads, args.seq_len)
    if args.base:
        model.load_state_dict(torch.load(args.base, map_location="cpu", weights_only=True))
    adapters = add_adapters(model, args.lora_rank, args.lora_alpha)
    trainable = sum(p.numel() for p in adapters)
    total = sum(p.numel() for p in model.parameters())
    if rank == 0:
        base = args.base or f"seed {args.seed} (no --base given)"
        print(f"base {base}; training {trainable:,} of {total:,} parameters "
              f"({100 * trainable / total:.1f}%), LoRA rank {args.lora_rank}, world {world}",
              flush=True)
    # DDP all-reduces the adapters' gradients only: the base has none
    net = DistributedDataParallel(model, broadcast_buffers=False) if distributed else model
    opt = torch.optim.AdamW(adapters, lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)

    rt = grace.runtime.init(net, opt, data_state=gen)
    first_step = rt.resume()
    started = time.monotonic()
    cpu = torch.device("cpu")
    for step in range(first_step, args.steps + 1):
        with rt.phase("data"):
            batch = synthetic_batch(gen, args.batch_size, args.seq_len, args.vocab, cpu)
        with rt.phase("forward"):
            logits = net(batch[:, :-1])
            loss = loss_fn(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        with rt.phase("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with rt.phase("optimizer"):
            opt.step()
        rt.step_done(loss=loss, tokens=batch.shape[0] * args.seq_len)
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(f"step {step}/{args.steps} loss {rt.last_loss:.4f} "
                  f"({time.monotonic() - started:.1f}s)", flush=True)
    rt.finish()
    if rank == 0 and args.save_adapters:
        adapters_only = {k: v for k, v in model.state_dict().items() if "lora_" in k}
        torch.save(adapters_only, args.save_adapters)
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
    os._exit(code)  # as train_ddp.py: skip C++ static destructors of gloo threads
