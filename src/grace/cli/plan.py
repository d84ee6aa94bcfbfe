"""``grace plan``: own, colocate, rent or mix? A table, JSON and an HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console, RenderableType

from grace.cli.fit import Cell, Column, Fit, fit_table
from grace.cli.json_out import check_html_out, check_json_out, to_stdout
from grace.cli.numbers import MAX_GPUS, finite, refuse_non_finite
from grace.spec.errors import SpecError

if TYPE_CHECKING:
    from grace.cost.site import SiteSpec

console = Console()
err = Console(stderr=True)


def _usd(v: float | None) -> str:
    return "-" if v is None else f"${v:,.0f}"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"${v:.2f}"


def check_utilization(value: float | None) -> float | None:
    """Utilization is a fraction: 0.6 means 60%. A number above 1 is refused, not guessed at."""
    if value is None:
        return None
    refuse_non_finite(value, "--utilization")
    if value > 1.0:
        raise typer.BadParameter(
            f"{value:g} is above 1: utilization is a fraction of time the GPUs do useful work; "
            f"write {value / 100:g} for {value:g}%", param_hint="--utilization")
    if value <= 0.0:
        raise typer.BadParameter("must be more than 0 (a fraction, 0.6 for 60%)",
                                 param_hint="--utilization")
    return value


def plan(
    gpus: float = typer.Option(..., "--gpus", min=1, max=MAX_GPUS, callback=finite,
                              help="GPUs the workload keeps busy at peak"),
    gpu: str = typer.Option(..., "--gpu", help="GPU model (a name from `grace gpus`)"),
    utilization: float | None = typer.Option(
        None, "--utilization", callback=check_utilization,
        help="average share of the GPUs doing useful work, a fraction in (0, 1]: 0.6 = 60%"),
    months: int | None = typer.Option(
        None, "--months", min=1,
        help="how long the workload lasts (with --trace: repeat the trace's months to this)"),
    trace: Path | None = typer.Option(
        None, "--trace", help="take each month's useful GPU-hours from this job trace "
                              "instead of --utilization"),
    fmt: str = typer.Option("philly", "--format", help="with --trace: the trace's format"),
    columns: str | None = typer.Option(None, "--columns", help="with --format csv: column map"),
    prices: Path | None = typer.Option(None, "--prices", help="YAML overriding the price book"),
    cloud: str = typer.Option("hyperscaler", "--cloud",
                              help="whose offers the cloud options use (a key under clouds:)"),
    egress_gb: float = typer.Option(0.0, "--egress-gb-per-month", callback=finite, min=0.0,
                                    help="data moved out of the cloud each month, GB"),
    json_out: Path | None = typer.Option(
        None, "--json", callback=check_json_out,
        help="write the plan as JSON here (- : to stdout, without the tables)"),
    html_out: Path | None = typer.Option(
        None, "--html", callback=check_html_out, help="write an HTML report here"),
    site_kw: float | None = typer.Option(
        None, "--site-kw", callback=finite, min=0.001,
        help="IT power the site can feed, kW: on-prem (and the hybrid's owned part) is "
             "refused if its nodes do not fit"),
    cooling_kw: float | None = typer.Option(
        None, "--cooling-kw", callback=finite, min=0.001, help="with --site-kw: heat the site can remove, kW "
                                              "(default: --site-kw)"),
    rack_kw: float | None = typer.Option(
        None, "--rack-kw", callback=finite, min=0.001, help="with --site-kw: power per rack, kW "
                                           "(default: the price book's site.rack_kw)"),
    floor_kg_per_m2: float | None = typer.Option(
        None, "--floor-kg-per-m2", callback=finite, min=0.001,
        help="with --site-kw: the floor's load rating (default: site.floor_kg_per_m2)"),
) -> None:
    """Compare on-prem, colo, cloud (on-demand, 1-year, 3-year) and hybrid for one workload."""
    from grace.cost.plan import plan as make_plan
    from grace.cost.pricebook import load_pricebook
    from grace.cost.workload import Workload

    if (trace is None) == (utilization is None):
        raise typer.BadParameter("give --utilization (with --months) or --trace, not both",
                                 param_hint="--utilization / --trace")
    if trace is None and months is None:
        raise typer.BadParameter("how long? give --months", param_hint="--months")
    site = _site_spec(site_kw, cooling_kw, rack_kw, floor_kg_per_m2)
    try:
        book = load_pricebook(prices)
        book.offers(gpu, cloud)
        if trace is not None:
            from grace.cost.trace_workload import trace_profile

            profile = trace_profile(trace, fmt, columns, months)
            workload = Workload.from_profile(gpus, gpu, profile, cloud, egress_gb)
        else:
            assert utilization is not None and months is not None
            workload = Workload(gpus, gpu, utilization, months, cloud, egress_gb)
        result = make_plan(workload, book, site)
        if trace is not None:
            result["inputs"]["workload"]["trace"] = {"path": str(trace), "format": fmt}
    except (SpecError, ValueError, OSError) as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(code=2) from e
    if not to_stdout(json_out):  # --json -: the JSON alone on stdout
        console.print(_table(result))
        threshold = result["owning_beats_renting_above_utilization"]
        unclamped = result["owning_beats_renting_above_utilization_unclamped"]["on-prem"]
        console.print("owning (on-prem) beats renting on demand above "
                      + (f"[bold]{100 * threshold:.1f}%[/bold] utilization"
                         if threshold is not None else
                         f"[bold]no utilization[/bold] (it would need {100 * unclamped:.0f}%)"))
        console.print(_sensitivity_table(result["sensitivity"][:8]))
        import textwrap

        for line in summary_lines(result):  # wrapped by hand: a hanging indent reads as a block
            indent = " " * (len(line) - len(line.lstrip(" -")) + 2)
            console.print(textwrap.fill(line, width=console.width, subsequent_indent=indent,
                                        break_on_hyphens=False), markup=False,
                          highlight=False, soft_wrap=True)
    if json_out:
        from grace.cli.simulate import _write_json

        _write_json(json_out, result)
        if not to_stdout(json_out):
            err.print(f"json: {json_out}")
    if html_out:
        from grace.cost.report import write_plan_html

        write_plan_html(result, html_out)
        err.print(f"report: {html_out}")


def _site_spec(site_kw: float | None, cooling_kw: float | None, rack_kw: float | None,
               floor_kg_per_m2: float | None) -> SiteSpec | None:
    """The site the user described, or None (no site check) without ``--site-kw``."""
    from grace.cost.site import SiteSpec

    if site_kw is None:
        given = [flag for flag, v in (("--cooling-kw", cooling_kw), ("--rack-kw", rack_kw),
                                      ("--floor-kg-per-m2", floor_kg_per_m2)) if v is not None]
        if given:
            raise typer.BadParameter(f"{', '.join(given)} describe a site: give its power "
                                     f"with --site-kw too", param_hint="--site-kw")
        return None
    return SiteSpec(site_kw, cooling_kw, rack_kw, floor_kg_per_m2)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _site_lines(site: dict[str, Any]) -> list[str]:
    """The site block: draw and its range, nodes that fit and in boxes, racks, floor."""
    verdict = "fits" if site["feasible"] else "REFUSED for on-prem"
    lines = [
        f"site: {verdict}. {_plural(site['nodes_needed'], 'node')} draw {site['draw_kw']:.1f} kW "
        f"({site['draw_kw_low']:.1f}-{site['draw_kw_high']:.1f} kW by node_power_overhead "
        f"{site['node_power_overhead_low']:g}-{site['node_power_overhead_high']:g}); the site "
        f"feeds {site['site_kw']:g} kW and cools {site['cooling_kw']:g} kW"]
    if site["nodes_per_rack"] < 1:
        lines.append(f"  racks: no rack can hold one node ({site['rack_kw']:g} kW, "
                     f"{site['rack_units']:g}U, floor {site['floor_kg_per_m2']:,.0f} kg/m2); "
                     f"all {site['nodes_needed']} stay in boxes")
    else:
        lines.append(
            f"  nodes: {site['nodes_fit']} fit, {site['nodes_in_boxes']} in boxes; "
            f"{_plural(site['racks'], 'rack')} of up to {site['nodes_per_rack']} nodes "
            f"({site['rack_kw']:g} kW, {site['rack_units']:g}U); fullest rack "
            f"{site['rack_weight_kg']:,.0f} kg = {site['floor_load_kg_per_m2']:,.0f} kg/m2 "
            f"(floor {site['floor_kg_per_m2']:,.0f})")
    if not site["feasible"]:
        lines.append(f"  why: {site['reason']}")
    hybrid = site.get("hybrid")
    if hybrid is not None and not hybrid["feasible"]:
        lines.append(f"  hybrid ({hybrid['gpus']:g} owned GPUs) refused too: {hybrid['reason']}")
    return lines


def summary_lines(result: dict[str, Any]) -> list[str]:
    """What goes under the tables: the site block (with --site-kw), staffing in one line,
    and each rule of thumb against the plan (console.print wraps them to its width)."""
    lines = _site_lines(result["site"]) if "site" in result else []
    st = result["staffing"]
    lines.append(
        f"staffing: {st['fte']:.2f} FTE for {st['gpus']:g} GPUs (1 per {st['gpus_per_fte']:g} "
        f"GPUs, at least {st['min_fte']:g}) = {_usd(st['usd_per_month'])}/month; the seed's "
        f"0.5 per 32 GPUs: {st['fte_by_seed_rule']:.2f} FTE")
    lines.append("rules of thumb (the seeds) against this plan, whose figures are: "
                 f"{result['rules_of_thumb_basis']}")
    for r in result["rules_of_thumb"]:
        mark = {True: "agrees", False: "DIFFERS", None: "no call"}[r["agrees"]]
        lines.append(f"- [{mark}] {r['rule']}. Seed: {r['says']}. Plan: {r['plan_says']}. "
                     f"Why: {r['reason']}.")
    return lines


def _table(result: dict[str, Any], width: int | None = None) -> RenderableType:
    """The options, figures whole and a note wrapped, in ``width`` (the console's) cells."""
    w = result["inputs"]["workload"]
    rows: list[list[Cell]] = []
    for o in result["options"]:
        name = o["name"] + (" *" if o["name"] == result["cheapest"] else "")
        be = o["breakeven_month"]
        rows.append([name, _usd(o["total_usd"]), _rate(o["usd_per_useful_gpu_hour"]),
                     "-" if be is None else str(be), o["note"]])
    return fit_table(
        [Column("option"), Column("total", justify="right"),
         Column("$/useful GPU-h", justify="right"), Column("breakeven", justify="right"),
         Column("note", Fit.WRAP, min_width=16)], rows, width or console.width,
        title=f"{w['gpus']:g} x {w['gpu']} at {100 * w['utilization']:.0f}% for "
              f"{w['months']} months ({w['useful_gpu_hours']:,.0f} useful GPU-h)",
        caption="* cheapest; breakeven: the first month owning costs less than renting the "
                "same hours on demand")


def _sensitivity_table(rows: list[dict[str, Any]], width: int | None = None) -> RenderableType:
    """Each input's low, base and high value and the utilization above which owning beats
    renting at its low and its high: every figure whole, the input's name wrapped."""
    body: list[list[Cell]] = [
        [r["input"], f"{r['low']:g}", f"{r['value']:g}", f"{r['high']:g}",
         f"{100 * r['owning_beats_renting_above_utilization_at_low']:.1f}%",
         f"{100 * r['owning_beats_renting_above_utilization_at_high']:.1f}%"] for r in rows]
    return fit_table(
        [Column("input", Fit.WRAP, min_width=14, weight=2),
         *(Column(c, justify="right") for c in ("low", "value", "high", "owning at low",
                                                 "at high"))],
        body, width or console.width,
        title="What moves the owning-vs-renting utilization most",
        caption="owning at low / at high: owning beats renting above this utilization with "
                "the input at its low / high value")
