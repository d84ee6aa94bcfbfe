"""``grace``: the single command-line entry point."""

from __future__ import annotations

import typer

from grace.cli.catalog import gpus, policies
from grace.cli.demo import demo
from grace.cli.simulate import compare, simulate
from grace.cli.validate import validate
from grace.cli.whatif import whatif

app = typer.Typer(
    name="grace",
    help="Grace: control plane and digital twin of a private GPU training cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(validate)
app.command()(gpus)
app.command()(policies)

app.command()(demo)
app.command()(simulate)
app.command()(compare)
app.command()(whatif)


if __name__ == "__main__":
    app()
