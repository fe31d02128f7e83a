"""The ``local`` sandbox: a subprocess in the trajectory's work directory, with limits.

Each :meth:`LocalSandbox.exec` starts the command

- with the work directory as its cwd and stdin from ``/dev/null``;
- in a **clean environment**: only :data:`KEPT_ENV` of Forge's own variables (``PATH``, locale,
  CA bundles) plus ``HOME`` and ``TMPDIR`` in a folder of the sandbox's own (so an agent's caches
  and config files land neither in the user's home nor in the work directory), then the caller's
  ``env``. Provider keys, proxies and ``FORGE_*`` variables of the caller do not leak in;
- in a **new session and process group**, and marked by a variable unique to this exec
  (:data:`MARKER_VAR`). When the command ends — on its own, at its deadline, or because the caller
  was cancelled — its whole group is killed, and so is every other process that still carries the
  mark (Linux: found through ``/proc/*/environ``), which catches children that started a session of
  their own. No program a sandbox started outlives the exec that started it;
- under **rlimits** set before it runs (by the launcher, below): ``RLIMIT_AS`` for
  ``memory_bytes`` (address space: an allocation past it fails, e.g. Python's ``MemoryError``),
  ``RLIMIT_CPU`` for ``cpu_time_s`` (``SIGXCPU``, then ``SIGKILL`` a second later), and no core
  files. Limits are per process; each child inherits its own copy.

The wall-time limit is the caller's ``timeout_s``: at the deadline the group gets ``SIGTERM``,
``grace_s`` later ``SIGKILL``.

**Isolation.** Where bubblewrap works (``isolation="auto"``, the default, or ``"bwrap"``), every exec
runs inside ``bwrap`` with the layout of :mod:`forge_cli.sandbox.bwrap`: a read-only system, the
work directory and the sandbox's home writable at their host paths, a private size-bounded
``/tmp``, only ``lo`` for a network (the gateway reached through its unix socket and
``forward.py`` at ``http://127.0.0.1:PORT``), its own pid namespace. Without bubblewrap
(``"auto"``) the program runs as a plain subprocess that sees the host's file system and network,
and one warning line says so; ``isolation="none"`` asks for that without the warning.

**Every process a sandbox starts** — an exec's program, an MCP server it is asked to run
(:meth:`LocalSandbox.stdio_command`) — starts through :mod:`~forge_cli.sandbox.launch`, which puts
it under the sandbox's bounds before it runs: where this process may write a control group
(:mod:`forge_cli.sandbox.cgroup`: as root here) a group of its own holding at most ``processes``
processes and threads (a fork bomb's forks fail, and an exec is killed as soon as one does) and
``memory_bytes`` for the whole tree (the kernel's OOM killer ends a process of it, and an exec is
killed then); without one, ``RLIMIT_NPROC`` for a non-root user (root is exempt from it) and a fork
bomb is ended by its wall-time limit. ``open_files`` is ``RLIMIT_NOFILE``. Inside bubblewrap it also
gets the seccomp filter of :mod:`~forge_cli.sandbox.seccomp` and no capability.

``disk_bytes`` bounds what the sandbox's programs keep in the work directory and its home: where
:mod:`~forge_cli.sandbox.quota` can mount one (root, loop devices), both live on a file system of
exactly that size with one inode per 16 KiB of it, so a write past the limit — of bytes or of
files, by any process — fails with ``ENOSPC`` at once, and an exec that filled it is killed;
elsewhere a check every :data:`WATCH_S` seconds of their total size and file count kills the exec
once it is over (it can overshoot by what it writes in that time). ``RLIMIT_FSIZE`` bounds each
file in both cases; ``/tmp`` and ``/dev/shm`` inside bubblewrap are tmpfs of ``tmp_bytes`` each. A
program's stdout and stderr come through pipes of which only the last ``tail_bytes`` are kept:
nothing of them is written to the host's disk. An exec killed for a bound says which in its
:class:`~forge_cli.sandbox.contract.ExecResult`.

:meth:`LocalSandbox.close` kills what still runs, its MCP servers included, gives the work
directory back as a plain folder (no setuid or setgid bit left in it) and deletes the sandbox's own
folder.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from forge_cli.errors import ForgeError
from forge_cli.sandbox import bwrap, launch, quota, seccomp
from forge_cli.sandbox.base import OutputTail, WorkdirFiles, exec_argv, exec_result, make_folder, sweep_folders
from forge_cli.sandbox.contract import ExecResult, GatewayAccess
from forge_cli.sandbox.cgroup import ExecCgroup, sweep_stale
from forge_cli.sandbox.hostfiles import chown_tree, clear_setid, hand_over, read_regular, remove_tree
from forge_cli.sandbox.processes import MARKER_VAR, kill, kill_all, marked_pids, signal_tree

# Forge's own environment variables a sandboxed program gets (when they are set).
KEPT_ENV = (
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
)
TAIL_BYTES = 64 * 1024
ISOLATIONS = ("auto", "bwrap", "none")  # bubblewrap where it works | bubblewrap or an error | a plain subprocess
WATCH_S = 0.25  # how often a running exec's process and disk bounds are checked
UNPRIVILEGED = (65534, 65534)  # nobody:nogroup, what user = "auto" runs a root Forge's sandboxes as
STATUS_FILE = "exit"  # in an exec's status folder: the program's exit status, written by forward.py
LAUNCHER = Path(launch.__file__).resolve()
_warned: set[str] = set()  # each "isolation is reduced" line is said once per process
_swept = False  # sweep_leftovers ran in this process
log = logging.getLogger("forge.sandbox")


def _warn_once(key: str, message: str, *args: object) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


class LocalSandbox(WorkdirFiles):
    """The ``local`` backend of :class:`~forge_cli.sandbox.contract.Sandbox` (see the module's docstring).

    ``workdir`` is made if missing and is not removed by :meth:`close` (it is the caller's);
    ``memory_bytes`` / ``cpu_time_s`` are the default limits of every exec (``None``: no limit).
    """

    backend = "local"
    host_python = True  # the interpreter Forge runs on (and its venv) runs inside, at its path

    def __init__(
        self,
        workdir: str | Path,
        *,
        memory_bytes: int | None = None,
        cpu_time_s: float | None = None,
        tail_bytes: int = TAIL_BYTES,
        grace_s: float = 1.0,
        isolation: str = "auto",
        gateway: GatewayAccess | None = None,
        processes: int | None = 512,
        open_files: int | None = 4096,
        disk_bytes: int | None = None,
        tmp_bytes: int = 512 * 2**20,
        read_only: Sequence[str | Path] = (),
        user: str = "auto",
    ) -> None:
        for label, value in (("memory_bytes", memory_bytes), ("cpu_time_s", cpu_time_s), ("processes", processes),
                             ("open_files", open_files), ("disk_bytes", disk_bytes), ("tmp_bytes", tmp_bytes)):
            if value is not None and value <= 0:
                raise ForgeError(f"local sandbox: {label} must be positive, not {value}")
        if isolation not in ISOLATIONS:
            raise ForgeError(f"local sandbox: isolation {isolation!r} is not one of {', '.join(ISOLATIONS)}")
        self.isolated = _use_bwrap(isolation)
        self.user = _sandbox_user(user, self.isolated)
        self.gateway = gateway
        self.processes, self.open_files, self.disk_bytes, self.tmp_bytes = processes, open_files, disk_bytes, tmp_bytes
        self.read_only = tuple(Path(p) for p in read_only)
        self._workdir = Path(workdir).resolve()
        self._workdir.mkdir(parents=True, exist_ok=True)
        global _swept
        if not _swept:  # once per process: what dead runs left behind
            _swept = True
            sweep_leftovers()
        self._root = make_folder()
        for sub in ("home", "tmp", "status"):
            (self._root / sub).mkdir()
        self.memory_bytes = memory_bytes
        self.cpu_time_s = cpu_time_s
        self.tail_bytes = tail_bytes
        self.grace_s = grace_s
        self._running: dict[int, str] = {}  # pid (= its process group) -> its marker
        self._servers: list[ExecCgroup] = []  # the groups of the MCP servers stdio_command started
        self._server_marks: list[str] = []  # and the marks of their first processes
        self._count = itertools.count()
        self._closed = False
        try:
            self._seccomp = self._write_filter(isolation) if self.isolated else None
        except ForgeError:
            remove_tree(self._root)
            raise
        self._quota = self._lay_quota()
        info = self._workdir.stat()
        self._owner = (info.st_uid, info.st_gid, info.st_mode & 0o7777)
        if self.user is not None:
            self._hand_over(*self.user)
            for path in (*bwrap.python_dirs(), *self.read_only):
                if path.exists() and path.stat().st_mode & 0o005 != 0o005:
                    _warn_once(f"unreadable {path}", "%s is not readable by the sandbox's user %s: programs inside "
                               "cannot use what it holds (chmod o+rx, or [sandboxes.local] user = \"self\")", path,
                               f"{self.user[0]}:{self.user[1]}")

    def _hand_over(self, uid: int, gid: int) -> None:
        """The work directory and home to the sandbox's user (the work directory open for others to enter:
        bubblewrap, root without capabilities, changes into it)."""
        for folder in (self._workdir, self.home):
            chown_tree(folder, uid, gid)
        os.chmod(self._workdir, self._workdir.stat().st_mode & 0o7777 | 0o001)

    def _handed(self, target: Path) -> None:
        if self.user is not None:
            hand_over(self._workdir, target, *self.user)

    def _write_filter(self, isolation: str) -> Path | None:
        """The seccomp filter's file in the sandbox's folder; where none can be built, an error under
        ``isolation = "bwrap"``, else None and one warning."""
        why = seccomp.unavailable()
        if why is not None:
            if isolation == "bwrap":
                raise ForgeError(f"local sandbox: isolation = bwrap, but {why} (pip install pyseccomp; Debian: "
                                 "libseccomp2)")
            _warn_once("seccomp", "isolation is reduced: %s, so sandboxed programs may make every system call "
                       "their missing capabilities allow (new user namespaces, ptrace, …)", why)
            return None
        path = self._root / "seccomp.bpf"
        seccomp.write_program(path)
        return path

    def _lay_quota(self) -> quota.WorkdirQuota | None:
        """The file system of ``disk_bytes`` over the work directory and home (None: polled, see the module)."""
        if self.disk_bytes is None:
            return None
        return quota.lay(self._workdir, self._root, self.disk_bytes, folders=("home",))

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def home(self) -> Path:
        """The host folder that is the ``HOME`` of this sandbox's programs (on the disk limit's file system
        where there is one)."""
        return self._quota.path("home") if self._quota is not None else self._root / "home"

    @functools.cached_property
    def _inside(self) -> tuple[Path, Path]:
        return self.layout().inside if self.isolated else (self._workdir, self.home)

    @property
    def view_workdir(self) -> Path:
        """The work directory as the programs inside see it: ``/forge/work`` in bubblewrap (every sandbox
        the same, :mod:`~forge_cli.sandbox.bwrap`), the host path without it."""
        return self._inside[0]

    @property
    def view_home(self) -> Path:
        """``HOME`` as the programs inside see it."""
        return self._inside[1]

    @property
    def disk_quota(self) -> bool:
        """Whether the disk limit is a file system of its size (else it is polled)."""
        return self._quota is not None

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a command gets: the kept variables, ``HOME``/``TMPDIR``/``PWD``, then ``env``."""
        base = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
        base.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        tmp = "/tmp" if self.isolated else str(self._root / "tmp")
        base.update(HOME=str(self.view_home), TMPDIR=tmp, PWD=str(self.view_workdir))
        return {**base, **(env or {})}

    def layout(self, status_dir: Path | None = None) -> bwrap.Layout:
        """What a bubblewrap exec of this sandbox mounts (``status_dir``: the exec's own, for its exit status)."""
        return bwrap.Layout(self._workdir, self.home, self.tmp_bytes, self.read_only, self.gateway, status_dir,
                            user=self.user)

    def host_command(self, command: Sequence[str], env: Mapping[str, str], status_dir: Path | None = None) -> list[str]:
        """The argv the host starts for ``command`` with exactly ``env``: bubblewrap's, or ``command``."""
        if not self.isolated:
            return [str(c) for c in command]
        return bwrap.bwrap_argv(self.layout(status_dir), command, env, STATUS_FILE if status_dir else None)

    def launched(self, argv: Sequence[str], memory: int | None, cpu: float | None,
                 cgroup: ExecCgroup | None) -> list[str]:
        """``argv`` behind :mod:`~forge_cli.sandbox.launch`: in ``cgroup``, under the rlimits of ``memory``,
        ``cpu`` and the sandbox's own, with the seccomp filter handed to bubblewrap."""
        args = [sys.executable, "-S", "-I", str(LAUNCHER)]
        for folder in (cgroup.dirs.values() if cgroup is not None else ()):
            args += ["--cgroup", str(folder)]
        for name, soft, hard in _rlimits(memory, cpu, self.open_files, self.disk_bytes,
                                         self.processes if cgroup is None else None):
            args += ["--rlimit", f"{name}={soft}:{hard}"]
        if self.isolated and self._seccomp is not None:
            args += ["--seccomp", str(self._seccomp)]
        if self.user is not None and not self.isolated:  # inside bubblewrap, forward.py becomes the user
            args += ["--user", f"{self.user[0]}:{self.user[1]}"]
        return [*args, "--", *argv]

    async def exec(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        memory_bytes: int | None = None,
        cpu_time_s: float | None = None,
    ) -> ExecResult:
        """Run ``command`` to its end or its deadline; see :meth:`forge_cli.sandbox.contract.Sandbox.exec`."""
        command = exec_argv("local", self._closed, command, timeout_s)
        memory = memory_bytes if memory_bytes is not None else self.memory_bytes
        cpu = cpu_time_s if cpu_time_s is not None else self.cpu_time_s
        marker = uuid.uuid4().hex
        full_env = {**self.environment(env), MARKER_VAR: marker}
        status = self._root / "status" / str(next(self._count))  # a folder of this exec's own: no other exec sees it
        start = time.monotonic()
        if why := _cannot_run(command[0], full_env.get("PATH"), self._workdir):  # the launcher would say it late
            return ExecResult(None, "", "", 0.0, started=False, reason=f"cannot start {command[0]!r}: {why}")
        status.mkdir()  # root's: forward.py writes there as root, out of the program's reach
        cgroup = await asyncio.to_thread(ExecCgroup.create, pids_max=self.processes, memory_bytes=memory)
        out, err = OutputTail(self.tail_bytes), OutputTail(self.tail_bytes)
        try:
            # pipes of our own, not the subprocess's: its wait() ends when it exits, not when every holder of them does
            out_fd, out_pump = await _output_pipe(out)
            try:
                err_fd, err_pump = await _output_pipe(err)
            except BaseException:
                os.close(out_fd)
                await _drain([out_pump], 0)
                raise
            pumps = [out_pump, err_pump]
            try:
                proc = await asyncio.create_subprocess_exec(
                    # bubblewrap's own process goes without the mark: a SIGTERM by mark reaches only the program
                    *self.launched(self.host_command(command, full_env, status), memory, cpu, cgroup),
                    cwd=self._workdir,
                    env={k: v for k, v in full_env.items() if k != MARKER_VAR} if self.isolated else full_env,
                    stdin=subprocess.DEVNULL, stdout=out_fd, stderr=err_fd, start_new_session=True,
                )
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                await _drain(pumps, 0)
                return ExecResult(None, "", "", time.monotonic() - start, started=False,
                                  reason=f"cannot start {command[0]!r}: {detail}")
            finally:
                os.close(out_fd)
                os.close(err_fd)
            self._running[proc.pid] = marker
            bound: str | None = None
            try:
                bound = await self._wait(proc, cgroup, timeout_s)
                if bound is not None:
                    signal_tree(None if self.isolated else proc.pid, marker, cgroup, signal.SIGTERM)
                    try:
                        await asyncio.wait_for(proc.wait(), self.grace_s)
                    except asyncio.TimeoutError:
                        pass
            finally:
                kill_all(proc.pid, marker)
                if cgroup is not None:
                    cgroup.kill()
                self._running.pop(proc.pid, None)
                await _drain(pumps)
            if proc.returncode is None:  # killed just now: it is about to be reaped
                await proc.wait()
            oom = cgroup is not None and cgroup.oom_killed()
            forks_refused = cgroup is not None and cgroup.pids_limit_hit()
        finally:
            if cgroup is not None:
                await asyncio.to_thread(cgroup.remove)
        wall = time.monotonic() - start
        code = proc.returncode
        if self.isolated:
            code = _inner_status(status, code)
        if bound is None and code != 0 and forks_refused:  # it failed on a refused fork before a poll saw one
            bound = "processes"
        full = bound is None and code != 0 and self._quota is not None and self._quota.full()
        files = quota.inode_budget(self.disk_bytes) if self.disk_bytes is not None else None
        return exec_result(code, out.text(), err.text(), wall, bound == "time", timeout_s, memory, cpu, oom=oom,
                           bound=bound, processes=self.processes, disk=self.disk_bytes, files=files, disk_full=full)

    async def _wait(self, proc: "asyncio.subprocess.Process", cgroup: ExecCgroup | None,
                    timeout_s: float | None) -> str | None:
        """Wait for ``proc``; the bound it went past first (``time``, ``processes``, ``memory``, ``disk``), or ``None``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        waiting = asyncio.ensure_future(proc.wait())
        try:
            while True:
                step = WATCH_S if deadline is None else min(WATCH_S, deadline - time.monotonic())
                done, _ = await asyncio.wait({waiting}, timeout=max(step, 0))
                if done:
                    return None
                if deadline is not None and time.monotonic() >= deadline:
                    return "time"
                if cgroup is not None and cgroup.pids_limit_hit():
                    return "processes"
                if cgroup is not None and cgroup.oom_killed():
                    return "memory"
                if self.disk_bytes is not None and await asyncio.to_thread(self.disk_over):
                    return "disk"
        finally:
            if not waiting.done():
                waiting.cancel()

    def disk_over(self) -> bool:
        """Whether the work directory and home hold the disk limit's worth (:func:`~forge_cli.sandbox.quota.over_limit`)."""
        return quota.over_limit(self._quota, (self._workdir, self.home), self.disk_bytes)

    def stdio_command(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """The launcher, then bubblewrap's argv (or ``env -i`` with the sandbox's environment and ``-C`` the
        work directory), then ``command``: the program runs under this sandbox's bounds, in a control group
        of its own that :meth:`close` ends."""
        if self._closed:
            raise ForgeError("local sandbox: stdio_command after close")
        marker = uuid.uuid4().hex  # how close() finds what it started where no cgroup holds it
        full = self.environment(env)
        if self.isolated:
            inner = self.host_command(command, full)
        else:
            inner = ["env", "-i", "-C", str(self._workdir), *(f"{k}={v}" for k, v in {**full, MARKER_VAR: marker}.items()),
                     *map(str, command)]
        cgroup = ExecCgroup.create(pids_max=self.processes, memory_bytes=self.memory_bytes)
        if cgroup is not None:
            self._servers.append(cgroup)
        self._server_marks.append(marker)
        return ["env", f"{MARKER_VAR}={marker}", *self.launched(inner, self.memory_bytes, self.cpu_time_s, cgroup)]

    def limits_hit(self) -> str | None:
        """What bound a program started by :meth:`stdio_command` (an MCP server) has reached, if any."""
        for group in self._servers:
            if group.oom_killed():
                return f"went over its memory limit of {(self.memory_bytes or 0) / 2**20:g} MiB (the kernel killed a process)"
            if group.pids_limit_hit():
                return f"reached its limit of {self.processes} processes (a fork failed)"
        if self.disk_over():
            return f"filled its disk limit of {self.disk_bytes / 2**20:g} MiB in the work directory and home"
        return None

    async def close(self) -> None:
        """Kill every program still running here (its MCP servers too), give the work directory back as a
        plain folder and delete the sandbox's own folder (not the work directory)."""
        if self._closed:
            return
        self._closed = True
        for pid, marker in list(self._running.items()):
            kill_all(pid, marker)
        self._running.clear()
        for marker in self._server_marks:  # bubblewrap's outer process carries the mark: its sandbox dies with it
            for pid in marked_pids(marker):
                kill(pid)
        for group in self._servers:
            await asyncio.to_thread(group.remove)
        self._servers.clear()
        try:
            if self._quota is not None:
                await asyncio.to_thread(self._quota.release)  # the copy back is the host's own
            else:
                await asyncio.to_thread(clear_setid, self._workdir)
                if self.user is not None:
                    await asyncio.to_thread(chown_tree, self._workdir, *self._owner[:2])
                    os.chmod(self._workdir, self._owner[2])
        finally:
            await asyncio.to_thread(remove_tree, self._root)

    async def __aenter__(self) -> "LocalSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _output_pipe(tail: OutputTail) -> tuple[int, "asyncio.Future[None]"]:
    """A pipe whose write end (returned) a program writes to, and the task that reads it into ``tail``."""
    read_fd, write_fd = os.pipe()
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0))

    async def pump() -> None:
        try:
            while chunk := await reader.read(65536):
                tail.add(chunk)
        finally:
            transport.close()

    return write_fd, asyncio.ensure_future(pump())


async def _drain(pumps: list["asyncio.Future[None]"], within: float = 2.0) -> None:
    """Let the output pumps read what is left (everything that held the pipes is dead by now), then stop them."""
    _, pending = await asyncio.wait(pumps, timeout=within) if within > 0 else (set(), set(pumps))
    for pump in pending:
        pump.cancel()
    if pending:
        await asyncio.wait(pending)


def sweep_leftovers() -> list[str]:
    """What sandboxes of processes that are gone (a SIGKILLed run) left behind: their exec cgroups, with
    every process still in them killed (a plain subprocess outlives its owner; bubblewrap's die with it),
    their disk limits' mounts and their own folders in the temporary directory — those this process can
    judge: its own cgroup's children, folders of owners in its pid namespace. Done by the first sandbox a
    process opens; returns what was removed."""
    return [*sweep_stale(), *sweep_folders()]


def _sandbox_user(user: str, isolated: bool) -> tuple[int, int] | None:
    """``(uid, gid)`` the sandbox's programs run as, or ``None`` for Forge's own: ``auto`` is
    :data:`UNPRIVILEGED` when Forge runs as root and bubblewrap isolates,
    ``self`` is Forge's own user, ``UID:GID`` that user (root only)."""
    if user == "self" or (user == "auto" and (os.geteuid() != 0 or not isolated)):
        return None
    if user == "auto":
        return UNPRIVILEGED
    try:
        uid, _, gid = user.partition(":")
        ids = (int(uid), int(gid or uid))
    except ValueError:
        raise ForgeError(f"local sandbox: user must be auto, self or UID:GID, not {user!r}") from None
    if os.geteuid() != 0 and ids != (os.geteuid(), os.getegid()):
        raise ForgeError(f"local sandbox: user = {user!r} needs Forge to run as root")
    return ids


def _use_bwrap(isolation: str) -> bool:
    """Whether execs run inside bubblewrap under ``isolation`` (:data:`ISOLATIONS`)."""
    if isolation == "none":
        return False
    why = bwrap.unavailable()
    if why is None:
        return True
    if isolation == "bwrap":
        raise ForgeError(f"local sandbox: isolation = bwrap, but {why}")
    _warn_once("bwrap", "isolation is reduced: %s, so local sandboxes are plain subprocesses that see this "
               "machine's files and network", why)
    return False


def _inner_status(folder: Path, code: int | None) -> int | None:
    """The program's own exit status, as forward.py wrote it inside bubblewrap (read as the host reads
    whatever a sandbox could have planted: a regular file of a few bytes, no link followed); else
    bubblewrap's ``code``, with ``128 + N`` read as signal ``N`` (forward.py itself was killed). It is
    the program's word, as any exit status is: no verifier trusts it."""
    try:
        return int(read_regular(folder, STATUS_FILE, max_bytes=32))
    except (ForgeError, ValueError):
        pass
    if code is not None and 128 < code <= 128 + 64:
        return 128 - code
    return code


def _cannot_run(program: str, path: str | None, cwd: Path) -> str | None:
    """Why ``program`` cannot be started from ``cwd`` (as ``execvp`` would say), or ``None``."""
    if "/" not in program:
        return None if shutil.which(program, path=path) else "No such file or directory"
    full = os.path.join(cwd, program)
    if not os.path.exists(full):
        return "No such file or directory"
    return None if os.access(full, os.X_OK) and not os.path.isdir(full) else "Permission denied"


def _user_processes() -> int:
    """How many processes this process's real user has now (RLIMIT_NPROC counts them all)."""
    uid, count = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                continue
    return count


def _rlimits(memory_bytes: int | None, cpu_time_s: float | None, open_files: int | None, file_bytes: int | None,
             processes: int | None) -> list[tuple[str, int, int]]:
    """The rlimits a launched program gets, as (name, soft, hard): no core files, ``RLIMIT_AS``,
    ``RLIMIT_CPU`` (its hard limit a second later), ``RLIMIT_NOFILE``, ``RLIMIT_FSIZE`` and — for a
    non-root user only (root is exempt), ``processes`` on top of those that user already has —
    ``RLIMIT_NPROC``."""
    limits = [("CORE", 0, 0)]
    if memory_bytes is not None:
        limits.append(("AS", int(memory_bytes), int(memory_bytes)))
    if cpu_time_s is not None:
        seconds = max(1, math.ceil(cpu_time_s))
        limits.append(("CPU", seconds, seconds + 1))
    if open_files is not None:
        limits.append(("NOFILE", int(open_files), int(open_files)))
    if file_bytes is not None:
        limits.append(("FSIZE", int(file_bytes), int(file_bytes)))
    if processes is not None and os.getuid() != 0:
        allowed = _user_processes() + int(processes)
        limits.append(("NPROC", allowed, allowed))
    return limits
