"""Fixtures shared across test folders."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import yaml

# Every reconcile cycle a test runs (here or in a `grace up` it starts) checks that the
# snapshot kept across cycles equals one built from scratch (grace.control.live.view_check).
os.environ["GRACE_VERIFY_VIEWS"] = "1"

HOUR = 3600.0
#: Four 8-GPU nodes, two to a leaf: small enough that a replay takes milliseconds.
SMALL_CLUSTER = {"name": "small", "node_groups": [{"name": "n", "count": 4, "gpu": "H100-SXM",
                                                   "gpus_per_node": 8, "nodes_per_leaf": 2}]}
_rng = random.Random(7)
#: 80 jobs (submit s, duration s, GPUs, tenant) of mixed sizes and lengths from two tenants,
#: arriving faster than they run, so the policies order them differently.
SMALL_ROWS = [(i * 300.0, _rng.choice([0.2, 1, 3, 8]) * HOUR, _rng.choice([1, 2, 4, 8, 16]),
               _rng.choice(["vision", "nlp"])) for i in range(80)]


@pytest.fixture
def sweep_scene(tmp_path: Path) -> list[str]:
    """``--cluster``, ``--trace`` and the csv flags of the small scene, written to tmp_path."""
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,duration,gpus,tenant\n" + "".join(
        f"{s:.0f},{d:.0f},{g},{t}\n" for s, d, g, t in SMALL_ROWS))
    cluster = tmp_path / "small.yaml"
    cluster.write_text(yaml.safe_dump({"kind": "cluster", **SMALL_CLUSTER}))
    return ["--cluster", str(cluster), "--trace", str(trace), "--format", "csv",
            "--columns", "submit=submit,duration=duration,gpus=gpus,tenant=tenant"]
