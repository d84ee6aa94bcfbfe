"""What the planner compares options on: a workload, and one option's answer for it.

Kept apart from ``plan`` so the option producers (``plan`` for owned and cloud,
``hybrid`` for the mix) share one record without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grace.cost.tco import HOURS_PER_MONTH


@dataclass(frozen=True)
class Workload:
    """N GPUs of one model, busy ``utilization`` of the time on average, for ``months``.

    ``utilization`` is a fraction in (0, 1]: the useful GPU-hours are
    ``gpus * utilization * 730 * months``. ``egress_gb_per_month`` is data moved out
    of a cloud each month (datasets, checkpoints), billed at the cloud's $/GB.
    ``profile`` (from a trace, see :meth:`from_profile`) gives each month's useful
    GPU-hours when they are not the same every month; ``utilization`` is then their
    average over ``gpus * 730 * months``.
    """

    gpus: float
    gpu: str
    utilization: float
    months: int
    cloud: str = "hyperscaler"
    egress_gb_per_month: float = 0.0
    profile: tuple[float, ...] | None = None

    @classmethod
    def from_profile(cls, gpus: float, gpu: str, profile: tuple[float, ...],
                     cloud: str = "hyperscaler", egress_gb_per_month: float = 0.0) -> Workload:
        """A workload whose month ``m`` needs ``profile[m - 1]`` useful GPU-hours on ``gpus``."""
        if not profile or sum(profile) <= 0:
            raise ValueError("the profile has no GPU-hours; check the trace")
        capacity = gpus * HOURS_PER_MONTH
        busiest = max(range(len(profile)), key=lambda i: profile[i])
        if profile[busiest] > capacity * (1 + 1e-9):
            need = profile[busiest] / HOURS_PER_MONTH
            raise ValueError(
                f"month {busiest + 1} needs {profile[busiest]:,.0f} GPU-hours but {gpus:g} GPUs "
                f"give {capacity:,.0f}; use --gpus {need:.0f} or more")
        utilization = sum(profile) / (capacity * len(profile))
        return cls(gpus, gpu, utilization, len(profile), cloud, egress_gb_per_month,
                   tuple(profile))

    def __post_init__(self) -> None:
        if not 0.0 < self.utilization <= 1.0:
            raise ValueError(f"utilization must be a fraction in (0, 1], got {self.utilization}")
        if self.gpus <= 0:
            raise ValueError(f"gpus must be more than 0, got {self.gpus}")
        if self.months < 1:
            raise ValueError(f"months must be at least 1, got {self.months}")
        if self.egress_gb_per_month < 0:
            raise ValueError("egress_gb_per_month must not be negative")
        if self.profile is not None and len(self.profile) != self.months:
            raise ValueError(f"profile has {len(self.profile)} months, workload {self.months}")

    @property
    def useful_gpu_hours_per_month(self) -> float:
        """``gpus * utilization * 730``."""
        return self.gpus * self.utilization * HOURS_PER_MONTH

    @property
    def useful_by_month(self) -> tuple[float, ...]:
        """Useful GPU-hours of each month: the profile, or the average every month."""
        if self.profile is not None:
            return self.profile
        return (self.useful_gpu_hours_per_month,) * self.months

    @property
    def useful_gpu_hours(self) -> float:
        return sum(self.useful_by_month) if self.profile is not None else (
            self.useful_gpu_hours_per_month * self.months)


@dataclass(frozen=True)
class PlanOption:
    """One way to run the workload. ``total_usd`` is None when the price book has no such offer.

    ``cumulative_usd[m - 1]`` is the cash spent by the end of month ``m``;
    ``breakeven_month`` (filled in by the planner) is the first month that figure is
    at or below renting the same useful GPU-hours on demand; None if never.
    ``resale_usd`` is what owned hardware still held at the end sells for: ``total_usd``
    is the last month's cash less it.
    """

    name: str
    total_usd: float | None
    useful_gpu_hours: float
    cumulative_usd: tuple[float, ...] = ()
    breakeven_month: int | None = None
    note: str = ""
    detail: dict[str, float] = field(default_factory=dict)
    resale_usd: float = 0.0

    @property
    def usd_per_useful_gpu_hour(self) -> float | None:
        if self.total_usd is None or self.useful_gpu_hours <= 0:
            return None
        return self.total_usd / self.useful_gpu_hours

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "total_usd": self.total_usd,
                "useful_gpu_hours": self.useful_gpu_hours,
                "usd_per_useful_gpu_hour": self.usd_per_useful_gpu_hour,
                "breakeven_month": self.breakeven_month, "resale_usd": self.resale_usd,
                "note": self.note,
                "detail": self.detail, "cumulative_usd_by_month": list(self.cumulative_usd)}
