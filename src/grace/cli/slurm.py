"""``grace slurm-import`` and the ``--backend`` option of ``grace up``.

``slurm-import`` writes the cluster a Slurm installation reports as a
ClusterSpec file, so it can be read, edited (GPU models Slurm does not know,
say) and given to ``grace up --backend slurm --cluster FILE`` or to the twin.

``grace up``'s own options live in ``cli/client.py``; ``with_backend_options``
adds ``--backend``, ``--slurm-partition`` and ``--default-gpu`` in front of it
without forking it, so an option added there keeps working here. They reach
the server through the environment (``GRACE_BACKEND`` ...), which is also how
a deployment sets them without the CLI.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console

from grace.backends.slurm_cli import SlurmCli, SlurmError
from grace.backends.slurm_inventory import DEFAULT_GPU, cluster_spec, read_nodes, read_topology

console = Console()
err = Console(stderr=True)


def slurm_import(
    out: Path = typer.Option(Path("cluster.yaml"), "--out", help="where to write the ClusterSpec"),
    name: str = typer.Option("slurm", "--name", help="the cluster's name in Grace"),
    default_gpu: str = typer.Option(DEFAULT_GPU, "--default-gpu",
                                    help="GPU model for a GRES without a type (gpu:8)"),
    partition: str | None = typer.Option(None, "--partition", help="only this partition's nodes"),
) -> None:
    """Write the Slurm cluster (nodes, GPUs, switch tree) as a Grace cluster file."""
    cli = SlurmCli()
    try:
        nodes, switches = read_nodes(cli), read_topology(cli)
        spec = cluster_spec(nodes, switches, name, default_gpu, partition)
    except (SlurmError, ValueError) as e:
        err.print(f"[red]cannot import[/red] {e}")
        raise typer.Exit(code=1) from e
    leaves = [s for s in switches if s.level == 0]
    header = [f"# Imported from Slurm by `grace slurm-import`: {len(nodes)} nodes, "
              f"{spec.total_gpus} GPUs, {len(leaves)} leaf switches.",
              "# One node group per leaf switch; GPUs without a GRES type are "
              f"{default_gpu} (--default-gpu)."]
    for n in nodes:
        where = ",".join(n.partitions) or "-"
        state = "+".join([n.state, *sorted(n.flags)])
        header.append(f"#   {n.name}: partitions {where}, {state}" + (f" ({n.reason})" if n.reason else ""))
    body = yaml.safe_dump({"kind": "cluster", **spec.model_dump(mode="json", exclude_defaults=True)},
                          sort_keys=False)
    out.write_text("\n".join(header) + "\n" + body)
    console.print(f"[green]wrote[/green] {out}: cluster {spec.name!r}, {spec.total_nodes} nodes, "
                  f"{spec.total_gpus} GPUs, groups {[g.name for g in spec.node_groups]}")


def with_backend_options(up: Callable[..., None]) -> Callable[..., None]:
    """``up`` with ``--backend``/``--slurm-partition``/``--default-gpu`` and an optional ``--cluster``."""
    sig = inspect.signature(up)
    params = [p.replace(default=typer.Option(None, "--cluster", help=(
        "cluster YAML (default: examples/clusters/lab.yaml; with --backend slurm, "
        "what Slurm reports)"))) if p.name == "cluster" else p for p in sig.parameters.values()]
    extra = [
        inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                          default=typer.Option("local", "--backend", help="local | slurm")),
        inspect.Parameter("slurm_partition", inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                          default=typer.Option(None, "--slurm-partition",
                                               help="with slurm: submit to and import this partition")),
        inspect.Parameter("default_gpu", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                          default=typer.Option(DEFAULT_GPU, "--default-gpu",
                                               help="with slurm: model of GPUs without a GRES type")),
    ]

    @functools.wraps(up)
    def wrapped(*args: Any, backend: str = "local", slurm_partition: str | None = None,
                default_gpu: str = DEFAULT_GPU, **kwargs: Any) -> None:
        if backend not in ("local", "slurm"):
            err.print(f"[red]invalid[/red] --backend {backend!r}: use local or slurm")
            raise typer.Exit(code=2)
        os.environ["GRACE_BACKEND"] = backend
        if slurm_partition:
            os.environ["GRACE_SLURM_PARTITION"] = slurm_partition
        os.environ["GRACE_SLURM_DEFAULT_GPU"] = default_gpu
        try:
            up(*args, **kwargs)
        except SlurmError as e:  # no slurmctld, no client tools: say so, not a traceback
            err.print(f"[red]slurm[/red] {e}")
            raise typer.Exit(code=2) from e

    wrapped.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[*[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params], *extra])
    return wrapped
