"""Engine throughput: output tokens/s of the embedded vLLM engine called directly and the same
engine through the gateway, and vLLM against transformers ``generate`` and Forge's ``hf`` engine, on
the default tiny model.

Direct vs through the gateway (the issue-27 row): ``N`` sessions at once, each sending its next
request as soon as its last is answered, for ``--seconds`` after a ``--warmup``; the tokens of the
answers that arrive in that window. Direct: ``engine.generate`` in this process, as the gateway
calls it (measured before and after the gateway: the median of the two). Through the gateway: the
gateway in a process of its own with the same engine settings, as ``forge gateway serve`` runs it;
each session its own API key (a recorded session: every call's ids and logprobs durable in the pool
before its answer) and keep-alive connection, the task as a chat message, a raw HTTP/1.1 client in
this process, the tokens from each answer's ``usage``.

vLLM vs ``generate`` (skipped by ``--gateway-only``): ``--rounds`` waves of ``N`` concurrent requests
a level, the median wave.

Every request: a ~30-token prompt, 64 new tokens at temperature 1 (EOS may end one early; tokens
actually produced are counted).

    python benchmarks/engine_throughput.py [--levels 1 16 64] [--seconds 20] [--gateway-only] [--out PATH]

Writes benchmarks/results/engine_throughput.json (or ``--out``).
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


async def closed_loop(call, sessions: int, seconds: float, warmup: float) -> float:
    """Output tokens/s with ``sessions`` sessions, each sending its next request as soon as its last
    is answered (``call(i)`` -> tokens of session ``i``'s answer): the tokens of the answers that
    arrive from the end of a ``warmup`` (every session's first call, the batch filling up) until
    ``seconds`` later — or, where some session has had no answer by then (a slow machine), until every
    session has had one, so that no level reads 0 for want of time."""
    start = time.perf_counter() + warmup
    end = start + seconds
    tokens, answered, stop = 0, set(), None

    async def session(i: int) -> None:
        nonlocal tokens, stop
        while stop is None or time.perf_counter() < stop:
            n = await call(i)
            now = time.perf_counter()
            if now < start:
                continue
            if stop is not None and now > stop:
                break
            tokens += n
            answered.add(i)
            if stop is None and now >= end and len(answered) == sessions:
                stop = now

    await asyncio.gather(*(session(i) for i in range(sessions)))
    return tokens / (stop - start)


async def direct_sessions(engine, prompts, levels, seconds: float, warmup: float) -> dict[int, float]:
    """:func:`closed_loop` on the engine called in-process (as the gateway calls it)."""
    from forge_cli.engine.base import SamplingParams

    params = SamplingParams(max_tokens=NEW, temperature=1.0)

    async def call(i: int) -> int:
        [out] = await engine.generate(prompts[i % len(prompts)], params)
        return len(out.output_ids)

    return {level: await closed_loop(call, level, seconds, warmup) for level in levels}


async def gateway_sessions(port: int, levels, seconds: float, warmup: float) -> dict[int, float]:
    """:func:`closed_loop` through a gateway in another process (:func:`serve_gateway_process`): each
    session its own API key (a recorded session: every call's ids and logprobs durable in the pool
    before its answer) and its own keep-alive connection, the task as a chat message, the tokens
    read from each answer's ``usage``. A raw HTTP/1.1 client: httpx would cost the shared cores more
    than the gateway does."""
    from benchmarks.gateway_overhead import raw_exchange

    rates = {}
    for level in levels:
        conns: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

        async def call(i: int) -> int:
            body = json.dumps({"model": "forge", "messages": [{"role": "user", "content": TASKS[i % len(TASKS)]}],
                               "max_tokens": NEW, "temperature": 1.0}).encode()
            if i not in conns:
                conns[i] = await asyncio.open_connection("127.0.0.1", port)
            status, answer = await raw_exchange(*conns[i], (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer through-{level}-{i}"
                f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
            if status != 200:
                raise RuntimeError(f"the gateway answered {status}: {answer[:300].decode(errors='replace')}")
            return json.loads(answer)["usage"]["completion_tokens"]

        try:
            rates[level] = await closed_loop(call, level, seconds, warmup)
        finally:
            for _, writer in conns.values():
                writer.close()
    return rates


def serve_gateway_process(port: int, model: Path, runs: Path) -> None:
    """The gateway with the same vLLM engine as the direct rows, in a process of its own (as
    ``forge gateway serve`` runs it), until SIGTERM."""
    import signal

    from forge_cli.config import load_config
    from forge_cli.engine.vllm import VLLMEngine
    from forge_cli.gateway.server import serve_gateway

    async def serve() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        engine = VLLMEngine(model, max_model_len=1024)
        config = load_config(env={}, overrides={"model.path": str(model), "gateway.host": "127.0.0.1", "gateway.port": port,
                                                "gateway.socket": "", "run.dir": str(runs)})
        try:
            async with serve_gateway(config, "through-gateway", engine=engine):
                await stop.wait()
        finally:
            await engine.close()

    asyncio.run(serve())


async def through_gateway(model: Path, runs: Path, levels, seconds: float, warmup: float) -> dict[int, float]:
    """:func:`gateway_sessions` against a :func:`serve_gateway_process` started for them, stopped after."""
    import os
    import socket
    import subprocess

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve-gateway", str(port), "--model", str(model), "--runs", str(runs)],
                              env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    try:
        while True:  # /health answers 200 once the engine is ready
            if server.poll() is not None:
                raise SystemExit(f"the gateway exited with {server.returncode} before it was ready")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        return await gateway_sessions(port, levels, seconds, warmup)
    finally:
        server.terminate()
        server.wait(timeout=60)


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
    parser.add_argument("--rounds", type=int, default=3, help="waves a level (the engines' table)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds a level (direct vs through the gateway)")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds before them")
    parser.add_argument("--gateway-only", action="store_true", help="only direct vs through the gateway")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "engine_throughput.json")
    parser.add_argument("--serve-gateway", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_gateway:
        serve_gateway_process(args.serve_gateway, args.model, args.runs)
        return

    from forge_cli.engine.default_model import init_default_model
    from forge_cli.engine.hf import HFEngine
    from forge_cli.engine.vllm import VLLMEngine

    with tempfile.TemporaryDirectory() as tmp:
        model = init_default_model(Path(tmp) / "model")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model)
        prompts = [tok.encode(f"<|im_start|>user\n{task}<|im_end|>\n<|im_start|>assistant\n") for task in TASKS]
        baseline = None if args.gateway_only else generate_one_at_a_time(model, prompts, 16)

        async def run_engines():
            vllm = VLLMEngine(model, max_model_len=1024)
            waves = await engine_rates(vllm, prompts, args.levels, args.rounds) if baseline else None
            d1 = await direct_sessions(vllm, prompts, args.levels, args.seconds, args.warmup)
            g = await through_gateway(model, Path(tmp) / "runs", args.levels, args.seconds, args.warmup)
            d2 = await direct_sessions(vllm, prompts, args.levels, args.seconds, args.warmup)  # again: the engine's drift
            await vllm.close()
            h = None
            if baseline:
                hf = HFEngine(model)
                h = await engine_rates(hf, prompts, args.levels, args.rounds)
                await hf.close()
            return waves, {c: statistics.median([d1[c], d2[c]]) for c in d1}, (d1, d2), g, h

        waves, direct, (d1, d2), gateway, hf_rates = asyncio.run(run_engines())
    rows = []
    for c in args.levels:
        row = {"concurrency": c, "direct_tokens_per_s": round(direct[c], 1), "direct_before_after": [round(d1[c], 1), round(d2[c], 1)],
               "through_gateway_tokens_per_s": round(gateway[c], 1), "gateway_vs_direct": round(gateway[c] / direct[c], 3)}
        if baseline:
            row.update({"vllm_wave_tokens_per_s": round(waves[c], 1), "hf_engine_wave_tokens_per_s": round(hf_rates[c], 1),
                        "generate_one_at_a_time_tokens_per_s": round(baseline, 1), "vllm_vs_generate": round(waves[c] / baseline, 2)})
        rows.append(row)
    print(f"sessions each sending its next request when answered, {args.seconds:g} s measured after {args.warmup:g} s:")
    print(f"{'sessions':>9}{'vLLM direct tok/s':>19}{'(before, after)':>18}{'through gateway':>17}{'gw / direct':>13}")
    for r in rows:
        before, after = r["direct_before_after"]
        print(f"{r['concurrency']:>9}{r['direct_tokens_per_s']:>19.0f}{f'({before:.0f}, {after:.0f})':>18}"
              f"{r['through_gateway_tokens_per_s']:>17.0f}{r['gateway_vs_direct']:>13.3f}")
    if baseline:
        print(f"\nwaves of concurrent requests; transformers generate, one request at a time: {baseline:.0f} output tokens/s")
        print(f"{'concurrent':>10}{'vLLM tok/s':>12}{'hf engine tok/s':>17}{'vLLM / generate':>17}")
        for r in rows:
            print(f"{r['concurrency']:>10}{r['vllm_wave_tokens_per_s']:>12.0f}{r['hf_engine_wave_tokens_per_s']:>17.0f}{r['vllm_vs_generate']:>17.2f}")
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "new_tokens": NEW, "seconds": args.seconds,
                               "warmup": args.warmup, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
