"""Vetted code: a job runs only what the admission file lists (``grace up --admission``).

Two checks, one rule set (``grace.spec.admission``):

* at submit, ``admit`` checks the job's command and env and returns the record
  the API stores in ``job.admission``: which interpreter, which script (its path
  resolved, symlinks followed) and the SHA-256 of the bytes that were vetted. A
  refusal is an ``AdmissionRefused`` naming the field, the rule and the fix.
* at every launch, ``Admission.check_launch`` hashes the script again: bytes that
  changed since submit (an edit, a symlink pointed elsewhere) are refused even if
  the admission file was updated to match them, since what was vetted with the
  job is not what would run. The current rules are applied too, so a script taken
  off the list, or a job submitted before admission was turned on, is refused.

The script is hashed at launch and read by the interpreter moments later; the
rule assumes the vetted files sit where job owners cannot write (an operator's
checkout), which is what makes a digest mean something between the two.

Why a few env names are refused: the command is vetted, but ``PATH`` chooses
what ``bash`` is, ``LD_PRELOAD`` loads a library into any interpreter and
``PYTHONPATH``/``PYTHONSTARTUP`` run other Python first. Letting a job set them
would make every vetted command a wrapper around unvetted code.

Relative paths, in commands and in the file, are relative to the control
plane's working directory: where both backends run jobs (``cwd``/``--chdir``).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from grace.spec.admission import AdmissionSpec, InterpreterOnly, ScriptRule
from grace.spec.errors import SpecError, SpecProblem
from grace.spec.job import JobSpec
from grace.spec.loader import load_admission

log = logging.getLogger("grace.admission")

#: ``reason`` prefix of a job whose launch the admission rules refused.
ADMISSION = "admission"
#: the names the backends run as the control plane's own interpreter (LocalBackend._command)
PYTHON_NAMES = frozenset({"python", "python3"})
#: env names that change which code runs, around any vetted command (see the module doc)
CODE_ENV = frozenset({"PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE",
                      "PYTHONINSPECT", "PYTHONBREAKPOINT", "BASH_ENV", "ENV"})
CODE_ENV_PREFIXES = ("LD_",)  # the dynamic loader's: LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT


class AdmissionRefused(ValueError):
    """A command or env the admission rules refuse; ``field`` is the spec field at fault."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class AdmittedBy(StrEnum):
    SCRIPT = "script"  # a listed script with its digest
    INTERPRETER_ONLY = "interpreter-only"  # no script; allowed by ``interpreter_only: allow``


@dataclass(frozen=True)
class AdmissionRecord:
    """What was matched at submit; stored as ``job.admission`` and checked at each launch."""

    rule: AdmittedBy
    interpreter: str | None  # what command[0] runs; None when the command is the script
    path: str | None = None  # the script as the command names it
    script: str | None = None  # that path resolved (absolute, symlinks followed)
    sha256: str | None = None  # of the script's bytes when it was checked

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule.value, "interpreter": self.interpreter, "path": self.path,
                "script": self.script, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AdmissionRecord:
        try:
            return cls(AdmittedBy(data["rule"]), data.get("interpreter"), data.get("path"),
                       data.get("script"), data.get("sha256"))
        except (KeyError, ValueError, TypeError) as e:
            raise AdmissionRefused("command", f"the job's admission record {dict(data)!r} is "
                                              "unreadable; resubmit the job") from e


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class Admission:
    """The rules of one admission file, with relative paths taken from ``base_dir``."""

    def __init__(self, spec: AdmissionSpec, base_dir: Path, source: str = "the admission file",
                 python: str = sys.executable) -> None:
        self.spec = spec
        self.base_dir = Path(base_dir).resolve()
        self.source = source
        self.python = python
        self._names = {name for name in spec.interpreters if "/" not in name}
        self._interpreter_files = {p for p in map(self._executable, spec.interpreters) if p}
        self._scripts: dict[Path, tuple[int, ScriptRule]] = {
            self._resolve(rule.path): (i, rule) for i, rule in enumerate(spec.scripts)}

    # ------------------------------------------------------------------ the checks
    def check(self, command: Sequence[str]) -> AdmissionRecord:
        """The rule ``command`` passes, or ``AdmissionRefused`` with the rule and the fix."""
        if not command:
            raise AdmissionRefused("command", "a job needs a command to be admitted")
        interpreter = self._interpreter(command[0])
        if interpreter is None:
            if "/" not in command[0]:  # exec looks a bare name up on PATH, never in the cwd
                raise AdmissionRefused("command[0]", (
                    f"{command[0]!r} is not an allowed interpreter; allowed: "
                    f"{self.spec.interpreters or 'none'}; run a listed script with one of "
                    f"them, or add it to interpreters in {self.source}"))
            return self._script_record(command[0], "command[0]", None)
        if len(command) < 2 or command[1].startswith("-"):
            return self._interpreter_only(command, interpreter)
        return self._script_record(command[1], "command[1]", interpreter)

    def check_env(self, env: Mapping[str, str]) -> None:
        for name in sorted(env):
            if name in CODE_ENV or name.startswith(CODE_ENV_PREFIXES):
                raise AdmissionRefused(f"env.{name}", (
                    f"{name} changes which code a vetted command runs, so admission refuses "
                    "it; remove it (the control plane's own value applies)"))

    def check_launch(self, command: Sequence[str], env: Mapping[str, str],
                     record: AdmissionRecord | None) -> AdmissionRecord:
        """At launch: the same bytes as at submit (``record``), and the current rules."""
        if record is not None and record.path is not None:
            where = self._resolve(record.path)
            if str(where) != record.script:
                raise AdmissionRefused("command", (
                    f"script {record.path} changed after submit: it was {record.script} and "
                    f"now resolves to {where}; resubmit the job"))
            try:
                digest = sha256_of(where)
            except OSError as e:
                raise AdmissionRefused("command", (
                    f"script {record.path} changed after submit: cannot read {where} "
                    f"({e.strerror}); restore it or resubmit the job")) from e
            if digest != record.sha256:
                raise AdmissionRefused("command", (
                    f"script {record.path} changed after submit: sha256 {record.sha256} when "
                    f"it was admitted, {digest} now; resubmit the job (its new digest must be "
                    f"in {self.source})"))
        self.check_env(env)
        return self.check(command)

    # ------------------------------------------------------------------ the parts
    def _resolve(self, path: str) -> Path:
        p = Path(path)
        return (p if p.is_absolute() else self.base_dir / p).resolve()

    def _executable(self, name: str) -> Path | None:
        """The file ``name`` runs: python is the control plane's own, as the backends do."""
        if name in PYTHON_NAMES:
            return Path(self.python).resolve()
        if "/" in name:
            return self._resolve(name)
        found = shutil.which(name)
        return Path(found).resolve() if found else None

    def _interpreter(self, head: str) -> str | None:
        """What ``head`` runs if it is an allowed interpreter (by name, or the same file)."""
        if head in self._names:
            runs = self._executable(head)
            return str(runs) if runs else head
        runs = self._executable(head)
        return str(runs) if runs is not None and runs in self._interpreter_files else None

    def _interpreter_only(self, command: Sequence[str], interpreter: str) -> AdmissionRecord:
        if self.spec.interpreter_only is InterpreterOnly.ALLOW:
            return AdmissionRecord(AdmittedBy.INTERPRETER_ONLY, interpreter)
        if len(command) < 2:
            what, field = f"{command[0]} with no script", "command"
        elif command[1] in ("-c", "-m"):
            what, field = f"{command[0]} {command[1]} ...", "command[1]"
        else:
            raise AdmissionRefused("command[1]", (
                f"{command[1]!r} is an interpreter option; a vetted command is "
                "INTERPRETER SCRIPT [ARGS...]: drop it or pass it after the script "
                "(for -u, set PYTHONUNBUFFERED=1 in env)"))
        raise AdmissionRefused(field, (
            f"{what} runs code no admission rule can vet (interpreter_only: refuse in "
            f"{self.source}); put the code in a script and list it with its sha256"))

    def _script_record(self, arg: str, field: str, interpreter: str | None) -> AdmissionRecord:
        where = self._resolve(arg)
        listed = self._scripts.get(where)
        if listed is None:
            allowed = [rule.path for rule in self.spec.scripts] or "none"
            raise AdmissionRefused(field, (
                f"{arg!r} is not an allowed script (it is {where}); allowed: {allowed}; add it "
                f"to scripts in {self.source} with its sha256 (sha256sum {arg})"))
        i, rule = listed
        try:
            digest = sha256_of(where)
        except OSError as e:
            raise AdmissionRefused(field, (
                f"script {arg} is listed (scripts[{i}]) but cannot be read at {where} "
                f"({e.strerror}); restore it")) from e
        if digest != rule.sha256:
            raise AdmissionRefused(field, (
                f"script {arg} has sha256 {digest} but {self.source} allows {rule.sha256} "
                f"(scripts[{i}]); if the change is vetted, put the new digest there "
                f"(sha256sum {arg}) and restart grace up"))
        return AdmissionRecord(AdmittedBy.SCRIPT, interpreter, arg, str(where), digest)

    # ------------------------------------------------------------------ the file itself
    def file_problems(self) -> tuple[list[SpecProblem], list[SpecProblem]]:
        """(missing, stale): listed scripts that are not there, and those whose bytes no longer
        match their digest. Missing is a typo nothing can match; stale, an edit to vet."""
        missing: list[SpecProblem] = []
        stale: list[SpecProblem] = []
        for where, (i, rule) in self._scripts.items():
            try:
                digest = sha256_of(where)
            except OSError as e:
                missing.append(SpecProblem(f"scripts[{i}].path", (
                    f"cannot read {where} ({e.strerror}); fix the path (relative paths are "
                    f"from {self.base_dir})")))
                continue
            if digest != rule.sha256:
                stale.append(SpecProblem(f"scripts[{i}].sha256", (
                    f"{rule.path} has sha256 {digest} now; jobs running it are refused until "
                    "the new digest is vetted and written here")))
        return missing, stale


def load_admission_for(path: Path, base_dir: Path) -> Admission:
    """``grace up --admission``: the file, checked against the files it lists. A listed
    script that is missing is a SpecError (before anything starts); a stale digest is
    logged, since refusing to start would stop the whole cluster over one edited file."""
    admission = Admission(load_admission(path), base_dir, str(path))
    missing, stale = admission.file_problems()
    if missing:
        raise SpecError(str(path), missing)
    for problem in stale:
        log.warning("admission %s: %s", path, problem)
    return admission


def admit(admission: Admission | None, spec: JobSpec) -> dict[str, Any] | None:
    """At submit: the record to store in ``job.admission`` (None without an admission file),
    or ``AdmissionRefused`` (``.field``, ``.message``) for the API's 422."""
    if admission is None:
        return None
    admission.check_env(spec.env)
    return admission.check(spec.command or []).to_json()


def launch_refusal(admission: Admission | None, spec_json: Mapping[str, Any],
                   record: Mapping[str, Any] | None) -> str | None:
    """At launch: None if the attempt may start, else why not (the job's failure reason)."""
    if admission is None:
        return None
    try:
        admission.check_launch(spec_json.get("command") or [], spec_json.get("env") or {},
                               AdmissionRecord.from_json(record) if record else None)
    except AdmissionRefused as e:
        return str(e)
    return None


def _print_digests(paths: Sequence[str]) -> int:
    """``python -m grace.control.admission FILE...``: ``scripts:`` entries to paste."""
    for p in paths:
        print(f"  - path: {p}\n    sha256: {sha256_of(Path(p))}")
    return 0



__all__ = ["ADMISSION", "Admission", "AdmissionRecord", "AdmissionRefused", "AdmittedBy",
           "admit", "launch_refusal", "load_admission_for", "sha256_of"]

if __name__ == "__main__":
    raise SystemExit(_print_digests(sys.argv[1:]))
