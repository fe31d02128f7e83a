"""``forge doctor``'s checks: what is present and working on this machine.

Imports of heavy packages run in subprocesses, in parallel, so a broken install (a torch build
that segfaults, a vLLM that cannot import) is reported rather than crashing the check, and the
CLI itself never imports them.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from forge_cli import __version__
from forge_cli.builtin.sandboxes import docker_check
from forge_cli.sandbox import bwrap, probe, quota, seccomp
from forge_cli.sandbox.cgroup import ExecCgroup
from forge_cli.sandbox.docker import DEFAULT_IMAGE, engine_host
from forge_cli.sandbox.local import LocalSandbox

PROBE_TIMEOUT_S = 180


@dataclass(frozen=True)
class Check:
    """One line of the doctor's table. ``required``: the default loop cannot run without it."""

    name: str
    ok: bool | None  # None = not applicable / skipped
    detail: str
    required: bool


def _probe(code: str, timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Run ``code`` in a fresh interpreter; (success, its last stdout line or error line)."""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"import timed out after {timeout:.0f} s"
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        return False, (lines[-1] if lines else f"exit code {done.returncode}")[:200]
    out = [ln for ln in done.stdout.strip().splitlines() if ln.strip()]
    return True, out[-1] if out else ""


def _import_check(name: str, module: str, required: bool, extra: str = "", quick: bool = False) -> Callable[[], Check]:
    def run() -> Check:
        if quick:
            if importlib.util.find_spec(module) is None:
                return Check(name, False, "not installed", required)
            try:
                return Check(name, True, f"{importlib.metadata.version(name.split()[0])} (not imported: --quick)", required)
            except importlib.metadata.PackageNotFoundError:
                return Check(name, True, "present (not imported: --quick)", required)
        ok, detail = _probe(f"import {module}\n{extra or f'print({module}.__version__)'}")
        return Check(name, ok, detail if ok else f"cannot import: {detail}", required)

    return run


def _sqlite_check() -> Check:
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "probe.db")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.close()
    ok = mode.lower() == "wal"
    return Check("sqlite (WAL)", ok, f"sqlite {sqlite3.sqlite_version}, journal_mode={mode}", True)


def _bwrap_check() -> Check:
    why = bwrap.unavailable()
    if why is not None:
        return Check("bubblewrap", False, f"{why}: local sandboxes are plain subprocesses (they keep the network "
                     "and see the file system); enable with `apt-get install bubblewrap`", False)
    return Check("bubblewrap", True, "local sandboxes isolated: own network (the gateway only), pid, ipc and uts "
                 "namespaces, read-only system, Forge's own package hidden", False)


def _probe_sandbox() -> dict[str, Any]:
    """What :mod:`forge_cli.sandbox.probe` says from inside a local sandbox as a rollout opens one."""
    async def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="forge-doctor-") as tmp:
            async with LocalSandbox(Path(tmp) / "work", disk_bytes=16 * 2**20) as box:
                done = await box.exec([sys.executable, "-S", "-c", Path(probe.__file__).read_text()], timeout_s=60)
                if not done.ok:
                    raise RuntimeError(done.reason)
                return {**json.loads(done.stdout), "isolated": box.isolated, "quota": box.disk_quota}

    return asyncio.run(run())


def _isolation_checks() -> list[Check]:
    """What a program in a local sandbox is refused here, measured from inside one, and what is missing."""
    try:
        return _isolation_rows(_probe_sandbox())
    except Exception as exc:  # a broken sandbox (or probe) is a finding, not a crash of the doctor
        return [Check("sandbox isolation", False, f"a probe in a local sandbox failed: {exc!r}"[:300], False)]


def _isolation_rows(seen: dict[str, Any]) -> list[Check]:
    """The doctor's isolation rows from what the probe saw inside a sandbox."""
    refused = [name for name in ("mount", "open_by_handle", "unshare_user", "ptrace") if seen[name] != "allowed"]
    allowed = [name for name in ("mount", "open_by_handle", "unshare_user", "ptrace") if seen[name] == "allowed"]
    user = Check("sandbox user", seen["uid"] != 0,
                 f"uid {seen['uid']}: root's own files are as closed to programs inside as to any user" if seen["uid"]
                 else "root (without capabilities): root's own files that the read-only system shows are readable "
                 "inside (Forge runs as root with [sandboxes.local] user = \"self\", or without bubblewrap)", False)
    caps = Check("sandbox capabilities", seen["cap_eff"] == 0,
                 "none inside (CapEff 0)" if seen["cap_eff"] == 0 else
                 f"a program inside holds capabilities {seen['cap_eff']:#x}" + ("" if seen["isolated"] else
                                                                                 " (a plain subprocess: no bubblewrap)"),
                 False)
    why = seccomp.unavailable()
    filtered = Check("seccomp filter", seen["seccomp"] == 2 and not allowed,
                     f"on: {', '.join(refused)} refused inside" if seen["seccomp"] == 2 and not allowed else
                     f"off ({why or 'no bubblewrap'}): a program inside may call {', '.join(allowed) or 'more'}", False)
    probe_group = ExecCgroup.create(pids_max=16, memory_bytes=2**30)
    if probe_group is not None:
        kinds = ", ".join(sorted(probe_group.dirs))
        probe_group.remove()
    groups = Check("sandbox cgroups", probe_group is not None,
                   f"processes and memory bounded per exec and per MCP server ({kinds})" if probe_group is not None
                   else "no writable cgroup (not root?): a fork bomb ends only at its time limit, memory per process only",
                   False)
    disk_why = quota.unavailable()
    disk = Check("sandbox disk limit", seen["quota"],
                 "a file system of its size (loop-mounted ext4, one inode per 16 KiB): writes past it fail at once"
                 if seen["quota"] else f"polled every 0.25 s ({disk_why}): a fast writer can overshoot it", False)
    try:
        most = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        most = 0
    userns = Check("user namespaces", seen["unshare_user"] != "allowed",
                   (f"this kernel lets unprivileged processes make them (max {most}); " if most else
                    "this kernel makes none for unprivileged processes; ")
                   + ("refused inside sandboxes" if seen["unshare_user"] != "allowed" else
                      "a program inside a sandbox may make one (and hold every capability in it)"), False)
    return [user, caps, filtered, groups, disk, userns]


def _node_check() -> Check:
    npm = shutil.which("npm")
    node = shutil.which("node")
    if not (npm and node):
        return Check("node + npm", False, "missing: npm-packaged agents (opencode, codex, claude-code) cannot be added", False)
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    return Check("node + npm", True, f"node {version}", False)


def _docker_check() -> Check:
    why = docker_check()
    return Check("docker engine", why is None, why or f"{engine_host()}; image {DEFAULT_IMAGE} built", False)


def _postgres_check(url: str) -> Check:
    if not url.startswith("postgresql"):
        return Check("postgresql", None, "not configured (pool.url = sqlite)", False)
    ok, detail = _probe(
        "import psycopg, sys\n"
        f"c = psycopg.connect({url!r}, connect_timeout=3)\n"
        "print('server', c.info.server_version)",
        timeout=20,
    )
    return Check("postgresql", ok, detail if ok else f"cannot connect: {detail}", True)


def _plugin_check(registry: Any) -> Check:
    third = [p for p in registry.plugins.values() if not p.builtin]
    example = [p for p in third if p.name.startswith("forge-scaffold-example")]
    if example:
        return Check("example plugin", True, f"{example[0].name} {example[0].version} loaded", False)
    others = f"; other plugins: {', '.join(p.name for p in third)}" if third else ""
    return Check("example plugin", False, f"not installed (forge scaffold add plugins/forge-scaffold-example){others}", False)


def run_checks(config: Any, registry: Any, quick: bool = False) -> list[Check]:
    """Every check, in table order. Import probes run concurrently."""
    py_ok = sys.version_info >= (3, 11)

    torch_extra = (
        "print(torch.__version__, '| build:', 'cuda ' + torch.version.cuda if torch.version.cuda else 'cpu',"
        " '| cuda available:', torch.cuda.is_available())"
    )
    probes: list[Callable[[], Check]] = [
        _import_check("torch", "torch", True, torch_extra, quick),
        _import_check("transformers", "transformers", True, quick=quick),
        _import_check("vllm", "vllm", config.model.engine.type == "vllm", quick=quick),
        _import_check("deepspeed", "deepspeed", config.train.engine.type == "deepspeed", quick=quick),
        _import_check("ray", "ray", False, quick=quick),
        _import_check("fastapi", "fastapi", True, quick=quick),
        _import_check("uvicorn", "uvicorn", True, quick=quick),
        _import_check("mcp", "mcp", False, "import mcp.server.mcpserver\nprint('MCPServer available')", quick),
        _sqlite_check,
        _bwrap_check,
        _node_check,
        _docker_check,
        lambda: _postgres_check(config.pool.url),
        lambda: _plugin_check(registry),
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        isolation = pool.submit(_isolation_checks)
        results = list(pool.map(lambda fn: fn(), probes))
        at = next(i for i, c in enumerate(results) if c.name == "bubblewrap") + 1
        results[at:at] = isolation.result()
    head = [
        Check("python", py_ok, sys.version.split()[0] + ("" if py_ok else " (Forge needs >= 3.11)"), True),
        Check("forge", True, f"{__version__} at {Path(__file__).resolve().parent}", True),
    ]
    return head + results
