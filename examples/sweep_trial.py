"""One trial of a learning-rate sweep: a small MLP regression whose result depends on ``--lr``.

What ``examples/jobs/sweep.yaml`` runs, one process per trial (``torchrun``
starts it; gloo on CPU, so it runs on a laptop or a 2-core CI box). The task
is a fixed random teacher network; the student is trained with plain SGD, so
the learning rate visibly decides the outcome: too small and the validation
loss hardly moves in the steps it has, well chosen and it falls fast. A sweep
with early stopping ends the slow trials after ``grace_steps``.

It uses ``grace.runtime`` like any training script (``init``, ``resume``,
``step_done``, ``finish``) and reports its objective every step with
``rt.report_metric("val_loss", ...)``: the control plane keeps it per attempt,
ranks the trials by it and stops weak ones. The sweep passes each parameter as
``--<name>=<value>`` (and ``GRACE_PARAM_<NAME>``), so the flags below are all
it needs. Under ``GRACE_PREFLIGHT_STEPS`` the runtime runs that many steps,
checks them, and ends the run (``grace.runtime.preflight``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import grace.runtime


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sleep-per-step", type=float, default=0.0,
                   help="seconds to sleep per step: a stand-in for a bigger model (tests)")
    p.add_argument("--diverge-at-step", type=int, default=None,
                   help="make the loss NaN from this step on (tests)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "WORLD_SIZE" in os.environ:  # started by torchrun
        dist.init_process_group(backend="gloo")
    torch.manual_seed(1234)  # the same task for every trial
    teacher = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x_val = torch.randn(256, 8)
    with torch.no_grad():
        y_val = teacher(x_val)
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(8, args.width), nn.Tanh(), nn.Linear(args.width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    rt = grace.runtime.init(model, opt, data_state=gen, heartbeat_flush_s=0.5,
                            heartbeat_record_s=0.2)
    for step in range(rt.resume(), args.steps + 1):
        x = torch.randn(args.batch_size, 8, generator=gen)
        with torch.no_grad():
            y = teacher(x)
        loss = nn.functional.mse_loss(model(x), y)
        if args.diverge_at_step is not None and step >= args.diverge_at_step:
            loss = loss * float("nan")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)
        rt.step_done(loss=loss)
        with torch.no_grad():
            rt.report_metric("val_loss", nn.functional.mse_loss(model(x_val), y_val))
    rt.finish()
    print(f"lr {args.lr} width {args.width}: val_loss after {args.steps} steps "
          f"{nn.functional.mse_loss(model(x_val), y_val).item():.4f}", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as train_ddp.py: skip C++ static destructors (gloo's occasional abort)
