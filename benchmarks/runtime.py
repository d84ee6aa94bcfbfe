"""grace.runtime's two measured claims, on CPU.

1. Async checkpoints: the time training blocks per checkpoint with
   ``async_save`` (the copy to host memory) against a synchronous save of the
   same state (DCP write, fsync, sha256 manifest, rename), on a model of at
   least 100M parameters with its AdamW state (3 x 4 bytes per parameter).
   Each figure is the median of ``--repeats`` saves, sync and async
   interleaved; the async save's background time (until committed) is
   reported too. As in training, the first ``step_done`` has the runtime
   prepare its reused host buffers in the background before any save.
2. Phase timers: their cost per step on the example (``examples/train_ddp.py``'s
   TinyLM, its default sizes, one process) as a share of that step's time. The
   cost is measured directly (the six ``with rt.phase(...)`` blocks and the
   per-step ``collect``, run empty many times), because it is far below the
   step-to-step noise of an A/B comparison; the A/B comparison (timers on vs
   off, alternating step by step, medians) is printed as well. One torch
   thread, as torchrun gives each rank (``OMP_NUM_THREADS=1``).

    .venv/bin/python benchmarks/runtime.py [--params-m 100] [--repeats 3] [--dir /tmp]

The last line of the output is one JSON object: ``sync_save_block_s``,
``async_save_block_s``, ``async_over_sync``, ``params``,
``timer_overhead_share`` and the figures behind them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "examples"))

from train_ddp import TinyLM, synthetic_batch  # noqa: E402

import grace.runtime as gr  # noqa: E402
from grace.runtime.config import RuntimeEnv  # noqa: E402
from grace.runtime.timers import PhaseTimers  # noqa: E402


def _env(workdir: Path) -> RuntimeEnv:
    return RuntimeEnv(
        job_id=None, attempt=1, node="bench", rank=0, world_size=1, local_rank=0,
        workdir=workdir, checkpoint_dir=workdir / "checkpoints", interval_s=None, url=None,
    )  # fmt: skip


def checkpoint_bench(params_m: float, repeats: int, root: Path) -> dict[str, float]:
    width = 4096
    layers = max(1, round(params_m * 1e6 / (width * width + width)))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, width)).sum().backward()
    opt.step()  # the optimizer state exists: 3 tensors per parameter in all
    state_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) * 3
    print(f"model: {layers} x Linear({width}, {width}) = {params / 1e6:.1f}M parameters; "
          f"state with AdamW {state_bytes / 2**30:.2f} GiB", flush=True)  # fmt: skip

    workdir = root / "grace-runtime-bench"
    shutil.rmtree(workdir, ignore_errors=True)
    rt = gr.init(model, opt, env=_env(workdir), keep=1, checkpoint_interval_s=0,
                 handle_sigterm=False, final_checkpoint=False, timers=False)  # fmt: skip
    rt.step_done(loss=1.0)  # a training step ends: the runtime prepares its staging buffers ...
    if rt.checkpointer._warming is not None:
        rt.checkpointer._warming.join()  # ... in the background, while training goes on
    sync_s: list[float] = []
    async_s: list[float] = []
    commit_s: list[float] = []
    for i in range(repeats):
        rt.step = 2 * i + 1
        sync_s.append(rt.checkpoint(block=True))
        print(f"  sync save  {i + 1}: blocked {sync_s[-1]:.3f}s", flush=True)
        rt.step = 2 * i + 2
        t0 = time.perf_counter()
        async_s.append(rt.checkpoint(block=False))
        rt.checkpointer.release(True)  # what the next healthy step does
        rt.checkpointer.wait()
        commit_s.append(time.perf_counter() - t0)
        assert rt.checkpointer.last_committed == rt.step, rt.checkpointer.last_error
        print(f"  async save {i + 1}: blocked {async_s[-1]:.3f}s, committed after {commit_s[-1]:.3f}s",
              flush=True)  # fmt: skip
    # for context: DCP's own synchronous save of the same state, without hashes, manifest or rename
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    bare_s: list[float] = []
    for i in range(repeats):
        t0 = time.perf_counter()
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=workdir / f"bare-{i}", no_dist=True)
        bare_s.append(time.perf_counter() - t0)
        shutil.rmtree(workdir / f"bare-{i}", ignore_errors=True)
    print(f"  bare dcp.save (no manifest): {', '.join(f'{x:.3f}s' for x in bare_s)}", flush=True)
    rt.finish()
    shutil.rmtree(workdir, ignore_errors=True)
    sync_med, async_med = statistics.median(sync_s), statistics.median(async_s)
    return {
        "params": params,
        "state_bytes": state_bytes,
        "sync_save_block_s": round(sync_med, 4),
        "async_save_block_s": round(async_med, 4),
        "async_over_sync": round(async_med / sync_med, 4),
        "async_commit_s": round(statistics.median(commit_s), 4),
        "async_save_block_s_first": round(async_s[0], 4),
        "bare_dcp_save_s": round(statistics.median(bare_s), 4),
        "async_over_bare_dcp_save": round(async_med / statistics.median(bare_s), 4),
        "sync_save_block_s_all": [round(x, 4) for x in sync_s],
        "async_save_block_s_all": [round(x, 4) for x in async_s],
    }


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator, timers: PhaseTimers,
                loss_fn: nn.Module, vocab: int) -> None:  # fmt: skip
    with timers.phase("data"):
        batch = synthetic_batch(gen, 16, 32, vocab, torch.device("cpu"))
    with timers.phase("h2d"):
        batch = batch.to("cpu")
    with timers.phase("forward"):
        logits = model(batch[:, :-1])
        loss = loss_fn(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
    with timers.phase("backward"):
        opt.zero_grad(set_to_none=True)
        loss.backward()
    with timers.phase("optimizer"):
        opt.step()
    with timers.phase("sync"):
        loss.item()
    timers.collect()


def timer_bench(steps: int = 800) -> dict[str, float]:
    vocab = 256
    torch.manual_seed(0)
    model = TinyLM(vocab, 64, 2, 4, 32)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    on, off = PhaseTimers(enabled=True), PhaseTimers(enabled=False)
    for _ in range(20):  # warm-up
        _train_step(model, opt, gen, on, loss_fn, vocab)
    per_step: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(steps):  # alternate step by step; medians shrug off other processes' bursts
        name, timers = ("on", on) if i % 2 == 0 else ("off", off)
        t0 = time.perf_counter()
        _train_step(model, opt, gen, timers, loss_fn, vocab)
        per_step[name].append(time.perf_counter() - t0)
    step_s = statistics.median(per_step["on"])

    # the instrumentation alone: the same six phases and one collect per step, with empty bodies
    timers = PhaseTimers(enabled=True)
    n = 50_000
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            with timers.phase("data"):
                pass
            with timers.phase("h2d"):
                pass
            with timers.phase("forward"):
                pass
            with timers.phase("backward"):
                pass
            with timers.phase("optimizer"):
                pass
            with timers.phase("sync"):
                pass
            timers.collect()
        best = min(best, (time.perf_counter() - t0) / n)
    ab = statistics.median(per_step["on"]) / statistics.median(per_step["off"]) - 1.0

    # the rest of the runtime's per-step work in one process: step_done without a checkpoint
    # (guard, heartbeat window, schedule); across ranks it adds one small gloo all-reduce
    with tempfile.TemporaryDirectory() as d:
        rt = gr.init(model, opt, env=_env(Path(d)), checkpoint_interval_s=0, handle_sigterm=False,
                     final_checkpoint=False, heartbeat_record_s=1.0)  # fmt: skip
        n_done = 20_000
        t0 = time.perf_counter()
        for _ in range(n_done):
            rt.step_done(loss=2.0, tokens=512)
        step_done_s = (time.perf_counter() - t0) / n_done
        rt.finish()
    return {
        "example_step_s": round(step_s, 6),
        "timer_cost_per_step_s": round(best, 9),
        "timer_overhead_share": round(best / step_s, 6),
        "timer_overhead_ab": round(ab, 4),
        "step_done_cost_s": round(step_done_s, 9),
        "runtime_overhead_share": round((best + step_done_s) / step_s, 6),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--params-m", type=float, default=100.0, help="model size, millions of parameters")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where checkpoints are written")
    p.add_argument("--skip-checkpoint", action="store_true")
    p.add_argument("--threads", type=int, default=1, help="torch threads for the timer benchmark")
    args = p.parse_args(argv)
    default_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    result: dict[str, object] = {"cpus": os.cpu_count(), "torch": torch.__version__}
    print("phase timers on the example's step:", flush=True)
    t = timer_bench()
    print(f"  step {t['example_step_s'] * 1e3:.2f} ms, timers {t['timer_cost_per_step_s'] * 1e6:.2f} us "
          f"per step = {t['timer_overhead_share']:.4%} (A/B, noisy: {t['timer_overhead_ab']:+.2%}); "
          f"step_done {t['step_done_cost_s'] * 1e6:.1f} us: timers + step_done = "
          f"{t['runtime_overhead_share']:.3%}", flush=True)  # fmt: skip
    result.update(t)
    torch.set_num_threads(default_threads)
    if not args.skip_checkpoint:
        print("checkpoint blocking time, sync vs async:", flush=True)
        c = checkpoint_bench(args.params_m, args.repeats, Path(args.dir))
        print(f"  median: sync {c['sync_save_block_s']:.3f}s, async {c['async_save_block_s']:.3f}s "
              f"= {c['async_over_sync']:.1%} of sync", flush=True)  # fmt: skip
        result.update(c)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
