"""Router: prefix-cache hit rate and throughput, cache-aware routing vs round-robin, over two
vLLM replicas on a multi-turn agent workload.

16 sessions, each with its own ~400-token task context, run 6 turns; every turn resends the whole
history plus a new ~20-token message, like an agent. Turns of all sessions run concurrently, arriving in a random order. The
same two replicas serve both policies, with their prefix caches reset in between. Hit rate is
vLLM's cached prompt tokens over all prompt tokens (the first turn of a session can never hit).

    python benchmarks/router.py [--sessions 16] [--turns 6]

Writes benchmarks/results/router.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


async def workload(router, tok, sessions: int, turns: int, seed: int) -> dict:
    from forge_cli.engine.base import SamplingParams

    rng = random.Random(seed)
    words = ["file", "read", "error", "test", "patch", "module", "function", "line", "build", "commit", "branch", "log"]
    histories = [tok.encode(f"<|im_start|>system\nSession {s}. " + " ".join(rng.choice(words) for _ in range(350)) + "<|im_end|>\n")
                 for s in range(sessions)]
    prompt_tokens = cached = out_tokens = 0
    t0 = time.perf_counter()
    for turn in range(turns):
        for s in range(sessions):
            histories[s] += tok.encode(f"<|im_start|>user\nStep {turn}: " + " ".join(rng.choice(words) for _ in range(12))
                                       + "<|im_end|>\n<|im_start|>assistant\n")
        order = list(range(sessions))
        rng.shuffle(order)  # agents do not arrive in a fixed order
        done = await asyncio.gather(*(router.generate(histories[s], SamplingParams(max_tokens=16, temperature=1.0)) for s in order))
        outs = dict(zip(order, done))
        for s, out in outs.items():
            prompt_tokens += len(histories[s])
            cached += out[0].extra.get("cached_tokens", 0)
            out_tokens += len(out[0].output_ids)
            histories[s] = histories[s] + out[0].output_ids
    wall = time.perf_counter() - t0
    return {"hit_rate": cached / prompt_tokens, "requests_per_s": sessions * turns / wall,
            "prompt_tokens_per_s": prompt_tokens / wall, "wall_s": wall, "per_replica": list(router.stats.per_replica)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from forge_cli.engine.default_model import init_default_model
    from forge_cli.engine.router import Router
    from forge_cli.engine.vllm import VLLMEngine

    with tempfile.TemporaryDirectory() as tmp:
        model = init_default_model(Path(tmp) / "model")
        tok = AutoTokenizer.from_pretrained(model)

        async def run():
            replicas = [VLLMEngine(model, max_model_len=4096, kv_cache_bytes=192 * 1024 * 1024) for _ in range(2)]
            results = {}
            for policy in ("round_robin", "cache_aware", "round_robin", "cache_aware"):  # interleaved, twice
                for r in replicas:
                    await r.llm.reset_prefix_cache()
                router = Router(replicas, policy=policy)
                res = await workload(router, tok, args.sessions, args.turns, seed=len(results))
                results.setdefault(policy, []).append(res)
            for r in replicas:
                await r.close()
            return results

        results = asyncio.run(run())
    rows = []
    for policy, runs in results.items():
        rows.append({"policy": policy, "hit_rate": round(sum(r["hit_rate"] for r in runs) / len(runs), 3),
                     "requests_per_s": round(sum(r["requests_per_s"] for r in runs) / len(runs), 2),
                     "prompt_tokens_per_s": round(sum(r["prompt_tokens_per_s"] for r in runs) / len(runs), 1),
                     "per_replica_last": runs[-1]["per_replica"]})
    print(f"{args.sessions} sessions x {args.turns} turns over 2 vLLM replicas (mean of 2 interleaved runs)")
    print(f"{'policy':<14}{'hit rate':>10}{'req/s':>8}{'prompt tok/s':>14}  per replica")
    for r in rows:
        print(f"{r['policy']:<14}{r['hit_rate']:>10.3f}{r['requests_per_s']:>8.2f}{r['prompt_tokens_per_s']:>14.0f}  {r['per_replica_last']}")
    out = HERE / "results" / "router.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "sessions": args.sessions, "turns": args.turns, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
