"""Engine throughput: output tokens/s of the embedded vLLM engine at 1, 16 and 64 concurrent
requests, against transformers ``generate`` serving one request at a time (and Forge's batching
``hf`` engine at the same concurrency), on the default tiny model; and the same vLLM engine through
the gateway (``through gateway``): the same number of concurrent sessions, each its own API key (a
recorded session: every call's ids and logprobs durable in the pool before its answer), the same
task as a chat message, the tokens counted from each answer's ``usage``. What an agent gets from the
engine once the gateway is between them, against the engine called in-process.

Every request: a ~30-token chat prompt, 64 new tokens at temperature 1 (EOS may end one early;
tokens actually produced are counted). Each level runs ``--rounds`` waves of ``concurrency``
requests; the figure is the median over rounds.

    python benchmarks/engine_throughput.py [--levels 1 16 64] [--rounds 3]

Writes benchmarks/results/engine_throughput.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

NEW = 64


async def wave(engine, prompts, params) -> tuple[int, float]:
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
    return sum(len(o[0].output_ids) for o in outs), time.perf_counter() - t0


async def engine_rates(engine, prompts, levels, rounds) -> dict[int, float]:
    from forge_cli.engine.base import SamplingParams

    params = SamplingParams(max_tokens=NEW, temperature=1.0)
    await wave(engine, prompts[:2], params)  # warm-up
    rates = {}
    for level in levels:
        samples = []
        for _ in range(rounds):
            tokens, secs = await wave(engine, (prompts * level)[:level], params)
            samples.append(tokens / secs)
        rates[level] = statistics.median(samples)
    return rates


TASKS = [f"Task {i}: list the files and report the largest one." for i in range(8)]


async def gateway_rates(engine, model: Path, runs: Path, levels, rounds) -> dict[int, float]:
    """Output tokens/s of ``engine`` served by the gateway, ``level`` sessions at once (chat completions)."""
    import httpx

    from forge_cli.config import load_config
    from forge_cli.gateway.server import serve_gateway

    config = load_config(env={}, overrides={"model.path": str(model), "gateway.port": 0, "gateway.socket": "",
                                            "run.dir": str(runs)})
    async with serve_gateway(config, "through-gateway", engine=engine) as gw:
        limits = httpx.Limits(max_connections=max(levels), max_keepalive_connections=max(levels))
        async with httpx.AsyncClient(base_url=gw.url, limits=limits, timeout=600) as client:
            async def call(i: int) -> int:
                r = await client.post("/v1/chat/completions", headers={"Authorization": f"Bearer through-{i}"}, json={
                    "model": "forge", "messages": [{"role": "user", "content": TASKS[i % len(TASKS)]}],
                    "max_tokens": NEW, "temperature": 1.0})
                r.raise_for_status()
                return r.json()["usage"]["completion_tokens"]

            await asyncio.gather(call(0), call(1))  # warm-up
            rates = {}
            for level in levels:
                samples = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    tokens = sum(await asyncio.gather(*(call(i) for i in range(level))))
                    samples.append(tokens / (time.perf_counter() - t0))
                rates[level] = statistics.median(samples)
    return rates


def generate_one_at_a_time(model_path: Path, prompts: list[list[int]], n: int) -> float:
    import torch

    from forge_cli.engine.hf import load_hf

    model, tok = load_hf(model_path)
    tokens, t0 = 0, time.perf_counter()
    for i in range(n):
        ids = torch.tensor([prompts[i % len(prompts)]])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_p=1.0,
                                 max_new_tokens=NEW, pad_token_id=tok.pad_token_id)
        tokens += out.shape[1] - ids.shape[1]
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from forge_cli.engine.default_model import init_default_model
    from forge_cli.engine.hf import HFEngine
    from forge_cli.engine.vllm import VLLMEngine

    with tempfile.TemporaryDirectory() as tmp:
        model = init_default_model(Path(tmp) / "model")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model)
        prompts = [tok.encode(f"<|im_start|>user\n{task}<|im_end|>\n<|im_start|>assistant\n") for task in TASKS]
        baseline = generate_one_at_a_time(model, prompts, 16)

        async def run_engines():
            vllm = VLLMEngine(model, max_model_len=1024)
            v = await engine_rates(vllm, prompts, args.levels, args.rounds)
            g = await gateway_rates(vllm, model, Path(tmp) / "runs", args.levels, args.rounds)
            v2 = await engine_rates(vllm, prompts, args.levels, args.rounds)  # again: the engine's drift over the run
            await vllm.close()
            hf = HFEngine(model)
            h = await engine_rates(hf, prompts, args.levels, args.rounds)
            await hf.close()
            return {c: statistics.median([v[c], v2[c]]) for c in v}, g, h

        vllm_rates, gateway, hf_rates = asyncio.run(run_engines())
    rows = [{"concurrency": c, "vllm_tokens_per_s": round(vllm_rates[c], 1), "through_gateway_tokens_per_s": round(gateway[c], 1),
             "gateway_vs_direct": round(gateway[c] / vllm_rates[c], 3), "hf_engine_tokens_per_s": round(hf_rates[c], 1),
             "generate_one_at_a_time_tokens_per_s": round(baseline, 1), "vllm_vs_generate": round(vllm_rates[c] / baseline, 2)}
            for c in args.levels]
    print(f"transformers generate, one request at a time: {baseline:.0f} output tokens/s")
    print(f"{'concurrent':>10}{'vLLM tok/s':>12}{'through gateway':>17}{'gw / direct':>13}{'hf engine tok/s':>17}{'vLLM / generate':>17}")
    for r in rows:
        print(f"{r['concurrency']:>10}{r['vllm_tokens_per_s']:>12.0f}{r['through_gateway_tokens_per_s']:>17.0f}{r['gateway_vs_direct']:>13.3f}"
              f"{r['hf_engine_tokens_per_s']:>17.0f}{r['vllm_vs_generate']:>17.2f}")
    out = HERE / "results" / "engine_throughput.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "new_tokens": NEW, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
