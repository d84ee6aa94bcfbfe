"""Write ``examples/cloud_bill.csv``: a small synthetic cloud-only history for ``grace assess``.

One team, 39 weeks (about 9 months) from Monday 2026-01-05, renting on demand on AWS:

- ``p5.48xlarge`` (8 x H100): 3 instances busy around the clock at the start, growing
  by about one instance a month to 10, each week's instance-hours at 80-95% of what
  that many instances could run (a long pre-training effort that keeps its nodes);
- ``p4de.24xlarge`` (8 x A100 80GB): 2 instances for fine-tuning and evaluation,
  busy 40-70% of the week, retired after week 26;
- capacity errors: the weeks the p5 fleet grows, some launches are refused for want
  of capacity (``InsufficientInstanceCapacity``), out of the launches tried.

Prices are the SkyPilot catalog's us-east-1 on-demand rows as transcribed in
``shared/pricing/skypilot_v8_aws_gpu_training.csv`` (p5.48xlarge $55.04/h,
p4de.24xlarge $27.44705/h). Everything else is made up to look like a team's bill,
drawn from a seeded generator so the file is the same on every run::

    python examples/make_cloud_bill.py            # writes examples/cloud_bill.csv
    python examples/make_cloud_bill.py --seed 7 --out /tmp/bill.csv
"""

from __future__ import annotations

import argparse
import csv
import random
from datetime import date, timedelta
from pathlib import Path

START = date(2026, 1, 5)
WEEKS = 39
HOURS_PER_WEEK = 7 * 24
PRICE_USD_PER_HOUR = {"p5.48xlarge": 55.04, "p4de.24xlarge": 27.44705}
HEADER = ["usage_start", "usage_end", "instance_type", "usage_hours", "cost_usd",
          "capacity_errors", "launch_requests"]


def rows(seed: int) -> list[list[str]]:
    """The bill's lines, week by week, p5 then p4de."""
    rng = random.Random(seed)
    out: list[list[str]] = []
    fleet = 3
    for week in range(WEEKS):
        start = START + timedelta(weeks=week)
        end = start + timedelta(weeks=1)
        grew = week > 0 and week % 4 == 0 and fleet < 10
        if grew:
            fleet += 1
        busy = rng.uniform(0.80, 0.95)
        hours = round(fleet * HOURS_PER_WEEK * busy, 1)
        launches = fleet + (rng.randint(2, 6) if grew else rng.randint(0, 2))
        errors = rng.randint(2, launches - fleet + 1) if grew else int(rng.random() < 0.15)
        out.append([start.isoformat(), end.isoformat(), "p5.48xlarge", f"{hours:g}",
                    f"{hours * PRICE_USD_PER_HOUR['p5.48xlarge']:.2f}", str(errors),
                    str(launches)])
        if week <= 26:
            hours = round(2 * HOURS_PER_WEEK * rng.uniform(0.40, 0.70), 1)
            out.append([start.isoformat(), end.isoformat(), "p4de.24xlarge", f"{hours:g}",
                        f"{hours * PRICE_USD_PER_HOUR['p4de.24xlarge']:.2f}", "0",
                        str(rng.randint(2, 6))])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("cloud_bill.csv"))
    args = parser.parse_args()
    with args.out.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(rows(args.seed))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
