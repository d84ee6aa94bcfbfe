"""Does Grace's storage access keep up with the device? ``grace bench storage``'s claim.

The issue's claim: on one directory, in one run, Grace's data-loader reads
(k readers, shuffled large files, sequential within a file) reach at least
80% of fio's sequential read, and its data set writes (fsync per file) at
least 70% of fio's sequential write, fio running the same jobs, files and
block size with the page cache dropped before reads. The figures are the
medians over ``--rounds`` rounds in which fio and Grace alternate going
first (see ``grace.bench.storage``).

    .venv/bin/python benchmarks/storage.py [DIR] [--size 1024] [--readers 4] [--rounds 5]

DIR defaults to a fresh temporary directory (on ``$TMPDIR``'s file system).
Progress goes to stderr; the last line of stdout is one JSON object:
``read_ratio``, ``write_ratio``, ``meets_claim`` (both thresholds met), and
every figure of the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from grace.bench.storage import DEFAULT_ROUNDS, DEFAULT_SIZE_MB, run_storage_bench  # noqa: E402

READ_CLAIM = 0.80
WRITE_CLAIM = 0.70


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", type=Path, help="directory to measure (default: a temporary one)")
    ap.add_argument("--size", type=int, default=DEFAULT_SIZE_MB, help="MiB of large files per pass")
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    args = ap.parse_args()

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="grace-storage-bench-") as tmp:
        where = args.dir if args.dir is not None else Path(tmp)
        result = run_storage_bench(
            where, readers=args.readers, size_mb=args.size, progress=say, rounds=args.rounds
        )
    doc = result.to_json()
    out = {
        "read_ratio": round(result.read_ratio, 3),
        "write_ratio": round(result.write_ratio, 3),
        "meets_claim": result.read_ratio >= READ_CLAIM and result.write_ratio >= WRITE_CLAIM,
        "claim": {"read_ratio": READ_CLAIM, "write_ratio": WRITE_CLAIM},
        **{k: v for k, v in doc.items() if k not in ("read_ratio", "write_ratio")},
    }
    for name, grace, fio, ratio in (
        ("read ", result.read_gbps, result.fio_read_gbps, result.read_ratio),
        ("write", result.write_gbps, result.fio_write_gbps, result.write_ratio),
    ):
        print(f"{name} Grace {grace:.3f} GB/s  fio {fio:.3f} GB/s  ratio {ratio:.2f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
