"""The Slurm the Slurm tests run against, and the skip that says how to get one.

``.ci/slurm-up.sh`` starts a real 4-node Slurm on this host and prints
``SLURM_CONF=...``; ``.ci/run`` exports it and ``GRACE_TEST_SLURM=1``. Without a
Slurm the tests that need one are skipped with the command to start it, except
where ``GRACE_TEST_SLURM=1`` (CI): there a missing Slurm fails them, so CI can
never pass by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grace.backends.slurm_cli import SlurmCli

DEFAULT_CONF = Path("/tmp/grace-slurm/etc/slurm.conf")  # where .ci/slurm-up.sh writes it
HOW_TO = 'start one as root with  export "$(bash .ci/slurm-up.sh)"  (stop: bash .ci/slurm-down.sh)'


@pytest.fixture(scope="session")
def slurm() -> SlurmCli:
    """A Slurm that answers ``scontrol ping``, or a skip (a failure under GRACE_TEST_SLURM=1)."""
    if not os.environ.get("SLURM_CONF") and DEFAULT_CONF.exists():
        os.environ["SLURM_CONF"] = str(DEFAULT_CONF)  # the jobs' own srun/scontrol need it too
    cli = SlurmCli()
    if not cli.available():
        if os.environ.get("GRACE_TEST_SLURM") == "1":
            pytest.fail(f"GRACE_TEST_SLURM=1 but no slurmctld answers: {HOW_TO}", pytrace=False)
        pytest.skip(f"no Slurm here; {HOW_TO}")
    return cli
