"""Batch inference on a MIG slice: forward passes only, with latency and accuracy.

What ``examples/jobs/mig-inference.yaml`` runs. It loads the tiny language
model of ``train_ddp.py`` (``--weights``: a file ``grace.runtime.save_params``
wrote, e.g. ``train_ddp.py --save-params``; without one, the model of
``--seed``'s initial weights), switches it to eval mode and answers
``--requests`` batches of synthetic prompts (the arithmetic progressions the
examples train on) under ``torch.inference_mode``. For each batch it times the
forward pass and scores the greedy next-token prediction from the fourth token
on (by then the stride can be inferred). At the end it prints the p50 and p95
latency, the throughput and the accuracy.

A sub-GPU job is one process (the local backend starts one rank for a slice);
on CUDA it uses the device the slice exposes, on CPU the CPU. It uses
``grace.runtime`` for what an inference job needs from it: phase timers,
heartbeats (the control plane sees it making progress) and the divergence
guard on the eval loss (a NaN output stops the job with code 86). With no
optimizer there is no training state, so periodic and final checkpoints are
off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_ddp import TinyLM, synthetic_batch

import grace.runtime

#: predictions are scored from this position on: the stride needs two tokens to infer
WARMUP_TOKENS = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--weights", default=None, help="model parameters (a save_params file)")
    p.add_argument("--requests", type=int, default=50, help="batches to answer")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(args.seed)
    model = TinyLM(args.vocab, args.d_model, args.layers, args.heads, args.seq_len)
    if args.weights:
        model.load_state_dict(torch.load(args.weights, map_location="cpu", weights_only=True))
    model = model.to(device).eval()
    print(f"serving {args.weights or f'seed {args.seed} (no --weights given)'} on {device} "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)

    rt = grace.runtime.init(model, None, checkpoint_interval_s=0, final_checkpoint=False)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed + 1)  # prompts unlike any training batch
    latencies: list[float] = []
    correct = scored = 0
    started = time.monotonic()
    for _ in range(args.requests):
        with rt.phase("data"):
            batch = synthetic_batch(gen, args.batch_size, args.seq_len, args.vocab, device)
        t0 = time.perf_counter()
        with rt.phase("forward"), torch.inference_mode():
            logits = model(batch[:, :-1])
            loss = loss_fn(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        latencies.append(time.perf_counter() - t0)
        hits = logits[:, WARMUP_TOKENS:].argmax(-1) == batch[:, WARMUP_TOKENS + 1:]
        correct += int(hits.sum())
        scored += hits.numel()
        rt.step_done(loss=loss, tokens=batch.numel())
    rt.finish()
    wall = time.monotonic() - started
    ms = sorted(1000 * s for s in latencies)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    print(f"answered {args.requests} batches of {args.batch_size} in {wall:.1f}s: "
          f"p50 {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, "
          f"{args.requests * args.batch_size / wall:.0f} prompts/s, "
          f"next-token accuracy {correct / scored:.3f}", flush=True)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as train_ddp.py: skip C++ static destructors
