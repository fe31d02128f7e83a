"""Put this process under a sandbox's limits, then become the program: the first step of every
process a ``local`` sandbox starts, an exec's or an MCP server's alike.

Run as a script with Python's ``-S -I`` (the standard library only, nothing of Forge)::

    python -S -I launch.py [--cgroup DIR]... [--rlimit NAME=SOFT:HARD]... [--seccomp FILE] [--user UID:GID]
        -- PROGRAM ARGS...

In order: it joins each control group folder (``cgroup.procs``), opens ``FILE`` (a compiled seccomp
filter) and passes its descriptor to ``PROGRAM`` — bubblewrap — as ``--seccomp FD`` right after the
program's name, becomes ``UID:GID`` (no supplementary groups; a root launcher's way to run the sandbox
as an unprivileged user), sets the rlimits (``NAME`` as in :mod:`resource` without ``RLIMIT_``: ``AS``,
``CPU``, ``NOFILE``, ``FSIZE``, ``NPROC``, ``CORE``) and ``exec``\\ s the program. An MCP client that
only takes an argv (the SDK's stdio client) thereby starts its server under the same bounds as an
exec. Whatever fails is said on stderr with exit status 126 (127: the program was not found).
"""

from __future__ import annotations

import os
import resource
import sys


class Plan:
    """What the command line asks for."""

    def __init__(self) -> None:
        self.groups: list[str] = []
        self.limits: list[tuple[int, int, int]] = []  # (resource, soft, hard)
        self.seccomp: str | None = None
        self.user: tuple[int, int] | None = None
        self.program: list[str] = []


def parse(argv: list[str]) -> Plan:
    """The :class:`Plan` of a command line (a ValueError for one that is not valid)."""
    plan = Plan()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            plan.program = argv[i + 1:]
            return plan
        if i + 1 >= len(argv):
            raise ValueError(f"{arg} needs a value")
        value = argv[i + 1]
        if arg == "--cgroup":
            plan.groups.append(value)
        elif arg == "--seccomp":
            plan.seccomp = value
        elif arg == "--user":
            uid, _, gid = value.partition(":")
            plan.user = (int(uid), int(gid or uid))
        elif arg == "--rlimit":
            name, _, numbers = value.partition("=")
            soft, _, hard = numbers.partition(":")
            plan.limits.append((getattr(resource, f"RLIMIT_{name}"), int(soft), int(hard or soft)))
        else:
            raise ValueError(f"unknown option {arg}")
        i += 2
    raise ValueError("no program after --")


def main(argv: list[str]) -> int:
    try:
        plan = parse(argv)
        program = plan.program
        if not program:
            raise ValueError("no program after --")
        for folder in plan.groups:
            fd = os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        if plan.seccomp is not None:
            fd = os.open(plan.seccomp, os.O_RDONLY)
            os.set_inheritable(fd, True)  # the program (bubblewrap) reads it
            program = [program[0], "--seccomp", str(fd), *program[1:]]
        if plan.user is not None:
            uid, gid = plan.user
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        for which, soft, hard in plan.limits:
            current = resource.getrlimit(which)[1]
            if current != resource.RLIM_INFINITY:  # never above what this process may have
                soft, hard = min(soft, current), min(hard, current)
            resource.setrlimit(which, (soft, hard))
    except (OSError, ValueError, AttributeError) as exc:
        print(f"forge sandbox launcher: {exc}", file=sys.stderr)
        return 126
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        print(f"forge sandbox launcher: cannot run {program[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 126  # not reached: execvp does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
