"""Escape tests of the docker sandbox, on a real engine: only loopback inside, the host's loopback
out of reach but for the gateway (through its unix socket and forward.py), nothing of the host
writable or readable but the work directory (and the agents, read-only), runaway programs contained
and killed with the reason — and afterwards no container, mount or process left on the host.

Nothing is sent to any address outside this machine: the only connections tried are to 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from forge_cli.records.session import SessionRequest
from forge_cli.sandbox import quota
from forge_cli.sandbox.contract import GatewayAccess
from forge_cli.sandbox.docker import DockerOptions, DockerSandbox
from tests.docker_support import docker_engine, sandbox_containers  # noqa: F401  (a fixture)
from tests.unix_http import serve_loopback, serve_unix, stop

pytestmark = pytest.mark.usefixtures("docker_engine")
TOKEN = uuid.uuid4().hex[:10]  # in the command lines of this module's programs, to find leftovers by


def run(coro):
    return asyncio.run(coro)


def _processes_with(token: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if token in cmdline and int(pid) != os.getpid():
                found.append(cmdline)
    return found


def _mounts(*roots: str) -> set[str]:
    """The host's mount points under ``roots`` (the engine's data root, the tests' folders): other
    programs on this machine may mount elsewhere meanwhile."""
    points = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    return {p for p in points if p.startswith(roots)}


@pytest.fixture(scope="module", autouse=True)
def host_unchanged(docker_engine, tmp_path_factory):
    """The host before and after every test of this module: containers, mounts, processes."""
    roots = (docker_engine.info()["DockerRootDir"], str(Path(tmp_path_factory.getbasetemp()).resolve()))
    before_mounts = _mounts(*roots)
    before_containers = {c.id for c in sandbox_containers(docker_engine)}
    yield
    assert {c.id for c in sandbox_containers(docker_engine)} <= before_containers
    assert _mounts(*roots) <= before_mounts  # none left behind (one an earlier test left may since have gone)
    assert _processes_with(TOKEN) == []


async def _in(tmp_path: Path, script: str, *, options: DockerOptions | None = None, timeout_s: float = 60,
              gateway: GatewayAccess | None = None, **exec_kw):
    async with DockerSandbox(tmp_path / "work", options, gateway=gateway) as sb:
        return await sb.exec(["python3", "-c", script, TOKEN], timeout_s=timeout_s, **exec_kw)


def _connect_script(port: int) -> str:
    return (f"import socket\ns = socket.socket()\ns.settimeout(3)\n"
            f"try:\n    s.connect(('127.0.0.1', {port})); print('connected')\n"
            f"except OSError as e:\n    print('refused', e.errno)")


def test_only_loopback_inside(tmp_path):
    done = run(_in(tmp_path, "import os, socket\nprint(sorted(os.listdir('/sys/class/net')))\n"
                             "s = socket.socket()\ntry:\n    s.connect(('127.0.0.1', 9)); print('?')\n"
                             "except OSError as e:\n    print('lo', e.errno)"))
    assert done.ok, done.reason
    lines = done.stdout.splitlines()
    assert lines[0] == "['lo']"
    assert lines[1] == "lo 111"  # ECONNREFUSED: loopback is up, and its own


def test_a_server_on_the_hosts_loopback_is_out_of_reach(tmp_path):
    server = serve_loopback()
    try:
        done = run(_in(tmp_path, _connect_script(server.server_address[1])))
    finally:
        stop(server)
    assert done.ok, done.reason
    assert done.stdout.strip() == "refused 111" and server.hits == []


def test_the_gateway_answers_at_loopback_port_inside_through_its_socket(tmp_path):
    sock_path = tmp_path / "gateway.sock"
    gateway = serve_unix(sock_path)
    # the same port on the host's loopback is someone else: what answers inside must be the socket
    decoy = serve_loopback("decoy")
    port = decoy.server_address[1]
    script = ("import urllib.request\n"
              f"print(urllib.request.urlopen('http://127.0.0.1:{port}/v1/models', timeout=10).read().decode())\n"
              f"print(urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=10).read().decode())")
    try:
        done = run(_in(tmp_path, script, gateway=GatewayAccess(sock_path, port)))
        other = run(_in(tmp_path, _connect_script(port + 1 if port < 65535 else port - 1),
                        gateway=GatewayAccess(sock_path, port)))
    finally:
        stop(gateway, decoy)
    assert done.ok, done.reason + done.stderr
    assert done.stdout.splitlines() == ["gateway /v1/models", "gateway /health"]
    assert gateway.hits == ["/v1/models", "/health"] and decoy.hits == []
    assert other.stdout.strip() == "refused 111"  # the forwarder's port only


@pytest.mark.parametrize("user", ["1000:1000", "root"])
def test_writes_outside_the_work_directory_fail(tmp_path, user):
    agents = Path(os.environ["FORGE_HOME"]) / "agents" / "demo"
    agents.mkdir(parents=True)
    (agents / "run.sh").write_text("echo agent\n")
    script = f"""
import sys
results = []
for path in ['/etc/forge-{TOKEN}', '/usr/bin/forge-{TOKEN}', '/forge-{TOKEN}', '/opt/forge/forward.py',
             {str(agents / 'run.sh')!r}, {str(agents / 'new.sh')!r}]:
    try:
        open(path, 'a').write('x')
        results.append('WROTE ' + path)
    except OSError as e:
        results.append(type(e).__name__)
open('inside.txt', 'w').write('ok')
open('/tmp/scratch', 'w').write('ok')
try:  # beside the work directory: the container's own /tmp (root may write there), never the host's
    open({str(tmp_path / 'outside.txt')!r}, 'w').write('x')
except OSError:
    pass
print(' '.join(results))
print(open({str(agents / 'run.sh')!r}).read().strip())
"""
    done = run(_in(tmp_path, script, options=DockerOptions(user=user)))  # root too: the root is read-only
    assert done.ok, done.reason + done.stderr
    assert "WROTE" not in done.stdout, done.stdout
    assert done.stdout.splitlines()[1] == "echo agent"  # the agents are there, read-only
    assert (tmp_path / "work" / "inside.txt").read_text() == "ok"
    assert not (tmp_path / "outside.txt").exists() and (agents / "run.sh").read_text() == "echo agent\n"
    assert not Path("/tmp/scratch").exists() or Path("/tmp/scratch").read_text() != "ok"


def test_the_hosts_home_and_forge_home_are_not_readable(tmp_path):
    home = Path(os.environ["FORGE_HOME"])
    secret = home / "secrets" / "api-key.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text(f"sk-{TOKEN}")
    host_home = Path.home()
    script = f"""
import os
for path in [{str(secret)!r}, {str(home)!r}, {str(host_home)!r}, '/root/.bash_history', {str(Path(__file__).resolve())!r}]:
    try:
        data = open(path).read() if os.path.isfile(path) else os.listdir(path)
        print('READ', path, data)
    except OSError as e:
        print(type(e).__name__)
"""
    done = run(_in(tmp_path, script))
    assert done.ok, done.reason + done.stderr
    assert "READ" not in done.stdout and f"sk-{TOKEN}" not in done.stdout, done.stdout


def test_a_fork_bomb_is_contained_and_killed(tmp_path):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    done = run(_in(tmp_path, bomb, options=DockerOptions(pids=64), timeout_s=30))
    assert not done.ok and done.processes_exceeded, done
    assert "limit of 64 processes" in done.reason and "container was removed" in done.reason
    assert not done.timed_out  # its process limit ended it, not its 30 s deadline


def test_a_memory_hog_is_killed_on_the_containers_memory_limit(tmp_path):
    # 1 GiB at most, so that without the limit it ends well (and does not wake the host's OOM killer)
    hog = "chunks = []\nfor _ in range(64):\n    chunks.append(bytearray(16 * 2**20))\nprint('survived')"
    done = run(_in(tmp_path, hog, options=DockerOptions(memory_mb=128), timeout_s=60))
    assert not done.ok and done.memory_exceeded and done.exit_code == -9, done
    assert "memory limit of 128 MiB" in done.reason


def test_a_disk_filler_is_stopped(tmp_path):
    many_files = ("i = 0\nwhile True:\n    open(f'fill-{i}', 'wb').write(b'x' * 4 * 2**20)\n    i += 1")
    one_file = "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 2**20)"
    in_tmp = "f = open('/tmp/big', 'wb')\nwhile True:\n    f.write(b'x' * 2**20)\n    f.flush()"
    opts = DockerOptions(disk_mb=64, file_size_mb=32, tmpfs_mb=16)
    spread = run(_in(tmp_path / "a", many_files, options=opts, timeout_s=60))
    single = run(_in(tmp_path / "b", one_file, options=opts, timeout_s=60))
    scratch = run(_in(tmp_path / "c", in_tmp, options=DockerOptions(tmpfs_mb=16), timeout_s=60))
    assert spread.disk_exceeded and "disk limit of 64 MiB" in spread.reason, spread
    # Python ignores SIGXFSZ, so the write past RLIMIT_FSIZE fails with EFBIG
    assert single.disk_exceeded and "File too large" in single.stderr and "32 MiB per file" in single.reason, single
    assert (tmp_path / "b" / "work" / "big").stat().st_size == 32 * 2**20
    assert scratch.disk_exceeded and "No space left on device" in scratch.stderr, scratch  # /tmp is a bounded tmpfs
    written = sum(f.stat().st_size for f in (tmp_path / "a" / "work").iterdir())
    if quota.unavailable() is None:  # a file system of the limit: the writes past it failed (ext4 keeps <= 2 % more)
        assert written <= 64 * 2**20 * 1.02, written
    else:  # polled: the container was removed within about half a second of writing past it
        assert "container was removed" in spread.reason and written < 2**30


def test_a_runaway_loop_is_killed_at_its_deadline_or_its_cpu_time(tmp_path):
    loop = "while True:\n    pass"
    wall = run(_in(tmp_path, loop, timeout_s=2))
    cpu = run(_in(tmp_path, loop, timeout_s=60, cpu_time_s=1))
    assert wall.timed_out and "timed out after 2 s" in wall.reason
    assert cpu.cpu_exceeded and "CPU-time limit of 1 s" in cpu.reason, cpu


def test_a_real_gateway_records_the_calls_an_agent_makes_from_inside(tmp_path, tiny_model):
    import json

    from forge_cli.config import load_config
    from forge_cli.gateway.server import serve_gateway

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"when": "ping", "reply": "pong"}], "turns": ["hello"]}))
    config = load_config(env={}, overrides={
        "model.path": str(tiny_model), "model.engine.type": "scripted", "model.engine.policy": str(policy),
        "gateway.port": 0, "run.dir": str(tmp_path / "runs")})

    async def main():
        async with serve_gateway(config, "docker-agent") as gw:
            info = await gw.open_session(SessionRequest(task_id="t1", scaffold="inside"))
            port = int(gw.url.rsplit(":", 1)[1])
            agent = f"""
import json, os, urllib.request
request = urllib.request.Request(os.environ["BASE"] + "/chat/completions",
    data=json.dumps({{"messages": [{{"role": "user", "content": "ping"}}]}}).encode(),
    headers={{"Authorization": "Bearer " + os.environ["KEY"], "Content-Type": "application/json"}})
print(json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["message"]["content"])
"""
            async with DockerSandbox(tmp_path / "work", gateway=GatewayAccess(gw.unix_path, port)) as sb:
                done = await sb.exec(["python3", "-c", agent, TOKEN], timeout_s=120,
                                     env={"BASE": f"http://127.0.0.1:{port}/v1", "KEY": info.api_key})
            return done, gw.pool.trajectory(info.trajectory_id)

    done, trajectory = run(main())
    assert done.ok, done.reason + done.stderr
    assert done.stdout.strip() == "pong"
    assert len(trajectory.completions) == 1 and trajectory.completions[0].output_ids
