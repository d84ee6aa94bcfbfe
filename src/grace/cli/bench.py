"""``grace bench net|scaling|storage``: measure the interconnect, a training script's
scaling and the file system, with JSON (``--json PATH``, ``-`` for stdout alone) and a
self-contained HTML page (``--html PATH``). Definitions and how to read the figures:
docs/bench.md. Torch, plotly and fio are loaded only by the verb that needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from grace.bench.launch import Launcher, Placement
from grace.bench.net import Backend, BenchError
from grace.cli.json_out import to_stdout, write_json

console = Console()
err = Console(stderr=True)

bench_app = typer.Typer(
    help="Measure the data path: collectives (net), a training script's scaling, storage.",
    no_args_is_help=True,
)


def _fail(e: Exception) -> typer.Exit:
    err.print(f"[red]error[/red] {e}", markup=True, highlight=False)
    return typer.Exit(code=1)


def _emit(json_out: Path | None, html_out: Path | None, payload: dict[str, Any],
          table: Any, html: Any) -> None:
    """JSON first (alone on stdout for ``-``), then the table unless ``-``, then the page."""
    if json_out is not None:
        write_json(json_out, payload)
    if not to_stdout(json_out):
        console.print(table())
    if html_out is not None:
        html(html_out)
        err.print(f"wrote {html_out}")


@bench_app.command("net")
def net(
    ranks: str = typer.Option(..., "--ranks", help="processes taking part (>= 2): a count, "
                                                 "a list 2,4,8 or a range 2..8 (powers of 2)"),
    nodes: int = typer.Option(1, "--nodes", help="nodes they span (> 1 needs --launcher slurm)"),
    sizes: str | None = typer.Option(
        None, "--sizes",
        help="message sizes: 1K..1G (every power of two) or a list 1K,1M,64M. Default 1K..1G "
             "with CUDA, 1K..64M on CPU (a 1G CPU all-reduce over 4 ranks needs ~8 GB of "
             "memory and minutes; ask for it explicitly)"),
    ops: str = typer.Option("allreduce,allgather,reducescatter", "--ops",
                            help="collectives, comma separated"),
    iters: int = typer.Option(20, "--iters", help="timed runs per size (fewer for large CPU "
                                                  "sizes: about 2 s each); the median is kept"),
    warmup: int = typer.Option(5, "--warmup", help="untimed runs per size first"),
    backend: Backend = typer.Option(Backend.AUTO, "--backend",
                                    help="auto: nccl with CUDA, else gloo"),
    launcher: Launcher = typer.Option(Launcher.LOCAL, "--launcher",
                                      help="local (processes on this host) | slurm (srun)"),
    placement: Placement = typer.Option(
        Placement.SAME_LEAF, "--placement",
        help="with slurm: same-leaf (nodes under one leaf switch) | cross-leaf (over the spine)"),
    cluster: Path | None = typer.Option(
        None, "--cluster", help="with slurm: cluster YAML whose node names are Slurm's "
                                "(default: the cluster Slurm reports, as grace up --backend slurm)"),
    json_out: Path | None = typer.Option(None, "--json", help="write JSON here (- : stdout only)"),
    html_out: Path | None = typer.Option(None, "--html", help="write a plot page here"),
) -> None:
    """Collective bandwidth (nccl-tests' algbw, busbw in GB/s = 1e9 B/s) and latency per size."""
    from grace.bench.html import net_html
    from grace.bench.net import (
        NetPlan,
        merge_reports,
        net_table,
        parse_ops,
        parse_rank_counts,
        parse_sizes,
        run_net_bench,
    )

    try:
        spec = None
        if cluster is not None:
            from grace.spec.errors import SpecError
            from grace.spec.loader import load_cluster

            try:
                spec = load_cluster(cluster)
            except (SpecError, OSError) as e:
                raise BenchError(f"--cluster {cluster}: {e}") from e
        counts = parse_rank_counts(ranks)
        plans = [NetPlan(ranks=n, nodes=nodes,
                         sizes=tuple(parse_sizes(sizes)) if sizes else None,
                         ops=tuple(parse_ops(ops)), iters=iters, warmup=warmup, backend=backend,
                         launcher=launcher.value, placement=placement.value) for n in counts]
        reports = []
        for plan in plans:  # one run per rank count, smallest first
            if len(plans) > 1:
                err.print(f"{plan.ranks} ranks", highlight=False)
            reports.append(run_net_bench(plan, cluster=spec))
        report = merge_reports(reports)
    except BenchError as e:
        raise _fail(e) from None
    _emit(json_out, html_out, report.to_json(), lambda: net_table(report, console.width),
          lambda out: net_html(report, out))


@bench_app.command("scaling")
def scaling(
    ranks: str = typer.Option("1,2,4", "--ranks", help="rank counts, e.g. 1,2,4"),
    script: Path | None = typer.Option(
        None, "--script", help="training script using grace.runtime and taking --steps and "
                               "--batch-size (default examples/train_ddp.py)"),
    steps: int = typer.Option(100, "--steps", help="steps per rank count (the first is warm-up)"),
    batch_size: int = typer.Option(16, "--batch-size", help="samples per rank per step"),
    backend: Backend = typer.Option(
        Backend.GLOO, "--backend",
        help="gloo: CPU, the script is shown no GPU; auto/nccl: nccl when CUDA is present"),
    json_out: Path | None = typer.Option(None, "--json", help="write JSON here (- : stdout only)"),
    html_out: Path | None = typer.Option(None, "--html", help="write a plot page here"),
) -> None:
    """Throughput and scaling efficiency of a DDP training script, with the phases explaining it."""
    from grace.bench.html import scaling_html
    from grace.bench.scaling import DEFAULT_SCRIPT, parse_ranks, run_scaling_bench, scaling_table

    try:
        report = run_scaling_bench(parse_ranks(ranks), script or DEFAULT_SCRIPT, steps=steps,
                                   batch_size=batch_size, backend=backend)
    except BenchError as e:
        raise _fail(e) from None
    _emit(json_out, html_out, report.to_json(), lambda: scaling_table(report, console.width),
          lambda out: scaling_html(report, out))


@bench_app.command("storage")
def storage(
    path: Path = typer.Option(..., "--path", help="directory on the file system to measure"),
    readers: int = typer.Option(4, "--readers", help="parallel readers (a data loader's workers)"),
    size: int = typer.Option(1024, "--size", help="MB of data files to write and read"),
    json_out: Path | None = typer.Option(None, "--json", help="write JSON here (- : stdout only)"),
    html_out: Path | None = typer.Option(None, "--html", help="write a plot page here"),
) -> None:
    """Dataset read and checkpoint (DCP) throughput against fio's on the same directory."""
    from grace.bench import storage as storage_mod
    from grace.bench.fio import FioError

    try:
        result = storage_mod.run_storage_bench(path, readers=readers, size_mb=size,
                                               progress=lambda msg: err.print(msg, highlight=False))
    except (storage_mod.StorageBenchError, FioError) as e:
        raise _fail(e) from None
    _emit(json_out, html_out, result.to_json(), lambda: _storage_table(result.to_json()),
          lambda out: storage_mod.storage_html(result, out))


def _storage_table(d: dict[str, Any]) -> Any:
    from grace.cli.fit import Column, fit_table

    rows = []
    for name, grace_key, fio_key in (("sequential read", "read_gbps", "fio_read_gbps"),
                                     ("sequential write", "write_gbps", "fio_write_gbps"),
                                     ("checkpoint write", "ckpt_write_gbps", "fio_write_gbps"),
                                     ("checkpoint read", "ckpt_read_gbps", "fio_read_gbps")):
        g, f = float(d.get(grace_key) or 0.0), float(d.get(fio_key) or 0.0)
        rows.append([name, f"{g:.3f}", f"{f:.3f}", f"{g / f:.0%}" if f > 0 else "-"])
    columns = [Column("pass"), Column("GB/s", justify="right"),
               Column("fio GB/s", justify="right"), Column("ratio", justify="right")]
    return fit_table(columns, rows, console.width, title=f"Storage: {d.get('path', '')}",
                     caption="GB/s = 1e9 bytes/s; ratio = Grace's pattern / fio on the same path")
