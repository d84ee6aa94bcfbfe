"""``grace validate``: check spec files before anyone submits, simulates or serves with them.

One command for every file a user writes, so a typo is found before a run, not
an hour into one: clusters, jobs, bursting configurations (``kind: bursting``),
health-table overrides (``kind: health``), admission files (``kind:
admission``: their scripts' digests checked against the files, from the working
directory as ``grace up`` reads them), runbooks (``kind: runbook``, what ``grace
runbooks --file`` reads) and price-book overrides (the
``--prices`` file of ``grace plan``, recognised by its sections since it has no
``kind``). Each kind goes through the loader its command uses, so ``ok`` here
means that command accepts the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from grace.spec.cluster import ClusterSpec
from grace.spec.errors import SpecError, SpecProblem
from grace.spec.loader import (
    detect_kind,
    load_cluster,
    parse_bursting,
    parse_cluster,
    parse_jobs,
    read_yaml,
)

console = Console()
err_console = Console(stderr=True)

#: the top-level sections of a price-book override (grace.cost.pricebook.PriceBook)
_PRICE_SECTIONS = frozenset({"owned", "clouds", "hybrid", "gpus"})


def kind_of(data: Any) -> str:
    """The loader's kind, plus ``prices``: a price-book override has no ``kind`` field,
    only price-book sections (``gpus`` as a mapping of models, where a job's is a count)."""
    if (isinstance(data, dict) and data and "kind" not in data and set(data) <= _PRICE_SECTIONS
            and isinstance(data.get("gpus", {}), dict)):
        return "prices"
    return detect_kind(data)


def _cluster(data: Any, source: str, _: ClusterSpec | None) -> str:
    spec = parse_cluster(data, source)
    return f"cluster {spec.name!r}, {spec.total_nodes} nodes, {spec.total_gpus} GPUs"


def _jobs(data: Any, source: str, _: ClusterSpec | None) -> str:
    jobs = parse_jobs(data, source)
    names = ", ".join(j.name for j in jobs[:5]) + (" ..." if len(jobs) > 5 else "")
    return f"{len(jobs)} job(s): {names}"


def _sweep(data: Any, source: str, _: ClusterSpec | None) -> str:
    from grace.spec.loader import parse_sweep

    spec = parse_sweep(data, source)
    trials = spec.expand()
    stop = spec.early_stopping.rule.value if spec.early_stopping else "no early stopping"
    return (f"sweep {spec.name!r}, {spec.search} search, {len(trials)} trial(s) of "
            f"{spec.job.gpus:g} GPU(s), {spec.max_parallel} at once, metric "
            f"{spec.metric.name} ({spec.metric.mode}), {stop}")


def _bursting(data: Any, source: str, cluster: ClusterSpec | None) -> str:
    spec = parse_bursting(data, source)
    if cluster is not None:
        problems = [SpecProblem(*line.split(": ", 1)) for line in spec.check_cluster(cluster)]
        if problems:
            raise SpecError(source, problems)
    offers = ", ".join(f"{o.name} ({o.kind}, pool {o.pool_name})" for o in spec.offers)
    fits = f"; fits cluster {cluster.name!r}" if cluster is not None else \
        " (give --cluster to check the offers against its cloud pools)"
    return f"bursting, {len(spec.offers)} offer(s): {offers or 'none'}{fits}"


def _health(data: Any, source: str, _: ClusterSpec | None) -> str:
    from grace.core.health import HealthTable

    table = HealthTable.from_dict(data, source)
    overrides = sum(1 for r in table.rules.values() if r.origin == source)
    return f"health table, {overrides} rule(s) overridden"


def _admission(data: Any, source: str, _: ClusterSpec | None) -> str:
    from grace.control.admission import Admission
    from grace.spec.loader import parse_admission

    admission = Admission(parse_admission(data, source), Path.cwd(), source)
    missing, stale = admission.file_problems()  # relative paths: from here, as grace up reads them
    if missing or stale:
        raise SpecError(source, missing + stale)
    spec = admission.spec
    return (f"admission, {len(spec.scripts)} script(s) whose digests match, "
            f"{len(spec.interpreters)} interpreter(s), interpreter-only commands: "
            f"{spec.interpreter_only}")


def _runbook(data: Any, source: str, _: ClusterSpec | None) -> str:
    from grace.observe.runbook_spec import parse_runbook

    spec = parse_runbook(data, source)
    return (f"runbook {spec.name!r}, {len(spec.rules)} rule(s): "
            + ", ".join(r.name for r in spec.rules[:5]) + (" ..." if len(spec.rules) > 5 else ""))


def _notify(data: Any, source: str, _: ClusterSpec | None) -> str:
    from grace.spec.notify import parse_notify_config

    spec = parse_notify_config(data, source)
    return (f"notify, {len(spec.allow_hosts)} allowed webhook host(s), "
            f"{len(spec.tenants)} tenant(s) with webhooks, "
            f"mail {'via ' + spec.smtp.host if spec.smtp else 'off'}")


def _prices(_: Any, source: str, __: ClusterSpec | None) -> str:
    from grace.cost.pricebook import load_pricebook

    book = load_pricebook(source)  # overlaid on the built-in book, as `grace plan` does
    return f"price-book override for `grace plan --prices` ({len(book.gpus)} GPU models priced)"


_CHECKS: dict[str, Callable[[Any, str, ClusterSpec | None], str]] = {
    "cluster": _cluster, "job": _jobs, "bursting": _bursting, "health": _health,
    "prices": _prices, "admission": _admission, "runbook": _runbook, "sweep": _sweep,
    "notify": _notify,
}


def check_file(path: Path, cluster: ClusterSpec | None = None) -> str:
    """One file's summary line, or a SpecError listing every bad field with its fix."""
    data = read_yaml(path)
    kind = kind_of(data)
    check = _CHECKS.get(kind)
    if check is None:
        raise SpecError(str(path), [SpecProblem(
            "kind", f"unknown kind {kind!r}; use one of {sorted(_CHECKS.keys() - {'prices'})}")])
    return check(data, str(path), cluster)


def validate(
    files: list[Path] = typer.Argument(
        ..., help="cluster, job, bursting, health, admission, runbook or price-book YAML files"),
    cluster: Path | None = typer.Option(
        None, "--cluster", help="check bursting files' offers against this cluster's cloud pools"),
) -> None:
    """Validate spec files of any kind; exit 1 naming each bad field and its fix."""
    failed = 0
    target: ClusterSpec | None = None
    if cluster is not None:
        try:
            target = load_cluster(cluster)
        except SpecError as e:
            err_console.print(f"[red]invalid[/red] --cluster {e}")
            raise typer.Exit(code=1) from e
    for path in files:
        try:
            console.print(f"[green]ok[/green] {path}: {check_file(path, target)}")
        except SpecError as e:
            failed += 1
            err_console.print(f"[red]invalid[/red] {e}")
    if failed:
        raise typer.Exit(code=1)
