"""Who owns a running trajectory: a process, named so that a dead one can be told from a live one.

An owner is ``HOST:PID:START``: the host name, the process id and the process's start time. On
Linux ``START`` is the kernel's boot id and the process's start tick (``/proc/PID/stat``), so a
pid the kernel handed to a new process after the owner died, or after a reboot, does not pass for
the owner. Elsewhere ``START`` is empty and only the pid is checked.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from pathlib import Path


def _start_time(pid: int) -> str | None:
    """``BOOT_ID.TICKS`` for a live process, ``""`` where /proc is not there, None if it is gone."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, someone else's
        return ""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    if fields[0] in ("Z", "X"):  # exited, not yet reaped: not running anything
        return None
    return f"{_boot_id()}.{fields[19]}"  # field 22 of stat(5), counted from field 3


@lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


_this: tuple[int, str] | None = None  # (pid, owner string): read from /proc once a process (a fork reads again)


def this_process() -> str:
    """The owner string of the calling process."""
    global _this
    pid = os.getpid()
    if _this is None or _this[0] != pid:
        _this = (pid, f"{socket.gethostname()}:{pid}:{_start_time(pid) or ''}")
    return _this[1]


def is_local(owner: str) -> bool:
    """Whether ``owner`` names a process on this host."""
    return owner.rsplit(":", 2)[0] == socket.gethostname()


def is_dead(owner: str) -> bool:
    """Whether ``owner``, a process on this host, is no longer running (gone, or its pid reused).

    A malformed owner string counts as dead: no process can be found under it. Owners on other
    hosts cannot be checked from here: call this only where :func:`is_local` holds.
    """
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return True
    now = _start_time(int(parts[1]))
    if now is None:
        return True
    return bool(parts[2]) and bool(now) and parts[2] != now
