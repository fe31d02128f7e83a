"""The recipe for the pools `benchmarks/prefix_tree.py --from-pool` trains on: what real agents sent.

Black-box agents (``--agents``): each built-in agent program (installed under FORGE_HOME when missing)
does ``--groups`` groups of ``--group-size`` trajectories in bubblewrap through a real gateway — its
own system prompt, tool listing and turns, recorded as token ids — as `benchmarks/sandbox.py` runs
them: the seven swe-agents fix swe-mini tasks with their scripted policies
(``forge_cli.tasks.agent_policies``), the others do ``files`` tasks with ``files_agent``. White-box
scaffolds (``--white``): the context-management policies on ``kv-search`` driven by the scripted
``kv_search`` policy, so their rewrites (truncation, summaries, dropped tool output) branch the tree.
The model (``scoring``: 1 layer) only scores the policies' text; the policies are deterministic, so the
trajectories of a group differ only where the agent's own input does (tool output, paths, times).

    python benchmarks/agent_pools.py [--agents claude-code codex ...] [--white tool-call-truncate ...]
        [--groups 1] [--group-size 8] [--out benchmarks/results/agent-pools]

Each pool is ``OUT/runs/agents-NAME/pool.sqlite`` (white-box: ``OUT/runs/white-NAME``); a table of what
was recorded is printed and written to ``OUT/pools.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

LONG_PROMPT_AGENTS = ["claude-code", "codex", "opencode", "gemini-cli", "qwen-code", "copilot", "kilo", "hermes-agent", "gptme"]
WHITE = ["tool-call-truncate", "tool-call-summarize", "tool-call-discard-tool-output", "tool-call-keep-last-k"]


async def white_box(names: list[str], groups: int, n: int, model: Path, runs: Path) -> list[dict]:
    from forge_cli.config import load_config
    from forge_cli.gateway.server import serve_gateway
    from forge_cli.rollout.driver import rollout
    from forge_cli.rollout.records import RolloutRequest

    config = load_config(env={}, overrides={
        "model.path": str(model), "model.engine.type": "scripted", "model.engine.policy": "forge_cli.tasks.demo_policies:kv_search",
        "gateway.port": 0, "gateway.socket": "", "run.dir": str(runs)})
    rows = []
    for name in names:
        async with serve_gateway(config, f"white-{name}") as gw:
            summary = await rollout(config, RolloutRequest(scaffold=name, suite="kv-search", groups=groups, n=n, concurrency=16),
                                    gateway=gw)
        rows.append({"agent": name, "task": "kv-search", "trajectories": summary.trajectories,
                     "solved": round(summary.success_rate * summary.trajectories), "wall_s": round(summary.wall_s, 1)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", nargs="*", default=LONG_PROMPT_AGENTS, help="black-box agents (default: the long-prompt ones)")
    parser.add_argument("--white", nargs="*", default=WHITE, help="white-box context-management scaffolds")
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4, help="black-box trajectories at once")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "agent-pools")
    args = parser.parse_args()

    from benchmarks.sandbox import agents
    from forge_cli.engine.default_model import init_default_model

    args.out.mkdir(parents=True, exist_ok=True)
    model = init_default_model(args.out / "model", size="scoring", seed=0)
    runs = args.out / "runs"
    rows = []
    if args.agents:
        rows += asyncio.run(agents(args.agents, "local", args.groups, args.concurrency, model, runs, group_size=args.group_size))
    if args.white:
        rows += asyncio.run(white_box(args.white, args.groups, args.group_size, model, runs))
    out = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", "benchmarks/agent_pools.py", *sys.argv[1:]]),
           "group_size": args.group_size, "groups": args.groups, "pools": rows}
    (args.out / "pools.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"\n{len(rows)} pools under {runs}: python benchmarks/prefix_tree.py --from-pool {runs}/*")


if __name__ == "__main__":
    main()
