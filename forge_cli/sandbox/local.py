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

This isolates nothing else: the program sees the host's file system and network. A backend with
real isolation (bubblewrap, Docker) is a later part.
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
from typing import Callable, Mapping, Sequence

from forge_cli.errors import ForgeError
from forge_cli.sandbox.base import ExecResult, inside, signal_name

# Forge's own environment variables a sandboxed program gets (when they are set).
KEPT_ENV = (
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
)
# Every process started by one exec carries MARKER_VAR=<a fresh id>, so its leftovers can be found.
MARKER_VAR = "FORGE_SANDBOX_EXEC"
TAIL_BYTES = 64 * 1024
# Words a program's error output says when an allocation failed.
_MEMORY_WORDS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc", "ENOMEM",
                 "memory allocation failed", "failed to allocate")


class LocalSandbox:
    """The ``local`` backend of :class:`~forge_cli.sandbox.base.Sandbox` (see the module's docstring).

    ``workdir`` is made if missing and is not removed by :meth:`close` (it is the caller's);
    ``memory_bytes`` / ``cpu_time_s`` are the default limits of every exec (``None``: no limit).
    """

    def __init__(
        self,
        workdir: str | Path,
        *,
        memory_bytes: int | None = None,
        cpu_time_s: float | None = None,
        tail_bytes: int = TAIL_BYTES,
        grace_s: float = 1.0,
    ) -> None:
        for label, value in (("memory_bytes", memory_bytes), ("cpu_time_s", cpu_time_s)):
            if value is not None and value <= 0:
                raise ForgeError(f"local sandbox: {label} must be positive, not {value}")
        self._workdir = Path(workdir).resolve()
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._root = Path(tempfile.mkdtemp(prefix="forge-sandbox-"))
        for sub in ("home", "tmp", "logs"):
            (self._root / sub).mkdir()
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
        base.update(HOME=str(self.home), TMPDIR=str(self._root / "tmp"), PWD=str(self._workdir))
        return {**base, **(env or {})}

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
        if self._closed:
            raise ForgeError("local sandbox: exec after close")
        command = [str(c) for c in command]
        if not command:
            raise ForgeError("local sandbox: exec needs a command")
        if timeout_s is not None and timeout_s <= 0:
            raise ForgeError(f"local sandbox: timeout_s must be positive, not {timeout_s}")
        memory = memory_bytes if memory_bytes is not None else self.memory_bytes
        cpu = cpu_time_s if cpu_time_s is not None else self.cpu_time_s
        marker = uuid.uuid4().hex
        full_env = {**self.environment(env), MARKER_VAR: marker}
        n = next(self._count)
        out_path, err_path = self._root / "logs" / f"{n}.out", self._root / "logs" / f"{n}.err"
        start = time.monotonic()
        with out_path.open("wb") as out, err_path.open("wb") as err:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *command, cwd=self._workdir, env=full_env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                    start_new_session=True, preexec_fn=_limit_setter(memory, cpu),
                )
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                return ExecResult(None, "", "", time.monotonic() - start, started=False,
                                  reason=f"cannot start {command[0]!r}: {detail}")
        self._running[proc.pid] = marker
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except asyncio.TimeoutError:
                timed_out = True
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), self.grace_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            kill_all(proc.pid, marker)
            self._running.pop(proc.pid, None)
        if proc.returncode is None:  # killed just now: it is about to be reaped
            await proc.wait()
        wall = time.monotonic() - start
        stdout, stderr = _tail(out_path, self.tail_bytes), _tail(err_path, self.tail_bytes)
        return _result(proc.returncode, stdout, stderr, wall, timed_out, timeout_s, memory, cpu)

    def stdio_command(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """``env -i`` with the sandbox's environment, ``-C`` the work directory, then ``command``."""
        full = self.environment(env)
        return ["env", "-i", "-C", str(self._workdir), *(f"{k}={v}" for k, v in full.items()), *map(str, command)]

    async def write_file(self, path: str, data: str | bytes) -> None:
        target = inside(self._workdir, path)

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, str):
                target.write_text(data)
            else:
                target.write_bytes(data)

        await asyncio.to_thread(write)

    async def read_file(self, path: str) -> bytes:
        target = inside(self._workdir, path)
        try:
            return await asyncio.to_thread(target.read_bytes)
        except OSError as exc:
            raise ForgeError(f"local sandbox: cannot read {path!r}: {exc.strerror or exc}") from None

    async def copy_in(self, src: Path, dest: str) -> None:
        target = inside(self._workdir, dest)
        await asyncio.to_thread(_copy, Path(src), target)

    async def copy_out(self, src: str, dest: Path) -> None:
        source = inside(self._workdir, src)
        await asyncio.to_thread(_copy, source, Path(dest))

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


def _copy(src: Path, dest: Path) -> None:
    if not src.exists():
        raise ForgeError(f"local sandbox: nothing to copy at {src}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dest)


def _limit_setter(memory_bytes: int | None, cpu_time_s: float | None) -> Callable[[], None]:
    """The ``preexec_fn`` that applies the limits in the child: values computed here, in the parent,
    so the child only makes ``setrlimit`` calls (a hard limit never above the current hard limit)."""
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
    setrlimit = resource.setrlimit

    def apply() -> None:
        for which, value in limits:
            setrlimit(which, value)

    return apply


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
            memory: int | None, cpu: float | None) -> ExecResult:
    """The :class:`ExecResult` of a finished process, with its one-line reason."""
    sig = -code if code is not None and code < 0 else None
    memory_exceeded = cpu_exceeded = False
    if timed_out:
        reason = f"timed out after {timeout_s:g} s of wall time; its processes were killed"
    elif code == 0:
        reason = "exited 0"
    else:
        cpu_exceeded = cpu is not None and sig in (signal.SIGXCPU, signal.SIGKILL)
        memory_exceeded = memory is not None and not cpu_exceeded and (
            any(word in stderr[-4000:] for word in _MEMORY_WORDS)
            or sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS)
        )
        reason = f"killed by {signal_name(sig)}" if sig else f"exited {code}"
        if cpu_exceeded:
            reason += f" (it used up its CPU-time limit of {cpu:g} s)"
        elif memory_exceeded:
            reason += f" (it ran out of its memory limit of {memory / 2**20:g} MiB)"
        last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
        if last:
            reason += f": {last[:200]}"
    return ExecResult(code, stdout, stderr, wall, reason, timed_out=timed_out,
                      memory_exceeded=memory_exceeded, cpu_exceeded=cpu_exceeded)
