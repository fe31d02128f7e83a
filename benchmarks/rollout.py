"""``forge rollout`` throughput, and the prefix sharing each context policy produces.

Part 1 — trajectories/hour and completion tokens/s of the rollout driver on the default tiny
model served by vLLM, with the local executor and with Ray, at several concurrencies. The
scaffold is ``tool-call`` on ``calc``; the untrained model writes up to ``--max-tokens`` tokens
and rarely a tool call, so a trajectory is mostly one or two long completions: this measures the
driver + gateway + engine path at load, not an agent's skill. One vLLM engine serves every row.

Part 2 — the prefix-share ratio (tokens / unique tokens of the recorded completions' trie: what
the prefix tree saves) and context events per trajectory of each context policy on ``kv-search``
with 8 samples per group, driven by the scripted demo policy that solves kv-search like an agent
(``forge_cli.tasks.demo_policies:kv_search``), so the policies really act.

    python benchmarks/rollout.py [--levels 8 32 128] [--executors local ray] [--skip-throughput]

Writes benchmarks/results/rollout.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

POLICIES = ["tool-call", "tool-call-truncate", "tool-call-discard-tool-output", "tool-call-keep-last-k", "tool-call-summarize"]


async def throughput(model: Path, runs: Path, levels: list[int], executors: list[str], max_tokens: int) -> list[dict]:
    from forge_cli.config import load_config
    from forge_cli.gateway.server import serve_gateway
    from forge_cli.rollout.records import RolloutRequest
    from forge_cli.rollout.driver import rollout

    config = load_config(env={}, overrides={
        "model.path": str(model), "model.engine.type": "vllm", "model.max_model_len": 2048, "gateway.port": 0,
        "gateway.socket": "", "run.dir": str(runs), "pool.max_active_groups": 64,
        "scaffolds.tool-call.max_tokens": max_tokens, "scaffolds.tool-call.max_turns": 3})
    rows = []
    async with serve_gateway(config, "throughput") as gw:
        for executor in executors:
            if executor == "ray":
                import ray

                ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR", configure_logging=False)
            for level in levels:
                request = RolloutRequest(scaffold="tool-call", suite="calc", groups=max(2, level // 4), n=8,
                                         concurrency=level, trajectory_timeout_s=600, seed=level, executor=executor)
                t0 = time.perf_counter()
                summary = await rollout(config, request, gateway=gw)
                wall = time.perf_counter() - t0
                rows.append({"executor": executor, "concurrency": level, "trajectories": summary.trajectories,
                             "wall_s": round(wall, 2), "trajectories_per_hour": round(summary.trajectories / wall * 3600),
                             "completion_tokens_per_s": round(summary.output_tokens / wall, 1),
                             "completions_per_trajectory": round(summary.completions_per_trajectory, 2)})
                print(f"{executor:>6}{level:>8}{rows[-1]['trajectories']:>8}{rows[-1]['trajectories_per_hour']:>12}"
                      f"{rows[-1]['completion_tokens_per_s']:>12.0f}{wall:>9.1f}", flush=True)
            if executor == "ray":
                ray.shutdown()
    return rows


async def sharing(model: Path, runs: Path, groups: int, n: int = 8) -> list[dict]:
    from forge_cli.config import load_config
    from forge_cli.gateway.server import serve_gateway
    from forge_cli.rollout.records import RolloutRequest
    from forge_cli.rollout.driver import rollout

    config = load_config(env={}, overrides={
        "model.path": str(model), "model.engine.type": "scripted", "model.engine.policy": "forge_cli.tasks.demo_policies:kv_search",
        "gateway.port": 0, "gateway.socket": "", "run.dir": str(runs)})
    rows = []
    async with serve_gateway(config, "sharing") as gw:
        for scaffold in POLICIES:
            summary = await rollout(config, RolloutRequest(scaffold=scaffold, suite="kv-search", groups=groups, n=n, concurrency=16),
                                    gateway=gw)
            rows.append({"scaffold": scaffold, "prefix_share": round(summary.prefix_share or 0, 2),
                         "context_events_per_trajectory": round(summary.context_events_per_trajectory, 2),
                         "completions_per_trajectory": round(summary.completions_per_trajectory, 2),
                         "tokens_per_trajectory": round(summary.tokens_per_trajectory), "success_rate": round(summary.success_rate, 3)})
            r = rows[-1]
            print(f"{scaffold:>32}{r['prefix_share']:>8.2f}{r['context_events_per_trajectory']:>9.2f}"
                  f"{r['completions_per_trajectory']:>8.2f}{r['tokens_per_trajectory']:>9}{r['success_rate']:>9.1%}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--executors", nargs="+", default=["local", "ray"], choices=["local", "ray"])
    parser.add_argument("--max-tokens", type=int, default=64, help="per completion, part 1")
    parser.add_argument("--groups", type=int, default=4, help="kv-search groups per policy, part 2")
    parser.add_argument("--n", type=int, default=8, help="trajectories per group, part 2")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "rollout.json")
    args = parser.parse_args()

    from forge_cli.engine.default_model import init_default_model

    result: dict = {"date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as tmp:
        model = init_default_model(Path(tmp) / "model")
        if not args.skip_throughput:
            print(f"{'exec':>6}{'conc':>8}{'traj':>8}{'traj/hour':>12}{'tok/s':>12}{'wall s':>9}")
            result["throughput"] = asyncio.run(throughput(model, Path(tmp) / "runs", args.levels, args.executors, args.max_tokens))
            result["throughput_settings"] = {"scaffold": "tool-call", "suite": "calc", "n": 8, "max_tokens": args.max_tokens,
                                             "engine": "vllm", "model": "default tiny"}
        print(f"{f'scaffold (kv-search, n = {args.n})':>32}{'share':>8}{'events':>9}{'calls':>8}{'tokens':>9}{'solved':>9}")
        result["sharing"] = asyncio.run(sharing(model, Path(tmp) / "runs", args.groups, args.n))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
