"""SIGTERM handling: the handler only raises a flag; exit code 143."""

from __future__ import annotations

import os
import signal
import time

from grace.runtime.signals import PREEMPTED_EXIT_CODE, Preempted, StopFlag


def test_sigterm_sets_the_flag_and_uninstall_restores() -> None:
    before = signal.getsignal(signal.SIGTERM)
    flag = StopFlag()
    assert flag.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 2
        while not flag.requested and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flag.requested and flag.signum == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGTERM)  # repeats (backend sweep + torchrun) change nothing
        time.sleep(0.05)
        assert flag.requested
    finally:
        flag.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before


def test_preempted_exits_143() -> None:
    assert PREEMPTED_EXIT_CODE == 143
    err = Preempted(12, True)
    assert isinstance(err, SystemExit) and err.code == 143
    assert "step 12" in str(err) and "checkpointed" in str(err)
