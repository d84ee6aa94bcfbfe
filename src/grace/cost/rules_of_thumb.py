"""The seeds' rules of thumb set beside this plan's own answer: where it agrees and why not.

A rule of thumb is someone else's plan at someone else's prices. ``grace plan`` states
each one, what it says for this workload, what the plan's own figures say, and the
figures that make the difference, so a reader can tell which to trust here. The rules
(from the seeds, quoted in ``source``):

- **size**: below 32 GPUs cluster management overhead outweighs the savings, above 64
  ownership wins (no call in between);
- **capital**: $500K+ of capital favours a cluster, under $200K favours cloud (no call
  in between); the capital is the plan's own ``gpus x capex_per_gpu``;
- **utilization**: owning breaks even "typically around 60-70% utilization over a
  12-month period": agrees when this plan's threshold for a 12-month workload of the
  same GPUs (the same functions as ``owning_beats_renting_above_utilization``) is in
  60-70%;
- **breakeven month**: "9-14 months depending on the GPU generation": agrees when the
  plan's on-prem breakeven month against on-demand is in 9-14.

"Own" for the plan means an owned option (on-prem or colo) costs less in total than
the cheapest way to rent (on demand, 1- or 3-year commitment). The rules judge the
economics: a site that cannot host the cluster (``site``) is reported apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SEED = "the seeds' rules of thumb"
SMALL_GPUS, LARGE_GPUS = 32, 64
SMALL_CAPITAL_USD, LARGE_CAPITAL_USD = 200_000.0, 500_000.0
BREAKEVEN_UTILIZATION = (0.60, 0.70)
BREAKEVEN_MONTHS = (9, 14)


@dataclass(frozen=True)
class PlanFacts:
    """The plan's figures the rules are judged on (all computed by ``grace.cost.plan``)."""

    gpus: float
    utilization: float
    months: int
    capex_per_gpu_usd: float
    running_usd_per_gpu_month: float  # power, space, maintenance
    staff_usd_per_month: float
    fte: float
    on_demand_usd_per_gpu_hour: float
    owned_name: str  # the cheaper owned option
    owned_total_usd: float
    rent_name: str  # the cheapest way to rent
    rent_total_usd: float
    useful_gpu_hours: float
    threshold_12m: float  # owning beats on-demand above this utilization, 12-month workload
    threshold_12m_without_resale: float  # the same with no resale credit
    resale_share_12m: float  # of capex, what 12-month-old hardware sells for
    breakeven_month: int | None  # on-prem against on-demand, at this utilization

    @property
    def owning_wins(self) -> bool:
        return self.owned_total_usd < self.rent_total_usd

    @property
    def capital_usd(self) -> float:
        return self.gpus * self.capex_per_gpu_usd


@dataclass(frozen=True)
class RuleCheck:
    """One rule: what it says here, what the plan says, whether they agree (None: the rule
    makes no call for this workload), and the figures behind the difference."""

    rule: str
    source: str
    says: str
    plan_says: str
    agrees: bool | None
    why: str  # the whole reason: the plan's cost figures, then ``reason``
    reason: str  # what this rule turns on, beyond the cost figures every rule shares

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _verdict(f: PlanFacts) -> str:
    per = f.useful_gpu_hours
    return (f"{'own' if f.owning_wins else 'rent'}: {f.owned_name} "
            f"${f.owned_total_usd / per:.2f} per useful GPU-hour against {f.rent_name} "
            f"${f.rent_total_usd / per:.2f}")


def cost_basis(f: PlanFacts) -> str:
    """The plan's figures every rule's reason rests on (printed once above the rules)."""
    return _cost_figures(f)


def _cost_figures(f: PlanFacts) -> str:
    staff_per_gpu = f.staff_usd_per_month / f.gpus
    return (f"capex ${f.capex_per_gpu_usd:,.0f} a GPU, running ${f.running_usd_per_gpu_month:,.0f} "
            f"and staff ${staff_per_gpu:,.0f} a GPU-month ({f.fte:.2f} FTE for {f.gpus:g} GPUs), "
            f"on-demand ${f.on_demand_usd_per_gpu_hour:.2f} a GPU-hour at "
            f"{100 * f.utilization:.0f}% utilization")


def _own_or_rent(rule: str, source: str, says_own: bool | None, says: str,
                 f: PlanFacts) -> RuleCheck:
    agrees = None if says_own is None else says_own == f.owning_wins
    staff_share = f.staff_usd_per_month * f.months / f.owned_total_usd if f.owned_total_usd else 0.0
    reason = f"staff is {100 * staff_share:.0f}% of {f.owned_name}'s cost"
    return RuleCheck(rule, source, says, _verdict(f), agrees, f"{_cost_figures(f)}; {reason}",
                     reason)


def size_rule(f: PlanFacts) -> RuleCheck:
    if f.gpus < SMALL_GPUS:
        says_own, says = False, f"rent: {f.gpus:g} GPUs is below {SMALL_GPUS}"
    elif f.gpus > LARGE_GPUS:
        says_own, says = True, f"own: {f.gpus:g} GPUs is above {LARGE_GPUS}"
    else:
        says_own, says = None, f"no call: {f.gpus:g} GPUs is between {SMALL_GPUS} and {LARGE_GPUS}"
    return _own_or_rent(f"below {SMALL_GPUS} GPUs management overhead outweighs savings; "
                        f"above {LARGE_GPUS} ownership wins",
                        f"{SEED}: cluster size", says_own, says, f)


def capital_rule(f: PlanFacts) -> RuleCheck:
    cap = f.capital_usd
    if cap >= LARGE_CAPITAL_USD:
        says_own, says = True, f"own: ${cap:,.0f} of capital is $500K or more"
    elif cap < SMALL_CAPITAL_USD:
        says_own, says = False, f"rent: ${cap:,.0f} of capital is under $200K"
    else:
        says_own, says = None, f"no call: ${cap:,.0f} of capital is between $200K and $500K"
    return _own_or_rent("$500K+ of capital favours a cluster; under $200K favours cloud",
                        f"{SEED}: capital", says_own, says, f)


def utilization_rule(f: PlanFacts) -> RuleCheck:
    lo, hi = BREAKEVEN_UTILIZATION
    t = f.threshold_12m
    plan_says = (f"owning beats on-demand above {100 * t:.1f}% over 12 months" if t <= 1.0
                 else f"owning never beats on-demand over 12 months (it would need "
                      f"{100 * t:.0f}%)")
    reason = (f"after 12 months the hardware sells for "
              f"{100 * f.resale_share_12m:.0f}% of capex (book value): without that credit the "
              f"threshold would be {100 * f.threshold_12m_without_resale:.1f}%")
    return RuleCheck("breakeven typically around 60-70% utilization over a 12-month period",
                     f"{SEED}: utilization", f"owning beats renting above {100 * lo:.0f}-"
                     f"{100 * hi:.0f}% utilization over 12 months", plan_says,
                     lo <= t <= hi, f"{_cost_figures(f)}; {reason}", reason)


def breakeven_rule(f: PlanFacts) -> RuleCheck:
    lo, hi = BREAKEVEN_MONTHS
    be = f.breakeven_month
    plan_says = (f"on-prem breaks even in month {be}" if be is not None else
                 f"on-prem does not break even within {f.months} months")
    rent_month = f.on_demand_usd_per_gpu_hour * f.utilization * 730.0
    margin = rent_month - f.running_usd_per_gpu_month - f.staff_usd_per_month / f.gpus
    reason = (f"renting a GPU's useful hours costs ${rent_month:,.0f} a month, "
              f"owning it ${rent_month - margin:,.0f} after the purchase, so capex is paid back "
              + (f"after {f.capex_per_gpu_usd / margin:.1f} months" if margin > 0 else "never"))
    return RuleCheck("breakeven in 9-14 months depending on the GPU generation",
                     f"{SEED}: breakeven month", f"owning breaks even in month {lo}-{hi}",
                     plan_says, be is not None and lo <= be <= hi,
                     f"{_cost_figures(f)}: {reason}", reason)


def rules_of_thumb(f: PlanFacts) -> list[RuleCheck]:
    """Every rule, in the order the seeds give them."""
    return [size_rule(f), capital_rule(f), utilization_rule(f), breakeven_rule(f)]
