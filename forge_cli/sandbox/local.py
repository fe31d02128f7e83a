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
- under **rlimits** set in the child before it runs (``preexec_fn``): ``RLIMIT_AS`` for
  ``memory_bytes`` (address space: an allocation past it fails, e.g. Python's ``MemoryError``),
  ``RLIMIT_CPU`` for ``cpu_time_s`` (``SIGXCPU``, then ``SIGKILL`` a second later), and no core
  files. Limits are per process; each child inherits its own copy.

The wall-time limit is the caller's ``timeout_s``: at the deadline the group gets ``SIGTERM``,
``grace_s`` later ``SIGKILL``. Output goes to files outside the work directory (no pipe can fill
and block the program), of which the last ``tail_bytes`` are returned.

**Isolation.** Where bubblewrap works (``isolation="auto"``, the default, or ``"bwrap"``), every exec
runs inside ``bwrap`` with the layout of :mod:`forge_cli.sandbox.bwrap`: a read-only system, the
work directory and the sandbox's home writable at their host paths, a private size-bounded
``/tmp``, only ``lo`` for a network (the gateway reached through its unix socket and
``forward.py`` at ``http://127.0.0.1:PORT``), its own pid namespace. Without bubblewrap
(``"auto"``) the program runs as a plain subprocess that sees the host's file system and network,
and one warning line says so; ``isolation="none"`` asks for that without the warning.

**Bounds** beyond the rlimits above, where this process may write a control group
(:mod:`forge_cli.sandbox.cgroup`: as root here): at most ``processes`` processes and threads (a
fork bomb's forks fail, and the exec is killed as soon as one does), and ``memory_bytes`` for the
whole tree (the kernel's OOM killer ends a process of it, and the exec is killed then). Without a writable cgroup, ``RLIMIT_NPROC`` is set
for a non-root user (root is exempt from it) and a fork bomb is ended by its wall-time limit.
``open_files`` is ``RLIMIT_NOFILE``. ``disk_bytes`` bounds what it writes into the work directory
and its home: ``RLIMIT_FSIZE`` per file, and a check every :data:`WATCH_S` seconds of their total
size that kills the exec once it is over (so it can overshoot by what it writes in that time);
``/tmp`` and ``/dev/shm`` inside bubblewrap are tmpfs of ``tmp_bytes`` each. An exec killed for a
bound says which in its :class:`~forge_cli.sandbox.base.ExecResult`.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from forge_cli.errors import ForgeError
from forge_cli.sandbox.base import ExecResult, GatewayAccess, WorkdirFiles, exec_argv, owner_alive, owner_of, signal_name
from forge_cli.sandbox.cgroup import ExecCgroup

if TYPE_CHECKING:
    from forge_cli.sandbox.bwrap import Layout

# Forge's own environment variables a sandboxed program gets (when they are set).
KEPT_ENV = (
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
)
# Every process started by one exec carries MARKER_VAR=<a fresh id>, so its leftovers can be found.
MARKER_VAR = "FORGE_SANDBOX_EXEC"
TAIL_BYTES = 64 * 1024
ISOLATIONS = ("auto", "bwrap", "none")  # bubblewrap where it works | bubblewrap or an error | a plain subprocess
WATCH_S = 0.25  # how often a running exec's process and disk bounds are checked
_warned = False  # the "isolation is reduced" line is said once per process
_swept = False  # sweep_leftovers ran in this process
ROOT_PREFIX = "forge-sandbox-"  # a sandbox's own folder in the temporary directory
# Words a program's error output says when an allocation failed.
_MEMORY_WORDS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc", "ENOMEM",
                 "memory allocation failed", "failed to allocate")


class LocalSandbox(WorkdirFiles):
    """The ``local`` backend of :class:`~forge_cli.sandbox.base.Sandbox` (see the module's docstring).

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
    ) -> None:
        for label, value in (("memory_bytes", memory_bytes), ("cpu_time_s", cpu_time_s), ("processes", processes),
                             ("open_files", open_files), ("disk_bytes", disk_bytes), ("tmp_bytes", tmp_bytes)):
            if value is not None and value <= 0:
                raise ForgeError(f"local sandbox: {label} must be positive, not {value}")
        if isolation not in ISOLATIONS:
            raise ForgeError(f"local sandbox: isolation {isolation!r} is not one of {', '.join(ISOLATIONS)}")
        self.isolated = _use_bwrap(isolation)
        self.gateway = gateway
        self.processes, self.open_files, self.disk_bytes, self.tmp_bytes = processes, open_files, disk_bytes, tmp_bytes
        self.read_only = tuple(Path(p) for p in read_only)
        self._workdir = Path(workdir).resolve()
        self._workdir.mkdir(parents=True, exist_ok=True)
        global _swept
        if not _swept:  # once per process: what dead runs left behind
            _swept = True
            sweep_leftovers()
        self._root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
        for sub in ("home", "tmp", "logs", "status"):
            (self._root / sub).mkdir()
        (self._root / "owner").write_text(f"{owner_of(os.getpid()) or ''} {_pid_namespace()}")
        self.memory_bytes = memory_bytes
        self.cpu_time_s = cpu_time_s
        self.tail_bytes = tail_bytes
        self.grace_s = grace_s
        self._running: dict[int, str] = {}  # pid (= its process group) -> its marker
        self._count = itertools.count()
        self._closed = False

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def home(self) -> Path:
        """The ``HOME`` (and, beside it, ``TMPDIR``) programs of this sandbox get."""
        return self._root / "home"

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a command gets: the kept variables, ``HOME``/``TMPDIR``/``PWD``, then ``env``."""
        base = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
        base.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        tmp = "/tmp" if self.isolated else str(self._root / "tmp")
        base.update(HOME=str(self.home), TMPDIR=tmp, PWD=str(self._workdir))
        return {**base, **(env or {})}

    def layout(self) -> "Layout":
        """What a bubblewrap exec of this sandbox mounts."""
        from forge_cli.sandbox.bwrap import Layout

        return Layout(self._workdir, self.home, self.tmp_bytes, self.read_only, self.gateway, self._root / "status")

    def host_command(self, command: Sequence[str], env: Mapping[str, str], status_file: str | None = None) -> list[str]:
        """The argv the host starts for ``command`` with exactly ``env``: bubblewrap's, or ``command``."""
        if not self.isolated:
            return [str(c) for c in command]
        from forge_cli.sandbox.bwrap import bwrap_argv

        return bwrap_argv(self.layout(), command, env, status_file)

    async def exec(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        memory_bytes: int | None = None,
        cpu_time_s: float | None = None,
    ) -> ExecResult:
        """Run ``command`` to its end or its deadline; see :meth:`forge_cli.sandbox.base.Sandbox.exec`."""
        command = exec_argv("local", self._closed, command, timeout_s)
        memory = memory_bytes if memory_bytes is not None else self.memory_bytes
        cpu = cpu_time_s if cpu_time_s is not None else self.cpu_time_s
        marker = uuid.uuid4().hex
        full_env = {**self.environment(env), MARKER_VAR: marker}
        n = next(self._count)
        out_path, err_path = self._root / "logs" / f"{n}.out", self._root / "logs" / f"{n}.err"
        start = time.monotonic()
        if self.isolated and (why := _cannot_run(command[0], full_env.get("PATH"))):  # bwrap would say it late
            return ExecResult(None, "", "", 0.0, started=False, reason=f"cannot start {command[0]!r}: {why}")
        cgroup = await asyncio.to_thread(ExecCgroup.create, pids_max=self.processes, memory_bytes=memory)
        nproc = self.processes if cgroup is None else None
        try:
            with out_path.open("wb") as out, err_path.open("wb") as err:
                try:
                    proc = await asyncio.create_subprocess_exec(
                        # bubblewrap's own process goes without the mark: a SIGTERM by mark reaches only the program
                        *self.host_command(command, full_env, f"{n}"), cwd=self._workdir,
                        env={k: v for k, v in full_env.items() if k != MARKER_VAR} if self.isolated else full_env,
                        stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                        preexec_fn=_limit_setter(memory, cpu, open_files=self.open_files, processes=nproc,
                                                 file_bytes=self.disk_bytes, cgroup=cgroup),
                    )
                except (OSError, subprocess.SubprocessError, ValueError) as exc:
                    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                    return ExecResult(None, "", "", time.monotonic() - start, started=False,
                                      reason=f"cannot start {command[0]!r}: {detail}")
            self._running[proc.pid] = marker
            bound: str | None = None
            try:
                bound = await self._wait(proc, cgroup, timeout_s)
                if bound is not None:
                    _signal_tree(None if self.isolated else proc.pid, marker, cgroup, signal.SIGTERM)
                    try:
                        await asyncio.wait_for(proc.wait(), self.grace_s)
                    except asyncio.TimeoutError:
                        pass
            finally:
                kill_all(proc.pid, marker)
                if cgroup is not None:
                    cgroup.kill()
                self._running.pop(proc.pid, None)
            if proc.returncode is None:  # killed just now: it is about to be reaped
                await proc.wait()
            oom = cgroup is not None and cgroup.oom_killed()
            forks_refused = cgroup is not None and cgroup.pids_limit_hit()
        finally:
            if cgroup is not None:
                await asyncio.to_thread(cgroup.remove)
        wall = time.monotonic() - start
        stdout, stderr = _tail(out_path, self.tail_bytes), _tail(err_path, self.tail_bytes)
        code = proc.returncode
        if self.isolated:
            code = _inner_status(self._root / "status" / f"{n}", code)
        if bound is None and code != 0 and forks_refused:  # it failed on a refused fork before a poll saw one
            bound = "processes"
        return _result(code, stdout, stderr, wall, bound == "time", timeout_s, memory, cpu, oom=oom,
                       bound=bound, processes=self.processes, disk=self.disk_bytes)

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
                if self.disk_bytes is not None and await asyncio.to_thread(
                        _disk_usage, (self._workdir, self.home)) > self.disk_bytes:
                    return "disk"
        finally:
            if not waiting.done():
                waiting.cancel()

    def stdio_command(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """``env -i`` with the sandbox's environment, ``-C`` the work directory, then ``command``."""
        full = self.environment(env)
        if self.isolated:
            return self.host_command(command, full)
        return ["env", "-i", "-C", str(self._workdir), *(f"{k}={v}" for k, v in full.items()), *map(str, command)]

    async def close(self) -> None:
        """Kill every program still running here and delete the sandbox's own folder (not the work directory)."""
        self._closed = True
        for pid, marker in list(self._running.items()):
            kill_all(pid, marker)
        self._running.clear()
        await asyncio.to_thread(shutil.rmtree, self._root, True)

    async def __aenter__(self) -> "LocalSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def sweep_leftovers() -> list[str]:
    """What local sandboxes of processes that are gone (a SIGKILLed run) left behind: their exec cgroups,
    with every process still in them killed (a plain subprocess outlives its owner; bubblewrap's die with
    it), and their own folders in the temporary directory — those this process can judge: its own cgroup's
    children, folders of owners in its pid namespace. Done by the first sandbox a process opens; returns
    what was removed."""
    from forge_cli.sandbox.cgroup import sweep_stale

    removed = sweep_stale()
    here = _pid_namespace()
    for root in Path(tempfile.gettempdir()).glob(f"{ROOT_PREFIX}*"):
        try:
            owner, _, namespace = (root / "owner").read_text().strip().partition(" ")
        except OSError:
            continue  # not one of ours, or still being made
        # only an owner this process can see: a /tmp shared with another pid namespace holds live ones it cannot
        if owner and namespace == here and not owner_alive(owner):
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root.name)
    return removed


def _pid_namespace() -> str:
    """This process's pid namespace (``pid:[INODE]``): owners are comparable only within one."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "?"


def _use_bwrap(isolation: str) -> bool:
    """Whether execs run inside bubblewrap under ``isolation`` (:data:`ISOLATIONS`)."""
    global _warned
    if isolation == "none":
        return False
    from forge_cli.sandbox.bwrap import unavailable

    why = unavailable()
    if why is None:
        return True
    if isolation == "bwrap":
        raise ForgeError(f"local sandbox: isolation = bwrap, but {why}")
    if not _warned:
        _warned = True
        import logging

        logging.getLogger("forge.sandbox").warning(
            "isolation is reduced: %s, so local sandboxes are plain subprocesses that see this machine's files "
            "and network", why)
    return False


def _inner_status(path: Path, code: int | None) -> int | None:
    """The program's own exit status, as forward.py wrote it inside bubblewrap; else bubblewrap's
    ``code``, with ``128 + N`` read as signal ``N`` (forward.py itself was killed)."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        pass
    if code is not None and 128 < code <= 128 + 64:
        return 128 - code
    return code


def _is_bwrap(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "bwrap"
    except OSError:
        return False


def _cannot_run(program: str, path: str | None) -> str | None:
    """Why ``program`` cannot be started (as ``execvp`` would say), or ``None``."""
    if "/" not in program:
        return None if shutil.which(program, path=path) else "No such file or directory"
    if not os.path.exists(program):
        return "No such file or directory"
    return None if os.access(program, os.X_OK) and not os.path.isdir(program) else "Permission denied"


def _disk_usage(roots: Sequence[Path]) -> int:
    """Bytes the files under ``roots`` take on disk (links not followed)."""
    total = 0
    stack = [str(r) for r in roots]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


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


def _limit_setter(memory_bytes: int | None, cpu_time_s: float | None, *, open_files: int | None = None,
                  processes: int | None = None, file_bytes: int | None = None,
                  cgroup: ExecCgroup | None = None) -> Callable[[], None]:
    """The ``preexec_fn`` that applies the limits in the child: values computed here, in the parent,
    so the child only makes ``setrlimit`` calls (a hard limit never above the current hard limit)
    and joins ``cgroup``. ``processes`` becomes ``RLIMIT_NPROC`` for a non-root user only (root is
    exempt), on top of the processes that user already has."""
    import resource

    def capped(which: int, soft: int, hard: int) -> tuple[int, tuple[int, int]]:
        current = resource.getrlimit(which)[1]
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        return which, (soft, hard)

    limits = [capped(resource.RLIMIT_CORE, 0, 0)]
    if memory_bytes is not None:
        limits.append(capped(resource.RLIMIT_AS, int(memory_bytes), int(memory_bytes)))
    if cpu_time_s is not None:
        seconds = max(1, math.ceil(cpu_time_s))
        limits.append(capped(resource.RLIMIT_CPU, seconds, seconds + 1))
    if open_files is not None:
        limits.append(capped(resource.RLIMIT_NOFILE, int(open_files), int(open_files)))
    if file_bytes is not None:
        limits.append(capped(resource.RLIMIT_FSIZE, int(file_bytes), int(file_bytes)))
    if processes is not None and os.getuid() != 0:
        allowed = _user_processes() + int(processes)
        limits.append(capped(resource.RLIMIT_NPROC, allowed, allowed))
    setrlimit = resource.setrlimit
    enter = cgroup.enter if cgroup is not None else None

    def apply() -> None:
        if enter is not None:
            enter()
        for which, value in limits:
            setrlimit(which, value)

    return apply


def _signal_tree(pgid: int | None, marker: str, cgroup: ExecCgroup | None, sig: int) -> None:
    """Send ``sig`` to the group ``pgid``, everything in ``cgroup`` and every process marked ``marker``
    (bubblewrap's own processes are spared when ``pgid`` is ``None``: they end with the program)."""
    if pgid is not None:
        _signal_group(pgid, sig)
    if cgroup is not None:
        for pid in cgroup.procs():
            if pgid is None and _is_bwrap(pid):
                continue
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    for pid in marked_pids(marker):
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
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _tail(path: Path, size: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _result(code: int | None, stdout: str, stderr: str, wall: float, timed_out: bool, timeout_s: float | None,
            memory: int | None, cpu: float | None, *, oom: bool = False, bound: str | None = None,
            processes: int | None = None, disk: int | None = None) -> ExecResult:
    """The :class:`ExecResult` of a finished process, with its one-line reason."""
    sig = -code if code is not None and code < 0 else None
    memory_exceeded = cpu_exceeded = file_too_big = False
    if timed_out:
        reason = f"timed out after {timeout_s:g} s of wall time; its processes were killed"
    elif bound == "processes":
        reason = f"reached its limit of {processes} processes (a fork failed); its processes were killed"
    elif bound == "memory":
        memory_exceeded = True
        reason = (f"went over its memory limit of {(memory or 0) / 2**20:g} MiB (the kernel killed one of its "
                  "processes); its processes were killed")
    elif bound == "disk":
        reason = (f"wrote more than its limit of {(disk or 0) / 2**20:g} MiB into its work directory and home; "
                  "its processes were killed")
    elif code == 0:
        reason = "exited 0"
    else:
        cpu_exceeded = not oom and cpu is not None and sig in (signal.SIGXCPU, signal.SIGKILL)
        memory_exceeded = memory is not None and not cpu_exceeded and (
            oom or any(word in stderr[-4000:] for word in _MEMORY_WORDS)
            or sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)
        )
        reason = f"killed by {signal_name(sig)}" if sig else f"exited {code}"
        if file_too_big := disk is not None and (sig == signal.SIGXFSZ or "File too large" in stderr[-4000:]):
            reason += f" (a file reached its disk limit of {disk / 2**20:g} MiB)"
        if cpu_exceeded:
            reason += f" (it used up its CPU-time limit of {cpu:g} s)"
        elif memory_exceeded:
            reason += f" (it ran out of its memory limit of {memory / 2**20:g} MiB)"
        last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
        if last:
            reason += f": {last[:200]}"
    return ExecResult(code, stdout, stderr, wall, reason, timed_out=timed_out,
                      memory_exceeded=memory_exceeded, cpu_exceeded=cpu_exceeded,
                      processes_exceeded=bound == "processes", disk_exceeded=bound == "disk" or file_too_big)
