"""Gateway overhead: latency the gateway adds per request, and requests/s, recording on.

The gateway runs in its own process with an engine that answers instantly (16 fixed ids, real
tokenizer and chat template, every call recorded into a SQLite pool with ``synchronous=FULL``),
so what is measured is the gateway: parsing, rendering, tokenising, recording, responding. The
load comes from another process (httpx, HTTP/1.1 keep-alive), one API key — one recorded
session — per concurrent client, at 1, 64 and 256 concurrent sessions. "Direct" is the same
instant engine called in-process, the baseline the gateway's latency is measured against.

    python benchmarks/gateway_overhead.py [--requests 2000] [--levels 1 64 256]

Writes benchmarks/results/gateway_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from forge_cli.engine.base import Engine, GenerationOutput, SamplingParams  # noqa: E402

OUTPUT = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55]


class InstantEngine(Engine):
    """Answers at once with fixed ids: isolates the gateway from generation."""

    name = "instant"

    def __init__(self, eos: int) -> None:
        super().__init__(8192)
        self.eos_token_id = eos

    async def _generate(self, prompt_ids, params, context):
        return [GenerationOutput(OUTPUT + [self.eos_token_id], [-0.5] * (len(OUTPUT) + 1), "stop", self.version) for _ in range(params.n)]

    async def _load_weights(self, weights):
        pass


def serve(port: int, model: Path, pool_path: Path) -> None:
    import uvicorn
    from transformers import AutoTokenizer

    from forge_cli import plugins
    from forge_cli.gateway.app import create_app
    from forge_cli.gateway.state import GatewayState
    from forge_cli.pool.store import DataPool

    tok = AutoTokenizer.from_pretrained(model)
    formats = {n: e.value for n, e in plugins.get_registry().tool_formats.items()}
    state = GatewayState(InstantEngine(tok.eos_token_id), tok, formats, pool=DataPool.sqlite(pool_path))
    uvicorn.run(create_app(state), host="127.0.0.1", port=port, log_level="error", access_log=False)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def load(url: str, concurrency: int, total: int) -> tuple[list[float], float]:
    import httpx

    body = {"model": "forge", "messages": [{"role": "system", "content": "You are a helpful agent."},
                                           {"role": "user", "content": "List the files in the current folder."}], "max_tokens": 16}
    latencies: list[float] = []
    per_client = max(1, total // concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        async def session(i: int) -> None:
            headers = {"Authorization": f"Bearer bench-{concurrency}-{i}"}
            for _ in range(per_client):
                t0 = time.perf_counter()
                r = await client.post("/v1/chat/completions", json=body, headers=headers)
                latencies.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
        await asyncio.gather(*(session(0) for _ in range(1)))  # warm-up: one session's first call
        latencies.clear()
        t0 = time.perf_counter()
        await asyncio.gather(*(session(i) for i in range(concurrency)))
        wall = time.perf_counter() - t0
    return latencies, len(latencies) / wall


def direct(model: Path, n: int = 2000) -> list[float]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    engine = InstantEngine(tok.eos_token_id)
    prompt = tok.encode("<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n")

    async def run() -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            await engine.generate(prompt, SamplingParams(max_tokens=16))
            out.append(time.perf_counter() - t0)
        return out

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per concurrency level")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pool", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.model, args.pool)
        return

    from forge_cli.engine.default_model import init_default_model

    with tempfile.TemporaryDirectory() as tmp:
        model = init_default_model(Path(tmp) / "model")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--model", str(model), "--pool", f"{tmp}/pool.sqlite"],
                                  env={**os.environ, "PYTHONPATH": str(HERE.parent)})
        try:
            import httpx

            for _ in range(300):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            base = direct(model)
            direct_p50 = statistics.median(base)
            rows = []
            for level in args.levels:
                lat, rps = asyncio.run(load(f"http://127.0.0.1:{port}", level, args.requests))
                rows.append({"concurrency": level, "requests": len(lat), "p50_ms": round(1000 * statistics.median(lat), 2),
                             "p99_ms": round(1000 * percentile(lat, 0.99), 2),
                             "added_p50_ms": round(1000 * (statistics.median(lat) - direct_p50), 2),
                             "added_p99_ms": round(1000 * (percentile(lat, 0.99) - percentile(base, 0.99)), 2),
                             "requests_per_s": round(rps, 1)})
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"direct engine call: p50 {1000 * direct_p50:.3f} ms, p99 {1000 * percentile(base, 0.99):.3f} ms")
    print(f"{'sessions':>9}{'requests':>10}{'p50 ms':>9}{'p99 ms':>9}{'added p50':>11}{'added p99':>11}{'req/s':>8}")
    for r in rows:
        print(f"{r['concurrency']:>9}{r['requests']:>10}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{r['added_p50_ms']:>11.2f}{r['added_p99_ms']:>11.2f}{r['requests_per_s']:>8.1f}")
    out = HERE / "results" / "gateway_overhead.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "direct_p50_ms": round(1000 * direct_p50, 4), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
