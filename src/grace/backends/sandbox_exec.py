"""The exec shim between the control plane (root) and an attempt's agent.

``python -S -E sandbox_exec.py [--join FILE]... [--uid U --gid G] -- program args...``

Run as root, in this order: write its own pid into each ``--join`` file (the
``cgroup.procs`` of the attempt-node's cgroups, so it and everything it ever
starts are in them before anything else runs), drop every supplementary
group, ``setgid``, ``setuid`` (real, effective and saved, so nothing can
regain root), set the umask to 0o077, then ``execv`` the program. Any
failure ends it with code 126 and a line on stderr before the program starts,
so a job never runs half-isolated.

Why a separate process and not ``preexec_fn``: the control plane has threads,
and running Python between ``fork`` and ``exec`` in a threaded process can
deadlock; and the cgroup must be joined by the process itself before it forks
anything (moving a pid from outside races with its first ``fork``).

It imports nothing but ``os`` and ``sys`` and is run with ``-S -E`` (no site,
no ``PYTHON*`` variables for itself; the program still gets the whole
environment), so it adds a few milliseconds to a launch.
"""

from __future__ import annotations

import os
import sys

#: Exit code when the shim cannot isolate the program (as a shell's "cannot execute").
CANNOT_ISOLATE = 126


def _die(message: str) -> None:
    sys.stderr.write(f"grace sandbox: {message}\n")
    sys.stderr.flush()
    os._exit(CANNOT_ISOLATE)


def main(argv: list[str]) -> None:
    joins: list[str] = []
    uid: int | None = None
    gid: int | None = None
    i = 0
    while i < len(argv) and argv[i] != "--":
        flag = argv[i]
        if i + 1 >= len(argv):
            _die(f"{flag} needs a value")
        value = argv[i + 1]
        if flag == "--join":
            joins.append(value)
        elif flag == "--uid":
            uid = int(value)
        elif flag == "--gid":
            gid = int(value)
        else:
            _die(f"unknown flag {flag}")
        i += 2
    program = argv[i + 1:]
    if not program:
        _die("give the program to run after --")
    if (uid is None) != (gid is None):
        _die("give both --uid and --gid, or neither")
    pid = str(os.getpid())
    for path in joins:
        try:
            with open(path, "w") as f:
                f.write(pid)
        except OSError as e:
            _die(f"cannot join cgroup {path}: {e}")
    if uid is not None and gid is not None:
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except OSError as e:
            _die(f"cannot become uid {uid} gid {gid}: {e}")
        if os.geteuid() != uid or os.getegid() != gid or os.getgroups():
            _die(f"still not uid {uid} gid {gid} after setuid")
    os.umask(0o077)
    try:
        os.execv(program[0], program)
    except OSError as e:
        _die(f"cannot run {program[0]}: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])
