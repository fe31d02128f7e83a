"""A hostile agent, under the ``local`` (bubblewrap) and ``docker`` backends alike, as a rollout opens them.

An RL policy is optimised for reward and will find any way out of its sandbox or around its limits,
so these tests are written as it would try: real programs inside real sandboxes (the registry's
``local`` and ``docker``, with ``[sandboxes.NAME]`` limits) that

- try to get out: by file handle, mount, new namespaces, ``ptrace``, ``/proc`` of other processes,
  the unix sockets of another run (a path, an abstract name), a server on the host's loopback, the
  pool file, another trajectory's folder, ``FORGE_HOME``, device nodes, setuid bits;
- exhaust processes, memory, disk (blocks and files), output and time — through the agent's own
  exec **and** through an MCP server the sandbox runs;
- plant FIFOs, sparse files and links for the host to read.

Each attempt fails; an exhausting trajectory ends with its reason; nothing outside the trajectory
changes (the host's files, servers, processes, mounts and cgroups are checked afterwards). The only
network use is loopback: servers of the test's own on the host.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from forge_cli.errors import ForgeError
from forge_cli.sandbox import probe, quota
from tests.docker_support import docker_engine, sandbox_spec  # noqa: F401  (docker_engine: a fixture)
from tests.waiting import until

LIMITS = {  # [sandboxes.NAME] as a user would set them: small, so that the attacks reach them quickly
    "local": {"isolation": "bwrap", "processes": 64, "memory_mb": 256, "disk_mb": 16, "tmp_mb": 16},
    "docker": {"pids": 64, "memory_mb": 256, "disk_mb": 16, "tmpfs_mb": 16, "file_size_mb": 16},
}
DISK = 16 * 2**20


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _ours(mount_point: str) -> bool:
    """Whether a mount point lies in a sandbox folder (``forge-sandbox-*``) this process owns."""
    from forge_cli.sandbox.base import FOLDER_PREFIX

    parts = Path(mount_point).parts
    for i, part in enumerate(parts):
        if part.startswith(FOLDER_PREFIX):
            try:
                owner = (Path(*parts[: i + 1]) / "owner").read_text().split(":")
            except OSError:
                return True  # its owner file is gone: a folder half removed, not another run's
            return len(owner) > 1 and owner[1] == str(os.getpid())
    return False


class Host:
    """What lies outside the trajectory: another run's pool, socket and trajectory folder, FORGE_HOME's
    keys, a server on the host's loopback and an abstract unix socket — and a check that none changed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        other = root / "other-run"
        (other / "work" / "t-2").mkdir(parents=True)
        self.forge_home = home = Path(os.environ["FORGE_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        self.secrets = {other / "pool.sqlite": "SECRET-POOL", other / "work" / "t-2" / "secret.txt": "SECRET-TRAJ",
                        home / "keys.json": "SECRET-KEY"}
        for path, text in self.secrets.items():
            path.write_text(text)
        # a file only root may read, in a folder every sandbox shows read-only ($FORGE_HOME/agents)
        self.root_only = home / "agents" / "root-only.key"
        self.root_only.parent.mkdir(exist_ok=True)
        self.root_only.write_text("SECRET-ROOT")
        self.root_only.chmod(0o600)
        self.contacts: list[str] = []
        self._servers: list[socket.socket] = []
        self.socket_path = other / "gateway.sock"
        self.abstract = f"\0forge-other-run-{uuid.uuid4().hex[:8]}"
        for family, address in ((socket.AF_UNIX, str(self.socket_path)), (socket.AF_UNIX, self.abstract),
                                (socket.AF_INET, ("127.0.0.1", 0))):
            server = socket.socket(family, socket.SOCK_STREAM)
            server.bind(address)
            server.listen()
            self._servers.append(server)
            threading.Thread(target=self._accept, args=(server, repr(address)), daemon=True).start()
        self.port = self._servers[-1].getsockname()[1]
        self.mounts = self._mounts()
        self.groups = self._groups()

    def _accept(self, server: socket.socket, name: str) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            self.contacts.append(name)
            conn.close()

    def _mounts(self) -> set[str]:
        """This test's mounts: over its own folders, or in a sandbox folder of this process."""
        points = {line.split(" ")[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
        return {p for p in points if p.startswith(str(self.root)) or _ours(p)}

    @staticmethod
    def _groups() -> set[str]:
        """This process's sandbox cgroups (another run on the machine has its own)."""
        return {str(p) for p in Path("/sys/fs/cgroup").glob(f"**/forge-sandbox-{os.getpid()}-*")}

    def targets(self) -> dict[str, Any]:
        """What the hostile program is told to reach (a policy could learn every path: they are no secret)."""
        return {"files": [*map(str, self.secrets), str(self.root_only)], "socket": str(self.socket_path),
                "abstract": self.abstract,
                "port": self.port, "forge_home": str(self.forge_home)}

    def assert_unchanged(self) -> None:
        for path, text in self.secrets.items():
            assert path.read_text() == text, path
        assert sorted(p.name for p in (self.root / "other-run" / "work" / "t-2").iterdir()) == ["secret.txt"]
        assert sorted(p.name for p in self.forge_home.iterdir() if p.name != "agents") == ["keys.json"]
        assert self.contacts == [], f"the sandbox reached a host server: {self.contacts}"
        assert not Path("/etc/forge-owned").exists() and not Path("/usr/forge-owned").exists()
        assert self._mounts() <= self.mounts, f"mounts left behind: {self._mounts() - self.mounts}"
        assert self._groups() <= self.groups, f"cgroups left behind: {self._groups() - self.groups}"

    def close(self) -> None:
        for server in self._servers:
            server.close()


@pytest.fixture(params=["local", "docker"])
def arena(request, tmp_path):
    """``(backend, open)``: ``open(**limits)`` opens the backend's sandbox on ``tmp_path/work`` the way a rollout
    does (``[sandboxes.NAME]`` options over :data:`LIMITS`); the host is checked unchanged afterwards."""
    backend = request.param
    spec = sandbox_spec(request, backend)
    host = Host(tmp_path)

    @asynccontextmanager
    async def open_(**over: Any) -> AsyncIterator[Any]:
        sandbox = spec.open(tmp_path / "work", {**LIMITS[backend], **over}, None)
        try:
            yield sandbox
        finally:
            await sandbox.close()

    yield backend, open_, host
    host.close()
    host.assert_unchanged()


async def attack(sandbox: Any, code: str, *args: str, timeout_s: float = 60) -> Any:
    """Run the Python program ``code`` inside ``sandbox`` (its own python3)."""
    await sandbox.write_file("attack.py", code)
    return await sandbox.exec(["python3", "attack.py", *args], timeout_s=timeout_s)


ESCAPE = r'''
import ctypes, errno, json, os, socket, stat, sys
t = json.loads(sys.argv[1])
got = []  # every attempt that worked
def tried(name, fn):
    try:
        fn()
        got.append(name)
    except OSError:
        pass
for path in t["files"]:
    tried("read " + path, lambda: open(path).read())
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:  # through other processes' roots and folders
        tried(f"read /proc/{pid}/root{path}", lambda: open(f"/proc/{pid}/root{path}").read())
tried("write FORGE_HOME", lambda: open(os.path.join(t["forge_home"], "owned"), "w").write("x"))
tried("write /etc", lambda: open("/etc/forge-owned", "w").write("x"))
tried("write /usr", lambda: open("/usr/forge-owned", "w").write("x"))
tried("write another trajectory", lambda: open(os.path.dirname(t["files"][1]) + "/owned", "w").write("x"))
tried("read a file of root's", lambda: open(t["files"][-1]).read())
def connect(family, address):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect(address)
    finally:
        s.close()
tried("another run's socket", lambda: connect(socket.AF_UNIX, t["socket"]))
tried("an abstract socket", lambda: connect(socket.AF_UNIX, t["abstract"]))
tried("the host's loopback", lambda: connect(socket.AF_INET, ("127.0.0.1", t["port"])))
tried("a device node", lambda: os.mknod("mem", stat.S_IFCHR | 0o666, os.makedev(1, 1)))
open("suid", "w").write("#!/bin/sh\n")
os.chmod("suid", 0o4755)
for fd in os.listdir("/proc/self/fd"):  # an inherited descriptor of the host's
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if any(target.startswith(p) for p in ("/home", "/root", t["forge_home"])) or "other-run" in target:
        got.append("an inherited descriptor: " + target)
print(json.dumps(got))
'''


def test_every_escape_fails_and_nothing_outside_changes(arena, tmp_path):
    backend, open_, host = arena

    async def go():
        async with open_() as sandbox:
            escape = await attack(sandbox, ESCAPE, json.dumps(host.targets()))
            probed = await sandbox.exec(["python3", "-c", Path(probe.__file__).read_text()], timeout_s=60)
            return escape, probed

    escape, probed = run(go())
    assert escape.ok, escape
    assert json.loads(escape.stdout) == [], escape.stdout
    seen = json.loads(probed.stdout)
    if os.geteuid() == 0:  # Forge as root: the programs inside are not (nobody in bubblewrap, 1000 in a container)
        assert seen["uid"] != 0, seen
    assert seen["cap_eff"] == 0, f"{backend}: capabilities kept inside: {seen['cap_eff']:#x}"
    assert seen["no_new_privs"] == 1 and seen["seccomp"] == 2, seen
    for name in ("mount", "unshare_user", "unshare_mount", "open_by_handle", "ptrace", "vsock", "af_alg"):
        assert seen[name] != "allowed", (backend, name, seen)
    left = tmp_path / "work" / "suid"  # the work directory is the host's again, with no setuid bit in it
    assert left.exists() and not left.stat().st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert not (tmp_path / "work" / "mem").exists()


# ---- exhausting the limits through the agent ---------------------------------------------------------------

FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
MEMORY = r'''
import os
kids = []
for _ in range(8):  # 8 x 64 MiB: each under any per-process limit, together twice the sandbox's 256 MiB
    pid = os.fork()
    if pid == 0:
        block = bytearray(64 * 2**20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        import time; time.sleep(60)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
'''
BLOCKS = "import itertools\nfor n in itertools.count():\n    open(f'fill-{n}', 'wb').write(b'x' * 2**20)\n"
INODES = "for n in range(200_000):\n    open(f'e{n}', 'w').close()\n"
OUTPUT = r'''
import sys
chunk = "y" * 2**20
for _ in range(256):  # 256 MiB on each stream
    sys.stdout.write(chunk); sys.stderr.write(chunk)
sys.stdout.write("\nthe last line\n")
'''
DAEMON = r'''
import os, sys, time
token = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", f"exec sleep 300 # {token}"])
    os._exit(0)
os.execvp("sh", ["sh", "-c", f"exec sleep 300 # {token}"])
'''


def host_processes_with(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if token.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                continue
    return found


def host_files(sandbox: Any) -> dict[str, int]:
    """The files a sandbox keeps on the host outside its work directory (its own folder, where a local
    sandbox once kept its programs' output), with their sizes; its disk limit's image and mount aside."""
    root = getattr(sandbox, "_root", None)
    if root is None:  # docker: output comes through the engine's API
        return {}
    found = {}
    for path in root.rglob("*"):
        if path.name != "disk.img" and "disk" not in path.relative_to(root).parts[:1] and path.is_file():
            found[str(path)] = path.stat().st_size
    return found


def work_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "work").iterdir() if p.name not in ("attack.py",)]


@pytest.mark.parametrize("resource", ["processes", "memory", "blocks", "inodes", "output", "time"])
def test_each_limit_holds_against_the_agent_and_its_trajectory_says_which(arena, tmp_path, resource):
    backend, open_, host = arena
    token = f"forge-daemon-{uuid.uuid4().hex}"
    code = {"processes": FORK_BOMB, "memory": MEMORY, "blocks": BLOCKS, "inodes": INODES, "output": OUTPUT,
            "time": DAEMON}[resource]

    async def go():
        async with open_() as sandbox:
            done = await attack(sandbox, code, token, timeout_s=4 if resource == "time" else 120)
            return done, host_processes_with(token), getattr(sandbox, "disk_quota", False), host_files(sandbox)

    done, alive_after_exec, quota_mode, kept = run(go())
    if resource == "processes":
        assert done.processes_exceeded and "limit of 64 processes" in done.reason, done
    elif resource == "memory":
        assert done.memory_exceeded and "memory limit of 256 MiB" in done.reason, done
    elif resource in ("blocks", "inodes"):
        assert done.disk_exceeded and "disk limit of 16 MiB or 1024 files" in done.reason, done
        written = work_files(tmp_path)
        if quota_mode:  # a file system of the limit: nothing past it (ext4 keeps <= 2 % more)
            assert sum(p.stat().st_blocks * 512 for p in written) <= DISK * 1.02
            assert len(written) <= quota.inode_budget(DISK)
    elif resource == "output":
        assert done.ok and done.stdout.endswith("the last line\n"), done.reason
        assert len(done.stdout) <= 64 * 1024 and len(done.stderr) <= 64 * 1024  # tails
        assert [p for p, size in kept.items() if size > 2**20] == [], kept  # and no log of it on the host's disk
    else:
        assert done.timed_out and "timed out after 4 s" in done.reason, done
        assert alive_after_exec == [], "a double-forked daemon outlived its exec"
    assert host_processes_with(token) == []


# ---- through an MCP server ---------------------------------------------------------------------------------


@pytest.fixture
def mcp_home(request, arena, monkeypatch):
    """The docker sandbox runs the servers from their own venv under FORGE_HOME/agents: the session's."""
    if arena[0] == "docker":
        monkeypatch.setenv("FORGE_HOME", str(request.getfixturevalue("agents_home")))
    return arena


@pytest.mark.parametrize("resource", ["processes", "memory", "blocks", "stderr", "time"])
def test_each_limit_holds_against_an_mcp_server_and_the_agent_is_told_which(mcp_home, tmp_path, resource):
    """The shell MCP server runs the agent's commands inside the trajectory's sandbox: under its bounds too
    (the local sandbox starts it in a control group of its own, with the rlimits and the filter), and a
    tool call that reached one says which."""
    from forge_cli.rollout.mcp_tools import mcp_tools

    backend, open_, host = mcp_home
    token = f"forge-mcp-{uuid.uuid4().hex}"
    command = {
        "stderr": "head -c 67108864 /dev/zero | tr '\\0' 'e' > /proc/$PPID/fd/2; echo done",
        # a daemon in a session of its own (the server kills only its command's group), once it has left that group
        "time": f"setsid sh -c 'touch left.flag; sleep 300; echo {token}' > /dev/null 2>&1 < /dev/null & "
                "while [ ! -e left.flag ]; do sleep 0.05; done; echo started",
    }.get(resource, "python3 attack.py")
    code = {"processes": FORK_BOMB, "memory": MEMORY, "blocks": BLOCKS}.get(resource, "")

    async def go():
        async with open_() as sandbox:
            if code:
                await sandbox.write_file("attack.py", code)
            async with mcp_tools(["shell"], sandbox) as tools:
                shell = next(t for t in tools if t.name == "shell")
                try:
                    text = await shell.run({"command": command, "timeout_s": 5 if resource == "processes" else 30})
                except ForgeError as exc:  # the server itself may be what the kernel killed
                    text = str(exc)
                running = (await until(lambda: host_processes_with(token), what="the daemon on the host")
                           if resource == "time" else [])
            return text, running, getattr(sandbox, "disk_quota", False)

    text, running, quota_mode = run(go())
    if resource == "processes":
        assert "limit: " in text and "64 processes" in text, text
    elif resource == "memory":
        assert "limit: " in text and "memory limit" in text, text
    elif resource == "blocks":
        assert "No space left on device" in text or "disk limit" in text, text
        if quota_mode:
            assert sum(p.stat().st_blocks * 512 for p in work_files(tmp_path)) <= DISK * 1.02
    elif resource == "stderr":
        assert text.strip().endswith("[exit code 0]") and "done" in text, text  # 64 MiB read and dropped
    else:
        assert "started" in text and running, "the daemon should run while its server does"
    assert host_processes_with(token) == [], "a process the server started outlived its sandbox"


def test_a_servers_stderr_is_kept_as_a_bounded_tail():
    """However much a server (or a program that reaches its stderr) writes there, the host keeps its tail only."""
    import subprocess
    import sys

    from forge_cli.rollout.mcp_tools import StderrTail

    with StderrTail(size=4096) as tail:
        subprocess.run([sys.executable, "-c", "import sys\nfor _ in range(64): sys.stderr.write('z' * 2**20)\n"
                        "sys.stderr.write('\\nlast words\\n')"], stderr=tail, check=True)
    tail._thread.join(timeout=30)  # every writer has closed: the reader has seen the end
    assert tail.last_words() == "last words"
    assert tail._tail.total > 64 * 2**20 and len(tail._tail.data) <= 2 * 4096


# ---- what the host reads of the work directory -------------------------------------------------------------

PLANT = r'''
import os
os.mkfifo("answer.txt")
with open("sparse.bin", "wb") as f:
    f.truncate(2**30)  # a gigabyte (under the disk limit: it takes one block), one written byte
    f.seek(2**29); f.write(b"x")
os.symlink("/etc/shadow", "shadow.txt")
os.symlink("/dev/zero", "zero.txt")
os.makedirs("sub")
os.symlink("..", "sub/up")
open("real.txt", "w").write("fine")
'''


async def unblocked(read: Any, fifo: Path, within: float = 20.0) -> Any:
    """``read``'s result; if it is still blocked after ``within`` seconds (a host read stuck on the FIFO,
    the bug), a writer opens and closes the FIFO so that the read ends, and the test fails saying so."""
    task = asyncio.ensure_future(read)
    done, _ = await asyncio.wait({task}, timeout=within)
    if not done:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        await asyncio.wait({task}, timeout=within)
        raise AssertionError(f"a host-side read blocked on the planted FIFO {fifo}")
    return task.result()


def test_planted_fifos_sparse_files_and_links_are_refused_by_the_host(arena, tmp_path):
    from forge_cli.rollout.blackbox import _answer
    from forge_cli.sandbox.contract import ExecResult
    from forge_cli.tasks.types import Task, Transcript
    from forge_cli.tasks.workdir import FilesMatch

    backend, open_, host = arena
    outside = tmp_path / "outside"

    big = {"disk_mb": 2048, **({"file_size_mb": 2048} if backend == "docker" else {})}  # room for the sparse file

    async def go():
        async with open_(**big) as sandbox:
            planted = await attack(sandbox, PLANT)
            assert planted.ok, planted
            refused = {}
            for name in ("answer.txt", "sparse.bin", "shadow.txt", "zero.txt", "sub/up/real.txt"):
                try:
                    await unblocked(sandbox.read_file(name), sandbox.workdir / "answer.txt")
                except ForgeError as exc:
                    refused[name] = str(exc)
            real = await sandbox.read_file("real.txt")
            answer = await unblocked(_answer("file:answer.txt", ExecResult(0, "", "", 0.0, "exited 0"), sandbox),
                                     sandbox.workdir / "answer.txt")
            task = Task(id="t", suite="files", prompt="", answer={"files": {"answer.txt": "42", "zero.txt": "",
                                                                            "shadow.txt": "x"}})
            judged = await asyncio.wait_for(asyncio.to_thread(FilesMatch().verify, task, sandbox.workdir,
                                                              Transcript(answer=None)), 20)
            await sandbox.copy_out(".", outside)
            return refused, real, answer, judged

    refused, real, answer, judged = run(go())
    assert "not a regular file (a FIFO)" in refused["answer.txt"]
    assert "more than the 16.0 MiB" in refused["sparse.bin"]
    assert "leaves the work directory" in refused["shadow.txt"] and "leaves the work directory" in refused["zero.txt"]
    assert "sub/up/real.txt" not in refused or "leaves" in refused["sub/up/real.txt"]
    assert real == b"fine" and answer is None
    assert judged.score == 0.0 and "FIFO" in judged.reason and "leads out" in judged.reason, judged.reason
    assert not (outside / "answer.txt").exists() and (outside / "shadow.txt").is_symlink()  # no FIFO comes out
    assert (outside / "sparse.bin").stat().st_blocks * 512 < 2**20  # and a sparse file stays sparse
    for kept in (tmp_path / "work" / "sparse.bin", outside / "sparse.bin"):
        assert kept.stat().st_size == 2**30
