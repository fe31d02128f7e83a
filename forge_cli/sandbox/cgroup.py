"""A control group per sandboxed exec: a hard bound on its processes and its memory, and a kill list.

As root, ``RLIMIT_NPROC`` contains nothing (the kernel exempts root's user from it) and a pid
namespace has no size of its own, so what really stops a fork bomb is the ``pids`` controller; the
``memory`` controller bounds the whole tree's memory (``RLIMIT_AS`` only bounds each process's
address space). :class:`ExecCgroup` makes a child group of this process's own group in each
controller it may write — cgroup v2 (``/sys/fs/cgroup/cgroup.controllers``) or v1
(``/sys/fs/cgroup/pids``, ``/sys/fs/cgroup/memory``) — the exec's first process joins it before it
runs (:mod:`~forge_cli.sandbox.launch` writes to each folder's ``cgroup.procs``), and afterwards kills every process
still in it and removes it. Where no controller is writable (not root, a read-only cgroupfs)
:func:`ExecCgroup.create` returns ``None`` and the caller keeps its rlimits only.

A group's name carries its owner (``forge-sandbox-PID-START-ID``: the creating process and its start
time), so :func:`sweep_stale` — run by the next process in the same control group — can kill and
remove the groups of a process that died without cleaning up (SIGKILL), with whatever it had started
still inside. A group whose owner could not be named (``PID-?``) is never swept.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from forge_cli.sandbox.base import owner_of

ROOT = Path("/sys/fs/cgroup")
PREFIX = "forge-sandbox-"


def _owner_tag(pid: int | None = None) -> str:
    """``PID-START`` of a process (this one by default); ``PID-?`` if it is gone."""
    pid = os.getpid() if pid is None else pid
    owner = owner_of(pid)
    return f"{pid}-{owner.rsplit(':', 1)[1] if owner else '?'}"


def _hierarchies() -> list[tuple[str, Path]]:
    """The folders this process's exec groups are made in: (controller key, folder)."""
    if (ROOT / "cgroup.controllers").exists():
        own = _own_path("")
        return [("unified", ROOT / own.lstrip("/"))] if own is not None else []
    found = []
    for controller in ("pids", "memory"):
        own = _own_path(controller)
        if own is not None and (ROOT / controller).is_dir():
            found.append((controller, ROOT / controller / own.lstrip("/")))
    return found


def sweep_stale() -> list[str]:
    """Kill the processes in, and remove, the exec groups whose owner process is gone; their names."""
    removed = []
    for key, folder in _hierarchies():
        try:
            entries = [d for d in folder.iterdir() if d.name.startswith(PREFIX) and d.is_dir()]
        except OSError:
            continue
        for d in entries:
            parts = d.name[len(PREFIX):].split("-")
            if len(parts) < 3 or not parts[0].isdigit() or parts[1] == "?" \
                    or _owner_tag(int(parts[0])) == f"{parts[0]}-{parts[1]}":
                continue  # not named by a known owner, or its owner still runs
            ExecCgroup({key: d}, None, None).remove()
            if not d.exists():
                removed.append(d.name)
    return removed


def _own_path(controller: str) -> str | None:
    """This process's group in ``controller`` (``""`` for cgroup v2's unified line), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return path
    return None


class ExecCgroup:
    """The control group(s) of one exec: ``dirs`` are its folders, one per controller hierarchy."""

    def __init__(self, dirs: dict[str, Path], pids_max: int | None, memory_bytes: int | None) -> None:
        self.dirs = dirs
        self.pids_max = pids_max
        self.memory_bytes = memory_bytes

    @classmethod
    def create(cls, *, pids_max: int | None, memory_bytes: int | None) -> "ExecCgroup | None":
        """A new group bounding ``pids_max`` processes (threads count) and ``memory_bytes`` in all;
        ``None`` when nothing here can be bounded this way."""
        name = f"{PREFIX}{_owner_tag()}-{uuid.uuid4().hex[:12]}"
        dirs: dict[str, Path] = {}
        limits = {"pids": pids_max, "memory": memory_bytes}
        try:
            for key, folder in _hierarchies():
                if key != "unified" and limits[key] is None:
                    continue
                d = folder / name
                d.mkdir()
                dirs[key] = d
                if key == "unified":
                    if pids_max is not None:
                        (d / "pids.max").write_text(str(pids_max))
                    if memory_bytes is not None:
                        (d / "memory.max").write_text(str(memory_bytes))
                        _try_write(d / "memory.swap.max", "0")
                elif key == "pids":
                    (d / "pids.max").write_text(str(pids_max))
                else:
                    (d / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    _try_write(d / "memory.memsw.limit_in_bytes", str(memory_bytes))
                    _try_write(d / "memory.swappiness", "0")
        except OSError:
            cls(dirs, pids_max, memory_bytes).remove()
            return None
        return cls(dirs, pids_max, memory_bytes) if dirs else None

    def procs(self) -> list[int]:
        """The processes in the group now."""
        found: set[int] = set()
        for d in self.dirs.values():
            try:
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def signal_all(self, sig: int) -> None:
        for pid in self.procs():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self, within: float = 2.0) -> None:
        """SIGKILL everything in the group until it is empty (or ``within`` seconds have passed)."""
        deadline = time.monotonic() + within
        while self.procs() and time.monotonic() < deadline:
            self.signal_all(signal.SIGKILL)
            time.sleep(0.01)

    def pids_limit_hit(self) -> bool:
        """A fork failed because the group was at ``pids_max``."""
        for key in ("unified", "pids"):
            d = self.dirs.get(key)
            if d is not None and _event_count(d / "pids.events", "max") > 0:
                return True
        return False

    def oom_killed(self) -> bool:
        """The kernel killed a process of the group for going over ``memory_bytes``."""
        if "unified" in self.dirs:
            return _event_count(self.dirs["unified"] / "memory.events", "oom_kill") > 0
        if "memory" in self.dirs:
            return _event_count(self.dirs["memory"] / "memory.oom_control", "oom_kill") > 0
        return False

    def remove(self) -> None:
        """Kill what is left and remove the group's folders."""
        self.kill()
        for d in self.dirs.values():
            for _ in range(100):  # the kernel frees a group a moment after its last process is reaped
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _event_count(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _try_write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError:
        pass
