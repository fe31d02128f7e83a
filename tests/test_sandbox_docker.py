"""The docker sandbox against a real engine: the Sandbox protocol, and containers that never outlive
their exec's deadline, their caller's cancellation, their sandbox or the process that owns them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from forge_cli.errors import ForgeError
from forge_cli.sandbox import Sandbox
from forge_cli.sandbox.docker import LABEL, OWNER_LABEL, DockerOptions, DockerSandbox, remove_leftovers
from tests.docker_support import docker_engine, exists, sandbox_containers  # noqa: F401  (a fixture)
from tests.waiting import until, wait_until

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("docker_engine")


def run(coro):
    return asyncio.run(coro)


def test_exec_runs_in_the_work_directory_as_a_non_root_user_with_a_clean_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")

    async def main():
        async with DockerSandbox(tmp_path / "w") as sb:
            assert isinstance(sb, Sandbox)
            ok = await sb.exec(["sh", "-c", 'id -u; pwd; echo "$HOME|$GREETING|${OPENAI_API_KEY:-unset}"'],
                               env={"GREETING": "hi"})
            failed = await sb.exec(["sh", "-c", "echo to-err >&2; exit 3"])
            missing = await sb.exec(["no-such-program"])
            return ok, failed, missing

    ok, failed, missing = run(main())
    assert ok.ok and ok.reason == "exited 0"
    assert ok.stdout.splitlines() == ["1000", "/forge/work", "/home/agent|hi|unset"]  # the same path in every container
    assert failed.exit_code == 3 and not failed.ok and failed.stderr == "to-err\n"
    assert failed.reason == "exited 3: to-err"
    assert missing.exit_code == 127 and "no-such-program" in missing.stderr


def test_output_is_kept_as_its_tails(tmp_path):
    async def main():
        async with DockerSandbox(tmp_path, tail_bytes=1000) as sb:
            script = "import sys\nfor i in range(20000): print(i)\nsys.stderr.write('E' * 5000 + 'end')"
            return await sb.exec(["python3", "-c", script])

    done = run(main())
    assert done.ok
    assert len(done.stdout) == 1000 and done.stdout.endswith("19998\n19999\n")
    assert len(done.stderr) == 1000 and done.stderr.endswith("Eend")


def test_a_timeout_removes_the_container_and_the_next_exec_gets_a_fresh_one(tmp_path, docker_engine):
    async def main():
        async with DockerSandbox(tmp_path) as sb:
            await sb.exec(["sh", "-c", "echo kept > note; touch /tmp/scratch"])
            first = sb.container_id
            slow = await sb.exec(["sh", "-c", "sleep 60 & sleep 60"], timeout_s=1)
            gone = not exists(docker_engine, first)
            after = await sb.exec(["sh", "-c", "cat note; ls /tmp"])
            return slow, gone, after, first, sb.container_id

    slow, gone, after, first, second = run(main())
    # its 1 s deadline ended it (not its 60 s of sleep): the result says so, and the container is gone
    assert slow.timed_out and not slow.ok and slow.exit_code is None
    assert slow.reason == "timed out after 1 s of wall time; its container was removed"
    assert gone
    assert after.ok and after.stdout.split()[0] == "kept"  # the work directory stays; /tmp was the container's
    assert "scratch" not in after.stdout.split()
    assert second != first


def test_close_removes_the_container_and_gives_the_work_directory_back(tmp_path, docker_engine):
    work = tmp_path / "w"
    work.mkdir()
    (work / "task.txt").write_text("from the host\n")

    async def main():
        sb = DockerSandbox(work)
        done = await sb.exec(["sh", "-c", "cat task.txt; echo edited >> task.txt; echo new > made.txt"])
        cid = sb.container_id
        alive = exists(docker_engine, cid)
        await sb.close()
        await sb.close()  # twice is fine
        with pytest.raises(ForgeError, match="after close"):
            await sb.exec(["true"])
        return done, cid, alive

    done, cid, alive = run(main())
    assert done.ok and done.stdout == "from the host\n"
    assert alive and not exists(docker_engine, cid)
    assert (work / "task.txt").read_text() == "from the host\nedited\n"
    assert (work / "made.txt").read_text() == "new\n"
    me = os.stat(tmp_path)
    assert {(p.stat().st_uid, p.stat().st_gid) for p in [work, *work.iterdir()]} == {(me.st_uid, me.st_gid)}


def test_a_cancelled_exec_removes_its_container(tmp_path, docker_engine):
    async def main():
        async with DockerSandbox(tmp_path) as sb:
            task = asyncio.ensure_future(sb.exec(["sleep", "60"]))

            def sleeping() -> bool:
                if not sb.container_id:
                    return False
                processes = docker_engine.containers.get(sb.container_id).top()["Processes"] or []
                return any("sleep 60" in " ".join(p) for p in processes)

            await until(sleeping, what="the exec's program to run in its container")
            cid = sb.container_id
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return cid, exists(docker_engine, cid)  # before close: the cancellation itself removed it

    cid, still_there = run(main())
    assert cid is not None and not still_there


def test_the_container_goes_when_its_owner_process_is_killed(tmp_path, docker_engine):
    script = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(ROOT)!r})
        from forge_cli.sandbox.docker import DockerSandbox
        async def main():
            sb = DockerSandbox({str(tmp_path)!r})
            await sb.exec(["true"])
            print(sb.container_id, flush=True)
            await sb.exec(["sleep", "300"])
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        cid = proc.stdout.readline().strip()
        assert cid and exists(docker_engine, cid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
        proc.wait()
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not exists(docker_engine, cid), what=f"container {cid} to go")
    assert not exists(docker_engine, cid)


def test_leftovers_of_dead_owners_are_removed_and_live_ones_kept(tmp_path, docker_engine):
    async def main():
        async with DockerSandbox(tmp_path) as live:
            await live.exec(["true"])
            dead = docker_engine.containers.create(
                "forge-agent-base:latest", ["sleep", "300"], labels={LABEL: "1", OWNER_LABEL: "gone-boot:1:1"},
                network_mode="none")
            removed = remove_leftovers(docker_engine)
            return live.container_id, dead, removed

    live_id, dead, removed = run(main())
    assert dead.name in removed and not exists(docker_engine, dead.id)
    assert all(c.id != live_id for c in sandbox_containers(docker_engine))  # closed since, not swept


def test_files_in_and_out_stay_inside_the_work_directory(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n")

    async def main():
        async with DockerSandbox(tmp_path / "w") as sb:
            await sb.write_file("notes/a.txt", "text")
            await sb.write_file("b.bin", b"\x00\x01")
            await sb.copy_in(src / "pkg", "repo/pkg")
            edit = await sb.exec(["sh", "-c", "echo more >> notes/a.txt && echo 'X = 2' > repo/pkg/mod.py && cat b.bin | wc -c"])
            await sb.copy_out("repo", tmp_path / "out")
            with pytest.raises(ForgeError):
                await sb.write_file("../escape.txt", "x")
            with pytest.raises(ForgeError):
                await sb.read_file("/etc/passwd")
            with pytest.raises(ForgeError, match="cannot read"):
                await sb.read_file("nothing-here")
            return edit, await sb.read_file("notes/a.txt")

    edit, notes = run(main())
    assert edit.ok and edit.stdout.strip() == "2"  # files the host wrote are the agent's to change
    assert notes == b"textmore\n"
    assert (tmp_path / "out" / "pkg" / "mod.py").read_text() == "X = 2\n"
    assert not (tmp_path / "escape.txt").exists()


def test_stdio_command_connects_a_program_inside_to_the_caller(tmp_path):
    async def main():
        async with DockerSandbox(tmp_path) as sb:
            argv = sb.stdio_command(["python3", "-c", "import os, sys; print(sys.stdin.read().upper(), os.getcwd(), os.environ['K'])"],
                                    env={"K": "v"})
            done = await asyncio.to_thread(subprocess.run, argv, input="hello", capture_output=True, text=True, timeout=60)
            return argv, done

    argv, done = run(main())
    assert "exec" in argv and "-i" in argv
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["HELLO", "/forge/work", "v"]  # the work directory, where every container shows it


def test_a_missing_image_is_a_result_that_never_started(tmp_path):
    async def main():
        async with DockerSandbox(tmp_path, DockerOptions(image="forge-not-built:latest")) as sb:
            return await sb.exec(["true"])

    done = run(main())
    assert not done.started and done.exit_code is None
    assert "forge-not-built:latest is not built" in done.reason and "forge sandbox build" in done.reason


def test_the_registry_opens_a_docker_sandbox_with_its_options(tmp_path):
    from forge_cli import plugins

    spec = plugins.get_registry().sandboxes["docker"].value
    assert spec.check() is None
    sb = spec.open(tmp_path, {"memory_mb": 256, "pids": 64}, None)
    assert isinstance(sb, DockerSandbox) and sb.options.memory_mb == 256 and sb.options.pids == 64
    run(sb.close())
    with pytest.raises(Exception, match="extra"):
        spec.open(tmp_path, {"no_such_option": 1}, None)


def test_forge_sandbox_status_and_build_on_this_engine(cli):
    status = cli("sandbox", "status", "--json")
    assert status.exit_code == 0, status.output
    assert '"forge-agent-base:latest"' in status.output and '"forge-base:latest"' in status.output
    built = cli("sandbox", "build")
    assert built.exit_code == 0, built.output
    assert "forge-base:latest already there" in built.output


def test_forge_sandbox_build_without_an_engine_is_one_red_line(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    done = cli("sandbox", "build")
    assert done.exit_code == 1
    assert "no Docker engine answers" in done.output and "scripts/docker-engine.sh start" in done.output
    assert len(done.output.strip().splitlines()) == 1


def test_an_agents_venv_runs_inside_on_its_own_python_mounted_read_only(tmp_path):
    from forge_cli.paths import agents_dir

    venv = agents_dir() / "demo" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)

    async def main():
        async with DockerSandbox(tmp_path) as sb:
            return await sb.exec([str(venv / "bin" / "python"), "-c", "import sys; print(sys.prefix, sys.version_info[:2])"])

    done = run(main())
    assert done.ok, done.reason
    assert done.stdout.split()[0] == str(venv) and done.stdout.split(None, 1)[1].strip() == str(sys.version_info[:2])
