"""The sandbox contract (the contracts layer): what every backend (``local``, ``docker``) offers a caller.

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

The helpers the backends share are in :mod:`forge_cli.sandbox.base`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence, runtime_checkable


# where a sandboxed program finds the gateway's unix socket, in every backend (forward.py listens on
# loopback inside and relays to it)
SOCKET_INSIDE = "/run/forge/gateway.sock"
VIEW_WORKDIR = Path("/forge/work")  # where a sandbox that can shows its program the work directory (every one the same)
VIEW_HOME = Path("/forge/home")  # and its home


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


def view_workdir(sandbox: Sandbox) -> Path:
    """The work directory as the programs in ``sandbox`` see it — the path a launch recipe's ``$workdir``
    and an agent's MCP configuration name: the sandbox's ``view_workdir`` where it has one (a sandbox
    that shows every trajectory the same path, such as the local one in bubblewrap), else its host path."""
    return Path(getattr(sandbox, "view_workdir", None) or sandbox.workdir)
