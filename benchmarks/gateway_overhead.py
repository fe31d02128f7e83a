"""Gateway overhead: latency the gateway adds per request, and requests/s, recording on.

The gateway runs in its own process with an engine that answers instantly (16 fixed ids, real
tokenizer and chat template, every call recorded into a SQLite pool with ``synchronous=FULL``),
so what is measured is the gateway: parsing, rendering, tokenising, recording, responding. The
load comes from another process (httpx, HTTP/1.1 keep-alive), one API key — one recorded
session — per concurrent client, at 1, 64 and 256 concurrent sessions. "Direct" is the same
instant engine called in-process, the baseline the gateway's latency is measured against.

    python benchmarks/gateway_overhead.py [--requests 2000] [--levels 1 64 256] [--out PATH]

Every level sends exactly ``--requests`` requests, spread over its sessions; each ends answered
(200), refused (another status, counted by status with its reason) or failed (no response, counted
by the client's error). Exits 1 when any request was not answered. Writes
benchmarks/results/gateway_overhead.json (or ``--out``).
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


def shares(total: int, sessions: int) -> list[int]:
    """How many of ``total`` requests each of ``sessions`` clients sends: all of them, spread evenly
    (the first ``total % sessions`` send one more), so every level sends exactly ``total``."""
    return [total // sessions + (i < total % sessions) for i in range(sessions)]


async def load(url: str, concurrency: int, total: int, transport=None) -> dict:
    """Send exactly ``total`` requests from ``concurrency`` sessions. Every request ends as answered
    (200, its latency kept), refused (any other status, counted by status with the first reason seen)
    or failed (no response: counted by the client's exception type, with its message). ``transport``:
    an httpx transport to use instead of the network (tests)."""
    import httpx

    body = {"model": "forge", "messages": [{"role": "system", "content": "You are a helpful agent."},
                                           {"role": "user", "content": "List the files in the current folder."}], "max_tokens": 16}
    latencies: list[float] = []
    refused: dict[str, int] = {}
    failed: dict[str, int] = {}
    reasons: dict[str, str] = {}
    sent = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120, transport=transport) as client:
        async def session(i: int, n: int) -> None:
            nonlocal sent
            headers = {"Authorization": f"Bearer bench-{concurrency}-{i}"}
            for _ in range(n):
                sent += 1
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/chat/completions", json=body, headers=headers)
                except httpx.HTTPError as e:
                    key = type(e).__name__
                    failed[key] = failed.get(key, 0) + 1
                    reasons.setdefault(key, str(e)[:200])
                    continue
                if r.status_code == 200:
                    latencies.append(time.perf_counter() - t0)
                else:
                    key = str(r.status_code)
                    refused[key] = refused.get(key, 0) + 1
                    reasons.setdefault(key, r.text[:200])

        await session(0, 1)  # warm-up: one session's first call, not counted
        for kept in (latencies, refused, failed, reasons):
            kept.clear()
        sent = 0
        t0 = time.perf_counter()
        await asyncio.gather(*(session(i, n) for i, n in enumerate(shares(total, concurrency))))
        wall = time.perf_counter() - t0
    return {"sent": sent, "latencies": latencies, "requests_per_s": len(latencies) / wall,
            "refused": refused, "failed": failed, "reasons": reasons}


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
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gateway_overhead.json")
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
                res = asyncio.run(load(f"http://127.0.0.1:{port}", level, args.requests))
                lat = res["latencies"]
                row = {"concurrency": level, "sent": res["sent"], "answered": len(lat),
                       "refused": res["refused"], "failed": res["failed"], "reasons": res["reasons"]}
                if lat:
                    row.update({"p50_ms": round(1000 * statistics.median(lat), 2), "p99_ms": round(1000 * percentile(lat, 0.99), 2),
                                "added_p50_ms": round(1000 * (statistics.median(lat) - direct_p50), 2),
                                "added_p99_ms": round(1000 * (percentile(lat, 0.99) - percentile(base, 0.99)), 2),
                                "requests_per_s": round(res["requests_per_s"], 1)})
                rows.append(row)
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"direct engine call: p50 {1000 * direct_p50:.3f} ms, p99 {1000 * percentile(base, 0.99):.3f} ms")
    print(f"{'sessions':>9}{'sent':>6}{'answered':>9}{'p50 ms':>9}{'p99 ms':>9}{'added p50':>11}{'added p99':>11}{'req/s':>8}")
    for r in rows:
        if r["answered"]:
            print(f"{r['concurrency']:>9}{r['sent']:>6}{r['answered']:>9}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
                  f"{r['added_p50_ms']:>11.2f}{r['added_p99_ms']:>11.2f}{r['requests_per_s']:>8.1f}")
        else:
            print(f"{r['concurrency']:>9}{r['sent']:>6}{0:>9}  (none answered)")
        for kind in ("refused", "failed"):
            for key, count in r[kind].items():
                print(f"{'':>9}  {kind} {count} x {key}: {r['reasons'][key]}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "direct_p50_ms": round(1000 * direct_p50, 4), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")
    if any(r["answered"] != r["sent"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
