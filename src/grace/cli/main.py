"""``grace``: the single command-line entry point."""

from __future__ import annotations

import typer

from grace.cli.assess import assess
from grace.cli.audit import audit_command
from grace.cli.bench import bench_app
from grace.cli.catalog import gpus, policies
from grace.cli.client import cancel, drain, inject, job, jobs, logs, nodes, resume, submit, up
from grace.cli.demo import demo
from grace.cli.lifecycle import lifecycle
from grace.cli.plan import plan
from grace.cli.runbooks import alerts, runbooks
from grace.cli.showback import showback
from grace.cli.simulate import EstimatesFlagCommand, compare, simulate
from grace.cli.slurm import slurm_import
from grace.cli.sweep import sweep
from grace.cli.tokens import token_app
from grace.cli.twin_demo import twin_demo
from grace.cli.validate import validate
from grace.cli.views import history, priority, shares
from grace.cli.whatif import whatif
from grace.cli.why import why
from grace.cli.workflow import hold, release, requeue

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
app.command(name="twin-demo")(twin_demo)
app.command(name="up")(up)
app.command(name="slurm-import")(slurm_import)
app.command()(submit)
app.command()(sweep)
app.command()(jobs)
app.command()(job)
app.command()(logs)
app.command()(cancel)
app.command()(hold)
app.command()(release)
app.command()(requeue)
app.command()(nodes)
app.command()(history)
app.command()(priority)
app.command()(shares)
app.command()(drain)
app.command()(resume)
app.command()(inject)
app.command()(why)
app.command(cls=EstimatesFlagCommand)(simulate)
app.command(cls=EstimatesFlagCommand)(compare)
app.command()(whatif)
app.command()(plan)
app.command()(lifecycle)
app.command()(assess)
app.command()(showback)
app.command()(runbooks)
app.command()(alerts)
app.add_typer(token_app, name="token")
app.add_typer(bench_app, name="bench")
app.command(name="audit")(audit_command)


if __name__ == "__main__":
    app()
