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
import shutil
import signal as _signal
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping, Protocol, Sequence, runtime_checkable

from forge_cli.errors import ForgeError


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
        target = inside(self._workdir, path)

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data.encode() if isinstance(data, str) else data)
            self._handed(target)

        await asyncio.to_thread(write)

    async def read_file(self, path: str) -> bytes:
        target = inside(self._workdir, path)
        try:
            return await asyncio.to_thread(target.read_bytes)
        except OSError as exc:
            raise ForgeError(f"{self.backend} sandbox: cannot read {path!r}: {exc.strerror or exc}") from None

    async def copy_in(self, src: Path, dest: str) -> None:
        target = inside(self._workdir, dest)

        def copy() -> None:
            self._copy(Path(src), target)
            self._handed(target)

        await asyncio.to_thread(copy)

    async def copy_out(self, src: str, dest: Path) -> None:
        await asyncio.to_thread(self._copy, inside(self._workdir, src), Path(dest))

    def _copy(self, src: Path, dest: Path) -> None:
        if not src.exists():
            raise ForgeError(f"{self.backend} sandbox: nothing to copy at {src}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dest)


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
    rel = PurePosixPath(path)
    if not path or rel.is_absolute() or ".." in rel.parts:
        raise ForgeError(f"sandbox path {path!r} must be relative to the work directory and stay inside it")
    target = (workdir / rel).resolve()
    if not target.is_relative_to(workdir.resolve()):
        raise ForgeError(f"sandbox path {path!r} leaves the work directory {workdir} (through a link)")
    return target


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
