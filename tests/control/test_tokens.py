"""Tokens end to end: the first admin token ``grace up`` writes, and ``grace token`` over HTTP.

The store keeps hashes only; the token file is 0600 and never written over; the
CLI finds its token in ``GRACE_TOKEN``, ``GRACE_TOKEN_FILE`` or ``.grace/admin.token``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from helpers import LAB, served
from typer.testing import CliRunner

from grace.cli.main import app as cli
from grace.control.api import create_app
from grace.control.server import (
    ServerConfig,
    TokenFileInTheWay,
    admin_token_path,
    first_admin_token,
)
from grace.control.store import tokens
from grace.control.store.db import Store
from grace.control.store.models import ApiToken, Role
from grace.core.topology import Topology
from grace.spec.loader import load_cluster


def test_the_first_start_writes_one_admin_token_0600_and_the_store_keeps_its_hash(
        store: Store, tmp_path: Path) -> None:
    path = tmp_path / "admin.token"
    said: list[str] = []
    assert first_admin_token(store, path, said.append)
    text = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert str(path) in said[0] and "GRACE_TOKEN_FILE" in said[0]
    with store.read() as s:
        [row] = tokens.listed(s)
        assert row.role is Role.ADMIN and text.split("_", 2)[2] not in row.secret_hash
        assert tokens.authenticate(s.connection(), text, 0.0).id == row.id
    # a restart: an admin exists, nothing new is made or written
    path.unlink()
    assert not first_admin_token(store, path, said.append) and not path.exists()


def test_a_token_file_in_the_way_is_never_overwritten_nor_followed(store: Store,
                                                                   tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("precious")
    link = tmp_path / "admin.token"
    link.symlink_to(target)
    with pytest.raises(TokenFileInTheWay, match="already exists"):
        first_admin_token(store, link, print)
    assert target.read_text() == "precious"
    with store.read() as s:
        assert tokens.listed(s) == []  # rolled back: the next start tries again


def test_the_token_file_sits_beside_a_sqlite_store_else_in_the_working_directory(
        tmp_path: Path) -> None:
    assert admin_token_path(ServerConfig(LAB, None, 0, tmp_path / "st")) == \
        tmp_path / "st" / "admin.token"
    pg = ServerConfig(LAB, "postgresql://u@h/db", 0, tmp_path / "st")
    assert admin_token_path(pg) == Path.cwd() / "admin.token"
    named = ServerConfig(LAB, None, 0, tmp_path, admin_token_file=tmp_path / "x.token")
    assert admin_token_path(named) == tmp_path / "x.token"


def test_grace_token_create_list_revoke_through_the_api(store: Store, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "admin.token"
    first_admin_token(store, token_file, lambda _: None)
    app = create_app(store, Topology.from_spec(load_cluster(LAB)), tmp_path / "state")
    runner = CliRunner()
    with served(app) as url:
        monkeypatch.setenv("GRACE_URL", url)
        monkeypatch.delenv("GRACE_TOKEN", raising=False)
        monkeypatch.setenv("GRACE_TOKEN_FILE", str(token_file))
        r = runner.invoke(cli, ["token", "create", "--tenant", "vision", "--role", "member",
                                "--expires", "30d", "--json"])
        assert r.exit_code == 0, r.output
        made = json.loads(r.output)
        assert set(made) >= {"id", "token"} and made["tenant"] == "vision"
        assert made["expires_at"] is not None
        # the member's token: its own tenant's jobs, no token management
        monkeypatch.setenv("GRACE_TOKEN", made["token"])
        r = runner.invoke(cli, ["jobs", "--json"])
        assert r.exit_code == 0 and json.loads(r.output) == []
        r = runner.invoke(cli, ["token", "list"])
        assert r.exit_code == 1 and "needs admin" in r.output
        monkeypatch.delenv("GRACE_TOKEN")
        r = runner.invoke(cli, ["token", "list", "--json"])
        listed = {t["id"]: t for t in json.loads(r.output)}
        assert made["id"] in listed and "token" not in listed[made["id"]]
        assert runner.invoke(cli, ["token", "revoke", made["id"]]).exit_code == 0
        monkeypatch.setenv("GRACE_TOKEN", made["token"])
        r = runner.invoke(cli, ["jobs"])
        assert r.exit_code == 1 and "revoked" in r.output
        monkeypatch.delenv("GRACE_TOKEN")
        r = runner.invoke(cli, ["token", "create", "--role", "member", "--json"])
        assert r.exit_code == 1 and "tenant" in r.output  # a member needs its tenant
        monkeypatch.setenv("GRACE_TOKEN_FILE", str(tmp_path / "missing"))
        r = runner.invoke(cli, ["jobs"])
        assert r.exit_code == 2 and "GRACE_TOKEN_FILE" in r.output
    with store.read() as s:
        assert s.get(ApiToken, made["id"]).revoked_at is not None


def test_without_a_token_the_cli_says_how_to_get_one(store: Store, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(store, Topology.from_spec(load_cluster(LAB)), tmp_path / "state")
    monkeypatch.chdir(tmp_path)  # no .grace/admin.token here
    for var in ("GRACE_TOKEN", "GRACE_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    with served(app) as url:
        monkeypatch.setenv("GRACE_URL", url)
        r = CliRunner().invoke(cli, ["jobs"], env={"COLUMNS": "80"})
    assert r.exit_code == 1
    text = " ".join(r.output.split())
    assert "no token" in text and "GRACE_TOKEN" in text and "grace token create" in text
    assert os.environ.get("GRACE_TOKEN") is None


def test_a_token_check_reads_one_statement_and_sees_a_revocation_at_once(store: Store) -> None:
    """``Store.lookup``: on PostgreSQL an autocommit connection (one round trip per token
    check, no BEGIN/ROLLBACK); on both, a token revoked by a committed write is refused by
    the very next check, and the connection goes back to the pool in its normal mode."""
    with store.transaction() as s:
        row, text = tokens.create(s, name="ci", role=Role.MEMBER, tenant="a", created_by="t",
                                  now=0.0)
    with store.lookup() as conn:
        live = tokens.authenticate(conn, text, 1.0)
        raw: Any = conn.connection.dbapi_connection
        if store.dialect == "postgresql":
            assert raw.autocommit
    if store.dialect == "postgresql":  # the very connection, back in the pool, is not left so
        assert not raw.autocommit
    assert (live.id, live.name, live.role, live.tenant) == (row.id, "ci", Role.MEMBER, "a")
    with store.transaction() as s:
        tokens.revoke(s, row.id, 2.0)
    with store.lookup() as conn, pytest.raises(tokens.TokenRefused) as refused:
        tokens.authenticate(conn, text, 3.0)
    assert refused.value.problem is tokens.TokenProblem.REVOKED
