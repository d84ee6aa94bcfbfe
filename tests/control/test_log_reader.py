"""``log_reader`` over files written here: each line once, labelled node/rank, from offsets.

The layout is the one torchrun leaves (``<node>.log`` with ``[default<L>]:`` copies of
every rank's lines, and ``ranks/<node>/<run>/attempt_0/<L>/{stdout,stderr}.log``); the API
tests at the end go through ``/jobs/N/logs/follow`` and the plain-text ``/jobs/N/logs``.
"""

from __future__ import annotations

import base64
import json
import os
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from helpers import LAB, FakeClock, ScriptedBackend, authed, make_token

from grace.control import log_reader
from grace.control.api import create_app
from grace.control.log_reader import Cursor, CursorError, follow, sources
from grace.control.reconciler import Reconciler
from grace.control.store.db import Store
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.loader import load_cluster

PLACEMENT = [{"node": "a100-00", "gpus": [0, 1]}, {"node": "a100-01", "gpus": [2, 3]}]
OWNER = os.getuid()


def rank_file(adir: Path, node: str, local: int, stream: str = "stdout") -> Path:
    path = adir / "ranks" / node / "7-1_abcd" / "attempt_0" / str(local) / f"{stream}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    for name in ("stdout.log", "stderr.log"):  # torchrun opens both before it starts the rank
        (path.parent / name).touch()
    return path


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def a_2x2_attempt(adir: Path) -> None:
    """What a 2-node x 2-GPU attempt leaves: every rank line also teed into its node log."""
    adir.mkdir(parents=True)
    for i, node in enumerate(("a100-00", "a100-01")):
        own = [f"rank {2 * i + local}/4 ready\n" for local in (0, 1)]
        for local in (0, 1):
            append(rank_file(adir, node, local), own[local])
        append(adir / f"{node}.log", "*****\nSetting OMP_NUM_THREADS\n"
               + "".join(f"[default{local}]:{own[local]}" for local in (0, 1)))
    append(rank_file(adir, "a100-00", 0), "step 1/2 loss 4.0\nstep 2/2 loss 3.0\n")
    append(rank_file(adir, "a100-00", 0, "stderr"), "a warning\n")
    append(adir / "a100-00.log", "[default0]:step 1/2 loss 4.0\n[default0]:step 2/2 loss 3.0\n"
           "[default0]:a warning\n")


def read_all(adir: Path, cursor: Cursor, *, final: bool = False, budget: int = 1 << 20,
             node: str | None = None) -> list[tuple[str, str]]:
    """Every line after ``cursor`` (reading again while ``more``), as (source, text)."""
    got: list[tuple[str, str]] = []
    while True:
        chunk = follow(adir, sources(adir, PLACEMENT, node), cursor, OWNER, final=final,
                       budget=budget)
        got += [(line["source"], line["text"]) for line in chunk.lines]
        cursor = Cursor.decode(chunk.cursor.encode())  # as a client passes it back
        if not chunk.more:
            return got


# ---------------------------------------------------------------- the reader
def test_each_line_once_labelled_node_rank_and_the_agents_own_lines_kept(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    a_2x2_attempt(adir)
    got = read_all(adir, Cursor(7, 1))
    assert got == [
        ("a100-00/agent", "*****"), ("a100-00/agent", "Setting OMP_NUM_THREADS"),
        ("a100-00/rank0", "rank 0/4 ready"), ("a100-00/rank0", "step 1/2 loss 4.0"),
        ("a100-00/rank0", "step 2/2 loss 3.0"), ("a100-00/rank0", "a warning"),
        ("a100-00/rank1", "rank 1/4 ready"),
        ("a100-01/agent", "*****"), ("a100-01/agent", "Setting OMP_NUM_THREADS"),
        ("a100-01/rank2", "rank 2/4 ready"), ("a100-01/rank3", "rank 3/4 ready"),
    ]
    assert read_all(adir, Cursor(7, 1), node="a100-01")[-1] == ("a100-01/rank3", "rank 3/4 ready")


def test_a_rank_without_its_own_file_keeps_its_copy_under_agent(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    append(adir / "a100-00.log", "[default0]:only here\n")
    assert read_all(adir, Cursor(7, 1)) == [("a100-00/agent", "[default0]:only here")]


def test_a_partial_last_line_waits_for_its_newline_until_the_attempt_ends(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    out = rank_file(adir, "a100-01", 1)
    append(out, "whole\nhal")
    cursor = Cursor(7, 1)
    chunk = follow(adir, sources(adir, PLACEMENT), cursor, OWNER, final=False)
    assert [x["text"] for x in chunk.lines] == ["whole"] and not chunk.more and not chunk.drained
    chunk = follow(adir, sources(adir, PLACEMENT), cursor, OWNER, final=False)
    assert chunk.lines == []  # still waiting: "hal" is not a line yet
    append(out, "f\nno newline")
    chunk = follow(adir, sources(adir, PLACEMENT), cursor, OWNER, final=False)
    assert [x["text"] for x in chunk.lines] == ["half"]
    chunk = follow(adir, sources(adir, PLACEMENT), cursor, OWNER, final=True)  # it ended
    assert [(x["source"], x["text"]) for x in chunk.lines] == [("a100-01/rank3", "no newline")]
    assert chunk.drained
    assert follow(adir, sources(adir, PLACEMENT), cursor, OWNER, final=True).lines == []


def test_a_file_that_grows_between_reads_gives_only_its_new_lines(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    a_2x2_attempt(adir)
    cursor = Cursor(7, 1)
    first = read_all(adir, cursor)
    cursor = Cursor.decode(cursor.encode())
    append(rank_file(adir, "a100-00", 0), "step 3/3 loss 2.0\n")
    append(adir / "a100-00.log", "[default0]:step 3/3 loss 2.0\ntorchrun: worker 1 failed\n")
    append(rank_file(adir, "a100-01", 0), "done\n")
    assert read_all(adir, cursor) == [("a100-00/agent", "torchrun: worker 1 failed"),
                                      ("a100-00/rank0", "step 3/3 loss 2.0"),
                                      ("a100-01/rank2", "done")]
    assert read_all(adir, cursor) == []
    assert len(first) == 11


def test_a_small_budget_returns_everything_once_over_several_answers(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    lines = {local: [f"r{local} line {i:04d}" for i in range(3000)] for local in (0, 1)}
    for local, own in lines.items():
        append(rank_file(adir, "a100-00", local), "".join(f"{t}\n" for t in own))
    cursor = Cursor(7, 1)
    first = follow(adir, sources(adir, PLACEMENT), cursor, OWNER, final=False, budget=20_000)
    assert first.more and 0 < len(first.lines) < 6000
    assert {x["source"] for x in first.lines} == {"a100-00/rank0", "a100-00/rank1"}  # both move
    got = [(x["source"], x["text"]) for x in first.lines]
    got += read_all(adir, Cursor.decode(cursor.encode()), budget=20_000)
    for local, own in lines.items():
        assert [t for s, t in got if s == f"a100-00/rank{local}"] == own


def test_a_line_longer_than_a_share_is_split_not_stuck(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    append(rank_file(adir, "a100-00", 0), "x" * (log_reader.MIN_SHARE_BYTES + 10) + "\nnext\n")
    got = read_all(adir, Cursor(7, 1), budget=1)
    assert "".join(t for _, t in got[:-1]) == "x" * (log_reader.MIN_SHARE_BYTES + 10)
    assert got[-1] == ("a100-00/rank0", "next")


def test_a_truncated_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    out = rank_file(adir, "a100-00", 1)
    append(out, "old one\nold two\n")
    cursor = Cursor(7, 1)
    assert len(read_all(adir, cursor)) == 2
    out.write_text("new\n")
    assert read_all(adir, Cursor.decode(cursor.encode())) == [("a100-00/rank1", "new")]


def test_a_planted_symlink_or_fifo_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text("the admin token\n")
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    out = rank_file(adir, "a100-00", 0)
    out.unlink()
    out.symlink_to(secret / "token")  # the job replaced its log by a link to a secret
    (adir / "a100-00.log").symlink_to(secret / "token")
    fifo_err = rank_file(adir, "a100-00", 1, "stderr")
    fifo_err.unlink()
    os.mkfifo(fifo_err)  # a FIFO would block a reader that opened it blocking
    (secret / "1" / "attempt_0" / "0").mkdir(parents=True)
    (secret / "1" / "attempt_0" / "0" / "stdout.log").write_text("the other tenant's log\n")
    (adir / "ranks" / "a100-01").symlink_to(secret)  # a directory link out of the attempt
    append(rank_file(adir, "a100-00", 1), "mine\n")
    got = read_all(adir, Cursor(7, 1), final=True)
    assert got == [("a100-00/rank1", "mine")]
    listed = log_reader.tail(adir, sources(adir, PLACEMENT), OWNER, 100, 1 << 20)
    assert listed == ["[a100-00/rank1] mine"]


def test_a_file_of_another_uid_is_not_read(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    append(rank_file(adir, "a100-00", 0), "mine\n")
    chunk = follow(adir, sources(adir, PLACEMENT), Cursor(7, 1), OWNER + 1, final=True)
    assert chunk.lines == []


def _forged(data: Any) -> str:
    raw = zlib.compress(json.dumps(data).encode())
    return "c1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("text", [
    "", "garbage", "c1.", "c1.!!!!", "c1." + base64.urlsafe_b64encode(b"not zlib").decode(),
    _forged([1, 2]), _forged({"j": 1, "a": 1, "o": {}}),
    _forged({"j": 1, "a": 1, "o": {"a100-00": [-5]}, "s": 0}),
    _forged({"j": 1, "a": 0, "o": {}, "s": 0}),
    _forged({"j": 1, "a": 1, "o": {"a100-00": [True]}, "s": 0}),
    _forged({"j": 1, "a": 1, "o": {"a100-00": [0] * 5000}, "s": 0}),
    "c1." + base64.urlsafe_b64encode(zlib.compress(b"[" + b"0," * 2_000_000 + b"0]")).decode(),
])
def test_a_bad_cursor_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(CursorError, match="cursor"):
        Cursor.decode(text)


def test_a_cursor_round_trips_and_stays_small() -> None:
    c = Cursor(7, 2, {f"a100-{n:02d}": [123456789 + n] * 17 for n in range(64)}, start=5)
    again = Cursor.decode(c.encode())
    assert (again.job, again.attempt, again.offsets, again.start) == (7, 2, c.offsets, 5)
    assert len(c.encode()) < log_reader.MAX_CURSOR_CHARS


# ---------------------------------------------------------------- through the API
@pytest.fixture
def lab(store: Store, tmp_path: Path) -> tuple[Any, Reconciler, ScriptedBackend]:
    topo = Topology.from_spec(load_cluster(LAB))
    backend = ScriptedBackend(load_cluster(LAB))
    rec = Reconciler(store, backend, topo, get_policy("grace"), tmp_path / "state", clock=FakeClock())
    app = create_app(store, topo, tmp_path / "state")
    return app, rec, backend


def _started_2x2(app: Any, rec: Reconciler, store: Store) -> tuple[Any, int, Path, list[Any]]:
    client = authed(app, store)
    r = client.post("/jobs", json={"name": "ddp", "tenant": "vision", "nodes": 2,
                                   "gpus_per_node": 2, "gpu_model": "A100-80GB",
                                   "command": ["python", "train.py"]})
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    rec.cycle()
    placement = client.get(f"/jobs/{jid}").json()["attempts"][0]["nodes"]
    adir = rec.ctx.dirs.attempt(jid, 1)
    adir.mkdir(parents=True)
    return client, jid, adir, placement


def test_follow_through_the_api_gives_each_line_once_then_ends(
        lab: tuple[Any, Reconciler, ScriptedBackend], store: Store) -> None:
    app, rec, backend = lab
    client, jid, adir, placement = _started_2x2(app, rec, store)
    first_node = placement[0]["node"]
    append(rank_file(adir, first_node, 0), "step 1\npart")
    append(adir / f"{first_node}.log", "[default0]:step 1\n")
    viewer = authed(app, store, role="viewer", tenant="vision")  # a viewer token is enough
    r = viewer.get(f"/jobs/{jid}/logs/follow").json()
    assert [(x["source"], x["text"]) for x in r["lines"]] == [(f"{first_node}/rank0", "step 1")]
    assert (r["attempt"], r["attempt_state"], r["ended"], r["more"]) == (1, "running", False, False)
    assert viewer.get(f"/jobs/{jid}/logs/follow", params={"cursor": r["cursor"]}).json()["lines"] == []
    backend.finish(jid)
    rec.cycle()
    r = viewer.get(f"/jobs/{jid}/logs/follow", params={"cursor": r["cursor"]}).json()
    assert [x["text"] for x in r["lines"]] == ["part"] and r["ended"] and r["job_ended"]
    plain = client.get(f"/jobs/{jid}/logs").text
    assert plain == f"[{first_node}/rank0] step 1\n[{first_node}/rank0] part\n"  # no copy, no path


def test_a_bad_cursor_or_node_is_422_naming_the_field_and_others_are_404(
        lab: tuple[Any, Reconciler, ScriptedBackend], store: Store) -> None:
    app, rec, _ = lab
    client, jid, _, _ = _started_2x2(app, rec, store)
    for bad in ("nonsense", "c1.AAAA", "x" * (log_reader.MAX_CURSOR_CHARS + 1)):
        r = client.get(f"/jobs/{jid}/logs/follow", params={"cursor": bad})
        assert r.status_code == 422, r.text
        assert [p["field"] for p in r.json()["detail"]] == ["query.cursor"]
    other = Cursor(jid + 1, 1).encode()
    r = client.get(f"/jobs/{jid}/logs/follow", params={"cursor": other})
    assert r.status_code == 422 and "for job" in r.json()["detail"][0]["message"]
    good = client.get(f"/jobs/{jid}/logs/follow").json()["cursor"]
    r = client.get(f"/jobs/{jid}/logs/follow", params={"cursor": good, "attempt": 2})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.cursor"
    r = client.get(f"/jobs/{jid}/logs/follow", params={"node": "l40s-00"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.node"
    assert client.get(f"/jobs/{jid}/logs/follow", params={"attempt": 2}).status_code == 404
    stranger = {"Authorization": f"Bearer {make_token(store, 'member', 'nlp')}"}
    assert client.get(f"/jobs/{jid}/logs/follow", headers=stranger).status_code == 404


def test_names_a_job_planted_cannot_break_the_reader(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    for odd in ("²", "9" * 5000, "99999"):  # int() of the first two raises; the last is no rank
        try:
            rank_file(adir, "a100-00", 0).parent.with_name(odd).mkdir()
        except OSError:  # a name too long for this file system cannot be planted either
            continue
        (rank_file(adir, "a100-00", 0).parent.with_name(odd) / "stdout.log").write_text("odd\n")
    append(adir / "a100-00.log", "[default" + "9" * 5000 + "]:not a copy\n")
    got = read_all(adir, Cursor(7, 1))
    assert got == [("a100-00/agent", "[default" + "9" * 5000 + "]:not a copy")]


def test_a_file_of_bare_newlines_gives_bounded_answers_and_every_line_once(tmp_path: Path) -> None:
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    (adir / "a100-00.log").write_bytes(b"\n" * (1 << 20))
    out = rank_file(adir, "a100-00", 0)
    append(out, "".join(f"r{i}\n" for i in range(50_000)))  # short numbered lines: in order
    cursor = Cursor(7, 1)
    chunk = follow(adir, sources(adir, PLACEMENT), cursor, OWNER, final=True)
    size = len(json.dumps(chunk.lines, ensure_ascii=False))
    assert chunk.more and size < 2 * log_reader.FOLLOW_BYTES  # unbounded: 18.9 MB, 349,525 lines
    assert len(chunk.lines) <= 2 * log_reader.FOLLOW_BYTES // log_reader.LINE_OVERHEAD_BYTES
    got = [(x["source"], x["text"]) for x in chunk.lines]
    got += read_all(adir, Cursor.decode(cursor.encode()), final=True)
    assert [t for s, t in got if s == "a100-00/agent"] == [""] * (1 << 20)
    assert [t for s, t in got if s == "a100-00/rank0"] == [f"r{i}" for i in range(50_000)]
    assert len(got) == (1 << 20) + 50_000
    listed = log_reader.tail(adir, sources(adir, PLACEMENT), OWNER, 1_000_000, 1 << 20)
    assert len("\n".join(listed)) < 3 * (1 << 20)  # the plain-text /logs is bounded too
    assert listed[-1] == "[a100-00/rank0] r49999" and listed[-2] == "[a100-00/rank0] r49998"


def test_thousands_of_planted_directories_and_a_directory_link_cost_a_bounded_walk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "secret"
    (secret / "attempt_0" / "0").mkdir(parents=True)
    (secret / "attempt_0" / "0" / "stdout.log").write_text("the other tenant's log\n")
    (secret / "5").mkdir()
    (secret / "5" / "stdout.log").write_text("the other tenant's log\n")
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    append(rank_file(adir, "a100-00", 0), "mine\n")
    run = rank_file(adir, "a100-00", 0).parent.parent.parent
    (run.parent / "linked-run").symlink_to(secret)  # a run directory linked out of the attempt
    (run / "attempt_0" / "5").symlink_to(secret / "5")  # and a local rank directory
    planted = adir / "ranks" / "a100-01"
    for k in range(2500):  # run directories, and names that are no local rank
        (planted / f"r{k}" / "attempt_0").mkdir(parents=True)
        (planted / "r0" / "attempt_0" / f"x{k}").mkdir()
    scanned = 0
    real_scandir = os.scandir

    class Counting:
        def __init__(self, fd: Any) -> None:
            self.it = real_scandir(fd)

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.it.close()

        def __iter__(self) -> Counting:
            return self

        def __next__(self) -> os.DirEntry[str]:
            nonlocal scanned
            scanned += 1
            return next(self.it)

    monkeypatch.setattr(os, "scandir", Counting)
    started = time.perf_counter()
    srcs = sources(adir, PLACEMENT)
    got = read_all(adir, Cursor(7, 1), final=True)
    took = time.perf_counter() - started
    monkeypatch.undo()
    assert [s.label for s in srcs] == ["a100-00/agent", "a100-00/rank0", "a100-00/rank0",
                                       "a100-01/agent"]  # no rank 5, nothing via linked-run
    assert got == [("a100-00/rank0", "mine")]
    # two walks (sources, and read_all's), each bounded per node: the glob read all 7,500
    assert scanned <= 2 * 2 * log_reader._MAX_RANK_ENTRIES
    assert took < 2.0
