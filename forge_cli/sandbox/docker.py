"""The ``docker`` sandbox: one container per trajectory, through the Docker SDK, on a local engine.

A :class:`DockerSandbox` starts its container on first use (a missing image or a dead engine is then
an :class:`~forge_cli.sandbox.contract.ExecResult` that never started, with the reason) from
:data:`~forge_cli.sandbox.images`' ``forge-agent-base`` image (``forge sandbox build``):

- **no network**: ``--network none``, only ``lo``. With a :class:`GatewayAccess` the gateway's unix
  socket is bind-mounted at :data:`SOCKET_INSIDE` and ``forward.py`` (bind-mounted read-only) runs as
  the container's main program, so ``http://127.0.0.1:PORT`` inside reaches the gateway;
- **files**: the work directory bind-mounted read-write at ``/forge/work`` in every container
  (:data:`~forge_cli.sandbox.contract.VIEW_WORKDIR`: every trajectory of a group sees the same path, so
  the agents' prompts that name it share their prefix; launch recipes render ``$workdir`` with it),
  ``$FORGE_HOME/agents`` read-only at its host path, and read-only the Python
  installations the pip agents' venvs link to and the host's ``node`` for the npm agents
  (:func:`host_node`), nothing else of the host;
  a read-only root, tmpfs ``/tmp`` and ``HOME`` of bounded size, a per-file size limit;
- **limits**: memory (the cgroup's; swap off), processes (``pids``), CPUs, all capabilities
  dropped, ``no-new-privileges``, a non-root user (uid 1000; the work directory is handed to it);
  per-exec ``memory_bytes`` / ``cpu_time_s`` are ``prlimit`` rlimits on the command;
- **always removed**: the container is ``auto_remove`` and its main program reads a stdin only this
  process holds open (``stdin_once``), so when this process dies — killed or not — the stream
  closes, the container ends and the engine removes it. :meth:`close`, an exec that reaches its
  deadline and an exec whose caller is cancelled remove it at once (the next exec starts a fresh
  one on the same work directory). Containers carry :data:`LABEL` and their owner process; those
  of processes that are gone are removed when a sandbox first starts (:func:`remove_leftovers`).

Exit codes above 128 are reported as ``-N`` (signal ``N``), as the engine gives ``128+N``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from forge_cli.errors import ForgeError
from forge_cli.paths import agents_dir
from forge_cli.sandbox import forward, quota, seccomp
from forge_cli.sandbox.base import (
    DISK_WORDS,
    OutputTail,
    WorkdirFiles,
    exec_argv,
    exec_result,
    make_folder,
    owner_alive,
    owner_of,
    sweep_folders,
)
from forge_cli.sandbox.contract import SOCKET_INSIDE, VIEW_WORKDIR, ExecResult, GatewayAccess
from forge_cli.sandbox.hostfiles import chown_tree, clear_setid, hand_over, remove_tree

ENGINE_SCRIPT = "scripts/docker-engine.sh"
DEFAULT_IMAGE = "forge-agent-base:latest"
LABEL = "forge.sandbox"
OWNER_LABEL = "forge.owner"
RUN_LABEL = "forge.run"
FORWARD_INSIDE = "/opt/forge/forward.py"
READY_FILE = "/tmp/.forge-ready"  # made by the main program once the forwarder listens
TAIL_BYTES = 64 * 1024
WATCH_S = 0.25  # how often a running exec's process count (and a quota's fill) is looked at
DISK_WATCH_S = 0.5  # how often its work directory's size is, where it is polled (a walk of the folder)
_SWEPT = False


class DockerOptions(BaseModel):
    """``[sandboxes.docker]``: the image and the limits of every container."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(DEFAULT_IMAGE, description="Image to start (built offline by `forge sandbox build`).")
    user: str = Field("1000:1000", description="UID:GID programs run as ('root' for agents that need it); "
                      "the work directory is handed to that user while the sandbox runs.")
    memory_mb: int = Field(2048, gt=0, description="Memory limit of the container (cgroup; no swap), in MiB.")
    pids: int = Field(512, gt=0, description="Most processes and threads the container may hold at once.")
    cpus: float = Field(1.0, gt=0, description="CPUs the container may use.")
    tmpfs_mb: int = Field(512, gt=0, description="Size of each of the container's tmpfs /tmp and HOME, in MiB.")
    file_size_mb: int | None = Field(1024, gt=0, description="Largest file a program may write (RLIMIT_FSIZE), in MiB.")
    cpu_time_s: float | None = Field(None, gt=0, description="CPU-time limit per process (RLIMIT_CPU) unless an exec sets one.")
    disk_mb: int | None = Field(4096, gt=0, description="Most the work directory may hold, in MiB, and in files one per "
                                "16 KiB of it: a file system of that size where Forge runs as root (writes past it fail), "
                                "else measured every half second (the container is removed past it).")
    read_only_root: bool = Field(True, description="Mount the image's root file system read-only.")


def engine_host() -> str:
    """The Docker engine Forge talks to: ``$DOCKER_HOST``; else the system socket when it exists; else
    the socket of the engine ``scripts/docker-engine.sh`` starts (``$FORGE_DOCKER_SOCK``, default
    ``/tmp/forge-docker/docker.sock``)."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    if Path("/var/run/docker.sock").exists():
        return "unix:///var/run/docker.sock"
    folder = Path(os.environ.get("FORGE_DOCKER_DIR") or "/tmp/forge-docker")
    return f"unix://{os.environ.get('FORGE_DOCKER_SOCK') or folder / 'docker.sock'}"


def connect(timeout_s: float = 60.0) -> Any:
    """A ``docker.DockerClient`` on :func:`engine_host` that answered a ping, or a ForgeError saying how to start one."""
    try:
        import docker
    except ImportError:
        raise ForgeError("the 'docker' Python package is not installed (pip install docker)") from None
    host = engine_host()
    try:
        client = docker.DockerClient(base_url=host, timeout=int(timeout_s))
        client.ping()
    except Exception as exc:  # the SDK raises several unrelated types
        raise ForgeError(f"no Docker engine answers at {host} ({type(exc).__name__}): start one with "
                         f"`{ENGINE_SCRIPT} start` and export the DOCKER_HOST it prints") from None
    return client


def image_problem(image: str = DEFAULT_IMAGE, timeout_s: float = 3.0) -> str | None:
    """Why a docker sandbox cannot start here (no engine, the image not built), or None when it can."""
    try:
        client = connect(timeout_s)
    except ForgeError as exc:
        return str(exc)
    try:
        client.images.get(image)
    except Exception:
        return f"image {image} is not built on {engine_host()} (run `forge sandbox build`)"
    finally:
        client.close()
    return None


def clean_leftovers() -> list[str]:
    """Remove the sandbox containers of processes that are gone (``forge sandbox clean``); their names."""
    client = connect(10)
    try:
        return remove_leftovers(client)
    finally:
        client.close()


def remove_leftovers(client: Any) -> list[str]:
    """Remove the sandbox containers whose owner process is gone (a killed run's); their names."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        if not owner_alive(container.labels.get(OWNER_LABEL, "")):
            try:
                container.remove(force=True)
                removed.append(container.name)
            except Exception:  # already going (auto_remove): nothing to do
                pass
    return removed


def python_prefixes(agents: Path) -> list[Path]:
    """The Python installations the agents' venvs were made from (``home`` in ``pyvenv.cfg``), where
    the image does not have them (``/usr``): a venv's ``bin/python`` links there, so the sandbox
    mounts them read-only at the same path."""
    found: set[Path] = set()
    for cfg in agents.glob("*/venv/pyvenv.cfg"):
        try:
            home = next(line.split("=", 1)[1].strip() for line in cfg.read_text().splitlines()
                        if line.split("=", 1)[0].strip() == "home")
        except (OSError, StopIteration):
            continue
        prefix = Path(home).resolve().parent
        if prefix.is_dir() and str(prefix) not in ("/", "/usr", "/usr/local"):
            found.add(prefix)
    return sorted(found)


# where the host's Node.js is mounted inside a container: before the image's own /usr/bin/node on PATH
NODE_INSIDE = "/usr/local/bin/node"


def host_node(agents: Path) -> Path | None:
    """The host's ``node`` the npm agents were installed with, when one is installed: the image has
    Debian's Node.js 18, and gemini-cli, qwen-code, pi, kilo and copilot need 20 or newer, so the sandbox
    mounts the host's read-only at :data:`NODE_INSIDE` (the same Debian userland: its libraries match)."""
    if not any(agents.glob("*/node_modules")):
        return None
    found = shutil.which("node")
    return Path(found).resolve() if found else None


def _ids(user: str) -> tuple[int, int]:
    if user == "root":
        return 0, 0
    try:
        uid, gid = (int(part) for part in user.split(":"))
    except ValueError:
        raise ForgeError(f"docker sandbox: user must be 'UID:GID' or 'root', not {user!r}") from None
    return uid, gid


class DockerSandbox(WorkdirFiles):
    """The ``docker`` backend of :class:`~forge_cli.sandbox.contract.Sandbox` (see the module's docstring).

    ``workdir`` is made if missing and stays the caller's (its owner is given back on :meth:`close`);
    ``gateway`` makes the gateway reachable inside; ``run_id`` labels the containers.
    """

    backend = "docker"
    host_python = False  # Debian's python3 only (and the Pythons of $FORGE_HOME/agents' venvs)

    def __init__(self, workdir: str | Path, options: DockerOptions | None = None, *,
                 gateway: GatewayAccess | None = None, run_id: str | None = None,
                 tail_bytes: int = TAIL_BYTES) -> None:
        self.options = options or DockerOptions()
        self.uid, self.gid = _ids(self.options.user)
        self._workdir = Path(workdir).resolve()
        self._workdir.mkdir(parents=True, exist_ok=True)
        stat = self._workdir.stat()
        self._owner = (stat.st_uid, stat.st_gid)
        self.gateway = gateway
        self.run_id = run_id or ""
        self.tail_bytes = tail_bytes
        self.home = "/root" if self.uid == 0 else "/home/agent"
        self._client: Any = None
        self._container: str | None = None  # the running container's id
        self._stdin: Any = None  # the attach socket that keeps the container alive
        self._lock = threading.Lock()
        self._closed = False
        self._quota: quota.WorkdirQuota | None = None
        self._quota_tried = False
        self._root: Path | None = None  # this sandbox's folder on the host (the quota's image), once made

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def view_workdir(self) -> Path:
        """The work directory as the container's programs see it (the same in every container)."""
        return VIEW_WORKDIR

    @property
    def container_id(self) -> str | None:
        """The running container's id (None before the first exec and after a removal)."""
        return self._container

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a command gets: ``PATH``, locale, ``HOME``, ``TMPDIR``, then ``env``."""
        base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                "HOME": self.home, "TMPDIR": "/tmp", "PWD": str(VIEW_WORKDIR)}
        return {**base, **{k: str(v) for k, v in (env or {}).items()}}

    # -- the container -------------------------------------------------------------------------

    def _start(self) -> None:
        """Start the container unless it runs (blocking; ForgeError with the reason if it cannot)."""
        global _SWEPT
        with self._lock:
            if self._closed:
                raise ForgeError("docker sandbox: used after close")
            if self._container is not None:
                return
            import docker.errors
            from docker.types import Mount, Ulimit

            if self._client is None:
                self._client = connect()
            if not _SWEPT:
                remove_leftovers(self._client)
                sweep_folders()
                _SWEPT = True
            try:
                self._client.images.get(self.options.image)
            except docker.errors.ImageNotFound:
                raise ForgeError(f"docker sandbox: image {self.options.image} is not built (run `forge sandbox build`)") from None
            self._lay_quota()
            if self.uid != 0:
                chown_tree(self._workdir, self.uid, self.gid)
            mounts = [Mount(str(VIEW_WORKDIR), str(self._workdir), type="bind", read_only=False)]

            if agents_dir().is_dir():
                agents = str(agents_dir().resolve())
                mounts.append(Mount(agents, agents, type="bind", read_only=True))
                for prefix in python_prefixes(agents_dir()):
                    mounts.append(Mount(str(prefix), str(prefix), type="bind", read_only=True))
                if (node := host_node(agents_dir())) is not None:
                    mounts.append(Mount(NODE_INSIDE, str(node), type="bind", read_only=True))
            main = ["sh", "-c", f"touch {READY_FILE}; exec cat >/dev/null"]
            if self.gateway is not None:
                if not Path(self.gateway.socket).exists():
                    raise ForgeError(f"docker sandbox: the gateway's socket {self.gateway.socket} does not exist")
                mounts.append(Mount(FORWARD_INSIDE, str(forward.PATH), type="bind", read_only=True))
                mounts.append(Mount(SOCKET_INSIDE, str(Path(self.gateway.socket).resolve()), type="bind"))
                main = ["python3", FORWARD_INSIDE, "--port", str(self.gateway.port), "--socket", SOCKET_INSIDE, "--", *main]
            tmpfs_opts = f"rw,nosuid,nodev,size={self.options.tmpfs_mb}m"
            ulimits = [Ulimit(name="core", soft=0, hard=0)]
            if self.options.file_size_mb is not None:
                size = self.options.file_size_mb * 2**20
                ulimits.append(Ulimit(name="fsize", soft=size, hard=size))
            owner = owner_of(os.getpid()) or f"?:{os.getpid()}:?"
            memory = f"{self.options.memory_mb}m"
            api = self._client.api
            try:
                host_config = api.create_host_config(
                    init=True, network_mode="none", auto_remove=True, mounts=mounts,
                    read_only=self.options.read_only_root,
                    tmpfs={"/tmp": f"{tmpfs_opts},mode=1777",
                           self.home: f"{tmpfs_opts},mode=700,uid={self.uid},gid={self.gid}"},
                    mem_limit=memory, memswap_limit=memory, pids_limit=self.options.pids,
                    nano_cpus=int(self.options.cpus * 1e9), ulimits=ulimits,
                    cap_drop=["ALL"], security_opt=["no-new-privileges", f"seccomp={seccomp.docker_profile()}"],
                )
                cid = api.create_container(
                    self.options.image, main, name=f"forge-sandbox-{uuid.uuid4().hex[:12]}",
                    labels={LABEL: "1", OWNER_LABEL: owner, RUN_LABEL: self.run_id},
                    # the main program (the forwarder) runs as this process's user, who may open the gateway's
                    # socket; programs exec'd run as the sandbox's user
                    stdin_open=True, detach=False, tty=False, user=f"{os.getuid()}:{os.getgid()}",
                    working_dir=str(VIEW_WORKDIR), environment=self.environment(), host_config=host_config,
                )["Id"]
                self._stdin = api.attach_socket(cid, params={"stdin": 1, "stream": 1})
                api.start(cid)
            except docker.errors.DockerException as exc:
                raise ForgeError(f"docker sandbox: cannot start a container: {exc}") from None
            self._container = cid

    def _lay_quota(self) -> None:
        """The file system of ``disk_mb`` over the work directory, once (see :mod:`~forge_cli.sandbox.quota`);
        where none can be mounted the work directory's size is polled."""
        if self._quota_tried or self.options.disk_mb is None:
            return
        self._quota_tried = True
        self._root = make_folder()
        self._quota = quota.lay(self._workdir, self._root, self.options.disk_mb * 2**20)

    @property
    def disk_quota(self) -> bool:
        """Whether the disk limit is a file system of its size (else it is polled)."""
        return self._quota is not None

    def _remove(self) -> None:
        """Remove the container now (everything in it dies); a no-op when there is none."""
        with self._lock:
            cid, self._container = self._container, None
            sock, self._stdin = self._stdin, None
        if cid is not None:
            try:
                self._client.api.remove_container(cid, force=True)
            except Exception:  # already gone (auto_remove)
                pass
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _cgroup_count(self, controller: str, file: str, key: str) -> int:
        """A counter of the container's control group (``oom_kill`` of memory, ``max`` of pids): v1 or v2."""
        cid = self.container_id
        if cid is None:
            return 0
        for path in (f"/sys/fs/cgroup/{controller}/docker/{cid}/{file}", f"/sys/fs/cgroup/docker/{cid}/{file}",
                     f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/{file}"):
            try:
                for line in Path(path).read_text().splitlines():
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
            except (OSError, ValueError):
                continue
        return 0

    def _counters(self) -> tuple[int, int]:
        """(OOM kills, refused forks) of the container so far."""
        return (self._cgroup_count("memory", "memory.oom_control", "oom_kill") or
                self._cgroup_count("memory", "memory.events", "oom_kill"),
                self._cgroup_count("pids", "pids.events", "max"))

    def _wrap(self, command: Sequence[str], memory: int | None, cpu: float | None) -> list[str]:
        """``command`` behind a shell that waits for the forwarder and applies the per-exec rlimits."""
        limits = []
        if memory is not None:
            limits.append(f"--as={int(memory)}")
        if cpu is not None:
            limits.append(f"--cpu={max(1, int(cpu + 0.999))}")
        run = f'exec prlimit {" ".join(limits)} -- "$@"' if limits else 'exec "$@"'
        script = f"i=0; while [ ! -e {READY_FILE} ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; {run}"
        return ["/bin/sh", "-c", script, "sh", *map(str, command)]

    # -- the protocol ----------------------------------------------------------------------------

    async def exec(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        memory_bytes: int | None = None,
        cpu_time_s: float | None = None,
    ) -> ExecResult:
        """Run ``command`` in the container to its end or its deadline; see :meth:`forge_cli.sandbox.contract.Sandbox.exec`."""
        command = exec_argv("docker", self._closed, command, timeout_s)
        memory = memory_bytes
        cpu = cpu_time_s if cpu_time_s is not None else self.options.cpu_time_s
        start = time.monotonic()
        try:
            await asyncio.to_thread(self._start)
            created = await asyncio.to_thread(
                self._client.api.exec_create, self._container, self._wrap(command, memory, cpu),
                stdout=True, stderr=True, stdin=False, environment=self.environment(env),
                workdir=str(VIEW_WORKDIR), user=f"{self.uid}:{self.gid}")
            exec_id = created["Id"]
        except Exception as exc:  # a ForgeError from _start, or the engine refusing the exec
            self._remove()
            reason = str(exc) if isinstance(exc, ForgeError) else f"docker sandbox: cannot start {command[0]!r}: {exc}"
            return ExecResult(None, "", "", time.monotonic() - start, reason, started=False)
        before = self._counters()
        out, err = OutputTail(self.tail_bytes), OutputTail(self.tail_bytes)
        pump = asyncio.ensure_future(asyncio.to_thread(self._pump, exec_id, out, err))
        try:
            bound = await self._watch(pump, start, timeout_s)
        except BaseException:  # cancelled: nothing of it may go on running
            self._remove()
            raise
        after = self._counters()
        code: int | None = None
        if bound is not None:
            await asyncio.to_thread(self._remove)
            if bound == "memory":  # the kernel's OOM kill (or the removal, had the watcher seen it first) is a SIGKILL
                code = -9
        else:
            try:
                code = (await asyncio.to_thread(self._client.api.exec_inspect, exec_id)).get("ExitCode")
            except Exception:
                code = None
        try:
            await asyncio.wait_for(pump, 10)
        except (asyncio.TimeoutError, Exception):
            pass
        if code is None and bound is None:  # the container went away under it
            await asyncio.to_thread(self._remove)
            code = -9
        elif code is not None and 128 < code < 128 + 65:
            code = 128 - code
        return self._result(code, out.text(), err.text(), time.monotonic() - start, timeout_s, memory, cpu,
                            oom=after[0] > before[0], bound=bound, forks_refused=after[1] > before[1])

    async def _watch(self, pump: "asyncio.Future[None]", start: float, timeout_s: float | None) -> str | None:
        """Wait for the exec to end; ``"time"``, ``"processes"``, ``"memory"`` (the kernel killed one of its
        processes) or ``"disk"`` when it must be killed for one of them."""
        ooms, forks = self._counters()
        next_disk = 0.0
        while True:
            left = None if timeout_s is None else start + timeout_s - time.monotonic()
            if left is not None and left <= 0:
                return "time"
            done, _ = await asyncio.wait({pump}, timeout=min(WATCH_S, left) if left is not None else WATCH_S)
            if done:
                return None
            now = self._counters()
            if now[1] > forks:
                return "processes"
            if now[0] > ooms:  # the kernel killed one of its processes: what is left must not go on as if not
                return "memory"
            if self.options.disk_mb is not None and time.monotonic() >= next_disk:
                if await asyncio.to_thread(self.disk_over):
                    return "disk"
                next_disk = time.monotonic() + (WATCH_S if self._quota is not None else DISK_WATCH_S)

    def disk_over(self) -> bool:
        """Whether the work directory holds the disk limit's worth (:func:`~forge_cli.sandbox.quota.over_limit`)."""
        limit = self.options.disk_mb * 2**20 if self.options.disk_mb is not None else None
        return quota.over_limit(self._quota, [self._workdir], limit)

    def limits_hit(self) -> str | None:
        """What bound of the container a program in it has reached so far, if any (an MCP server's, say)."""
        oom, forks = self._counters()
        if oom:
            return f"went over the container's memory limit of {self.options.memory_mb} MiB (the kernel killed a process)"
        if forks:
            return f"reached the container's limit of {self.options.pids} processes (a fork failed)"
        if self.disk_over():
            return f"filled its disk limit of {self.options.disk_mb} MiB in the work directory"
        return None

    def _pump(self, exec_id: str, out: OutputTail, err: OutputTail) -> None:
        try:
            for chunk_out, chunk_err in self._client.api.exec_start(exec_id, stream=True, demux=True):
                out.add(chunk_out)
                err.add(chunk_err)
        except Exception:  # the container was removed under the stream
            pass

    def _result(self, code: int | None, stdout: str, stderr: str, wall: float, timeout_s: float | None,
                memory: int | None, cpu: float | None, *, oom: bool, bound: str | None, forks_refused: bool) -> ExecResult:

        limit = memory if memory is not None else (self.options.memory_mb * 2**20 if oom else None)
        full = bound is None and code != 0 and self._quota is not None and self._quota.full()
        file_size = self.options.file_size_mb * 2**20 if self.options.file_size_mb is not None else None
        if (full or bound == "disk") and self.options.disk_mb is not None:  # the work directory's limit
            disk, files = self.options.disk_mb * 2**20, quota.inode_budget(self.options.disk_mb * 2**20)
        else:  # else what a failed write met is the per-file limit
            disk, files = file_size, None
        done = exec_result(code, stdout, stderr, wall, bound == "time", timeout_s, limit, cpu, oom=oom,
                           bound=bound if bound in ("processes", "memory", "disk") else None, processes=self.options.pids,
                           disk=disk, files=files, disk_full=full)
        if bound is None and not done.ok and not full and any(w in stderr[-4000:] for w in DISK_WORDS):
            limit_mb = f"{self.options.file_size_mb} MiB per file, {self.options.tmpfs_mb} MiB of /tmp and HOME"
            return replace(done, disk_exceeded=True, reason=f"{done.reason} (it reached a disk limit: {limit_mb})")
        if bound is not None:
            reason = done.reason.replace("its processes were killed", "its container was removed")
            if bound == "time" and forks_refused:
                reason += f" (it had reached its limit of {self.options.pids} processes)"
            return replace(done, reason=reason, processes_exceeded=done.processes_exceeded or forks_refused)
        return done

    def stdio_command(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
        """``docker exec -i`` into the container (started now if needed) with the sandbox's environment."""
        docker_cli = shutil.which("docker")
        if docker_cli is None:
            raise ForgeError("docker sandbox: the docker command-line client is not installed (Debian: docker.io)")
        self._start()
        args = [docker_cli, "-H", engine_host(), "exec", "-i", "-u", f"{self.uid}:{self.gid}", "-w", str(VIEW_WORKDIR)]
        for key, value in self.environment(env).items():
            args += ["-e", f"{key}={value}"]
        return [*args, self._container, *self._wrap(command, None, self.options.cpu_time_s)]

    def _handed(self, path: Path) -> None:
        if self.uid != 0 and path.exists():
            hand_over(self._workdir, path, self.uid, self.gid)

    async def close(self) -> None:
        """Remove the container and give the work directory back to its owner (it is not deleted)."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._remove)
        if self._quota is not None:
            await asyncio.to_thread(self._quota.release)  # the work directory a plain host folder again
        else:
            await asyncio.to_thread(clear_setid, self._workdir)
        if self._root is not None:
            await asyncio.to_thread(remove_tree, self._root)
        if self.uid != 0 and self._owner != (self.uid, self.gid):
            await asyncio.to_thread(chown_tree, self._workdir, *self._owner)
        if self._client is not None:
            self._client.close()
            self._client = None

    async def __aenter__(self) -> "DockerSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
