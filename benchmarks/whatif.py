"""``grace whatif``: wall time of the README's question, and its numbers held to the reference.

The README asks ``grace whatif --gpus 16384 --days 54``: 4 intervals x 4 seeds, with
and without spares. The timeline (the default, ``sim.whatif_timeline``) replays
each seed once; the reference (``WhatIfMethod.REPLAY``) runs ``Simulation`` once
per interval and seed, 32 replays, and took 8 min 52 s on this 2-core machine.

Checks, each in the JSON:

- ``small_case_equal``: a small case (2,048 GPUs, 5 days) run both ways gives the
  same numbers, every float;
- ``equal_to_stored_reference``: the README's case equals the reference's figures
  stored in ``benchmarks/whatif_reference.json`` (made with the reference path
  before the timeline existed; ``--reference`` runs it again, about 9 minutes).

Prints a line per step, then one JSON object on the last line.
Run: ``python benchmarks/whatif.py`` (about 35 s here).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from grace.sim.whatif import WhatIfInput, WhatIfMethod, run_whatif

STORED = Path(__file__).with_name("whatif_reference.json")
README = WhatIfInput(gpus=16384, days=54)
SMALL = WhatIfInput(gpus=2048, days=5)


def numbers(result: dict[str, Any]) -> dict[str, Any]:
    """Everything but the wall time, as the JSON file holds it."""
    return json.loads(json.dumps({k: v for k, v in result.items() if k != "wall_s"}))


def timed(inp: WhatIfInput, method: WhatIfMethod) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    result = run_whatif(inp, method)
    return result, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", action="store_true",
                    help="also run the README's case the reference way (about 9 minutes)")
    args = ap.parse_args()
    fast, fast_s = timed(SMALL, WhatIfMethod.TIMELINE)
    ref, ref_s = timed(SMALL, WhatIfMethod.REPLAY)
    small_equal = numbers(fast) == numbers(ref)
    print(f"small case: timeline {fast_s:.2f} s, reference {ref_s:.2f} s, equal: {small_equal}",
          flush=True)
    result, wall = timed(README, WhatIfMethod.TIMELINE)
    print(f"README case (16,384 GPUs, 54 days): {wall:.1f} s", flush=True)
    out: dict[str, Any] = {
        "benchmark": "whatif", "gpus": README.gpus, "days": README.days, "wall_s": round(wall, 2),
        "small_case_equal": small_equal,
        "small_case_wall_s": {"timeline": round(fast_s, 2), "reference": round(ref_s, 2)},
        "ettr_sim": {str(r["interval_min"]): r["ettr_sim"] for r in result["rows"]},
    }
    if STORED.exists():
        out["equal_to_stored_reference"] = numbers(result) == json.loads(STORED.read_text())
    if args.reference:
        reference, ref_wall = timed(README, WhatIfMethod.REPLAY)
        print(f"README case, reference: {ref_wall:.1f} s", flush=True)
        out["reference_wall_s"] = round(ref_wall, 2)
        out["equal_to_reference"] = numbers(result) == numbers(reference)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
