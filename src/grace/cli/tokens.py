"""``grace token create|list|revoke``: API tokens, through the API (an admin's token).

A token's text is printed once, when it is made: the store keeps only its hash.
"""

from __future__ import annotations

import json
import time

import typer
from rich.table import Table

from grace.cli.client import JsonOpt, _call, console, err
from grace.control.store.models import Role
from grace.spec.units import parse_duration

token_app = typer.Typer(help="API tokens: create, list, revoke (admin).", no_args_is_help=True)


@token_app.command("create")
def create(
    role: Role = typer.Option(..., "--role", help="admin | operator | member | viewer"),
    tenant: str | None = typer.Option(
        None, "--tenant", help="the tenant a member acts for (required for members); a "
                               "viewer without one reads every tenant"),
    name: str | None = typer.Option(None, "--name", help="who or what uses it"),
    expires: str | None = typer.Option(None, "--expires", help="e.g. 30d, 12h; default never"),
    as_json: bool = JsonOpt,
) -> None:
    """Make a token; prints it once (``--json``: ``{"id": ..., "token": ...}``)."""
    try:
        expires_in = parse_duration(expires) if expires is not None else None
    except ValueError as e:
        err.print(f"[red]invalid[/red] --expires: {e}")
        raise typer.Exit(code=2) from e
    body = {"role": role.value, "tenant": tenant, "expires_in_s": expires_in,
            "name": name or f"{role.value}{'@' + tenant if tenant else ''}"}
    out = _call("POST", "/tokens", json=body)
    if as_json:
        print(json.dumps(out))
        return
    console.print(f"token {out['id']} ({out['role']}"
                  f"{', tenant ' + out['tenant'] if out['tenant'] else ''}): shown once, keep it")
    print(out["token"])


@token_app.command("list")
def list_tokens(as_json: bool = JsonOpt) -> None:
    """Every token: id, name, role, tenant, expiry, last use (never the secret)."""
    rows = _call("GET", "/tokens")
    if as_json:
        print(json.dumps(rows))
        return
    t = Table(title="tokens")
    for col in ("id", "name", "role", "tenant", "expires", "last used", "state"):
        t.add_column(col, overflow="fold")
    now = time.time()
    for r in rows:
        state = ("revoked" if r["revoked_at"] else
                 "expired" if r["expires_at"] and r["expires_at"] <= now else "live")
        t.add_row(r["id"], r["name"], r["role"], r["tenant"] or "*", _when(r["expires_at"]),
                  _when(r["last_used_at"]), state)
    console.print(t)


@token_app.command("revoke")
def revoke(token_id: str = typer.Argument(..., help="the token's id (grace token list)"),
           as_json: bool = JsonOpt) -> None:
    """Revoke a token at once; requests with it get 401 from then on."""
    out = _call("DELETE", f"/tokens/{token_id}")
    print(json.dumps(out)) if as_json else console.print(f"token {token_id} revoked")


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "-"
