"""The sandbox contract: what every backend (``local``, ``docker``) offers a caller.

A :class:`Sandbox` is one trajectory's place to run programs. Its *work directory* is where the
agent works (the task's files, the agent's edits; the verifier inspects it afterwards); paths given
to :meth:`Sandbox.write_file`, :meth:`Sandbox.read_file`, :meth:`Sandbox.copy_in` and
:meth:`Sandbox.copy_out` are relative to it and may not leave it. :meth:`Sandbox.exec` runs a
command there and always returns an :class:`ExecResult` — a program that crashes, hangs past its
deadline, runs out of memory or cannot start is a result, never an exception. :meth:`Sandbox.close`
ends whatever the sandbox still runs; the work directory itself belongs to the caller and stays.

A backend that isolates the network is handed a :class:`GatewayAccess` when it is opened: the
gateway's unix socket on the host and the loopback port the agent must see, so that
``http://127.0.0.1:PORT`` inside the sandbox reaches the gateway (through ``forward.py``).
:meth:`Sandbox.stdio_command` is the host command line that runs a program inside the sandbox with
its stdin/stdout connected to the caller (an MCP client on the host launches stdio servers with it).
"""

from __future__ import annotations

import asyncio
import os
import signal as _signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence, runtime_checkable

from forge_cli.errors import ForgeError
from forge_cli.sandbox import quota
from forge_cli.sandbox.hostfiles import MAX_READ_BYTES, copy_tree, read_regular, remove_tree, resolve_inside, write_regular

FOLDER_PREFIX = "forge-sandbox-"  # a sandbox's own folder in the temporary directory


@dataclass(frozen=True)
class GatewayAccess:
    """How a sandboxed agent reaches the gateway: ``socket`` is the gateway's unix socket on the
    host, ``port`` the loopback port the agent is told (``http://127.0.0.1:PORT``); a backend with
    its own network namespace forwards that port inside to the socket."""

    socket: Path
    port: int


@dataclass(frozen=True)
class ExecResult:
    """How one command ended.

    ``exit_code`` is the program's exit status, or ``-N`` when signal ``N`` killed it (as
    :attr:`subprocess.Popen.returncode`), or ``None`` when it never started. ``stdout`` and
    ``stderr`` are the *tails* of its output (the last bytes the sandbox keeps, decoded as UTF-8
    with replacement). ``timed_out`` means the wall-time limit was reached and the sandbox killed
    it; ``memory_exceeded`` / ``cpu_exceeded`` mean it ended, by all signs, on its memory or
    CPU-time limit; ``processes_exceeded`` / ``disk_exceeded`` that the sandbox killed it for
    reaching its process limit or for writing past its disk limit. ``reason`` says all of that in
    one line.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    reason: str
    started: bool = True
    timed_out: bool = False
    memory_exceeded: bool = False
    cpu_exceeded: bool = False
    processes_exceeded: bool = False
    disk_exceeded: bool = False

    @property
    def ok(self) -> bool:
        """It started, finished on its own within its limits, and exited 0."""
        return self.started and not self.timed_out and self.exit_code == 0

    @property
    def signal(self) -> int | None:
        """The signal that ended it, if one did."""
        return -self.exit_code if self.exit_code is not None and self.exit_code < 0 else None


@runtime_checkable
class Sandbox(Protocol):
    """One trajectory's place to run programs (see the module's docstring)."""

    @property
    def workdir(self) -> Path:
        """The work directory on the host (for the verifier); programs run with it as their cwd."""
        ...

    async def exec(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        memory_bytes: int | None = None,
        cpu_time_s: float | None = None,
    ) -> ExecResult:
        """Run ``command`` (an argv list, no shell) in the work directory with ``env`` added to the
        sandbox's clean environment; kill it and everything it started after ``timeout_s`` seconds
        of wall time. ``memory_bytes`` / ``cpu_time_s`` override the sandbox's own limits."""
        ...

    def stdio_command(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """The host argv that runs ``command`` inside the sandbox (its cwd the work directory, ``env``
        added to its clean environment) with stdin/stdout connected to whoever starts that argv:
        bubblewrap's arguments then ``command``, ``docker exec -i CONTAINER …``, or ``command`` itself
        for a plain subprocess. The caller owns the process it starts with it."""
        ...

    async def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``data`` to ``path`` in the work directory (parents made as needed)."""
        ...

    async def read_file(self, path: str) -> bytes:
        """The bytes of ``path`` in the work directory."""
        ...

    async def copy_in(self, src: Path, dest: str) -> None:
        """Copy a host file or folder ``src`` to ``dest`` in the work directory."""
        ...

    async def copy_out(self, src: str, dest: Path) -> None:
        """Copy ``src`` (a file or folder in the work directory) to the host path ``dest``."""
        ...

    async def close(self) -> None:
        """Kill whatever still runs in the sandbox and free what it holds (not the work directory)."""
        ...


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
