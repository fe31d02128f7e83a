"""Finding and ending the processes a ``local`` sandbox started: by process group, by control group, and
by the mark every process of one exec carries in its environment (:data:`MARKER_VAR`), which catches
children that started a session of their own."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from forge_cli.sandbox.cgroup import ExecCgroup

# Every process started by one exec carries MARKER_VAR=<a fresh id>, so its leftovers can be found.
MARKER_VAR = "FORGE_SANDBOX_EXEC"


def _is_bwrap(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "bwrap"
    except OSError:
        return False


def signal_tree(pgid: int | None, marker: str, cgroup: ExecCgroup | None, sig: int) -> None:
    """Send ``sig`` to the group ``pgid``, everything in ``cgroup`` and every process marked ``marker``
    (bubblewrap's own processes are spared when ``pgid`` is ``None``: they end with the program)."""
    if pgid is not None:
        _signal_group(pgid, sig)
    if cgroup is not None:
        for pid in cgroup.procs():
            if pgid is None and _is_bwrap(pid):
                continue
            kill(pid, sig)
    for pid in marked_pids(marker):
        kill(pid, sig)


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to ``pid``; one already gone (or not ours) is nothing to do."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def marked_pids(marker: str) -> list[int]:
    """The processes (other than this one) whose environment carries ``MARKER_VAR=marker`` (Linux)."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def kill_all(pgid: int, marker: str) -> None:
    """SIGKILL the process group ``pgid`` and every process marked with ``marker``, until none is left."""
    _signal_group(pgid, signal.SIGKILL)
    for _ in range(5):
        pids = marked_pids(marker)
        if not pids:
            return
        for pid in pids:
            kill(pid)
        time.sleep(0.01)
