"""The one seam between Grace and Slurm: its command-line tools, run as subprocesses.

Grace talks to Slurm only through ``sbatch``, ``squeue``, ``sinfo``, ``scontrol``,
``scancel`` and ``sacct``, as a person would, so it works on any cluster the
user can submit to, without slurmrestd or a plugin. Each call has a timeout (a
hung slurmctld must not hang the reconciler) and a failure names the command
and Slurm's own message. The parsers here are pure, so they are tested without
a cluster.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence

#: Seconds any one Slurm command may take; slurmctld answers in milliseconds when well.
COMMAND_TIMEOUT_S = 30.0


class SlurmError(RuntimeError):
    """A Slurm command failed or is missing; the message says which and why."""


class SlurmCli:
    """Runs Slurm commands; ``conf`` (a slurm.conf path) overrides ``$SLURM_CONF``."""

    def __init__(self, conf: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        self.conf = conf
        self.timeout_s = timeout_s

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(self, *args: str, check: bool = True, stdin: str | None = None,
            env: Mapping[str, str] | None = None) -> str:
        """stdout of ``args``; raises SlurmError on a non-zero exit when ``check``.

        ``env`` is the command's whole environment (default ``self.env()``): how
        ``sbatch`` gets an attempt's secrets without them on its command line.
        Error messages name the command's arguments, never its environment.
        """
        try:
            done = subprocess.run(list(args), input=stdin, capture_output=True, text=True,
                                  env=dict(env) if env is not None else self.env(),
                                  timeout=self.timeout_s)
        except FileNotFoundError as e:
            raise SlurmError(f"{args[0]} not found: install Slurm's client tools "
                             "(Debian: apt install slurm-client) or fix PATH") from e
        except subprocess.TimeoutExpired as e:
            raise SlurmError(f"{' '.join(args)} took over {self.timeout_s:.0f}s: is slurmctld up?") from e
        if check and done.returncode != 0:
            msg = (done.stderr or done.stdout).strip()
            raise SlurmError(f"{' '.join(args)} exited {done.returncode}: {msg}")
        return done.stdout

    def available(self) -> bool:
        """Does a slurmctld answer? (``scontrol ping``)"""
        try:
            return " is UP" in self.run("scontrol", "ping", check=False)
        except SlurmError:
            return False


_RANGE = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(expr: str) -> list[str]:
    """``n[1-3,7],gpu[01-02]`` -> ``[n1, n2, n3, n7, gpu01, gpu02]`` (Slurm's hostlist syntax).

    Done here rather than by ``scontrol show hostnames`` because inventory and
    every observation need it and a subprocess each time would cost more than
    the parsing. Zero padding is kept as Slurm keeps it.
    """
    out: list[str] = []
    for part in _split_top(expr.strip()):
        if not part:
            continue
        m = _RANGE.search(part)
        if m is None:
            out.append(part)
            continue
        head, tail = part[: m.start()], part[m.end():]
        for item in m.group(1).split(","):
            lo, _, hi = item.partition("-")
            if not hi:
                values = [lo]
            else:
                width = len(lo) if lo.startswith("0") else 0
                values = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
            for v in values:
                out.extend(expand_hostlist(head + v + tail))  # a second bracket, e.g. r[1-2]n[1-4]
    return out


def _split_top(expr: str) -> list[str]:
    """Split on commas outside brackets."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        depth += (ch == "[") - (ch == "]")
        cur.append(ch)
    parts.append("".join(cur))
    return parts


_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")


def parse_record(line: str) -> dict[str, str]:
    """One ``scontrol -o show ...`` line -> ``{key: value}``; values may hold spaces (Reason=...)."""
    keys = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def parse_table(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """Rows of ``-P``/``--parsable2`` or ``-o 'a|b|c'`` output without a header line."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|", len(fields) - 1)
        rows.append(dict(zip(fields, values + [""] * (len(fields) - len(values)), strict=True)))
    return rows


def parse_exit_code(text: str) -> tuple[int, int]:
    """Slurm's ``ExitCode=N:S`` -> (exit status, terminating signal)."""
    code, _, sig = text.partition(":")
    try:
        return int(code or 0), int(sig or 0)
    except ValueError:
        return 0, 0
