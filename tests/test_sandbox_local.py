"""The local sandbox: real processes in their own session, their limits, and nothing left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.sandbox import ExecResult, Sandbox
from forge_cli.sandbox.bwrap import unavailable
from forge_cli.sandbox.local import MARKER_VAR, LocalSandbox
from tests.waiting import until, wait_until

PY = sys.executable
# The tests below that see no process ids run in both modes: a plain subprocess and bubblewrap.
MODES = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(
    unavailable() is not None, reason=f"no bubblewrap sandbox here: {unavailable()}"))]


@pytest.fixture(autouse=True)
def mode(request, monkeypatch, tmp_path):
    """The isolation every LocalSandbox of a test gets: ``none`` unless the test is parametrized
    with MODES (pids seen inside bubblewrap are its own namespace's, so pid tests stay plain);
    under bubblewrap the test's folder is visible read-only (its scripts live there)."""
    isolation = getattr(request, "param", "none")
    real_init = LocalSandbox.__init__

    def init(self, workdir, **kw):
        kw.setdefault("isolation", isolation)
        if isolation == "bwrap":
            tmp_path.chmod(0o755)  # its scripts, readable by the sandbox's user as an installed agent's are
            kw.setdefault("read_only", (tmp_path,))
        real_init(self, workdir, **kw)

    monkeypatch.setattr(LocalSandbox, "__init__", init)
    return isolation


both = pytest.mark.parametrize("mode", MODES, indirect=True)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_dead(pids: list[int], within: float = 60.0) -> list[int]:
    """The ``pids`` still alive once they have all died or ``within`` seconds (a safety net) have passed
    (killed then, so a failing test leaves none)."""
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not [p for p in pids if alive(p)], what=f"processes {pids} to die", timeout=within)
    left = [p for p in pids if alive(p)]
    for pid in left:
        os.kill(pid, 9)
    return left


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def run(coro):
    return asyncio.run(coro)


def test_local_sandbox_is_a_sandbox(tmp_path):
    box = LocalSandbox(tmp_path / "work")
    assert isinstance(box, Sandbox)
    assert box.workdir == (tmp_path / "work").resolve() and box.workdir.is_dir()
    run(box.close())


@both
def test_runs_in_its_workdir_with_a_clean_environment(tmp_path, monkeypatch, mode):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-own")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:1")
    monkeypatch.setenv("FORGE_SECRET", "x")
    work = tmp_path / "work"
    prog = script(tmp_path, "env.py", """
        import json, os
        print(json.dumps({"cwd": os.getcwd(), "env": dict(os.environ)}))
    """)

    async def go():
        async with LocalSandbox(work) as box:
            return await box.exec([PY, str(prog)], env={"AGENT_VAR": "1"}, timeout_s=30), box.home, box.isolated

    done, home, isolated = run(go())
    assert done.ok and done.reason == "exited 0", done
    seen = json.loads(done.stdout)
    env = seen["env"]
    if isolated:  # every bubblewrap sandbox shows the same two paths, whatever the host's
        assert seen["cwd"] == env["PWD"] == "/forge/work" and env["HOME"] == "/forge/home"
    else:
        assert seen["cwd"] == env["PWD"] == str(work.resolve()) and env["HOME"] == str(home)
        assert not Path(env["HOME"]).is_relative_to(work.resolve()) and Path(env["HOME"]) != Path.home()
    assert env["AGENT_VAR"] == "1" and env["PATH"] == os.environ["PATH"]
    for leaked in ("OPENAI_API_KEY", "HTTP_PROXY", "FORGE_SECRET", "FORGE_HOME"):
        assert leaked not in env
    assert MARKER_VAR in env
    assert not home.exists()  # the sandbox's own folder went with close(); the work directory stays
    assert work.is_dir()


@both
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.integers(0, 255), out=st.binary(max_size=3000), err=st.binary(max_size=3000),
       tail=st.integers(1, 4000))
def test_exit_codes_and_output_tails_are_exact(tmp_path, mode, code, out, err, tail):
    prog = script(tmp_path, "echo.py", """
        import sys
        sys.stdout.buffer.write(bytes.fromhex(sys.argv[1])); sys.stdout.flush()
        sys.stderr.buffer.write(bytes.fromhex(sys.argv[2])); sys.exit(int(sys.argv[3]))
    """)

    async def go():
        async with LocalSandbox(tmp_path / "work", tail_bytes=tail) as box:
            return await box.exec([PY, str(prog), out.hex(), err.hex(), str(code)], timeout_s=30)

    done = run(go())
    assert done.exit_code == code and done.ok == (code == 0) and not done.timed_out
    assert done.stdout == out[-tail:].decode("utf-8", errors="replace")
    assert done.stderr == err[-tail:].decode("utf-8", errors="replace")
    assert done.reason.startswith(f"exited {code}")


def test_a_hanging_program_is_killed_at_its_deadline_with_all_it_started(tmp_path):
    """It ignores SIGTERM, has a child in its group and a daemon in a session of its own: all die."""
    prog = script(tmp_path, "hang.py", """
        import json, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(["sleep", "300"])
        daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
        open("pids.json", "w").write(json.dumps([child.pid, daemon.pid]))
        print("started", flush=True)
        time.sleep(300)
    """)
    work = tmp_path / "work"

    async def go():
        async with LocalSandbox(work, grace_s=0.5) as box:
            return await box.exec([PY, str(prog)], timeout_s=1.5)

    start = time.monotonic()
    done = run(go())
    took = time.monotonic() - start
    assert done.timed_out and not done.ok and done.exit_code == -9, done  # SIGKILLed: its SIGTERM was ignored
    assert done.reason == "timed out after 1.5 s of wall time; its processes were killed"
    assert done.stdout == "started\n"
    assert took >= 1.5  # not before its deadline (a slower machine only adds to it)
    pids = json.loads((work / "pids.json").read_text())
    assert wait_dead(pids) == []


def test_a_program_that_exits_leaves_no_background_process(tmp_path):
    prog = script(tmp_path, "bg.py", """
        import subprocess, sys
        p = subprocess.Popen(["sleep", "300"])
        q = subprocess.Popen(["sleep", "300"], start_new_session=True)
        print(p.pid, q.pid)
    """)

    async def go():
        async with LocalSandbox(tmp_path / "work") as box:
            return await box.exec([PY, str(prog)], timeout_s=30)

    done = run(go())
    assert done.ok
    assert wait_dead([int(p) for p in done.stdout.split()]) == []


def test_cancelling_an_exec_kills_its_processes(tmp_path):
    prog = script(tmp_path, "hang.py", """
        import os, time
        open("pid", "w").write(str(os.getpid()))
        time.sleep(300)
    """)
    work = tmp_path / "work"

    async def go():
        box = LocalSandbox(work)
        task = asyncio.create_task(box.exec([PY, str(prog)], timeout_s=60))
        await until(lambda: _read(work / "pid"), what="the program to write its pid")  # it runs
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        pid = int((work / "pid").read_text())
        await box.close()
        return pid

    pid = run(go())
    assert wait_dead([pid]) == []


def test_close_kills_what_still_runs(tmp_path):
    prog = script(tmp_path, "hang.py", """
        import os, time
        open("pid", "w").write(str(os.getpid()))
        time.sleep(300)
    """)
    work = tmp_path / "work"

    async def go():
        box = LocalSandbox(work)
        task = asyncio.create_task(box.exec([PY, str(prog)], timeout_s=60))
        await until(lambda: _read(work / "pid"), what="the program to write its pid")
        await box.close()
        done = await asyncio.wait_for(task, 10)
        return done, int((work / "pid").read_text())

    done, pid = run(go())
    assert done.exit_code == -9 and not done.ok
    assert wait_dead([pid]) == []
    with pytest.raises(ForgeError, match="exec after close"):
        run(_exec_closed(work))


async def _exec_closed(work: Path) -> ExecResult:
    box = LocalSandbox(work)
    await box.close()
    return await box.exec([PY, "-c", "pass"])


@both
def test_memory_limit(tmp_path, mode):
    prog = script(tmp_path, "eat.py", """
        print("before", flush=True)
        block = bytearray(2 * 1024**3)
        print("after")
    """)

    async def go():
        async with LocalSandbox(tmp_path / "work", memory_bytes=512 * 2**20) as box:
            limited = await box.exec([PY, str(prog)], timeout_s=30)
            unlimited_small = await box.exec([PY, "-c", "x = bytearray(64 * 2**20)"], timeout_s=30)
            return limited, unlimited_small

    limited, small = run(go())
    assert limited.exit_code == 1 and limited.memory_exceeded and not limited.ok
    assert limited.stdout == "before\n" and "MemoryError" in limited.stderr
    assert limited.reason == "exited 1 (it ran out of its memory limit of 512 MiB): MemoryError"
    assert small.ok and not small.memory_exceeded


@both
def test_cpu_time_limit(tmp_path, mode):
    async def go():
        async with LocalSandbox(tmp_path / "work") as box:
            return await box.exec([PY, "-c", "while True: pass"], timeout_s=30, cpu_time_s=1)

    done = run(go())
    assert done.cpu_exceeded and not done.timed_out and done.exit_code in (-24, -9)
    assert "CPU-time limit of 1 s" in done.reason  # its CPU, not the 30 s deadline (not timed_out)


@both
def test_a_program_that_cannot_start_is_a_result(tmp_path, mode):
    not_exec = tmp_path / "plain.txt"
    not_exec.write_text("hello")

    async def go():
        async with LocalSandbox(tmp_path / "work") as box:
            return (await box.exec([str(tmp_path / "missing-program")], timeout_s=5),
                    await box.exec([str(not_exec)], timeout_s=5))

    missing, denied = run(go())
    for done in (missing, denied):
        assert not done.started and done.exit_code is None and not done.ok
    assert missing.reason.endswith("missing-program': No such file or directory")
    assert denied.reason.endswith("plain.txt': Permission denied")


@both
def test_files_in_and_out(tmp_path, mode):
    host = tmp_path / "host"
    (host / "tree" / "sub").mkdir(parents=True)
    (host / "tree" / "sub" / "a.txt").write_text("A")
    (tmp_path / "outside.txt").write_text("secret")
    work = tmp_path / "work"

    async def go():
        async with LocalSandbox(work) as box:
            await box.write_file("deep/er/x.txt", "héllo")
            await box.write_file("b.bin", b"\x00\x01")
            await box.copy_in(host / "tree", "copied")
            await box.copy_in(host / "tree" / "sub" / "a.txt", "one.txt")
            assert await box.read_file("deep/er/x.txt") == "héllo".encode()
            assert await box.read_file("b.bin") == b"\x00\x01"
            await box.copy_out("copied", tmp_path / "back")
            (work / "link").symlink_to(tmp_path / "outside.txt")
            for bad in ("../outside.txt", "/etc/passwd", "link", ""):
                with pytest.raises(ForgeError, match="work directory"):
                    await box.read_file(bad)
            with pytest.raises(ForgeError, match="work directory"):
                await box.write_file("../x", "no")
            with pytest.raises(ForgeError, match="cannot read 'nope'"):
                await box.read_file("nope")

    run(go())
    assert (work / "copied" / "sub" / "a.txt").read_text() == "A"
    assert (work / "one.txt").read_text() == "A"
    assert (tmp_path / "back" / "sub" / "a.txt").read_text() == "A"
    assert not (tmp_path / "x").exists()


@both
def test_bad_limits_are_refused(tmp_path, mode):
    with pytest.raises(ForgeError, match="memory_bytes must be positive"):
        LocalSandbox(tmp_path, memory_bytes=0)

    async def go():
        async with LocalSandbox(tmp_path / "work") as box:
            with pytest.raises(ForgeError, match="timeout_s must be positive"):
                await box.exec([PY, "-c", "pass"], timeout_s=0)
            with pytest.raises(ForgeError, match="needs a command"):
                await box.exec([])

    run(go())


def test_the_registered_local_sandbox_opens_with_its_options(tmp_path):
    from forge_cli import plugins

    reg = plugins.get_registry()
    spec = reg.sandboxes["local"].value
    options = reg.options_for("sandboxes", "local", {"memory_mb": 256, "cpu_time_s": 2}, "forge.toml")
    box = spec.open(tmp_path / "work", options)
    assert isinstance(box, LocalSandbox) and box.memory_bytes == 256 * 2**20 and box.cpu_time_s == 2
    run(box.close())
    with pytest.raises(ForgeError, match="memory_mb"):
        reg.options_for("sandboxes", "local", {"memory_mb": -1}, "forge.toml")


OWNER = """
import asyncio, sys
from forge_cli.sandbox.local import LocalSandbox

async def main():
    box = LocalSandbox(sys.argv[1], isolation=sys.argv[2])
    print(box.home.parent, flush=True)
    await box.exec(["sleep", "600"], env={"FORGE_TEST_OWNER": sys.argv[1]}, timeout_s=600)

asyncio.run(main())
"""


@pytest.mark.parametrize("isolation", MODES)
def test_what_a_sigkilled_owner_left_is_swept_by_the_next_process(tmp_path, isolation):
    """The process that opened a sandbox dies by SIGKILL mid-exec. In bubblewrap its program dies with it;
    a plain subprocess outlives it. Either way the next process's sweep kills what is left in the dead
    owner's cgroups and removes them and the sandbox's own folder."""
    import signal
    import subprocess

    from forge_cli.sandbox import local
    from forge_cli.sandbox.cgroup import ExecCgroup

    probe = ExecCgroup.create(pids_max=8, memory_bytes=None)
    if probe is None:
        pytest.skip("no writable cgroup here")
    probe.remove()
    workdir = tmp_path / "work"
    owner = subprocess.Popen([PY, "-c", OWNER, str(workdir), isolation], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parent.parent)
    root = Path(owner.stdout.readline().strip())
    needle = f"FORGE_TEST_OWNER={workdir}".encode()  # this test's program (every bubblewrap sandbox's PWD is /forge/work)
    sleepers = wait_until(lambda: [int(p) for p in os.listdir("/proc") if p.isdigit() and _environ_has(int(p), needle)
                                   and _read(Path(f"/proc/{p}/cmdline")).startswith(b"sleep\0")],
                          what="the owner's program to start")
    groups = {line.rsplit("/", 1)[-1] for line in Path(f"/proc/{sleepers[0]}/cgroup").read_text().splitlines()
              if "/forge-sandbox-" in line}
    assert groups and all(g.startswith(f"forge-sandbox-{owner.pid}-") for g in groups)  # named after its owner
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=30)
    if isolation == "bwrap":
        assert wait_dead(sleepers) == []  # --die-with-parent
    else:
        assert all(alive(p) for p in sleepers)  # nothing of the dead owner's stops it...
    local.sweep_leftovers()  # ... until the next process sweeps (another one on this machine may be first)
    assert wait_dead(sleepers) == [] and not root.exists()
    from forge_cli.sandbox.cgroup import _hierarchies

    left = [folder / g for _, folder in _hierarchies() for g in groups if (folder / g).exists()]
    assert left == []


def _environ_has(pid: int, needle: bytes) -> bool:
    return needle in _read(Path(f"/proc/{pid}/environ")).split(b"\0")


def _read(path: Path) -> bytes:
    """A file's bytes, or none if it is not there (a /proc file's process has gone meanwhile)."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


@both
def test_a_folder_the_host_makes_by_writing_a_file_is_the_programs_to_write_in(tmp_path):
    """An agent's config written by the host (``CODEX_HOME/config.toml``) makes its folder: a program of the
    sandbox, whichever user it runs as, writes its own files beside it."""

    async def go():
        async with LocalSandbox(tmp_path / "work") as box:
            await box.write_file(".agent/config.toml", "x = 1\n")
            return await box.exec(["sh", "-c", "echo state > .agent/state && cat .agent/config.toml .agent/state"],
                                  timeout_s=30)

    done = run(go())
    assert done.ok and done.stdout == "x = 1\nstate\n", done
