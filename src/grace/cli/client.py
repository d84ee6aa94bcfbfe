"""The CLI over the API: ``grace submit|jobs|job|logs|cancel|nodes|drain|resume`` and ``grace up``.

The server is found through ``GRACE_URL`` (default http://127.0.0.1:8470), and
every request carries a token: ``GRACE_TOKEN``, else the file ``GRACE_TOKEN_FILE``
names, else ``.grace/admin.token`` (what ``grace up`` with its default state
directory writes on first start) when it is there. Every command prints a
readable table that fits the console, also at 80 columns and through a pipe
(``grace.cli.fit``), or JSON with ``--json``.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from grace.cli.fit import Column, Fit, duration, fit_table
from grace.cli.jobs_view import (
    DEFAULT_COLUMNS,
    FormatError,
    JobColumn,
    jobs_table,
    parse_format,
    requeued_attempts,
    shown_reason,
    wait_run,
)
from grace.cli.logs_follow import print_logs
from grace.cli.workflow import flag_fields, submitted_line
from grace.control.tls import CA_FILE_ENV, client_verify
from grace.spec.errors import SpecError
from grace.spec.loader import load_jobs

console = Console()
err = Console(stderr=True)
JsonOpt = typer.Option(False, "--json", help="print JSON for scripts")


#: Where ``grace up --state-dir .grace`` (the default) writes the first admin token.
DEFAULT_TOKEN_FILE = Path(".grace/admin.token")


def base_url() -> str:
    return os.environ.get("GRACE_URL", "http://127.0.0.1:8470").rstrip("/")


def token() -> str | None:
    """The token this CLI sends: ``GRACE_TOKEN``, ``GRACE_TOKEN_FILE``, ``.grace/admin.token``."""
    if os.environ.get("GRACE_TOKEN"):
        return os.environ["GRACE_TOKEN"].strip()
    named = os.environ.get("GRACE_TOKEN_FILE")
    path = Path(named) if named else DEFAULT_TOKEN_FILE
    try:
        return path.read_text().strip() or None
    except OSError as e:
        if named:  # asked for by name: say so, instead of a 401 later
            err.print(f"[red]error[/red] cannot read GRACE_TOKEN_FILE {named}: {e.strerror}")
            raise typer.Exit(code=2) from e
        return None


def auth_headers() -> dict[str, str]:
    found = token()
    return {"Authorization": f"Bearer {found}"} if found else {}


def tls_verify() -> ssl.SSLContext | bool:
    """How an https GRACE_URL is verified: against ``GRACE_CA_FILE`` when set, else the system."""
    try:
        return client_verify()
    except (OSError, ssl.SSLError) as e:
        err.print(f"[red]error[/red] cannot use {CA_FILE_ENV}={os.environ.get(CA_FILE_ENV)} "
                  f"({e}): name a readable PEM file of the CA that issued the server's certificate")
        raise typer.Exit(code=2) from e


def _call(method: str, path: str, **kw: Any) -> Any:
    headers = {**auth_headers(), **kw.pop("headers", {})}
    try:
        r = httpx.request(method, base_url() + path, timeout=30.0, headers=headers,
                          verify=tls_verify(), **kw)
    except httpx.HTTPError as e:
        err.print(f"[red]error[/red] cannot reach Grace at {base_url()} ({e}); start it with "
                  "`grace up` or set GRACE_URL")
        raise typer.Exit(code=3) from e
    if r.status_code >= 400:
        detail = r.json().get("detail") if r.headers.get("content-type", "").startswith(
            "application/json") else r.text
        if isinstance(detail, list):
            for p in detail:
                err.print(f"[red]invalid[/red] {p.get('field')}: {p.get('message')}")
        else:
            err.print(f"[red]error[/red] {detail}")
        raise typer.Exit(code=1)
    return r.json() if "json" in r.headers.get("content-type", "") else r.text


def up(
    cluster: Path | None = typer.Option(
        None, "--cluster", help="cluster YAML (default: examples/clusters/lab.yaml; with "
                                "--backend slurm, what Slurm reports)"),
    backend: str = typer.Option("local", "--backend", help="local | slurm"),
    slurm_partition: str | None = typer.Option(
        None, "--slurm-partition", help="with slurm: submit to and import this partition"),
    default_gpu: str = typer.Option(
        "A100-80GB", "--default-gpu", help="with slurm: model of GPUs without a GRES type"),
    db: str | None = typer.Option(None, "--db", help="database URL (default: SQLite in --state-dir)"),
    port: int = typer.Option(8470, "--port"),
    state_dir: Path = typer.Option(Path(".grace"), "--state-dir",
                                   help="job directories, logs, checkpoints, SQLite file"),
    policy: str = typer.Option("grace", "--policy"),
    heartbeat_timeout: float = typer.Option(
        30.0, "--heartbeat-timeout", min=1.0,
        help="seconds without a heartbeat before a job that sends them is declared hung"),
    straggler_window: float = typer.Option(
        30.0, "--straggler-window", min=1.0,
        help="seconds per straggler window; a node slower than its gang's median for "
             "3 windows in a row is marked degraded and the job moved off it"),
    straggler_threshold: float = typer.Option(
        0.10, "--straggler-threshold", min=0.01,
        help="how much slower than the gang median a node must be (0.10 = 10%%)"),
    bursting: Path | None = typer.Option(
        None, "--bursting",
        help="bursting YAML (kind: bursting): rent the cluster's cloud pools when owned GPUs "
             "fall behind. Its nodes, declared in the cluster file, join after each offer's "
             "provisioning delay (the local provider); a real cloud plugs in behind the "
             "CloudProvider protocol (docs/bursting.md)"),
    health: Path | None = typer.Option(
        None, "--health", help="health table overrides (kind: health; examples/health.yaml)"),
    diagnostic_command: str | None = typer.Option(
        None, "--diagnostic-command",
        help="command that diagnoses a drained node before it returns, {node} and {level} "
             "filled in, exit 0 = pass (e.g. 'srun -w {node} dcgmi diag -r {level}'); "
             "default: each level passes after its typical duration (no DCGM here)"),
    admin_token_file: Path | None = typer.Option(
        None, "--admin-token-file",
        help="where the first admin token is written (mode 0600) on first start; default: "
             "admin.token beside a SQLite store, else in the working directory"),
    allow_inject: bool = typer.Option(
        False, "--allow-inject", help="let admins inject faults (POST /jobs/N/inject)"),
    isolation: str = typer.Option(
        "auto", "--isolation",
        help="local backend: users (each tenant's own uid and a cgroup), cgroup (a cgroup "
             "each, as this user), none; auto: the strongest this host allows, and why"),
    job_uids: str | None = typer.Option(
        None, "--job-uids", help="local backend: tenants' uids, FIRST-LAST (default "
                                 "61000-61999)"),
    admission: Path | None = typer.Option(
        None, "--admission",
        help="vetted code (kind: admission; examples/admission.yaml): jobs may run only the "
             "scripts it lists, by sha256, with its interpreters; others are refused at "
             "submit, and a script changed since submit at launch. Without it every command "
             "is allowed"),
    tls_cert: Path | None = typer.Option(
        None, "--tls-cert", help="serve HTTPS with this PEM certificate (with --tls-key); "
                                 "clients verify it against GRACE_CA_FILE or the system's CAs"),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="the certificate's PEM private key"),
    kms: str | None = typer.Option(
        None, "--kms",
        help="what wraps each job's checkpoint data key: keyfile:PATH (a 32-byte key, base64, "
             "mode 0600); default keyfile:<state-dir>/kek.key, made on first start. Every "
             "job's checkpoints are encrypted (docs/security.md)"),
    runbook: Path | None = typer.Option(
        None, "--runbook", help="alert rules (kind: runbook) for /alerts and the dashboard; "
                                "default: the shipped ones (grace runbooks, docs/runbooks.md)"),
    metrics_refresh_s: float = typer.Option(
        10.0, "--metrics-refresh-s", min=0.5, max=3600.0,
        help="/metrics figures are at most this many seconds old (it renders in the "
             "background, so a scrape never waits)"),
    notify: Path | None = typer.Option(
        None, "--notify", help="notifications (kind: notify): the hosts job webhooks may "
                               "call, per-tenant webhooks, an SMTP relay; without it job "
                               "webhooks and mail are refused (docs/notifications.md)"),
) -> None:
    """Run the control plane: API, reconciler and a backend (local processes or Slurm).

    One leads per store: on PostgreSQL a second ``grace up`` stands by (read-only API)
    and takes over when the leader's lease expires; on SQLite it is refused (exit 1).
    """
    from rich.markup import escape

    from grace.backends.slurm_cli import SlurmError
    from grace.control.kms import KMSError
    from grace.control.server import ServerConfig, StoreInUse, TokenFileInTheWay, serve

    if backend not in ("local", "slurm"):
        err.print(f"[red]invalid[/red] --backend {backend!r}: use local or slurm")
        raise typer.Exit(code=2)
    from grace.backends.isolation import Isolation, IsolationError
    from grace.control.server import parse_uid_range

    if isolation not in {i.value for i in Isolation}:
        err.print(f"[red]invalid[/red] --isolation {isolation!r}: use one of "
                  f"{', '.join(i.value for i in Isolation)}")
        raise typer.Exit(code=2)
    try:
        if job_uids:
            parse_uid_range(job_uids)
    except ValueError as e:
        err.print(f"[red]invalid[/red] {e}")
        raise typer.Exit(code=2) from e
    try:
        serve(ServerConfig(cluster, db, port, state_dir, policy, backend=backend,
                           slurm_partition=slurm_partition, slurm_default_gpu=default_gpu,
                           heartbeat_timeout_s=heartbeat_timeout,
                           straggler_window_s=straggler_window,
                           straggler_threshold=straggler_threshold, bursting=bursting,
                           health=health, diagnostic_command=diagnostic_command,
                           admin_token_file=admin_token_file, allow_inject=allow_inject,
                           isolation=isolation, job_uids=job_uids,
                           admission=admission, tls_cert=tls_cert, tls_key=tls_key,
                           kms=kms, runbook=runbook, metrics_refresh_s=metrics_refresh_s,
                           notify=notify))
    except SpecError as e:
        err.print(f"[red]invalid[/red] {e}")
        raise typer.Exit(code=2) from e
    except SlurmError as e:  # no slurmctld, no client tools: say so, not a traceback
        err.print(f"[red]slurm[/red] {e}")
        raise typer.Exit(code=2) from e
    except IsolationError as e:  # --isolation users on a host that cannot: say why
        err.print(f"[red]isolation[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(code=2) from e
    except (StoreInUse, TokenFileInTheWay) as e:  # nothing was written
        err.print(f"[red]error[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(code=1) from e
    except KMSError as e:  # a missing or group-readable key file, an unknown --kms scheme
        err.print(f"[red]kms[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(code=2) from e


def submit(
    file: Path | None = typer.Argument(None, help="job YAML (one job or a jobs: list)"),
    gpus: float | None = typer.Option(None, "--gpus"),
    name: str | None = typer.Option(None, "--name"),
    tenant: str | None = typer.Option(
        None, "--tenant", help=("the tenant to submit for, also over a file's own (default: "
                                "your token's; operators: 'default')")),
    command: list[str] | None = typer.Argument(None, help="after --: the command to run"),
    nodes: int | None = typer.Option(None, "--nodes", "-N", help="nodes (with --gpus-per-node)"),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node"),
    time: str | None = typer.Option(None, "--time", "-t", help=(
        "runtime limit: 90 (minutes), 2h, 02:00:00 or 1-02:00:00")),
    dependency: str | None = typer.Option(None, "--dependency", "-d", help=(
        "afterok:ID[,afterany:ID,afternotok:ID]: start after those jobs end so")),
    hold: bool = typer.Option(False, "--hold", "-H", help="submit held: grace release JOB"),
    array: str | None = typer.Option(None, "--array", "-a", help=(
        "a job array, e.g. 0-99%8: one task per index, at most 8 at once")),
    as_json: bool = JsonOpt,
) -> None:
    """Submit a job file, or `--gpus N -- CMD ...` (or `--nodes N --gpus-per-node G`);
    Slurm's flags (--time, --dependency, --hold, --array) also apply to a file's jobs."""
    flags = flag_fields(nodes, gpus_per_node, time, dependency, hold, array)
    whole = gpus is not None or nodes is not None or gpus_per_node is not None
    from grace.cli import sweep as sweep_cli  # it imports this module

    if file is not None and not whole and sweep_cli.is_sweep_file(file):  # POST /sweeps
        sweep_cli.submit_sweep(file, flags, as_json, tenant)
        return
    if file is not None and not whole and file.suffix in (".yaml", ".yml"):
        try:
            # a tenant the file does not name is the token's, not JobSpec's "default"
            specs = [{k: v for k, v in j.model_dump(mode="json", exclude_none=True).items()
                      if k != "tenant" or "tenant" in j.model_fields_set}
                     | ({"tenant": tenant} if tenant else {})  # --tenant over the file's
                     for j in load_jobs(file)]
        except SpecError as e:
            err.print(f"[red]invalid[/red] {e}")
            raise typer.Exit(code=1) from e
    elif whole:
        cmd = ([str(file)] if file is not None else []) + list(command or [])
        if not cmd:
            err.print("[red]invalid[/red] give the command after --, e.g. "
                      "grace submit --gpus 1 -- python train.py")
            raise typer.Exit(code=1)
        if cmd[0].endswith((".yaml", ".yml")):  # a job file with flags, or a mistyped one
            err.print(f"[red]invalid[/red] {escape(cmd[0])}: "
                      + ("no such file" if not Path(cmd[0]).exists() else
                         "a job file says its own GPUs: drop --gpus/--nodes/--gpus-per-node "
                         "(--time, --hold, --dependency and --array apply to its jobs)"),
                      soft_wrap=True)
            raise typer.Exit(code=1)
        if cmd[0].endswith(".py"):  # a script is not a program: exec would refuse it
            err.print(f"[red]invalid[/red] {escape(cmd[0])} is a Python script: run it with "
                      f"python, e.g. grace submit --gpus {gpus or 1:g} -- python "
                      f"{escape(' '.join(cmd))}", soft_wrap=True)
            raise typer.Exit(code=1)
        specs = [{"name": name or Path(cmd[0]).stem, "command": cmd,
                  **({"gpus": gpus} if gpus is not None else {}),
                  **({"tenant": tenant} if tenant else {})}]
    else:
        missing = file is not None and not file.exists()
        err.print(f"[red]invalid[/red] no such file: {escape(str(file))}" if missing else
                  "[red]invalid[/red] give a job YAML file, or --gpus N -- CMD",
                  soft_wrap=True)
        raise typer.Exit(code=1)
    if "nodes" in flags or "gpus_per_node" in flags:  # the flags' shape, not the file's
        specs = [{k: v for k, v in s.items() if k != "gpus"} for s in specs]
    out = [_call("POST", "/jobs", json=s | flags) for s in specs]
    if as_json:
        print(json.dumps(out[0] if len(out) == 1 else out))
        return
    for o in out:
        console.print(submitted_line(o))


#: ``GET /jobs`` answers at most this many jobs per request; ``--all`` pages through
PAGE = 1000
FORMAT_HELP = (f"columns to show, comma-separated, from: {', '.join(JobColumn)} "
               f"(default {', '.join(DEFAULT_COLUMNS)})")


def jobs(state: str | None = typer.Option(None, "--state"),
         tenant: str | None = typer.Option(None, "--tenant"), as_json: bool = JsonOpt,
         fmt: str | None = typer.Option(None, "--format", help=FORMAT_HELP),
         limit: int = typer.Option(200, "--limit", min=1, help="show the newest N jobs"),
         every: bool = typer.Option(False, "--all", help="every job: page through them all")
         ) -> None:
    """List jobs, newest first; says on stderr when more exist than it shows."""
    try:
        columns = parse_format(fmt)
    except FormatError as e:
        err.print(f"[red]invalid[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(code=2) from e
    params = {k: v for k, v in {"state": state, "tenant": tenant}.items() if v}
    rows, more = _jobs_pages(params, None if every else limit)
    if more:
        err.print(f"showing the newest {len(rows)} jobs; more exist: grace jobs --all shows "
                  "every one (or --limit N)", soft_wrap=True)
    if as_json:
        print(json.dumps(rows))
        return
    attempts = requeued_attempts(rows, lambda jid: _call("GET", f"/jobs/{jid}"))
    console.print(jobs_table(rows, console.width, columns, attempts))


def _jobs_pages(params: dict[str, Any], want: int | None) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``want`` jobs (every job if None), newest first, and whether more exist.
    Paged by id (``after``): a job submitted or ended meanwhile shifts no page, so each
    job is listed once."""
    rows: dict[int, dict[str, Any]] = {}
    after: dict[str, Any] = {}
    while True:
        size = PAGE if want is None else min(PAGE, want + 1 - len(rows))
        page = _call("GET", "/jobs", params=params | {"limit": size} | after)
        for j in page:
            rows.setdefault(j["id"], j)
        if page:
            after = {"after": page[-1]["id"]}
        if len(page) < size or (want is not None and len(rows) > want):
            break
    listed = list(rows.values())
    if want is None or len(listed) <= want:
        return listed, False
    return listed[:want], True


def job(job_id: int, as_json: bool = JsonOpt,
        clear_exclusions: bool = typer.Option(
            False, "--clear-exclusions",
            help="Let the job use every node again (operator)")) -> None:
    """Show one job: attempts, placement, excluded nodes, events."""
    if clear_exclusions:
        done = _call("POST", f"/jobs/{job_id}/clear-exclusions")
        if as_json:
            print(json.dumps(done))
        else:
            console.print(f"job {job_id}: cleared exclusions of "
                          f"{', '.join(done['cleared']) or 'no node'}")
        return
    j = _call("GET", f"/jobs/{job_id}")
    if as_json:
        print(json.dumps(j))
        return
    _show_job(j)


def _gpu_ranges(gpus: list[int]) -> str:
    """``[0, 1, 2, 3, 6]`` as ``0-3,6``: a node's GPUs in few cells."""
    runs: list[list[int]] = []
    for g in sorted(set(gpus)):
        if runs and runs[-1][-1] + 1 == g:
            runs[-1].append(g)
        else:
            runs.append([g])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _detail(detail: Any) -> str:
    """An event's detail in full, as ``key=value`` pairs (strings as they are, the rest as
    JSON): read in a wrapped column, not JSON cut at 80 characters."""
    if not detail:
        return ""
    if not isinstance(detail, dict):
        return detail if isinstance(detail, str) else json.dumps(detail)
    return ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                     for k, v in detail.items())


def constraint_line(c: dict[str, Any] | None, width: int = 80) -> str | None:
    """``constraint  input-bound (storage read): data 62% of step``: what limits a running
    job (``core.constraint``), one line cut to ``width``; the JSON has it whole."""
    if not c:
        return None
    text = f"constraint  {c.get('label') or c.get('kind')}"
    if c.get("kind") != "unknown" and c.get("detail"):
        text += f": {c['detail']}"
    return text if len(text) <= width else text[:max(1, width - 3)] + "..."


def _show_job(j: dict[str, Any]) -> None:
    """``grace job N``: every table fits the console; what a user needs is never cut
    (states, exit codes, reasons and event details wrap instead)."""
    width = console.width
    reason = shown_reason(j)
    head = Text.assemble((f"job {j['id']}", "bold"), f" {j['name']} ({j['tenant']}): ",
                         (j["state"], "bold"), f" - {reason}" if reason else "")
    console.print(head)
    wait, run = wait_run(j, j.get("attempts"), time.time())
    tries = len(j.get("attempts") or [])
    console.print(f"wait {duration(wait)}, run {duration(run) if tries else '-'}"
                  f" over {tries} attempt{'' if tries == 1 else 's'}")
    line = constraint_line(j.get("constraint"), width)
    if line:
        console.print(line, highlight=False, markup=False)
    now = time.time()
    console.print(fit_table(
        [Column("#", justify="right"), Column("state"), Column("nodes", Fit.WRAP),
         Column("exit", justify="right"), Column("run", justify="right"),
         Column("cause", Fit.WRAP), Column("resumed from", Fit.WRAP)],
        [[str(a["number"]), a["state"],
          ", ".join(f"{n['node']}:{_gpu_ranges(n['gpus'])}" for n in a["nodes"] or ()),
          "-" if a["exit_code"] is None else str(a["exit_code"]),
          duration((a.get("ended_at") or j.get("ended_at") or now) - a["started_at"]),
          a.get("failure_kind") or "", a.get("resumed_from") or ""]
         for a in j["attempts"]], width, title="attempts"))
    if j.get("excluded_nodes"):
        rows = []
        for ex in j["excluded_nodes"]:
            until = ("back in service" if ex.get("until") is None else
                     time.strftime("%m-%d %H:%M", time.localtime(ex["until"])) + " or back")
            rows.append([ex["node"], ex.get("reason") or "", until])
        console.print(fit_table(
            [Column("node"), Column("why", Fit.WRAP), Column("until")], rows, width,
            title="excluded nodes (grace job N --clear-exclusions lifts them)"))
    if j.get("progress"):
        rows = []
        for rank, rec in sorted(j["progress"].items()):
            phases = ", ".join(f"{k} {v:.3f}" for k, v in (rec.get("phases") or {}).items())
            rows.append([rank, str(rec.get("node", "")), str(rec.get("step", "")),
                         f"{rec['loss']:.4f}" if rec.get("loss") is not None else "",
                         f"{rec.get('tokens_per_s', 0):.0f}", phases])
        console.print(fit_table(
            [Column("rank"), Column("node"), Column("step", justify="right"),
             Column("loss", justify="right"), Column("tokens/s", justify="right"),
             Column("phases (s per step)", Fit.WRAP)], rows, width,
            title="progress (newest heartbeat per rank)"))
    console.print(fit_table(
        [Column("at"), Column("event"), Column("detail", Fit.WRAP, min_width=20)],
        [[time.strftime("%H:%M:%S", time.localtime(ev["at"])), ev["kind"], _detail(ev["detail"])]
         for ev in j["events"]], width, title="events"))


def logs(job_id: int, follow: bool = typer.Option(False, "-f", "--follow"),
         attempt: int | None = typer.Option(None, "--attempt"),
         node: str | None = typer.Option(None, "--node")) -> None:
    """Print a job's logs, each line once, labelled node/rankN; -f follows them, restarts too."""
    print_logs(_call, job_id, follow=follow, attempt=attempt, node=node)


def cancel(job: str = typer.Argument(..., help="a job id, an array's id (every task) or "
                                                "ID_INDEX (one task), as Slurm's"),
           as_json: bool = JsonOpt) -> None:
    """Cancel jobs (scancel): each one's whole process group ends."""
    from grace.cli.workflow import act  # it imports this module

    act(job, "cancel", "cancelling", as_json)


def nodes(as_json: bool = JsonOpt) -> None:
    """List nodes: health state, GPUs allocated and free, and the jobs on each."""
    rows = _call("GET", "/nodes")
    held = {a["name"]: a for a in _call("GET", "/nodes/allocation")}
    for n in rows:  # a node the cluster file no longer has keeps its health row only
        a = held.get(n["name"], {})
        n |= {k: a.get(k) for k in ("allocated", "free", "jobs", "other_jobs")}
    if as_json:
        print(json.dumps(rows))
        return
    if any(n.get("breaker_open") for n in rows):
        b = _call("GET", "/health/breaker")
        console.print(f"[bold red]automatic draining is stopped[/bold red]: {b.get('message', '')}"
                      "\n(reset it with: grace resume --reset-breaker)")
    table = []
    for n in rows:
        kept = ", ".join(str(e["job"]) for e in n.get("excluded_nodes") or ())
        state = n["state"] + (" (lemon)" if n.get("lemon") else "")
        reason = (n["reason"] or "") + (f" (by {n['actor']})" if n["reason"] and n["actor"]
                                        else "")
        on = [str(j["id"]) for j in n.get("jobs") or ()]
        if n.get("other_jobs"):
            on.append(f"+{n['other_jobs']} other")
        used = "-" if n.get("allocated") is None else f"{n['allocated']}/{n['gpus']}"
        free = "-" if n.get("free") is None else str(n["free"])
        table.append([n["name"], n["gpu_model"], used, free, state, ", ".join(on), reason, kept])
    # names, models, GPU counts and states whole (a drain names the node); a reason on one
    # line, and in full under the table where it was cut: there is no `grace node N` to read
    console.print(fit_table(
        [Column("name"), Column("gpu"), Column("used", justify="right"),
         Column("free", justify="right"), Column("state"), Column("jobs", Fit.WRAP),
         Column("reason", Fit.NOTE, min_width=12, weight=3), Column("kept off", Fit.WRAP)],
        table, console.width, title="nodes",
        caption="used: GPUs allocated (one holding any MIG slice counts) of the node's; "
                "kept off: jobs that may not use it"))


def drain(node: str, reason: str = typer.Option(..., "--reason"),
          evict: bool = typer.Option(False, "--evict", help=(
              "move its jobs off now, each from a checkpoint, instead of letting them finish")),
          as_json: bool = JsonOpt) -> None:
    """Take a node out of service, with a reason kept in its history."""
    out = _call("POST", f"/nodes/{node}/drain", json={"reason": reason, "evict": evict})
    print(json.dumps(out)) if as_json else console.print(f"{node} drained: {reason}")


def resume(node: str = typer.Argument("", help="the node to return to service"),
           diagnose: bool = typer.Option(
               False, "--diagnose", help="return it only after it passes a level-3 diagnostic"),
           reset_breaker: bool = typer.Option(
               False, "--reset-breaker", help="re-enable automatic draining (no node needed)"),
           as_json: bool = JsonOpt) -> None:
    """Return a drained node to service (now, or after a diagnostic with --diagnose)."""
    if reset_breaker:
        out = _call("POST", "/health/breaker/reset")
        print(json.dumps(out)) if as_json else console.print("automatic draining re-enabled")
        if not node:
            return
    if not node:
        raise typer.BadParameter("name the node to resume (or use --reset-breaker)",
                                 param_hint="NODE")
    out = _call("POST", f"/nodes/{node}/resume", params={"diagnose": diagnose})
    if as_json:
        print(json.dumps(out))
    elif out["state"] == "diagnosing":
        console.print(f"{node} is being diagnosed; it returns when it passes")
    else:
        console.print(f"{node} back in service")


def inject(job_id: int,
           fault: str = typer.Option(..., "--fault",
                                     help="kill-rank | hang-rank | straggler | node-unhealthy"),
           rank: int = typer.Option(0, "--rank",
                                    help="global rank, for kill-rank, hang-rank and straggler"),
           as_json: bool = JsonOpt) -> None:
    """Cause a fault on purpose, to watch Grace detect it and recover without anyone."""
    out = _call("POST", f"/jobs/{job_id}/inject", json={"fault": fault, "rank": rank})
    print(json.dumps(out)) if as_json else console.print(f"injected {fault} into job {job_id}")
