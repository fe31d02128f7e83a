"""Gateway overhead at an agent's prompt lengths: what one call costs when the prompt is 1k–30k tokens.

``gateway_overhead.py`` sends a 40-token prompt; real agents send their 10–30k-token system prompts
and tool listings on every call, and the conversation grows a turn at a time. Here each session is
such a conversation: a system prompt of about ``S`` tokens, the task, then ``--turns`` calls, each
sending the whole conversation so far — every earlier answer (as the gateway returned it) and a tool
result of ~150 tokens after it — as an agent's SDK does. The gateway runs in its own process as
``forge gateway serve`` runs it (recording on, every call durable before its answer is sent), with
the instant engine of ``gateway_overhead.py`` (16 fixed ids), so the latency measured is the
gateway's own: parsing the body, rendering the chat template, tokenising, matching the session's
history, recording the call, answering. One session at a time (latency, not load).

Per prompt size: the latency of a call (p50, p99), the gateway process's CPU a call, the pool's bytes
a call, the gateway's resident memory a session (what it keeps of a session: its history), and — in this process, on the same tokenizer and text — what the per-token steps cost alone
(rendering the template, encoding the text, decoding the ids), to say where the time goes.

    python benchmarks/gateway_long_prompts.py [--sizes 1000 8000 30000] [--sessions 4] [--turns 8]
        [--tokenizer default|qwen3] [--out PATH]

``--tokenizer qwen3``: a real Qwen3 tokenizer and chat template, built offline by the tests' family
builder (``tests.families``; needs the ``dev`` extra). Writes benchmarks/results/gateway_long_prompts.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from gateway_overhead import cpu_seconds, percentile, raw_exchange, start_server  # noqa: E402

WORDS = ("the file path argument returns string command shell output read write edit search pattern directory "
         "tool call user must should never always when error result list line number content replace create "
         "delete test run build project code function class module import value option flag default").split()


def text_of(tokenizer, tokens: int, seed: str) -> str:
    """Prose-like text of about ``tokens`` tokens on ``tokenizer`` (drawn from ``seed``)."""
    rng = random.Random(seed)
    words: list[str] = []
    while True:
        words += [rng.choice(WORDS) for _ in range(max(64, tokens // 4))]
        text = " ".join(words)
        if len(tokenizer.encode(text, add_special_tokens=False)) >= tokens:
            return text


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` now, MiB."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


async def conversation(host: str, port: int, key: str, system: str, results: list[str], turns: int) -> list[float]:
    """One agent's session: ``turns`` calls, each with the whole conversation so far; their latencies."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Fix the failing test in this project."}]
    reader, writer = await asyncio.open_connection(host, port)
    latencies = []
    try:
        for turn in range(turns):
            body = json.dumps({"model": "forge", "messages": messages, "max_tokens": 16}).encode()
            request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}"
                       f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
            t0 = time.perf_counter()
            status, answer = await raw_exchange(reader, writer, request)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                raise SystemExit(f"call {turn} of {key} was refused ({status}): {answer[:300]!r}")
            message = json.loads(answer)["choices"][0]["message"]
            messages += [{"role": "assistant", "content": message["content"] or ""},
                         {"role": "user", "content": results[turn % len(results)]}]
    finally:
        writer.close()
    return latencies


def steps_alone(tokenizer, system: str, results: list[str], turns: int, repeat: int = 5) -> dict[str, float]:
    """The per-token steps of the last call, timed alone in this process (median of ``repeat``), ms."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Fix the failing test in this project."}]
    for turn in range(turns - 1):
        messages += [{"role": "assistant", "content": "I will look at the files first."},
                     {"role": "user", "content": results[turn % len(results)]}]
    timings: dict[str, list[float]] = {"render_ms": [], "encode_ms": [], "decode_ms": []}
    for _ in range(repeat):
        t0 = time.perf_counter()
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        t1 = time.perf_counter()
        ids = tokenizer.encode(text, add_special_tokens=False)
        t2 = time.perf_counter()
        tokenizer.decode(ids)
        t3 = time.perf_counter()
        for key, seconds in zip(timings, (t1 - t0, t2 - t1, t3 - t2)):
            timings[key].append(1000 * seconds)
    return {k: round(statistics.median(v), 2) for k, v in timings.items()} | {"last_prompt_tokens": len(ids)}


def model_folder(kind: str, tmp: Path) -> Path:
    if kind == "qwen3":
        from tests.families import family_model_dir

        return family_model_dir("qwen3")
    from forge_cli.engine.default_model import init_default_model

    return init_default_model(tmp / "model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 8000, 30000], help="system prompt tokens")
    parser.add_argument("--sessions", type=int, default=4, help="conversations per size, one after another")
    parser.add_argument("--turns", type=int, default=8, help="calls per conversation")
    parser.add_argument("--tokenizer", choices=("default", "qwen3"), default="default")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gateway_long_prompts.json")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model = model_folder(args.tokenizer, tmp)
        tokenizer = AutoTokenizer.from_pretrained(model)
        results = [text_of(tokenizer, 150, f"result {i}") for i in range(4)]
        max_len = max(args.sizes) + args.turns * 400 + 2048
        pool = tmp / "gateway.sqlite"
        server, port = start_server("gateway", model, pool, "--max-len", str(max_len),
                                    *(["--tool-parser", "hermes"] if args.tokenizer == "qwen3" else []))
        try:
            asyncio.run(conversation("127.0.0.1", port, "warm-up", "You are a helpful agent.", results, 2))
            for size in args.sizes:
                system = text_of(tokenizer, size, f"system {size}")
                cpu0, bytes0, rss0 = cpu_seconds(server.pid), folder_bytes(pool.with_suffix(".runs")), rss_mib(server.pid)
                latencies: list[float] = []
                for s in range(args.sessions):
                    latencies += asyncio.run(conversation("127.0.0.1", port, f"long-{size}-{s}", system, results, args.turns))
                calls = len(latencies)
                row = {"system_tokens": size, "calls": calls, "p50_ms": round(1000 * statistics.median(latencies), 2),
                       "p99_ms": round(1000 * percentile(latencies, 0.99), 2),
                       "gateway_cpu_ms_per_call": round(1000 * (cpu_seconds(server.pid) - cpu0) / calls, 2),
                       "pool_bytes_per_call": round((folder_bytes(pool.with_suffix(".runs")) - bytes0) / calls),
                       "rss_mib_per_session": round((rss_mib(server.pid) - rss0) / args.sessions, 1),
                       **steps_alone(tokenizer, system, results, args.turns)}
                rows.append(row)
                print(f"  {size} tokens: p50 {row['p50_ms']} ms", file=sys.stderr, flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"tokenizer: {args.tokenizer}; {args.sessions} conversations of {args.turns} calls a size, one at a time")
    print(f"{'system tokens':>14}{'last prompt':>12}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/call':>12}{'pool KB/call':>13}"
          f"{'RSS MiB/session':>16}{'render ms':>10}{'encode ms':>10}{'decode ms':>10}")
    for r in rows:
        print(f"{r['system_tokens']:>14}{r['last_prompt_tokens']:>12}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
              f"{r['gateway_cpu_ms_per_call']:>12.2f}{r['pool_bytes_per_call'] / 1024:>13.1f}{r['rss_mib_per_session']:>16.1f}{r['render_ms']:>10.2f}"
              f"{r['encode_ms']:>10.2f}{r['decode_ms']:>10.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "tokenizer": args.tokenizer, "sessions": args.sessions,
                                    "turns": args.turns, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
