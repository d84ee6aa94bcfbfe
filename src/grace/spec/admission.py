"""AdmissionSpec (``kind: admission``): the code a shared cluster agrees to run.

On a cluster many teams share, a job's ``command`` is code that runs with the
cluster's GPUs, data mounts and network. The operator lists what may run, and
the control plane refuses anything else at submit (the user sees the rule and
the fix) and again at every launch (a script edited after it was vetted is
refused: ``grace.control.admission``).

What a rule can vet, and so what the file lists:

* ``scripts``: files by path and SHA-256. A command runs one as
  ``INTERPRETER SCRIPT ARGS...`` or, for an executable file, ``./SCRIPT ARGS...``.
  The digest binds the bytes that were vetted, not a name anyone can overwrite.
* ``interpreters``: what may stand as ``command[0]`` in front of a script, by
  name (``python``, ``bash``) or absolute path. ``python`` and ``python3`` are the
  control plane's own interpreter, as the backends run them.
* ``interpreter_only``: commands with no script to hash (``python -c CODE``,
  ``python -m MODULE``, ``bash -c``, a bare ``python``). Refused by default: a
  vetted-code rule that ``-c`` could bypass vets nothing. ``-m`` is refused with
  them because a module is found through ``sys.path`` at run time (the job's
  working directory first), so nothing hashed at submit would bind what runs;
  vet a small script that imports it instead. ``allow`` turns vetting off for
  such commands (a trusted cluster that still wants its interpreter list).
* ``images``: container images by digest, for Slurm sites that run jobs in
  containers. Jobs carry no image today (``JobSpec`` has no image field and the
  Slurm backend starts none), so the list is validated and kept for when they
  do: an image will be admitted by its ``sha256:`` digest only, never a tag.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_SHA256 = re.compile(r"[0-9a-f]{64}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: a bare executable name, found on PATH (no slash: a relative path would depend on the cwd)
_EXECUTABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")


class InterpreterOnly(StrEnum):
    """What happens to a command that runs an interpreter on no vetted script."""

    REFUSE = "refuse"
    ALLOW = "allow"


class ScriptRule(BaseModel):
    """One file that may run, and the digest of the bytes that were vetted."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, description="relative to the control plane's working "
                                                "directory, or absolute")
    sha256: str = Field(description="64 hex digits: what `sha256sum PATH` prints")

    @field_validator("sha256", mode="before")
    @classmethod
    def _hex_digest(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip().lower()
            if value.startswith("sha256:"):
                value = value[len("sha256:"):]
            if not _SHA256.fullmatch(value):
                raise ValueError(f"must be 64 hex digits, as `sha256sum FILE` prints; got {value!r}")
        return value


class ImageRule(BaseModel):
    """A container image, admitted by content digest (a tag can be moved to other bytes)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, description="for people: registry/repo")
    digest: str

    @field_validator("digest")
    @classmethod
    def _by_digest(cls, value: str) -> str:
        value = value.strip().lower()
        if not _DIGEST.fullmatch(value):
            raise ValueError("must be sha256:<64 hex digits> (docker inspect --format "
                             f"'{{{{.Id}}}}' IMAGE, or the registry's digest); got {value!r}")
        return value


class AdmissionSpec(BaseModel):
    """The allow-list: validated whole at ``grace up``, trusted afterwards."""

    model_config = ConfigDict(extra="forbid")

    interpreters: list[str] = Field(default_factory=list)
    scripts: list[ScriptRule] = Field(default_factory=list)
    images: list[ImageRule] = Field(default_factory=list)
    interpreter_only: InterpreterOnly = InterpreterOnly.REFUSE

    @field_validator("interpreters")
    @classmethod
    def _names_or_absolute(cls, interpreters: list[str]) -> list[str]:
        bad = [f"[{i}] {name!r}" for i, name in enumerate(interpreters)
               if not (_EXECUTABLE_NAME.fullmatch(name) or name.startswith("/"))]
        if bad:
            raise ValueError(f"{', '.join(bad)}: give a name found on PATH (python, bash) or an "
                             "absolute path (/usr/bin/python3); a relative path depends on "
                             "where a job runs")
        return interpreters

    @model_validator(mode="after")
    def _one_rule_per_script(self) -> AdmissionSpec:
        seen: dict[str, int] = {}
        for i, rule in enumerate(self.scripts):
            if rule.path in seen:
                raise ValueError(f"scripts[{i}].path: {rule.path!r} is listed twice (also "
                                 f"scripts[{seen[rule.path]}]); keep one digest per file")
            seen[rule.path] = i
        return self


__all__ = ["AdmissionSpec", "ImageRule", "InterpreterOnly", "ScriptRule"]
