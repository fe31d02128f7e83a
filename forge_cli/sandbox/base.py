"""What the sandbox backends share: the work directory's file operations, output tails, the exec
result's making, owners and folders. The contract itself (:class:`Sandbox`, :class:`ExecResult`,
:class:`GatewayAccess`) is :mod:`forge_cli.sandbox.contract`.
"""

from __future__ import annotations

import asyncio
import os
import signal as _signal
import tempfile
from pathlib import Path
from typing import Sequence

from forge_cli.errors import ForgeError
from forge_cli.sandbox import quota
from forge_cli.sandbox.contract import ExecResult
from forge_cli.sandbox.hostfiles import (
    MAX_READ_BYTES,
    copy_tree,
    read_regular,
    remove_tree,
    resolve_inside,
    write_regular,
)

FOLDER_PREFIX = "forge-sandbox-"  # a sandbox's own folder in the temporary directory


class WorkdirFiles:
    """The file half of :class:`Sandbox` for backends whose work directory is a host folder
    (``_workdir``) that programs see at the same path: ``local`` and ``docker``. ``backend`` names
    the backend in errors; :meth:`_handed` is called on what was written (docker hands it to the
    container's user)."""

    backend = "sandbox"
    _workdir: Path

    def _handed(self, target: Path) -> None:
        """Called on every file or folder written into the work directory (nothing by default)."""

    async def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``data`` to ``path`` through :func:`~forge_cli.sandbox.hostfiles.write_regular` (no link followed)."""
        target = inside(self._workdir, path)

        def write() -> None:
            write_regular(self._workdir, path, data.encode() if isinstance(data, str) else data)
            self._handed(target)

        try:
            await asyncio.to_thread(write)
        except OSError as exc:  # ENOSPC at the disk limit, a folder in the way, …
            raise ForgeError(f"{self.backend} sandbox: cannot write {path!r}: {exc.strerror or exc}") from None

    async def read_file(self, path: str, *, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """The bytes of the regular file ``path`` (no FIFO, device or link out; at most ``max_bytes``):
        :func:`~forge_cli.sandbox.hostfiles.read_regular`."""
        try:
            return await asyncio.to_thread(read_regular, self._workdir, path, max_bytes=max_bytes)
        except ForgeError as exc:
            raise ForgeError(f"{self.backend} sandbox: {exc}") from None

    async def copy_in(self, src: Path, dest: str) -> None:
        target = inside(self._workdir, dest)

        def copy() -> None:
            src_path = Path(src)
            if not src_path.exists():
                raise ForgeError(f"{self.backend} sandbox: nothing to copy at {src_path}")
            copy_tree(src_path, target)  # a link where the copy goes is replaced, never followed
            self._handed(target)

        try:
            await asyncio.to_thread(copy)
        except OSError as exc:
            raise ForgeError(f"{self.backend} sandbox: cannot copy {src} in: {exc.strerror or exc}") from None

    async def copy_out(self, src: str, dest: Path) -> None:
        """Copy ``src`` out with :func:`~forge_cli.sandbox.hostfiles.copy_tree` (links as links, no FIFO
        or device, no setuid bit)."""
        source = inside(self._workdir, src)

        def copy() -> None:
            if not os.path.lexists(source):
                raise ForgeError(f"{self.backend} sandbox: nothing to copy at {source}")
            copy_tree(source, Path(dest))

        await asyncio.to_thread(copy)


class OutputTail:
    """The last ``size`` bytes of a stream (a program's stdout or stderr), and how many it sent in all."""

    def __init__(self, size: int) -> None:
        self.size, self.data, self.total = size, bytearray(), 0

    def add(self, chunk: bytes | None) -> None:
        if chunk:
            self.total += len(chunk)
            self.data += chunk
            if len(self.data) > 2 * self.size:
                del self.data[: len(self.data) - self.size]

    def text(self) -> str:
        return bytes(self.data[-self.size:]).decode("utf-8", errors="replace")


def exec_argv(backend: str, closed: bool, command: Sequence[str], timeout_s: float | None) -> list[str]:
    """``command`` as strings, once it is one a backend can run: a ForgeError for an exec after
    :meth:`Sandbox.close`, an empty command or a deadline that is not positive."""
    if closed:
        raise ForgeError(f"{backend} sandbox: exec after close")
    argv = [str(c) for c in command]
    if not argv:
        raise ForgeError(f"{backend} sandbox: exec needs a command")
    if timeout_s is not None and timeout_s <= 0:
        raise ForgeError(f"{backend} sandbox: timeout_s must be positive, not {timeout_s}")
    return argv


def inside(workdir: Path, path: str) -> Path:
    """``path`` (relative, POSIX-style) resolved inside ``workdir``; a ForgeError if it would leave it."""
    return resolve_inside(workdir, path)


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9, and so on (``signal N`` for numbers Python does not name)."""
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def owner_of(pid: int) -> str | None:
    """``BOOT:PID:START`` naming process ``pid`` uniquely on this machine (None if it is gone): what a
    sandbox records as its owner, so that a later process can tell a dead run's leftovers from a live one's."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    start = stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name
    return f"{boot}:{pid}:{start}"


def owner_alive(owner: str) -> bool:
    """Whether the process an :func:`owner_of` string names still runs."""
    try:
        pid = int(owner.split(":")[1])
    except (IndexError, ValueError):
        return False
    return owner_of(pid) == owner


# Words a program's error output says when an allocation failed.
MEMORY_WORDS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc", "ENOMEM",
                "memory allocation failed", "failed to allocate")
# Words it says when a write hit the file-size limit or a full file system.
DISK_WORDS = ("File too large", "No space left on device", "EFBIG", "ENOSPC")


def exec_result(code: int | None, stdout: str, stderr: str, wall: float, timed_out: bool, timeout_s: float | None,
                memory: int | None, cpu: float | None, *, oom: bool = False, bound: str | None = None,
                processes: int | None = None, disk: int | None = None, files: int | None = None,
                disk_full: bool = False) -> ExecResult:
    """The :class:`ExecResult` of a finished process, with its one-line reason (every backend's).

    ``bound`` is the limit the sandbox killed it for (``processes``, ``memory``, ``disk``), if any;
    ``disk``/``files`` the disk limit in bytes and in files, when one applies; ``disk_full`` that its
    file system of that limit was full when it ended (it may have failed on that)."""
    sig = -code if code is not None and code < 0 else None
    memory_exceeded = cpu_exceeded = file_too_big = False
    disk_text = f"{(disk or 0) / 2**20:g} MiB" + (f" or {files} files" if files else "")
    if timed_out:
        reason = f"timed out after {timeout_s:g} s of wall time; its processes were killed"
    elif bound == "processes":
        reason = f"reached its limit of {processes} processes (a fork failed); its processes were killed"
    elif bound == "memory":
        memory_exceeded = True
        reason = (f"went over its memory limit of {(memory or 0) / 2**20:g} MiB (the kernel killed one of its "
                  "processes); its processes were killed")
    elif bound == "disk":
        reason = f"reached its disk limit of {disk_text} in its work directory and home; its processes were killed"
    elif code == 0:
        reason = "exited 0"
    else:
        cpu_exceeded = not oom and cpu is not None and sig in (_signal.SIGXCPU, _signal.SIGKILL)
        memory_exceeded = memory is not None and not cpu_exceeded and (
            oom or any(word in stderr[-4000:] for word in MEMORY_WORDS)
            or sig in (_signal.SIGSEGV, _signal.SIGABRT, _signal.SIGBUS)
        )
        reason = f"killed by {signal_name(sig)}" if sig else f"exited {code}"
        if file_too_big := disk is not None and (disk_full or sig == _signal.SIGXFSZ
                                                 or any(w in stderr[-4000:] for w in DISK_WORDS)):
            reason += f" (it reached its disk limit of {disk_text})"
        if cpu_exceeded:
            reason += f" (it used up its CPU-time limit of {cpu:g} s)"
        elif memory_exceeded:
            reason += f" (it ran out of its memory limit of {(memory or 0) / 2**20:g} MiB)"
        last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
        if last:
            reason += f": {last[:200]}"
    return ExecResult(code, stdout, stderr, wall, reason, timed_out=timed_out,
                      memory_exceeded=memory_exceeded, cpu_exceeded=cpu_exceeded,
                      processes_exceeded=bound == "processes", disk_exceeded=bound == "disk" or file_too_big)


def pid_namespace() -> str:
    """This process's pid namespace (``pid:[INODE]``): owners are comparable only within one."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "?"


def make_folder() -> Path:
    """A sandbox's own folder in the temporary directory, marked with its owner (this process) so that
    :func:`sweep_folders` can tell a dead owner's from a live one's."""
    root = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    (root / "owner").write_text(f"{owner_of(os.getpid()) or ''} {pid_namespace()}")
    return root


def sweep_folders() -> list[str]:
    """Remove the sandbox folders (and undo the disk limits' mounts) of owners that are gone — those this
    process can judge: owners in its pid namespace (a /tmp shared with another holds live ones it cannot
    see). Their names."""
    removed = []
    here = pid_namespace()
    for root in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            owner, _, namespace = (root / "owner").read_text().strip().partition(" ")
        except OSError:
            continue  # not one of ours, or still being made
        if owner and namespace == here and not owner_alive(owner):
            quota.sweep(root)
            remove_tree(root)
            removed.append(root.name)
    return removed
