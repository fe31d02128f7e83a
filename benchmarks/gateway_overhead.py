"""Gateway overhead: latency the gateway adds per request, and requests/s, recording on.

The gateway runs in its own process, as ``forge gateway serve`` runs it (its own listeners, the
run's pool), with an engine that answers instantly (16 fixed ids, real
tokenizer and chat template, every call recorded into a SQLite pool with ``synchronous=FULL``),
so what is measured is the gateway: parsing, rendering, tokenising, recording, responding. The
load comes from another process, one API key — one recorded session — per concurrent client, at
1, 64 and 256 concurrent sessions, from two load generators in turn (``--client``): ``raw`` (asyncio
streams, a keep-alive connection per session, the request's bytes built once: it leaves the shared
cores to the gateway) and ``httpx`` (HTTP/1.1 keep-alive, what the agents' SDKs use; its own cost
on the same 2 cores is in its figures). "Direct" is the same
instant engine called in-process, the baseline the gateway's latency is measured against.

    python benchmarks/gateway_overhead.py [--requests 2000] [--levels 1 64 256] [--client raw httpx] [--floor] [--out PATH]

``--floor`` also measures what bounds any gateway on this stack and machine, with the same clients:
``floor``, a bare FastAPI route on the same uvicorn that reads the body and answers a fixed chat
completion, and ``floor-durable``, the same plus one durable SQLite row a call through the thread
pool (what recording with every answer durable before it is sent costs at least).

Every level sends exactly ``--requests`` requests, spread over its sessions; each ends answered
(200), refused (another status, counted by status with its reason) or failed (no response, counted
by the client's error); beside each level's figures, the CPU time the server process (all its threads)
and the load generator used a call while the clock ran — steadier than the rates on a noisy machine,
and what says which of the two bounds the rate. Exits 1 when any request was not answered. Writes
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

    def __init__(self, eos: int, max_len: int = 8192) -> None:
        super().__init__(max_len)
        self.eos_token_id = eos

    async def _generate(self, prompt_ids, params, context):
        return [GenerationOutput(OUTPUT + [self.eos_token_id], [-0.5] * (len(OUTPUT) + 1), "stop", self.version) for _ in range(params.n)]

    async def _load_weights(self, weights):
        pass


def serve(port: int, model: Path, pool_path: Path, max_len: int = 8192, tool_parser: str | None = None) -> None:
    """The gateway as ``forge gateway serve`` runs it (its own listeners, the run's SQLite pool in
    ``pool_path``'s folder), with :class:`InstantEngine` (a context of ``max_len``), until SIGTERM;
    ``tool_parser``: vLLM's parser for a model folder other than the embedded default's."""
    import signal

    from transformers import AutoTokenizer

    from forge_cli.config import load_config
    from forge_cli.gateway import event_loop
    from forge_cli.gateway.server import serve_gateway

    tokenizer = AutoTokenizer.from_pretrained(model)
    engine = InstantEngine(tokenizer.eos_token_id, max_len)
    engine.tokenizer = tokenizer  # what the run reads the served model's tokenizer from
    config = load_config(env={}, overrides={"model.path": str(model), "gateway.host": "127.0.0.1", "gateway.port": port,
                                            "gateway.socket": "", "run.dir": str(pool_path.with_suffix(".runs")),
                                            **({"model.tool_parser": tool_parser} if tool_parser else {})})

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with serve_gateway(config, "overhead", engine=engine):
            await stop.wait()

    event_loop.run(main())  # as `forge gateway serve` runs it


def serve_floor(port: int, pool_path: Path, durable: bool) -> None:
    """The floor under any gateway on this stack: the same uvicorn and FastAPI, a route that reads the
    JSON body and answers a fixed chat completion; ``durable``: first one row of a recorded call's size
    into SQLite (WAL, ``synchronous=FULL``, committed) through the thread pool, as a recorded call needs."""
    import sqlite3
    import threading

    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    conn = sqlite3.connect(pool_path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, ids BLOB, meta TEXT)")
    row = (bytes(4 * 64), json.dumps({"sampling": {"temperature": 1.0}, "finish_reason": "stop"}))
    answer = {"id": "chatcmpl-floor", "object": "chat.completion", "created": 0, "model": "forge",
              "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
              "usage": {"prompt_tokens": 40, "completion_tokens": 17, "total_tokens": 57}}

    lock = threading.Lock()

    def insert() -> None:  # one transaction at a time on the one connection, as the pool's lock makes them
        with lock:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO rows (ids, meta) VALUES (?, ?)", row)
            conn.execute("COMMIT")

    async def health() -> dict:
        return {"status": "ok"}

    async def chat(request):
        await request.json()
        if durable:
            await run_in_threadpool(insert)
        return JSONResponse(answer)

    chat.__annotations__ = {"request": Request, "return": JSONResponse}  # objects: this module's are strings
    app = FastAPI()
    app.get("/health")(health)
    app.post("/v1/chat/completions")(chat)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def shares(total: int, sessions: int) -> list[int]:
    """How many of ``total`` requests each of ``sessions`` clients sends: all of them, spread evenly
    (the first ``total % sessions`` send one more), so every level sends exactly ``total``."""
    return [total // sessions + (i < total % sessions) for i in range(sessions)]


BODY = {"model": "forge", "messages": [{"role": "system", "content": "You are a helpful agent."},
                                       {"role": "user", "content": "List the files in the current folder."}], "max_tokens": 16}


class Tally:
    """What became of every request sent: answered (200, its latency kept), refused (any other
    status, counted by status with the first reason seen) or failed (no response: counted by the
    client's exception type, with its message)."""

    def __init__(self) -> None:
        self.sent, self.latencies = 0, []
        self.refused: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.reasons: dict[str, str] = {}

    def refuse(self, status: int, reason: str) -> None:
        self.refused[str(status)] = self.refused.get(str(status), 0) + 1
        self.reasons.setdefault(str(status), reason[:200])

    def fail(self, error: BaseException) -> None:
        key = type(error).__name__
        self.failed[key] = self.failed.get(key, 0) + 1
        self.reasons.setdefault(key, str(error)[:200])

    async def run(self, concurrency: int, total: int, session, server_cpu=None) -> dict:
        """``session(tally, i, n)`` sends ``n`` requests as session ``i``: first one uncounted call of
        every session (its first call opens its trajectory in the pool: the steady state is measured,
        not 64 sessions opening at once), then ``total`` spread over ``concurrency`` sessions at once.
        ``server_cpu``: a function giving the server process's CPU seconds so far (then the result
        says how much it and this client used while the clock ran)."""
        await asyncio.gather(*(session(Tally(), i, 1) for i in range(concurrency)))
        cpu0, client0, t0 = server_cpu() if server_cpu else 0.0, time.process_time(), time.perf_counter()
        await asyncio.gather(*(session(self, i, n) for i, n in enumerate(shares(total, concurrency))))
        wall = time.perf_counter() - t0
        return {"sent": self.sent, "latencies": self.latencies, "requests_per_s": len(self.latencies) / wall,
                "refused": self.refused, "failed": self.failed, "reasons": self.reasons,
                "server_cpu_s": (server_cpu() - cpu0) if server_cpu else None, "client_cpu_s": time.process_time() - client0}


async def load(url: str, concurrency: int, total: int, transport=None, server_cpu=None) -> dict:
    """Send exactly ``total`` requests from ``concurrency`` sessions with httpx (:class:`Tally` says
    what became of each). ``transport``: an httpx transport to use instead of the network (tests)."""
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120, transport=transport) as client:
        async def session(tally: Tally, i: int, n: int) -> None:
            headers = {"Authorization": f"Bearer bench-{concurrency}-{i}"}
            for _ in range(n):
                tally.sent += 1
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/chat/completions", json=BODY, headers=headers)
                except httpx.HTTPError as e:
                    tally.fail(e)
                    continue
                if r.status_code == 200:
                    tally.latencies.append(time.perf_counter() - t0)
                else:
                    tally.refuse(r.status_code, r.text)

        return await Tally().run(concurrency, total, session, server_cpu)


async def raw_exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 request's bytes sent on a keep-alive connection; (status, body), the body read by
    its Content-Length."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


async def load_raw(host: str, port: int, concurrency: int, total: int, server_cpu=None) -> dict:
    """What :func:`load` does with a client that costs the shared cores far less than httpx: one
    keep-alive HTTP/1.1 connection per session, the request's bytes built once, the answer read by
    its Content-Length."""
    body = json.dumps(BODY).encode()

    async def session(tally: Tally, i: int, n: int) -> None:
        request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer raw-{concurrency}-{i}"
                   f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        reader = writer = None
        for _ in range(n):
            tally.sent += 1
            t0 = time.perf_counter()
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                status, answer = await raw_exchange(reader, writer, request)
            except (OSError, asyncio.IncompleteReadError, StopIteration, ValueError) as e:
                tally.fail(e)
                if writer is not None:
                    writer.close()
                reader = writer = None
                continue
            if status == 200:
                tally.latencies.append(time.perf_counter() - t0)
            else:
                tally.refuse(status, answer.decode(errors="replace"))
        if writer is not None:
            writer.close()

    return await Tally().run(concurrency, total, session, server_cpu)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def start_server(kind: str, model: Path, pool: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """This file's ``--serve`` (``kind``: ``gateway`` or a floor, ``extra`` its hidden options) in a process
    of its own on a free port, once its ``/health`` answers; (the process, the port)."""
    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", str(port), "--server", kind,
                               "--model", str(model), "--pool", str(pool), *extra], env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    for _ in range(600):
        if server.poll() is not None:
            raise SystemExit(f"the {kind} server exited ({server.returncode}) while starting")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return server, port
        except httpx.HTTPError:
            time.sleep(0.1)
    server.terminate()
    raise SystemExit(f"the {kind} server did not answer /health in 60 s")


def measure_server(kind: str, model: Path, pool: Path, args: argparse.Namespace, base: list[float]) -> list[dict]:
    """Start one server (``gateway`` or a floor), send every client's load at every level, stop it."""
    server, port = start_server(kind, model, pool)
    rows = []
    try:
        for client, level in [(c, lv) for c in args.client for lv in args.levels]:
            server_cpu = lambda: cpu_seconds(server.pid)  # noqa: E731
            if client == "raw":
                res = asyncio.run(load_raw("127.0.0.1", port, level, args.requests, server_cpu))
            else:
                res = asyncio.run(load(f"http://127.0.0.1:{port}", level, args.requests, server_cpu=server_cpu))
            lat = res["latencies"]
            row = {"server": kind, "client": client, "concurrency": level, "sent": res["sent"], "answered": len(lat),
                   "refused": res["refused"], "failed": res["failed"], "reasons": res["reasons"]}
            if lat:
                row.update({"p50_ms": round(1000 * statistics.median(lat), 2), "p99_ms": round(1000 * percentile(lat, 0.99), 2),
                            "added_p50_ms": round(1000 * (statistics.median(lat) - statistics.median(base)), 2),
                            "added_p99_ms": round(1000 * (percentile(lat, 0.99) - percentile(base, 0.99)), 2),
                            "requests_per_s": round(res["requests_per_s"], 1),
                            "server_cpu_ms_per_call": round(1000 * res["server_cpu_s"] / len(lat), 3),
                            "client_cpu_ms_per_call": round(1000 * res["client_cpu_s"] / len(lat), 3)})
            rows.append(row)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per concurrency level")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gateway_overhead.json")
    parser.add_argument("--client", choices=("raw", "httpx"), nargs="+", default=["raw", "httpx"], help=(
        "load generators, each over every level: raw (asyncio streams, cheap) and httpx (what agents use)"))
    parser.add_argument("--floor", action="store_true", help=(
        "also measure the floor of this stack on this machine: a bare FastAPI route on the same uvicorn "
        "(floor), and the same with one durable SQLite insert a call (floor-durable)"))
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server", default="gateway", choices=("gateway", "floor", "floor-durable"), help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--pool", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--max-len", type=int, default=8192, help=argparse.SUPPRESS)
    parser.add_argument("--tool-parser", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        if args.server == "gateway":
            serve(args.serve, args.model, args.pool, args.max_len, args.tool_parser)
        else:
            serve_floor(args.serve, args.pool, durable=args.server == "floor-durable")
        return

    from forge_cli.engine.default_model import init_default_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = init_default_model(Path(tmp) / "model")
        base = direct(model)
        direct_p50 = statistics.median(base)
        for server_kind in ["gateway"] + (["floor", "floor-durable"] if args.floor else []):
            rows += measure_server(server_kind, model, Path(tmp) / f"{server_kind}.sqlite", args, base)
    print(f"direct engine call: p50 {1000 * direct_p50:.3f} ms, p99 {1000 * percentile(base, 0.99):.3f} ms")
    print(f"{'server':>14}{'client':>7}{'sessions':>9}{'sent':>6}{'answered':>9}{'p50 ms':>9}{'p99 ms':>9}{'added p50':>11}"
          f"{'added p99':>11}{'req/s':>8}{'server CPU ms':>14}{'client CPU ms':>14}")
    for r in rows:
        if r["answered"]:
            print(f"{r['server']:>14}{r['client']:>7}{r['concurrency']:>9}{r['sent']:>6}{r['answered']:>9}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
                  f"{r['added_p50_ms']:>11.2f}{r['added_p99_ms']:>11.2f}{r['requests_per_s']:>8.1f}"
                  f"{r['server_cpu_ms_per_call']:>14.3f}{r['client_cpu_ms_per_call']:>14.3f}")
        else:
            print(f"{r['server']:>14}{r['client']:>7}{r['concurrency']:>9}{r['sent']:>6}{0:>9}  (none answered)")
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
