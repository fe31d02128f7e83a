"""Sandboxes: start and teardown latency, how many this machine holds at once, and black-box
trajectories/hour per agent.

Part 1 — latency of each backend: ``local`` as a plain subprocess (``isolation = "none"``),
``local`` inside bubblewrap, and ``docker``. Each repeat opens a sandbox on a fresh work
directory with a gateway to forward (a listening unix socket, as ``serve_gateway``'s), runs
``true`` (start: open + first exec, which for docker creates and starts the container and for
bubblewrap sets up its namespaces, mounts and the forwarder), runs ``true`` again (a later exec),
then closes it (teardown: the container removed, the exec's cgroups and leftovers gone).

Part 2 — concurrency: K sandboxes at once, each running one program that sleeps ``--hold-s``
seconds, all started together; "ok" counts those that ended cleanly, and the ramp (wall time less
the hold) is how long the last one took to start. Reported: the time to have all K running, the host memory
they take (MemAvailable before against its lowest while they run) and, from that, how many the
free memory would hold.

Part 3 — black-box trajectories/hour: every built-in black-box agent (``forge scaffold add``;
installed here under FORGE_HOME when missing) does tasks through a real rollout — a real gateway,
the scripted engine, the agent program in the sandbox, the suite's verifier — ``--trajectories`` of
them at ``--agent-concurrency``. The first seven fix swe-mini tasks with their own policies
(``forge_cli.tasks.agent_policies``, the verifier run in the sandbox); the others do ``files`` tasks
with ``files_agent`` (``forge_cli.tasks.demo_policies``: the agent's own shell tool). The model only
scores the policy's text: ``--model-size scoring`` (1 layer) by default, so that the figure is the
agent's and the sandbox's, not the scoring of its prompts (``tiny``: as measured before 2026-12-06).

    python benchmarks/sandbox.py [--backends local bwrap docker] [--repeats 10] [--levels 1 16 64]
        [--agents mini-swe-agent aider ...] [--agent-sandbox local] [--trajectories 4] [--skip-agents]
        [--model-size scoring]

Writes benchmarks/results/sandbox.json (with ``--skip-agents``, the agents' figures already there are kept,
with the date they were measured: ``agents_date``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

BACKENDS = {"local": ("local", {"isolation": "none"}), "bwrap": ("local", {"isolation": "bwrap"}),
            "docker": ("docker", {})}
# the first seven: swe-mini with their own scripted policies; every other agent: files with files_agent
SWE_AGENTS = ["mini-swe-agent", "aider", "openai-agents", "smolagents", "opencode", "codex", "claude-code"]
_SERIAL = itertools.count()  # work directories


def available(backend: str) -> str | None:
    """Why ``backend`` cannot run here, or None."""
    if backend == "bwrap":
        from forge_cli.sandbox.bwrap import unavailable

        return unavailable()
    if backend == "docker":
        from forge_cli.builtin.sandboxes import docker_check

        return docker_check()
    return None


def opener(backend: str, root: Path, gateway: Any) -> Any:
    from forge_cli.plugins import get_registry

    name, options = BACKENDS[backend]
    spec = get_registry().sandboxes[name].value
    def make() -> Any:
        workdir = root / f"{backend}-{next(_SERIAL)}"
        workdir.mkdir(parents=True)
        return spec.open(workdir, spec.options(**options), gateway)

    return make


def memory_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


async def latency(backend: str, make: Any, repeats: int) -> dict[str, Any]:
    start, again, teardown = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sandbox = make()
        first = await sandbox.exec(["true"], timeout_s=60)
        t1 = time.perf_counter()
        second = await sandbox.exec(["true"], timeout_s=60)
        t2 = time.perf_counter()
        await sandbox.close()
        t3 = time.perf_counter()
        if first.exit_code != 0 or second.exit_code != 0:
            raise RuntimeError(f"{backend}: `true` failed: {first.reason} / {second.reason}")
        start.append(t1 - t0)
        again.append(t2 - t1)
        teardown.append(t3 - t2)
    row = {"backend": backend, "repeats": repeats, "start_ms": ms(start), "exec_ms": ms(again), "teardown_ms": ms(teardown)}
    print(f"{backend:>8}{row['start_ms']:>12.1f}{row['exec_ms']:>12.1f}{row['teardown_ms']:>14.1f}", flush=True)
    return row


def ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


async def concurrency(backend: str, make: Any, level: int, hold_s: float) -> dict[str, Any]:
    """``level`` sandboxes, each running one sleeper, all at once."""
    sandboxes = [make() for _ in range(level)]
    before = memory_available()
    lowest = before
    started = time.perf_counter()
    running = [asyncio.ensure_future(s.exec(["sleep", str(hold_s)], timeout_s=hold_s + 120)) for s in sandboxes]
    while not all(r.done() for r in running):
        lowest = min(lowest, memory_available())
        await asyncio.sleep(0.1)
    wall = time.perf_counter() - started
    results = [r.result() for r in running]
    closing = time.perf_counter()
    await asyncio.gather(*(s.close() for s in sandboxes))
    closed = time.perf_counter() - closing
    ok = sum(r.exit_code == 0 for r in results)
    # each sleeper ran hold_s; if they ran together, the last ends about hold_s after the last started
    ramp = wall - hold_s
    used = max(0, before - lowest)
    per = used / level
    row = {"backend": backend, "sandboxes": level, "ok": ok, "all_running_s": round(max(0.0, ramp), 2),
           "wall_s": round(wall, 2), "close_s": round(closed, 2), "memory_mib": round(used / 2**20, 1),
           "mib_per_sandbox": round(per / 2**20, 2),
           "free_memory_holds": int(before / per) if per > 0 else None,
           "errors": sorted({r.reason for r in results if r.exit_code != 0})[:3]}
    print(f"{backend:>8}{level:>6}{ok:>6}{row['all_running_s']:>10.2f}{row['memory_mib']:>10.0f}"
          f"{row['mib_per_sandbox']:>10.2f}{str(row['free_memory_holds']):>10}", flush=True)
    return row


async def agents(names: list[str], sandbox: str, trajectories: int, parallel: int, model: Path, runs: Path,
                 group_size: int = 1) -> list[dict]:
    """Each agent's rollout: ``trajectories`` groups of ``group_size`` (its pool in ``runs/agents-NAME``)."""
    from forge_cli import installer
    from forge_cli.config import load_config
    from forge_cli.gateway.server import serve_gateway
    from forge_cli.plugins import get_registry
    from forge_cli.rollout.records import RolloutRequest
    from forge_cli.rollout.driver import rollout

    rows = []
    for name in names:
        spec = get_registry().scaffold(name)
        t0 = time.perf_counter()
        await asyncio.to_thread(installer.install_agent, spec)
        install_s = time.perf_counter() - t0
        suite, policy = (("swe-mini", f"forge_cli.tasks.agent_policies:{name.replace('-', '_')}") if name in SWE_AGENTS
                         else ("files", "forge_cli.tasks.demo_policies:files_agent"))
        overrides = {"model.path": str(model), "gateway.port": 0, "run.dir": str(runs), "rollout.sandbox": sandbox,
                     "model.engine.type": "scripted", "model.engine.policy": policy}
        isolation = None
        if sandbox == "local":
            isolation = overrides["sandboxes.local.isolation"] = "bwrap" if available("bwrap") is None else "none"
        config = load_config(env={}, overrides=overrides)
        request = RolloutRequest(scaffold=name, suite=suite, groups=trajectories, n=group_size, concurrency=parallel,
                                 trajectory_timeout_s=600, seed=0)
        async with serve_gateway(config, f"agents-{name}") as gw:
            summary = await rollout(config, request, gateway=gw)
        solved = round(summary.success_rate * summary.trajectories)
        row = {"agent": name, "task": suite, "sandbox": sandbox, "isolation": isolation, "trajectories": summary.trajectories, "solved": solved,
               "concurrency": parallel, "wall_s": round(summary.wall_s, 1),
               "trajectories_per_hour": round(summary.trajectories / summary.wall_s * 3600),
               "completions_per_trajectory": round(summary.completions_per_trajectory, 1),
               "tokens_per_trajectory": round(summary.tokens_per_trajectory),
               "by_status": summary.by_status, "install_s": round(install_s, 1)}
        rows.append(row)
        print(f"{name:>17}{suite:>9}{sandbox:>8}{summary.trajectories:>6}{solved:>8}{row['trajectories_per_hour']:>10}"
              f"{row['completions_per_trajectory']:>8.1f}{row['tokens_per_trajectory']:>10}{row['wall_s']:>9.1f}", flush=True)
    return rows


async def gateway_socket(path: Path) -> Any:
    """A listening unix socket for the sandboxes to forward to (nothing connects in these parts)."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    return await asyncio.start_unix_server(answer, path=str(path))


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from forge_cli.sandbox.contract import GatewayAccess

    root = Path(tempfile.mkdtemp(prefix="forge-bench-sandbox-"))
    server = await gateway_socket(root / "gateway.sock")
    gateway = GatewayAccess(root / "gateway.sock", 8000)
    backends = []
    for backend in args.backends:
        problem = available(backend)
        if problem:
            print(f"skipping {backend}: {problem}", flush=True)
        else:
            backends.append(backend)
    out: dict[str, Any] = {"skipped": [b for b in args.backends if b not in backends]}
    if args.agents_only:
        backends = []
    try:
        print(f"\nstart / exec / teardown, median of {args.repeats}\n{'backend':>8}{'start ms':>12}{'exec ms':>12}"
              f"{'teardown ms':>14}", flush=True)
        out["latency"] = [await latency(b, opener(b, root, gateway), args.repeats) for b in backends]
        print(f"\nconcurrent sandboxes, each sleeping {args.hold_s:g} s\n{'backend':>8}{'K':>6}{'ok':>6}{'ramp s':>10}"
              f"{'MiB':>10}{'MiB/sb':>10}{'holds':>10}", flush=True)
        out["concurrency"] = [await concurrency(b, opener(b, root, gateway), k, args.hold_s)
                              for b in backends for k in args.levels]
    finally:
        server.close()
    if not args.skip_agents:
        from forge_cli.engine.default_model import init_default_model

        model = init_default_model(root / "model", size=args.model_size, seed=0)
        print(f"\nblack-box agents, scripted policy, {args.model_size} model scoring, {args.trajectories} trajectories "
              f"at concurrency {args.agent_concurrency}\n{'agent':>17}{'task':>9}{'sandbox':>8}{'traj':>6}{'solved':>8}{'traj/h':>10}"
              f"{'calls':>8}{'tokens':>10}{'wall s':>9}", flush=True)
        out["agents"] = await agents(args.agents, args.agent_sandbox, args.trajectories, args.agent_concurrency,
                                     model, root / "runs")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--hold-s", type=float, default=10.0)
    parser.add_argument("--agents", nargs="+", default=None, help="default: every built-in black-box agent")
    parser.add_argument("--model-size", default="scoring", choices=["scoring", "tiny"])
    parser.add_argument("--agent-sandbox", default="local", choices=["local", "docker"])
    parser.add_argument("--trajectories", type=int, default=4)
    parser.add_argument("--agent-concurrency", type=int, default=2)
    parser.add_argument("--skip-agents", action="store_true", help="parts 1 and 2 only (the agents' figures kept)")
    parser.add_argument("--agents-only", action="store_true", help="part 3 only (the sandboxes' figures kept)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sandbox.json")
    args = parser.parse_args()
    if args.agents_only and args.skip_agents:
        parser.error("--agents-only and --skip-agents exclude each other")
    if args.agents is None:
        from forge_cli.plugins import get_registry

        blackbox = sorted(n for n, e in get_registry().scaffolds.items() if e.value.kind == "black" and e.plugin.startswith("forge:"))
        args.agents = SWE_AGENTS + [n for n in blackbox if n not in SWE_AGENTS]
    result = asyncio.run(main_async(args))
    result.update(date=time.strftime("%Y-%m-%d"), machine=f"{platform.machine()}, {os.cpu_count()} cores",
                  forge_home=os.environ.get("FORGE_HOME", "~/.forge"), argv=sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.skip_agents and args.out.exists():  # the agents' figures of the last run that measured them stay
        before = json.loads(args.out.read_text())
        if "agents" in before:
            result["agents"] = before["agents"]
            result["agents_date"] = before.get("agents_date") or before.get("date")
    if args.agents_only and args.out.exists():  # and the sandboxes' of the last run that measured them
        before = json.loads(args.out.read_text())
        for key in ("latency", "concurrency", "skipped"):
            if key in before:
                result[key] = before[key]
        result["sandboxes_date"] = before.get("sandboxes_date") or before.get("date")
        # the agents measured now replace their rows; the others' stay, each with the date it was measured
        measured = {row["agent"] for row in result["agents"]}
        kept = [{"date": before.get("agents_date") or before.get("date"), **row} for row in before.get("agents", [])
                if row["agent"] not in measured]
        order = {name: i for i, name in enumerate(SWE_AGENTS)}
        result["agents"] = sorted(kept + [{"date": result["date"], **row} for row in result["agents"]],
                                  key=lambda row: (order.get(row["agent"], len(order)), row["agent"]))
        result["agents_date"] = max(row["date"] for row in result["agents"])
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
