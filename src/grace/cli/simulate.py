"""``grace simulate`` and ``grace compare``: replay a trace through the policy engine."""

from __future__ import annotations

import time
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, RenderableType
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from typer.core import TyperCommand

from grace.cli.fit import Column, Fit, fit_table
from grace.cli.json_out import to_stdout, write_json
from grace.core.checkpoint import LLAMA3_GPU_MTBF_H
from grace.core.checkpoint_stagger import CheckpointPhasing
from grace.core.policies import DEFAULT_POLICY, get_policy
from grace.sim.cluster_variants import parse_percents, variant_label
from grace.sim.clusters import load_topology
from grace.sim.estimates import EstimateModel, parse_estimate_model
from grace.sim.failures import FailureModel
from grace.sim.metrics import SimResult
from grace.sim.parallel import ReplayRun, replay_many
from grace.sim.report import SUMMARY_FIELDS, fmt_value, write_html
from grace.sim.runner import ReplayInput, load_input, replay
from grace.sim.slurm_sweep import SweepTask
from grace.spec.bursting import BurstingSpec
from grace.spec.errors import SpecError

console = Console()
err = Console(stderr=True)

ClusterOpt = typer.Option(..., "--cluster", help="cluster YAML (or, with --format openb, the node list CSV)")
TraceOpt = typer.Option(..., "--trace", help="job trace file")
FormatOpt = typer.Option("philly", "--format",
                         help="philly | openb | csv | chronus | tiresias | pollux")
ProfilesOpt = typer.Option(
    None, "--profiles",
    help="for --format pollux: the app-profiles/ folder (per-model throughput and efficiency)")
RoundOpt = typer.Option(None, "--round-s", min=1.0,
                        help="act on arrivals and freed GPUs only every N seconds (rounds), "
                             "e.g. 60 as Pollux's simulator does; default: at every event")
PerJobOpt = typer.Option(False, "--per-job",
                         help="add per_job (each trace job's name -> JCT in seconds) to the JSON")
ElasticOpt = typer.Option(False, "--elastic",
                          help="for --format pollux: declare jobs elastic (1 to 2x their GPUs)")
ColumnsOpt = typer.Option(
    None, "--columns",
    help="for --format csv: submit=COL,duration=COL,gpus=COL[,tenant=COL,limit=COL,name=COL]")
SeedOpt = typer.Option(0, "--seed", help="seed for every random choice in the run")
QuotasOpt = typer.Option(None, "--quotas", help="tenant quotas: YAML, or CSV of tenant,size shares")
JsonOpt = typer.Option(None, "--json", help="write the summary as JSON here (- : to stdout, "
                                              "without the table)")
HtmlOpt = typer.Option(None, "--html", help="write a self-contained HTML report here")
EstOpt = typer.Option(
    None, "--estimates", metavar="exact|none|user",
    help="what the scheduler is told about job lengths: user = the time limits users ask for "
         "(the trace's limit column, else a model of users; default), exact = true durations "
         "(an oracle), none = nothing. A bare --estimates means exact, as it used to")
NoEstOpt = typer.Option(False, "--no-estimates", help="the same as --estimates none")
EnforceOpt = typer.Option(
    None, "--enforce-limits/--no-enforce-limits",
    help="with --estimates user, end a job that outruns its time limit (outcome timeout), "
         "as Slurm does; --no-enforce-limits keeps the limit as an estimate only "
         "[default: enforced, except for --format pollux, whose simulator never ends a job]")


class EstimatesFlagCommand(TyperCommand):
    """A command whose ``--estimates`` takes a model name and, given bare, means ``exact``.

    ``--estimates`` used to be a flag (``--estimates/--no-estimates``); scripts that pass
    it alone keep working. Typer has no option with an optional value, so a bare
    ``--estimates`` (last, or followed by another option) becomes ``--estimates=exact``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        out = list(args)
        for i, a in enumerate(out):
            if a == "--":
                break
            if a == "--estimates" and (i + 1 == len(out) or out[i + 1].startswith("-")):
                out[i] = "--estimates=exact"
        return super().parse_args(ctx, out)


def _estimates(value: str | None, no_estimates: bool) -> EstimateModel:
    """The model the options name (default ``user``); exit 2 naming the choices if unknown."""
    if no_estimates and value is not None:
        err.print("[red]error[/red] --no-estimates and --estimates both given; "
                  "keep one (--no-estimates is --estimates none)")
        raise typer.Exit(code=2)
    if no_estimates:
        return EstimateModel.NONE
    try:
        return parse_estimate_model(value if value is not None else EstimateModel.USER)
    except ValueError as e:
        err.print(f"[red]error[/red] --estimates: {e}")
        raise typer.Exit(code=2) from e
FailOpt = typer.Option(False, "--failures/--no-failures",
                       help="inject node and job failures (Llama 3 rates unless --gpu-mtbf-h)")
MtbfOpt = typer.Option(LLAMA3_GPU_MTBF_H, "--gpu-mtbf-h", min=1.0, help="per-GPU MTBF, hours")
BurstOpt = typer.Option(None, "--bursting",
                        help="bursting YAML (kind: bursting): rent the cluster's cloud pools")
DataPathOpt = typer.Option(
    False, "--data-path/--no-data-path",
    help="model the data path: step time from compute, ring all-reduce over the placement's "
         "slowest tier and input loading, with jobs sharing spine uplinks and the file system "
         "(the cluster's storage:) and degraded links; the JSON gains a data_path section")
PhasesOpt = typer.Option(
    "start", "--checkpoint-phases", metavar="start|synchronized|staggered",
    help="with --data-path, --failures and a storage tier: when jobs checkpoint (start: an "
         "interval after each start; synchronized: all at once; staggered: Grace's policy)")
FewerOpt = typer.Option(
    None, "--fewer-nodes", metavar="PERCENT",
    help="replay on the cluster with this share of each node group's nodes taken away "
         "(e.g. 20: what if we had bought 20% fewer nodes?)")
LemonOpt = typer.Option(0.012, "--lemon-share", min=0.0, max=1.0,
                        help="share of nodes failing 10x as often (Meta HPCA'25: 1.2%)")


def _failure_model(on: bool, mtbf: float, lemons: float) -> FailureModel | None:
    return FailureModel(gpu_mtbf_h=mtbf, lemon_share=lemons) if on else None


def _load(cluster: Path, trace: Path, fmt: str, columns: str | None,
          profiles: Path | None = None, round_s: float | None = None, per_job: bool = False,
          elastic: bool = False, fewer_nodes: float = 0.0) -> ReplayInput:
    try:
        inp = load_input(cluster, trace, fmt, columns, profiles, elastic)
        inp.round_s, inp.per_job = round_s, per_job
        if fewer_nodes:
            inp = _variant(inp, cluster, fmt, fewer_nodes)
    except (SpecError, ValueError, OSError) as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(code=2) from e
    rep = inp.trace.report
    err.print(f"[dim]{rep.summary()}[/dim]")
    return inp


def _variant(inp: ReplayInput, cluster: Path, fmt: str, percent: float) -> ReplayInput:
    """``inp`` on the cluster with ``percent`` of its nodes taken away, sharing the trace."""
    return replace(inp, topo=load_topology(cluster, fmt, percent)) if percent else inp


def _percents(text: str) -> list[float]:
    try:
        return parse_percents(text)
    except ValueError as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(code=2) from e


def _seeds(text: str | None, seed: int) -> list[int]:
    """``--seeds 0,1,2`` (default: ``--seed`` alone); exit 2 naming the bad part."""
    if text is None:
        return [seed]
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.lstrip("-").isdigit() or not 0 <= int(part) < 2**32:
            err.print(f"[red]error[/red] --seeds: {part!r} is not a seed (a whole number from "
                      "0 to 4294967295); e.g. --seeds 0,1,2")
            raise typer.Exit(code=2)
        if int(part) in out:
            err.print(f"[red]error[/red] --seeds: {part} given twice; give each seed once")
            raise typer.Exit(code=2)
        out.append(int(part))
    if not out:
        err.print("[red]error[/red] --seeds: no seed given; e.g. --seeds 0,1,2")
        raise typer.Exit(code=2)
    return out


def _quotas(path: Path | None, inp: ReplayInput) -> dict | None:
    if path is None:
        return None
    from grace.sim.quotas_file import load_quotas

    try:
        return load_quotas(path, inp.topo.total_gpus)
    except SpecError as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(code=2) from e


def _bursting(path: Path | None) -> BurstingSpec | None:
    if path is None:
        return None
    from grace.spec.loader import load_bursting

    try:
        return load_bursting(path)
    except SpecError as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(code=2) from e


def _phasing(value: str) -> CheckpointPhasing:
    try:
        return CheckpointPhasing(value.strip().lower())
    except ValueError as e:
        choices = ", ".join(p.value for p in CheckpointPhasing)
        err.print(f"[red]error[/red] --checkpoint-phases: unknown {value!r}; use one of {choices}")
        raise typer.Exit(code=2) from e


def _run(inp: ReplayInput, policy: str, seed: int, quotas: dict | None,
         estimates: EstimateModel, failures: FailureModel | None = None,
         bursting: BurstingSpec | None = None, enforce_limits: bool | None = None,
         data_path: bool = False,
         phases: CheckpointPhasing = CheckpointPhasing.START) -> SimResult:
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                  TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        task = progress.add_task(f"replaying with {policy}", total=1.0)
        try:
            result = replay(inp, policy, seed, quotas, estimates,
                            progress=lambda f: progress.update(task, completed=f),
                            failures=failures, bursting=bursting, enforce_limits=enforce_limits,
                            data_path=data_path, checkpoint_phases=phases)
        except ValueError as e:  # the bursting offers do not fit the cluster's pools
            err.print(f"[red]error[/red] --bursting: {e}")
            raise typer.Exit(code=2) from e
    return result


class SweepOn(StrEnum):
    """Where ``grace compare`` runs its replays."""

    LOCAL = "local"
    SLURM = "slurm"


def _sweep_label(policy: str, seed: int, percent: float, many_seeds: bool,
                 percents: list[float] | None) -> str:
    """A replay's name in the table and the JSON: the policy, then what else varies."""
    parts = [policy]
    if many_seeds:
        parts.append(f"seed {seed}")
    if percents:
        parts.append(variant_label(percent))
    return " ".join(parts)


def _check_where(on: SweepOn, sweep_dir: Path | None, partition: str | None,
                 workers: int | None, html_out: Path | None) -> None:
    """Flags that belong to the other place a compare can run: exit 2 naming them."""
    if on is SweepOn.SLURM:
        wrong = [f for f, v in (("--workers", workers), ("--html", html_out)) if v is not None]
        fix = ("--on slurm runs one replay per array task (--html needs the replays' series, "
               "which only --on local brings back); drop them or use --on local")
    else:
        wrong = [f for f, v in (("--sweep-dir", sweep_dir), ("--partition", partition))
                 if v is not None]
        fix = "they apply to --on slurm; add it or drop them"
    if wrong:
        err.print(f"[red]error[/red] {' and '.join(wrong)} with --on {on.value}: {fix}")
        raise typer.Exit(code=2)


def _shared_flags(cluster: Path, trace: Path, fmt: str, columns: str | None,
                  quotas: Path | None, model: EstimateModel, enforce_limits: bool | None,
                  failures: bool, gpu_mtbf_h: float, lemon_share: float,
                  profiles: Path | None, round_s: float | None, per_job: bool, elastic: bool,
                  data_path: bool, phases: CheckpointPhasing) -> list[str]:
    """The ``grace simulate`` flags every replay of a compare shares, as the user gave
    them (paths as written: the array tasks start in this directory)."""
    out = ["--cluster", str(cluster), "--trace", str(trace), "--format", fmt,
           "--estimates", model.value, "--checkpoint-phases", phases.value]
    out += ["--columns", columns] if columns is not None else []
    out += ["--quotas", str(quotas)] if quotas is not None else []
    if enforce_limits is not None:
        out.append("--enforce-limits" if enforce_limits else "--no-enforce-limits")
    if failures:
        out += ["--failures", "--gpu-mtbf-h", repr(gpu_mtbf_h), "--lemon-share",
                repr(lemon_share)]
    out += ["--profiles", str(profiles)] if profiles is not None else []
    out += ["--round-s", repr(round_s)] if round_s is not None else []
    out += ["--per-job"] if per_job else []
    out += ["--elastic"] if elastic else []
    out += ["--data-path"] if data_path else []
    return out


def _on_slurm(tasks: list[SweepTask], folder: Path | None, partition: str | None,
              timeout_s: float) -> dict[str, dict[str, Any]]:
    """Submit the replays as one Slurm array, wait for it, and read the summaries back."""
    from grace.backends.slurm_cli import SlurmCli, SlurmError
    from grace.sim import slurm_sweep

    folder = folder or Path(".grace") / "sweeps" / time.strftime("%Y%m%d-%H%M%S")
    cli = SlurmCli()
    try:
        job_id = slurm_sweep.submit(cli, folder, tasks, partition=partition)
        err.print(f"submitted {len(tasks)} replays as Slurm array {job_id}; results in {folder}")
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                      TextColumn("{task.completed:.0f}/{task.total:.0f}"),
                      TimeElapsedColumn(), console=err, transient=True) as progress:
            bar = progress.add_task("array tasks done", total=len(tasks))
            try:
                slurm_sweep.wait(cli, job_id, timeout_s,
                                 lambda live: progress.update(bar, completed=len(tasks) - live))
            except KeyboardInterrupt:  # nobody will read the results: free the nodes
                cli.run("scancel", job_id, check=False)
                err.print(f"interrupted: Slurm array {job_id} cancelled")
                raise typer.Exit(code=130) from None
        summaries = slurm_sweep.gather(folder, tasks)
    except (SlurmError, TimeoutError, OSError) as e:
        err.print(f"[red]error[/red] --on slurm: {e}")
        raise typer.Exit(code=1) from e
    return {t.label: s for t, s in zip(tasks, summaries, strict=True)}


def _run_many(inp: ReplayInput | list[ReplayInput], runs: list[ReplayRun],
              workers: int | None) -> list[SimResult]:
    """Several replays of ``inp`` (in parallel unless ``workers`` is 1), one progress bar
    each; a replay's bad input ends the command with exit 2, as one replay's does."""
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                  TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        tasks = [progress.add_task(f"replaying with {r.label}", total=1.0) for r in runs]
        try:
            return replay_many(inp, runs, workers,
                               progress=lambda i, f: progress.update(tasks[i], completed=f),
                               keep_jobs=False)  # the table, JSON and HTML read no job records
        except ValueError as e:
            err.print(f"[red]error[/red] {e}")
            raise typer.Exit(code=2) from e


def _table(results: dict[str, SimResult], width: int | None = None) -> RenderableType:
    """The replays' summaries side by side (``_summary_table``)."""
    return _summary_table({name: r.summary for name, r in results.items()}, width)


def _summary_table(summaries: dict[str, dict[str, Any]],
                   width: int | None = None) -> RenderableType:
    """One row per metric, one column per replay: figures whole, a long metric label
    wrapped, several replays dealt into tables that repeat the metric where 80 columns
    cannot hold them side by side (``cli.fit``)."""
    columns = [Column("metric", Fit.WRAP, min_width=16, weight=2),
               *(Column(name, justify="right") for name in summaries)]
    rows = [[label, *(fmt_value(s.get(key, 0), how) for s in summaries.values())]
            for key, label, how in SUMMARY_FIELDS
            if any(key in s for s in summaries.values())]  # e.g. no cloud spend unless bursting
    rows += [[label, *(fmt_value(s.get("data_path", {}).get(key, 0), how)
                       for s in summaries.values())]
             for key, label, how in DATA_PATH_FIELDS
             if any("data_path" in s for s in summaries.values())]
    return fit_table(columns, rows, width or console.width, title="Replay results")


#: The rows ``--data-path`` adds (the summary's ``data_path`` section, ``sim.data_path``).
DATA_PATH_FIELDS = (
    ("comm_share", "exposed all-reduce share", "%"), ("input_wait_share", "input wait share", "%"),
    ("checkpoint_write_wait_gpu_h", "GPU-h waiting on ckpt writes", "{:,.1f}"),
    ("rerates", "contention re-rates", "{:,}"),
)


def _write_json(path: Path, payload: object) -> None:
    """To ``path``, or to stdout for ``--json -`` (``cli.json_out``)."""
    write_json(path, payload)


def _packing(cluster: Path, trace: Path, fmt: str, policy: str, seed: int, no_departures: bool,
             drop_cpu_only: bool, json_out: Path | None) -> None:
    """``--no-departures``: the openb packing experiment (``sim.packing``)."""
    from grace.sim.packing import load_packing_input, packing_experiment

    if not no_departures:
        err.print("[red]error[/red] --drop-cpu-only only applies to --no-departures "
                  "(a replay never schedules CPU-only pods); add --no-departures or drop it")
        raise typer.Exit(code=2)
    if fmt.strip().lower() != "openb":
        err.print(f"[red]error[/red] --no-departures replays the openb trace; use --format openb, "
                  f"not {fmt!r}")
        raise typer.Exit(code=2)
    try:
        inp = load_packing_input(cluster, trace, drop_cpu_only)
    except (SpecError, ValueError, OSError) as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(code=2) from e
    err.print(f"[dim]{inp.trace.report.summary()}[/dim]")
    summary = packing_experiment(inp, policy, seed)
    if not to_stdout(json_out):
        console.print_json(data={k: v for k, v in summary.items() if k != "curve"})
    if json_out:
        _write_json(json_out, summary)


def _check_policy(name: str) -> None:
    try:
        get_policy(name)
    except ValueError as e:
        err.print(f"[red]error[/red] --policy: {e}")
        raise typer.Exit(code=2) from e


def simulate(
    cluster: Path = ClusterOpt, trace: Path = TraceOpt, fmt: str = FormatOpt,
    columns: str | None = ColumnsOpt,
    policy: str = typer.Option(DEFAULT_POLICY, "--policy", help="queue policy (grace policies)"),
    seed: int = SeedOpt, quotas: Path | None = QuotasOpt, json_out: Path | None = JsonOpt,
    html_out: Path | None = HtmlOpt, estimates: str | None = EstOpt,
    no_estimates: bool = NoEstOpt, enforce_limits: bool | None = EnforceOpt,
    failures: bool = FailOpt, gpu_mtbf_h: float = MtbfOpt, lemon_share: float = LemonOpt,
    bursting: Path | None = BurstOpt,
    profiles: Path | None = ProfilesOpt, round_s: float | None = RoundOpt,
    per_job: bool = PerJobOpt, elastic: bool = ElasticOpt,
    data_path: bool = DataPathOpt, checkpoint_phases: str = PhasesOpt,
    fewer_nodes: float | None = FewerOpt,
    no_departures: bool = typer.Option(
        False, "--no-departures",
        help="openb packing experiment: pods arrive in seeded random order and never leave"),
    drop_cpu_only: bool = typer.Option(
        False, "--drop-cpu-only",
        help="with --no-departures: leave out the pods that ask for no GPU (kept by default, as "
             "FGD keeps them: their CPU and memory can strand a node's GPUs)"),
) -> None:
    """Replay a job trace on a cluster with one policy; print a table, write JSON/HTML."""
    _check_policy(policy)
    if no_departures or drop_cpu_only:
        _packing(cluster, trace, fmt, policy, seed, no_departures, drop_cpu_only, json_out)
        return
    model = _estimates(estimates, no_estimates)
    phases = _phasing(checkpoint_phases)
    burst = _bursting(bursting)
    percent = _percents(f"{fewer_nodes!r}")[0] if fewer_nodes is not None else 0.0
    inp = _load(cluster, trace, fmt, columns, profiles, round_s, per_job, elastic, percent)
    result = _run(inp, policy, seed, _quotas(quotas, inp), model,
                  _failure_model(failures, gpu_mtbf_h, lemon_share), burst, enforce_limits,
                  data_path, phases)
    if fewer_nodes is not None:  # as a compare --fewer-nodes replay records it
        result.summary["fewer_nodes_percent"] = percent
    if not to_stdout(json_out):
        console.print(_table({policy: result}))
    if json_out:
        _write_json(json_out, result.summary)
    if html_out:
        write_html({policy: result}, html_out, f"Grace twin: {inp.trace_path} on {inp.cluster_path}")
        err.print(f"report: {html_out}")


def compare(
    cluster: Path = ClusterOpt, trace: Path = TraceOpt, fmt: str = FormatOpt,
    columns: str | None = ColumnsOpt,
    policies: str = typer.Option("fifo,easy-backfill,grace", "--policies",
                                 help="comma-separated policy names"),
    seed: int = SeedOpt, quotas: Path | None = QuotasOpt, json_out: Path | None = JsonOpt,
    html_out: Path | None = HtmlOpt, estimates: str | None = EstOpt,
    no_estimates: bool = NoEstOpt, enforce_limits: bool | None = EnforceOpt,
    failures: bool = FailOpt, gpu_mtbf_h: float = MtbfOpt, lemon_share: float = LemonOpt,
    profiles: Path | None = ProfilesOpt, round_s: float | None = RoundOpt,
    per_job: bool = PerJobOpt, elastic: bool = ElasticOpt,
    data_path: bool = DataPathOpt, checkpoint_phases: str = PhasesOpt,
    workers: int | None = typer.Option(
        None, "--workers", min=1, max=256,
        help="replays at once, one process each, the trace parsed once and shared "
             "(default: one per replay, at most one per core; 1: one after another)"),
    seeds: str | None = typer.Option(
        None, "--seeds", help="replay each policy once per seed, e.g. 0,1,2 (default: --seed)"),
    fewer_nodes: str | None = typer.Option(
        None, "--fewer-nodes", metavar="PERCENTS",
        help="cluster variants: replay on the cluster with these shares of its nodes taken "
             "away too, e.g. 0,10,20,30 (0: the cluster as written)"),
    on: SweepOn = typer.Option(
        SweepOn.LOCAL, "--on",
        help="where the replays run: local cores, or one Slurm job array (each task runs "
             "grace simulate; --sweep-dir must be on a file system the nodes share)"),
    sweep_dir: Path | None = typer.Option(
        None, "--sweep-dir",
        help="with --on slurm: the folder for the array's manifest, script, logs and "
             "results (default: .grace/sweeps/DATE-TIME under this directory)"),
    partition: str | None = typer.Option(None, "--partition",
                                         help="with --on slurm: the partition to submit to"),
    timeout_s: float = typer.Option(
        24 * 3600.0, "--timeout", min=1.0, max=30 * 24 * 3600.0,
        help="with --on slurm: seconds to wait for the array before cancelling it"),
) -> None:
    """Replay one trace under several policies (and seeds, and cluster variants) side by side.

    The replays run in parallel on local cores (``sim.parallel``), or as one Slurm job
    array (``--on slurm``, ``sim.slurm_sweep``); either way the results are those the
    same replays give one after another."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names:
        err.print("[red]error[/red] --policies: no policy named; e.g. --policies fifo,grace")
        raise typer.Exit(code=2)
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        err.print(f"[red]error[/red] --policies: {', '.join(twice)} named twice; name each "
                  "policy once")
        raise typer.Exit(code=2)
    for n in names:
        _check_policy(n)
    model = _estimates(estimates, no_estimates)
    phases = _phasing(checkpoint_phases)
    seed_list = _seeds(seeds, seed)
    percents = _percents(fewer_nodes) if fewer_nodes is not None else None
    _check_where(on, sweep_dir, partition, workers, html_out)
    inp = _load(cluster, trace, fmt, columns, profiles, round_s, per_job, elastic)
    try:  # built here for --on slurm too: a variant the cluster cannot make fails before sbatch
        inputs = [_variant(inp, cluster, fmt, p) for p in (percents or [0.0])]
    except (SpecError, ValueError, OSError) as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(code=2) from e
    q = _quotas(quotas, inp)
    fm = _failure_model(failures, gpu_mtbf_h, lemon_share)
    plan = [(n, s, p) for p in (percents or [0.0]) for n in names for s in seed_list]
    labels = [_sweep_label(n, s, p, len(seed_list) > 1, percents) for n, s, p in plan]
    if on is SweepOn.SLURM:
        shared = _shared_flags(cluster, trace, fmt, columns, quotas, model, enforce_limits,
                               failures, gpu_mtbf_h, lemon_share, profiles, round_s,
                               per_job, elastic, data_path, phases)
        tasks = [SweepTask(label, ["simulate", *shared, "--policy", n, "--seed", str(s),
                                   *(["--fewer-nodes", f"{p:g}"] if percents else [])])
                 for label, (n, s, p) in zip(labels, plan, strict=True)]
        summaries = _on_slurm(tasks, sweep_dir, partition, timeout_s)
        if not to_stdout(json_out):
            console.print(_summary_table(summaries))
        if json_out:
            _write_json(json_out, summaries)
        return
    runs = [ReplayRun(label, n, s, q, model, fm, enforce_limits=enforce_limits,
                      data_path=data_path, checkpoint_phases=phases,
                      input_index=(percents or [0.0]).index(p),
                      fewer_nodes_percent=p if percents else None)
            for label, (n, s, p) in zip(labels, plan, strict=True)]
    results = dict(zip(labels, _run_many(inputs, runs, workers), strict=True))
    if not to_stdout(json_out):
        console.print(_table(results))
    if json_out:
        _write_json(json_out, {n: r.summary for n, r in results.items()})
    if html_out:
        write_html(results, html_out, f"Grace twin: {inp.trace_path} on {inp.cluster_path}")
        err.print(f"report: {html_out}")
