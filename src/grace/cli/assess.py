"""``grace assess``: has this team reached the point where its own cluster pays?

Reads a history (a sacct export, a job CSV, Grace's own store, a cloud bill or a
public trace), judges the seeds' six indicators on it (``grace.cost.assess``) and
prints them, the verdict with its dollar figure and the workload-class table;
``--json`` and ``--html`` write the same answer for a script or a reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console, RenderableType

from grace.cli.fit import Cell, Column, Fit, fit_table
from grace.cli.json_out import check_html_out, check_json_out, to_stdout, write_json
from grace.cli.numbers import whole_gpus

if TYPE_CHECKING:
    from grace.cost.history import History

console = Console()
err = Console(stderr=True)

FORMATS = ("sacct", "csv", "grace", "cloud-bill", "philly", "chronus", "tiresias", "openb")
CLASSIFICATIONS = ("public", "internal", "confidential", "regulated")


class _Refused(Exception):
    """A user-fixable problem with one flag: printed as one red line, exit 2."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag


def _flagged(flag: str, e: BaseException) -> _Refused:
    text = " ".join(str(e).split())
    return _Refused(flag, text if text.startswith("--") else f"{flag}: {text}")


def _read_scaling(path: Path | None) -> dict[str, Any] | None:
    """The JSON ``grace bench scaling --json`` wrote, or a refusal naming --scaling."""
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise _Refused("--scaling", f"--scaling: cannot read {path} ({e.strerror or e}); give "
                                    "the file `grace bench scaling --json FILE` wrote") from e
    except ValueError as e:
        raise _Refused("--scaling", f"--scaling: {path} is not JSON ({e}); give the file "
                                    "`grace bench scaling --json FILE` wrote") from e
    if not isinstance(data, dict):
        raise _Refused("--scaling", f"--scaling: {path} holds a JSON {type(data).__name__}, "
                                    "not the object `grace bench scaling --json` writes")
    return data


def assess(
    history_path: str = typer.Option(
        ..., "--history", help="the history: a file, or with --format grace a database URL "
                               "or the store's SQLite file"),
    fmt: str = typer.Option(
        "sacct", "--format", help=f"what the history is: {', '.join(FORMATS)}"),
    columns: str | None = typer.Option(
        None, "--columns", help="csv: role=Column map (submit=Submit,duration=Elapsed,gpus=NGPU"
                                ",...); sacct and cloud-bill: rename a column (cost_usd=Cost)"),
    gpu: str = typer.Option("H100-SXM", "--gpu", help="GPU model a cluster would be built of"),
    cloud: str = typer.Option("hyperscaler", "--cloud",
                              help="whose cloud offers to price renting with (clouds: key)"),
    gpus: float | None = typer.Option(
        None, "--gpus", callback=whole_gpus, help="cluster size to judge against (default: sized from the "
                                    "history's demand)"),
    gpus_per_node: int = typer.Option(
        8, "--gpus-per-node", min=1, max=72,
        help="GPUs per node, to count nodes where the history does not record them"),
    scaling: Path | None = typer.Option(
        None, "--scaling", help="`grace bench scaling --json` output: scaling efficiency"),
    data_classification: str | None = typer.Option(
        None, "--data-classification",
        help=f"the most sensitive data training touches: {', '.join(CLASSIFICATIONS)}"),
    prices: Path | None = typer.Option(None, "--prices", help="YAML overriding the price book"),
    json_out: Path | None = typer.Option(
        None, "--json", callback=check_json_out,
        help="write the assessment as JSON here (- : to stdout, no tables)"),
    html_out: Path | None = typer.Option(
        None, "--html", callback=check_html_out, help="write an HTML report here"),
) -> None:
    """Judge a team's history against the six signs that owning GPUs pays, with the dollars."""
    try:
        result = _run(history_path, fmt, columns, gpu, cloud, gpus, gpus_per_node, scaling,
                      data_classification, prices)
    except _Refused as e:
        err.print(f"[red]error[/red] {e}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None
    for warning in result.get("warnings", []):
        err.print(f"[yellow]warning[/yellow] {warning}", highlight=False)
    if not to_stdout(json_out):
        print_assessment(result)
    if json_out:
        write_json(json_out, result)
        if not to_stdout(json_out):
            err.print(f"json: {json_out}")
    if html_out:
        from grace.cost.assess_report import write_assess_html

        write_assess_html(result, html_out)
        err.print(f"report: {html_out}")


def _run(history_path: str, fmt: str, columns: str | None, gpu: str, cloud: str,
         gpus: float | None, gpus_per_node: int, scaling: Path | None,
         data_classification: str | None, prices: Path | None) -> dict[str, Any]:
    """Load, check and judge; every user-fixable problem is a ``_Refused`` naming its flag."""
    from grace.cost.assess import AssessInputs, DataClassification
    from grace.cost.assess import assess as judge
    from grace.cost.history import load_history, parse_format
    from grace.cost.pricebook import load_pricebook
    from grace.spec.errors import SpecError

    try:
        kind = parse_format(fmt)
    except ValueError as e:
        raise _flagged("--format", e) from e
    classification = None
    if data_classification is not None:
        try:
            classification = DataClassification(data_classification.strip().lower())
        except ValueError as e:
            raise _Refused("--data-classification",
                           f"--data-classification: {data_classification!r} is not one of "
                           f"{', '.join(CLASSIFICATIONS)}") from e
    try:
        book = load_pricebook(prices)
    except (SpecError, ValueError, OSError) as e:
        raise _flagged("--prices", e) from e
    try:
        book.gpu(gpu)
    except ValueError as e:
        raise _flagged("--gpu", e) from e
    try:
        book.offers(gpu, cloud)
    except ValueError as e:
        raise _flagged("--cloud", e) from e
    scaling_data = _read_scaling(scaling)
    try:
        history = load_history(history_path, kind, columns, gpus_per_node=gpus_per_node)
    except ValueError as e:
        flag = "--columns" if str(e).startswith("--columns") else "--history"
        raise _flagged(flag, e) from e
    except OSError as e:
        raise _Refused("--history", f"--history: cannot read {history_path} "
                                    f"({e.strerror or e})") from e
    err.print(history.summary(), highlight=False, markup=False)
    if not history.jobs and not history.usage:
        fix = ("the file has no rows after its header" if history.rows == 0 else
               "every row was skipped (reasons above); check --format and --columns")
        raise _Refused("--history", f"--history: no usable rows in {history_path}: {fix}")
    inputs = AssessInputs(gpu=gpu, cloud=cloud, gpus=gpus, scaling=scaling_data,
                          data_classification=classification)
    try:
        result = judge(history, inputs, book)
    except (SpecError, ValueError) as e:
        raise _flagged("--scaling" if str(e).startswith("scaling") else "--history", e) from e
    result.setdefault("inputs", {})["history"] = history_echo(history, history_path)
    return result


def history_echo(history: History, path: str) -> dict[str, Any]:
    """What was read, echoed in the JSON: the source, its format, what was skipped, and its
    GPU-hours by 730-hour month (the report's plot; they sum to ``gpu_hours``)."""
    from grace.cost.history import DAY_S, MONTH_S

    return {"path": path, "format": history.format.value, "rows": history.rows,
            "jobs": len(history.jobs), "bill_lines": len(history.usage),
            "skipped": dict(history.skipped), "gpus_per_node": history.gpus_per_node,
            "origin_epoch_s": history.origin_epoch_s, "span_days": history.span_s / DAY_S,
            "gpu_hours": history.gpu_hours, "hours_per_month": MONTH_S / 3600.0,
            "billed_usd": sum(u.cost_usd for u in history.usage),
            "gpu_hours_by_month": history.gpu_hours_by_period(MONTH_S)}


# ------------------------------------------------------------------ tables
def _met(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def indicators_table(result: dict[str, Any], width: int | None = None) -> RenderableType:
    """The six indicators: name, met (yes/no/unknown), evidence wrapped in its column."""
    rows: list[list[Cell]] = [[i["name"], _met(i["met"]), i["evidence"]]
                              for i in result["indicators"]]
    return fit_table(
        [Column("indicator"), Column("met"),
         Column("evidence", Fit.WRAP, min_width=24, weight=3)],
        rows, width or console.width,
        title=f"{result['met_count']} of {len(result['indicators'])} indicators met, "
              f"{result['unknown_count']} unknown")


def _usd(v: Any) -> str:
    return f"${v:,.0f}" if isinstance(v, int | float) else "-"


def classes_table(result: dict[str, Any], width: int | None = None) -> RenderableType:
    """Each workload class (and run length, where the class is split by it): jobs, GPU-hours,
    share, where it should run and its $/month there; the reason wrapped beside it."""
    rows: list[list[Cell]] = []
    for c in result["placement_by_class"]:
        per_month = c.get("usd_per_month") or {}
        runtime = c.get("runtime")
        label = str(c["class"]) + (f"\n{runtime}" if runtime and runtime != "any" else "")
        rows.append([label, f"{c['jobs']:,}", f"{c['gpu_hours']:,.0f}",
                     f"{100 * c['share']:.0f}%", str(c["runs_on"]),
                     _usd(per_month.get(c["runs_on"])), str(c.get("why_short") or c.get("why", ""))])
    return fit_table(
        [Column("class"), Column("jobs", justify="right"), Column("GPU-h", justify="right"),
         Column("share", justify="right"), Column("runs on"),
         Column("$/month", justify="right"), Column("why", Fit.WRAP, min_width=16)],
        rows, width or console.width, title="Where each workload class should run",
        caption="$/month: the class's monthly cost where it runs; every option's cost and "
                "the whole reason are in the JSON (why) and the HTML report")


def verdict_line(result: dict[str, Any]) -> str:
    """The verdict, in the seeds' words, as the judging code wrote it (figures included)."""
    return str(result["verdict"])


def print_assessment(result: dict[str, Any], out: Console | None = None) -> None:
    """The indicators table, the verdict line and the class table, at ``out``'s width."""
    out = out or console
    out.print(indicators_table(result, out.width))
    style = {"past-the-point": "bold green", "on-the-edge": "bold yellow"}.get(
        result.get("verdict_level", ""), "bold")
    out.print(verdict_line(result), style=style, highlight=False)
    if result.get("placement_by_class"):
        out.print(classes_table(result, out.width))
