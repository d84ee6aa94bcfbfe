"""``grace lifecycle``: when to order, what to get, when to retire: JSON, a table and HTML."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, RenderableType

from grace.cli.fit import Cell, Column, Fit, fit_table
from grace.cli.json_out import check_html_out, check_json_out, to_stdout
from grace.cli.numbers import refuse_non_finite
from grace.spec.errors import SpecError

console = Console()
err = Console(stderr=True)

_OWNED = re.compile(r"^(?P<model>[^:]+):(?P<count>\d+):(?P<age>\d+(\.\d+)?)$")


def parse_owned(values: list[str] | None) -> list[str] | None:
    """``MODEL:COUNT:AGE_MONTHS``, repeatable, or ``none``: checked here, the model against
    the catalog, so a typo is refused with the form to write."""
    if not values:
        return values
    if [v.strip().lower() for v in values] == ["none"]:
        return values
    if any(v.strip().lower() == "none" for v in values):
        raise typer.BadParameter("`none` (nothing owned) cannot be combined with other "
                                 "--owned values; drop one", param_hint="--owned")
    from grace.spec.gpus import BUILTIN_GPUS

    known = {m.lower() for m in BUILTIN_GPUS}

    for v in values:
        m = _OWNED.match(v.strip())
        if m is None:
            raise typer.BadParameter(
                f"{v!r} is not MODEL:COUNT:AGE_MONTHS; write e.g. A100-80GB:64:24 "
                "(64 GPUs bought 24 months ago), or `none` for nothing owned",
                param_hint="--owned")
        if m["model"].lower() not in known:
            raise typer.BadParameter(f"unknown GPU model {m['model']!r}; use one of "
                                     f"{sorted(BUILTIN_GPUS)}", param_hint="--owned")
        if int(m["count"]) < 1:
            raise typer.BadParameter(f"{v!r} owns no GPUs; give a count of 1 or more, or drop "
                                     "it", param_hint="--owned")
    return values


#: Monthly growth beyond +-50% compounds to nonsense within a plan (1.5^24 = 16,834x).
MAX_GROWTH = 0.5
#: Below this a target utilization sizes purchases for GPUs that mostly sit idle.
MIN_TARGET_UTILIZATION = 0.05


def _merged(values: list[str]) -> tuple[Any, ...]:
    """``--owned`` values as groups, one per (model, age): the same group given twice is
    counted once with both counts added, and the catalog's spelling of the model used."""
    from grace.cost.lifecycle import OwnedGroup
    from grace.spec.gpus import BUILTIN_GPUS

    by_name = {m.lower(): m for m in BUILTIN_GPUS}
    counts: dict[tuple[str, float], int] = {}
    for v in values:
        m = _OWNED.match(v.strip())
        if m is not None:
            key = (by_name.get(m["model"].lower(), m["model"]), float(m["age"]))
            counts[key] = counts.get(key, 0) + int(m["count"])
    return tuple(OwnedGroup(model, n, age) for (model, age), n in counts.items())


def check_fraction(flag: str, example: str) -> Any:
    def check(value: float | None) -> float | None:
        if value is None:
            return None
        refuse_non_finite(value, flag)
        if value > 1.0:
            raise typer.BadParameter(f"{value:g} is above 1: this is a fraction; write "
                                     f"{value / 100:g} for {value:g}% ({example})",
                                     param_hint=flag)
        return value
    return check


def check_utilization(value: float) -> float:
    check_fraction("--target-utilization", "0.7 keeps GPUs 70% busy")(value)
    if value < MIN_TARGET_UTILIZATION:
        raise typer.BadParameter(f"must be at least {MIN_TARGET_UTILIZATION:g} (a fraction, 0.7 "
                                 "for 70%): below that a plan buys for GPUs that sit idle",
                                 param_hint="--target-utilization")
    return value


def check_growth(value: float | None) -> float | None:
    check_fraction("--growth", "0.05 is 5% more GPU-hours each month")(value)
    if value is not None and not -MAX_GROWTH <= value <= MAX_GROWTH:
        raise typer.BadParameter(f"{value:g} a month is beyond any planning horizon's trend: "
                                 f"give -{MAX_GROWTH:g} to {MAX_GROWTH:g} (0.05 is 5% more "
                                 "GPU-hours each month, -0.02 2% less)", param_hint="--growth")
    return value


def lifecycle(
    history: str = typer.Option(..., "--history",
                                help="job history or cloud bill to read; with --format grace "
                                     "a database URL or the store's SQLite file"),
    fmt: str = typer.Option("sacct", "--format",
                            help="sacct, csv, grace, cloud-bill, philly, chronus, tiresias, "
                                 "openb"),
    columns: str | None = typer.Option(None, "--columns",
                                       help="csv: role map; sacct/cloud-bill: renamed columns"),
    months: int = typer.Option(..., "--months", min=1, max=120, help="months to plan ahead"),
    gpu: str = typer.Option("H100-SXM", "--gpu", help="the generation to buy (`grace gpus`)"),
    owned: list[str] | None = typer.Option(
        None, "--owned", callback=parse_owned,
        help="MODEL:COUNT:AGE_MONTHS owned today, repeatable; `none` for nothing. Default: "
             "the busiest month's GPUs needed, whole nodes of --gpu, new"),
    growth: float | None = typer.Option(
        None, "--growth", callback=check_growth,
        help="monthly demand growth, a fraction (0.05 = 5%); default: fitted to the history"),
    target_utilization: float = typer.Option(
        0.7, "--target-utilization", callback=check_utilization,
        help="how busy owned GPUs should run, a fraction in (0, 1]"),
    cover_months: int = typer.Option(12, "--cover-months", min=1,
                                     help="a tranche covers demand this many months past "
                                          "delivery"),
    site: str = typer.Option("on-prem", "--site", help="on-prem or colo"),
    cloud: str = typer.Option("hyperscaler", "--cloud",
                              help="whose 1-year commitment and on-demand prices to use"),
    preserve_cash: bool = typer.Option(False, "--preserve-cash",
                                       help="lease rather than buy: cash preservation matters"),
    prices: Path | None = typer.Option(None, "--prices", help="YAML overriding the price book"),
    json_out: Path | None = typer.Option(None, "--json", callback=check_json_out,
                                         help="write the plan as JSON here (- : stdout)"),
    html_out: Path | None = typer.Option(
        None, "--html", callback=check_html_out, help="write an HTML report here"),
) -> None:
    """A month-by-month capacity plan: demand against owned GPUs, orders, buy/lease/cloud,
    retirements and the cash curve."""
    from grace.cost.history import HistoryFormat, load_history, parse_format
    from grace.cost.lifecycle import LifecycleInputs, OwnedGroup, lifecycle_plan
    from grace.cost.lifecycle_demand import monthly_gpu_hours
    from grace.cost.pricebook import load_pricebook

    try:
        parse_format(fmt)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--format") from e
    if site not in ("on-prem", "colo"):
        raise typer.BadParameter(f"{site!r}: use on-prem or colo", param_hint="--site")
    groups: tuple[OwnedGroup, ...] | None = None
    if owned:
        groups = () if [v.strip().lower() for v in owned] == ["none"] else _merged(owned)
    elif parse_format(fmt) is HistoryFormat.CLOUD_BILL:
        groups = ()  # a team paying a cloud bill owns nothing unless it says so
    try:
        book = load_pricebook(prices)
    except (SpecError, OSError) as e:
        err.print(f"[red]error[/red] --prices: {e}")
        raise typer.Exit(code=2) from e
    for flag, check in (("--gpu", lambda: book.gpu(gpu)),
                        ("--cloud", lambda: book.offers(gpu, cloud)),
                        ("--owned", lambda: [book.gpu(o.model) for o in groups or ()])):
        try:
            check()
        except ValueError as e:
            err.print(f"[red]error[/red] {flag}: {e}")
            raise typer.Exit(code=2) from e
    try:
        hist = load_history(history, fmt, columns)
    except (ValueError, OSError) as e:
        flag = "--columns" if str(e).startswith("--columns") else "--history"
        text = str(e) if str(e).startswith(flag) else f"{flag}: {e}"  # said once, not twice
        err.print(f"[red]error[/red] {text}", highlight=False)
        raise typer.Exit(code=2) from e
    err.print(hist.summary(), highlight=False, markup=False)
    hours, partial = monthly_gpu_hours(hist)
    if not hours:
        err.print(f"[red]error[/red] --history: {history} covers no complete 730-hour month "
                  "(a month of history at least is needed to project demand)")
        raise typer.Exit(code=2)
    inputs = LifecycleInputs(months, gpu, site, cloud, target_utilization, growth,
                             preserve_cash, cover_months, groups)
    try:
        result = lifecycle_plan(hours, inputs, book)
    except ValueError as e:
        flag = "--months" if "--months" in str(e) else "--history"
        err.print(f"[red]error[/red] {flag}: {e}")
        raise typer.Exit(code=2) from e
    result["inputs"]["history"] = {"path": history, "format": fmt, "columns": columns,
                                   "rows": hist.rows, "jobs": len(hist.jobs),
                                   "bill_lines": len(hist.usage), "skipped": hist.skipped}
    result["history"]["partial_month_gpu_hours"] = partial
    if growth is None and result["demand"]["uncertain"]:
        err.print("[yellow]warning[/yellow] the fitted trend is uncertain ("
                  f"{result['demand']['uncertain_reason']}); its growth, "
                  f"{100 * result['demand']['trend']['growth_per_month']:.1f}% a month, is "
                  "projected as it is: give --growth to project your own")
    if not to_stdout(json_out):
        console.print(_table(result))
        console.print(_summary(result))
    if json_out:
        from grace.cli.json_out import write_json

        write_json(json_out, result)
        if not to_stdout(json_out):
            err.print(f"json: {json_out}")
    if html_out:
        from grace.cost.lifecycle_report import write_lifecycle_html

        write_lifecycle_html(result, html_out)
        err.print(f"report: {html_out}")


def money(v: float) -> str:
    """Dollars short enough for a table cell: ``$264.7M``, ``$1.3B``, ``$52,300``."""
    for size, unit in ((1e9, "B"), (1e6, "M")):
        if abs(v) >= size:
            return f"${v / size:,.1f}{unit}"
    return f"${v:,.0f}"


def _summary(result: dict[str, Any]) -> str:
    d = result["demand"]
    lines = [f"demand grows {100 * d['trend']['growth_per_month']:.1f}% a month "
             f"({d['trend']['method']}); "
             + ("uncertain: " if d["uncertain"] else "steady: ") + d["uncertain_reason"]]
    owned = ", ".join(f"{o['count']} x {o['model']} aged {o['age_months']:g} months"
                      for o in result["inputs"]["owned"]) or "nothing"
    lines.append(f"owned today: {owned} ({result['inputs']['owned_source']})")
    cross = result["demand_crosses_owned_capacity_month"]
    lines.append("demand stays within owned capacity" if cross is None else
                 f"demand crosses owned capacity in month {cross}")
    for g in result["retirement"]["generations"]:
        when = g["retire_month"]
        lines.append(f"{g['count']} x {g['model']}: " + (
            "keep (cheaper per useful GPU-hour than new all horizon)" if when is None else
            f"retire or repurpose in month {when}"))
    cash = result["cash"]["cumulative_usd_by_month"]
    lines.append(f"cash spent over {len(cash)} months: ${cash[-1]:,.0f}")
    return "\n".join(lines)


def _table(result: dict[str, Any], width: int | None = None) -> RenderableType:
    """One row per tranche: when needed, ordered, delivered; size; the three costs."""
    def usd(o: dict[str, Any] | None) -> str:
        return "-" if o is None else money(o["total_usd"])

    rows: list[list[Cell]] = []
    for tr in result["tranches"]:
        o = tr["options"]
        rows.append([str(tr["tranche"]), str(tr["crossing_month"]), str(tr["order_month"]),
                     str(tr["delivered_month"]), str(tr["gpus"]), tr["choice"],
                     usd(o["buy"]), usd(o["lease"]), usd(o["cloud-1y"])])
    i = result["inputs"]
    return fit_table(
        [Column("#", justify="right"), Column("needed", justify="right"),
         Column("order", justify="right"), Column("arrive", justify="right"),
         Column("GPUs", justify="right"), Column("choice", Fit.WRAP, min_width=5),
         Column("buy", justify="right"), Column("lease", justify="right"),
         Column("cloud 1y", justify="right")], rows, width or console.width,
        title=f"{i['gpu']} tranches over {i['months']} months (lead time "
              f"{i['lead_time_months']} months)",
        caption="needed/order/arrive: plan months (0 = now); costs to the horizon's end")
