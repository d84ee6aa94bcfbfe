"""``grace audit``: read and check the audit trail, through the API or straight from a store.

Through the API (an admin token): ``GET /audit`` and ``GET /audit/verify``.
With ``--db URL`` the store is opened directly and only read (not migrated):
an auditor's path that needs neither a running control plane nor a token, only
read access to the database. ``--verify`` exits 0 when the chain holds and 1,
naming the first broken entry, when it does not; ``--head`` prints the newest
``seq:hash`` to keep somewhere the database's writers cannot reach, and
``--verify --anchor seq:hash`` later checks the chain still holds it
(``store.audit`` says why that matters).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from grace.cli.showback import parse_since
from grace.control.store import audit as trail
from grace.control.store.db import Store, make_engine, normalize_url

T = TypeVar("T")
err = Console(stderr=True)


def since_epoch(text: str, now: float) -> float:
    """``--since``: a span back from now (``7d``, ``12h``, ``30m``, ``90s``) or a Unix time."""
    try:
        return float(text)
    except ValueError:
        return parse_since(text, now)


def _when(at: float) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(at))


def entries_table(rows: list[dict[str, Any]]) -> Table:
    """The entries as a table that fits 80 columns (long targets and actors fold)."""
    t = Table(title=f"audit trail ({len(rows)} entries)")
    t.add_column("seq", justify="right", no_wrap=True)
    t.add_column("at", no_wrap=True)
    t.add_column("actor", overflow="fold", max_width=16)
    t.add_column("action", overflow="fold")
    t.add_column("target", overflow="fold")
    t.add_column("outcome", no_wrap=True)
    for r in rows:
        t.add_row(str(r["seq"]), _when(float(r["at"])), r["actor"], r["action"], r["target"],
                  r["outcome"])
    return t


@contextmanager
def _direct(url: str) -> Iterator[Session]:
    """A read-only session on the store at ``url``, opened without migrating it."""
    url = normalize_url(url)
    parsed = make_url(url)
    file = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if file not in (None, "", ":memory:") and not Path(str(file)).is_file():
        raise typer.BadParameter(f"no SQLite store at {parsed.database}; name the file "
                                     "`grace up` uses (<state dir>/grace.sqlite)", param_hint="--db")
    store = Store(make_engine(url))
    try:
        with store.read() as s:
            yield s
    finally:
        store.close()


def _from_store(url: str, read: Callable[[Session], T]) -> T:
    try:
        with _direct(url) as s:
            return read(s)
    except SQLAlchemyError as e:
        err.print(f"[red]error[/red] cannot read the audit trail at --db {url}: "
                  f"{type(e).__name__}: {str(e).splitlines()[0]}. Is it a Grace store migrated "
                  "to revision 0003 or later (`grace up` migrates it)?")
        raise typer.Exit(code=3) from e


def _via_api(path: str, params: dict[str, Any]) -> Any:
    from grace.cli.client import _call

    return _call("GET", path, params={k: v for k, v in params.items() if v is not None})


def audit_command(
    since: str | None = typer.Option(
        None, "--since", help="entries from then on: a span back (7d, 12h, 30m) or a Unix time"),
    actor: str | None = typer.Option(None, "--actor", help="only this actor (`grace`: the "
                                                           "control plane; else a token's name)"),
    action: str | None = typer.Option(None, "--action", help="only this action, e.g. job.started"),
    target: str | None = typer.Option(None, "--target", help="only this target, e.g. job:12"),
    limit: int = typer.Option(50, "--limit", min=1, max=10_000,
                              help="the newest this many entries that match"),
    as_json: bool = typer.Option(False, "--json", help="print JSON for scripts"),
    verify: bool = typer.Option(False, "--verify", help=(
        "check the hash chain: exit 0 if it holds, 1 naming the first broken entry")),
    anchor: str | None = typer.Option(None, "--anchor", help=(
        f"with --verify: a {trail.ANCHOR_HELP}, that must still be in the chain")),
    head: bool = typer.Option(False, "--head", help=(
        "print the chain's newest seq:hash, to keep elsewhere as an anchor")),
    db: str | None = typer.Option(None, "--db", help=(
        "read this store directly (e.g. sqlite:///.grace/grace.sqlite) instead of the API")),
) -> None:
    """The audit trail: who did what to which job, node or tenant, and how it went."""
    if anchor is not None:
        if not verify:
            raise typer.BadParameter("--anchor is checked by --verify: add --verify",
                                     param_hint="--anchor")
        try:
            trail.Anchor.parse(anchor)
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--anchor") from e
    if verify:
        _verify(db, anchor, as_json)
    elif head:
        out = (_from_store(db, trail.head_json) if db is not None
               else _via_api("/audit/head", {}))
        print(json.dumps(out) if as_json else out["anchor"])
    else:
        _list(db, since, actor, action, target, limit, as_json)


def _verify(db: str | None, anchor: str | None, as_json: bool) -> None:
    if db is not None:
        out = _from_store(db, lambda s: trail.verify_json(s, anchor))
    else:
        out = _via_api("/audit/verify", {"anchor": anchor})
    if as_json:
        print(json.dumps(out))
    elif out["ok"]:
        Console().print(out["message"], soft_wrap=True)
    else:
        err.print(f"[red]broken[/red] {out['message']}", soft_wrap=True)
    raise typer.Exit(code=0 if out["ok"] else 1)


def _list(db: str | None, since: str | None, actor: str | None, action: str | None,
          target: str | None, limit: int, as_json: bool) -> None:
    after = since_epoch(since, time.time()) if since else None
    if action is not None and action not in {a.value for a in trail.AuditAction}:
        raise typer.BadParameter(f"unknown action; use one of "
                                 f"{', '.join(a.value for a in trail.AuditAction)}",
                                 param_hint="--action")
    if db is not None:
        rows = _from_store(db, lambda s: trail.entries_json(s, after, actor, action, target,
                                                            limit))
    else:
        rows = _via_api("/audit", {"since": after, "actor": actor, "action": action,
                                   "target": target, "limit": limit})
    if as_json:
        print(json.dumps(rows))
    else:
        Console().print(entries_table(rows))


__all__ = ["audit_command", "entries_table", "since_epoch"]
