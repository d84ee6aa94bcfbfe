"""A phased runtime checkpoints on the common clock: at Unix times phase + k x interval.

A real ``grace.runtime`` session (a small model, real checkpoints on disk) is
given ``GRACE_CHECKPOINT_INTERVAL_S`` and ``GRACE_CHECKPOINT_PHASE_S`` the way
the control plane's launch sets them; its checkpoints must fall just after
each boundary of that schedule, whenever the run itself started.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from grace.runtime.config import INTERVAL_ENV, PHASE_ENV, RuntimeEnv

INTERVAL_S = 2.0
STEP_S = 0.05


def test_phase_env_is_read_and_bad_values_name_the_variable(tmp_path: Path) -> None:
    env = RuntimeEnv.from_environ({"GRACE_WORKDIR": str(tmp_path), INTERVAL_ENV: "60",
                                   PHASE_ENV: "12.5"})
    assert env.phase_s == 12.5 and env.interval_s == 60.0
    assert RuntimeEnv.from_environ({"GRACE_WORKDIR": str(tmp_path)}).phase_s is None
    with pytest.raises(ValueError, match=PHASE_ENV):
        RuntimeEnv.from_environ({"GRACE_WORKDIR": str(tmp_path), PHASE_ENV: "soon"})


@pytest.mark.slow
def test_checkpoints_follow_the_phase(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import grace.runtime as gr

    # a phase 0.7 s after "now" on the Unix clock: unrelated to when the run starts
    phase = (time.time() + 0.7) % INTERVAL_S
    env = RuntimeEnv.from_environ({"GRACE_WORKDIR": str(tmp_path), INTERVAL_ENV: str(INTERVAL_S),
                                   PHASE_ENV: f"{phase:.3f}"})
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rt = gr.init(model, opt, env=env, async_save=False, final_checkpoint=False,
                 handle_sigterm=False, heartbeat_flush_s=60.0)
    rt.resume()
    started = time.time()
    windows: list[tuple[float, float]] = []  # (step_done began, ended) of each checkpoint
    while time.time() - started < 3 * INTERVAL_S + 0.5:
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(STEP_S)
        before, n = time.time(), len(rt.checkpoint_block_s)
        rt.step_done(loss=loss)
        if len(rt.checkpoint_block_s) > n:
            windows.append((before, time.time()))
    rt.finish()
    boundaries = [phase + k * INTERVAL_S
                  for k in range(math.ceil((started - phase) / INTERVAL_S),
                                 math.floor((time.time() - phase) / INTERVAL_S) + 1)]
    assert len(windows) >= 3
    assert len(windows) == len([b for b in boundaries if b <= windows[-1][1]])
    for (before, after), boundary in zip(windows, boundaries, strict=False):
        # due from the boundary on: taken by the first step_done that ends after it
        assert before - STEP_S - 0.2 <= boundary <= after, (before, boundary, after)
