"""``grace slurm-import``: a Slurm cluster as a Grace cluster file.

It writes the cluster a Slurm installation reports as a
ClusterSpec file, so it can be read, edited (GPU models Slurm does not know,
say) and given to ``grace up --backend slurm --cluster FILE`` or to the twin.
"""

from __future__ import annotations

from pathlib import Path

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
