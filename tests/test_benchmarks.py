"""The benchmarks run end to end on small settings: CUDA tree attention (on CPU: dense and tree only), the rollout
benchmark's sharing part, the sandbox benchmark's latency and concurrency parts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_tree_attention_benchmark_runs_and_tree_matches_dense(tmp_path):
    out = tmp_path / "tac.json"
    done = subprocess.run([sys.executable, "benchmarks/tree_attention_cuda.py", "--quick", "--hidden", "128", "--layers", "1",
                           "--dtype", "fp32", "--repeats", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "grad rel diff" in done.stdout  # the table
    result = json.loads(out.read_text())
    modes = result["modes"]
    assert set(modes) >= {"dense", "tree"}
    assert modes["tree"]["loss"] == pytest.approx(modes["dense"]["loss"], rel=1e-5)
    assert modes["tree"]["max_rel_grad_diff_vs_dense"] < 1e-4


def test_rollout_benchmark_sharing_runs(tmp_path):
    """Part 2 of benchmarks/rollout.py: every context policy solves kv-search with the demo policy and says what it did."""
    out = tmp_path / "rollout.json"
    done = subprocess.run([sys.executable, "benchmarks/rollout.py", "--skip-throughput", "--groups", "1", "--n", "4", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["scaffold"]: r for r in json.loads(out.read_text())["sharing"]}
    assert set(rows) == {"tool-call", "tool-call-truncate", "tool-call-discard-tool-output", "tool-call-keep-last-k",
                         "tool-call-summarize"}
    assert all(r["success_rate"] == 1.0 and r["prefix_share"] > 1.0 for r in rows.values())
    assert rows["tool-call"]["context_events_per_trajectory"] == 0
    assert rows["tool-call-truncate"]["context_events_per_trajectory"] > 0 and rows["tool-call-summarize"]["context_events_per_trajectory"] > 0


def test_sandbox_benchmark_latency_and_concurrency_run(tmp_path):
    """Parts 1 and 2 of benchmarks/sandbox.py on the local backends (the agents' part is each agent's own test)."""
    from forge_cli.sandbox.bwrap import unavailable

    out = tmp_path / "sandbox.json"
    backends = ["local"] + (["bwrap"] if unavailable() is None else [])
    done = subprocess.run([sys.executable, "benchmarks/sandbox.py", "--backends", *backends, "--repeats", "1",
                           "--levels", "3", "--hold-s", "0.5", "--skip-agents", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "teardown ms" in done.stdout  # the table
    result = json.loads(out.read_text())
    assert [r["backend"] for r in result["latency"]] == backends
    assert all(r["start_ms"] > 0 and r["exec_ms"] > 0 for r in result["latency"])
    assert [(r["backend"], r["sandboxes"], r["ok"]) for r in result["concurrency"]] == [(b, 3, 3) for b in backends]


def test_gateway_overhead_sends_every_request_and_says_what_each_got():
    """Every level sends exactly --requests, also when the sessions do not divide it (2000 // 64 once
    sent 1,984, read as 16 unanswered); a request not answered is counted as refused (by status, with
    its reason) or failed (by the client's error), never dropped from the count."""
    import asyncio

    import httpx

    from benchmarks.gateway_overhead import load, shares

    assert shares(2000, 64) == [32] * 16 + [31] * 48 and sum(shares(2000, 256)) == 2000
    assert shares(3, 5) == [1, 1, 1, 0, 0]
    calls = 0

    def answer(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls % 5 == 0:
            return httpx.Response(429, json={"error": {"message": "too many sessions"}})
        if calls % 7 == 0:
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(200, json={})

    res = asyncio.run(load("http://gateway", 7, 100, transport=httpx.MockTransport(answer)))
    assert calls == 107  # the uncounted warm-up of each of the 7 sessions and the 100
    refused, failed = res["refused"]["429"], res["failed"]["ReadTimeout"]
    assert res["sent"] == 100 == len(res["latencies"]) + refused + failed and refused > 0 and failed > 0
    assert "too many sessions" in res["reasons"]["429"] and res["reasons"]["ReadTimeout"] == "timed out"


def test_gateway_overhead_raw_client_counts_every_request():
    """The raw load generator's accounting, against a server on loopback that refuses every 5th
    request and drops the connection on every 7th: answered + refused + failed = sent."""
    import asyncio

    from benchmarks.gateway_overhead import load_raw

    calls = 0

    async def handle(reader, writer):
        nonlocal calls
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")).split(b":")[1])
                await reader.readexactly(length)
                calls += 1
                if calls % 7 == 0:
                    writer.close()
                    return
                status, body = (b"429 Too Many Requests", b'{"error": "too many sessions"}') if calls % 5 == 0 else (b"200 OK", b"{}")
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await load_raw("127.0.0.1", port, 7, 100)

    res = asyncio.run(main())
    refused, failed = res["refused"]["429"], sum(res["failed"].values())
    assert calls == 107 and res["sent"] == 100 == len(res["latencies"]) + refused + failed and refused > 0 and failed > 0
    assert "too many sessions" in res["reasons"]["429"]


def test_gateway_overhead_benchmark_runs(tmp_path):
    out = tmp_path / "gateway.json"
    done = subprocess.run([sys.executable, "benchmarks/gateway_overhead.py", "--requests", "30", "--levels", "1", "7",
                           "--floor", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["server"], r["client"], r["concurrency"], r["sent"], r["answered"], r["refused"], r["failed"]) for r in rows] == [
        (server, client, level, 30, 30, {}, {}) for server in ("gateway", "floor", "floor-durable")
        for client in ("raw", "httpx") for level in (1, 7)]
    assert all(r["p50_ms"] > 0 for r in rows)
    # each side's CPU a call while the clock ran (the server's from /proc, in clock ticks: 30 calls may show 0)
    assert all(r["server_cpu_ms_per_call"] >= 0 and r["client_cpu_ms_per_call"] > 0 for r in rows)
    assert sum(r["server_cpu_ms_per_call"] for r in rows if r["server"] == "gateway") > 0


def test_gateway_long_prompts_benchmark_runs(tmp_path):
    """Agents' conversations on a real Qwen3 tokenizer: every call of every session answered (the benchmark
    exits on any refusal), each row's figures there, the last prompt as long as the conversation made it."""
    out = tmp_path / "long.json"
    done = subprocess.run([sys.executable, "benchmarks/gateway_long_prompts.py", "--sizes", "300", "3000", "--sessions", "2",
                           "--turns", "3", "--tokenizer", "qwen3", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["system_tokens"], r["calls"]) for r in rows] == [(300, 6), (3000, 6)]
    assert all(r["last_prompt_tokens"] > r["system_tokens"] + 300 and r["p50_ms"] > 0 and r["pool_bytes_per_call"] > 0 for r in rows)
    assert "3000" in done.stdout


@pytest.mark.slow
def test_drift_benchmark_agents_keep_their_sampled_ids_on_qwen3(tmp_path):
    """The seven agents' captured second requests on Qwen3 (native): where Forge renders both sides
    the sampled ids survive (the thinking the agents drop is put back); aider's earlier answer comes
    before a new user turn, where Qwen's template drops thinking; smolagents rewrites its calls as
    text. The families: the tool loop keeps the ids; a new question drifts only where the template
    drops thinking, at the first sampled token."""
    out = tmp_path / "drift.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "drift.py"), "--out", str(out)], check=True, cwd=ROOT, timeout=900)
    data = json.loads(out.read_text())
    agents = {r["agent"]: r for r in data["agents"]}
    assert len(agents) == 7
    for name in ("opencode", "codex", "claude-code", "mini-swe-agent", "openai-agents"):
        assert agents[name]["kind"] in ("exact", "reused"), agents[name]
    assert agents["aider"]["kind"] == "drifted" and agents["aider"]["cause"] == "the template drops earlier thinking"
    assert agents["smolagents"]["kind"] == "drifted" and agents["smolagents"]["cause"] == "the agent rewrites its turn"
    families = {r["family"]: r for r in data["families"]}
    assert set(families) == {"qwen3", "qwen3_5", "llama3_1", "deepseek_v3"}
    assert all(r["tool_loop"] in ("exact", "reused") for r in families.values())
    for name in ("qwen3", "qwen3_5"):
        assert families[name]["new_question"] == "drifted" and families[name]["drift_at"] == families[name]["first_output_at"]
    for name in ("llama3_1", "deepseek_v3"):
        assert families[name]["new_question"] in ("exact", "reused")


def pool_of(run_dir: Path, groups: list) -> None:
    """A run's pool with these groups in queue order, each trajectory ``(solved, completions, seconds)``
    or ``(solved, completions, seconds, warmups)`` (its first ``warmups`` completions call the
    calculator on the habit teacher's warm-up expression, the others on a task's; the pool's clock moves
    by the seconds while it runs, one equal turn a completion), and a held-out evaluation's group as well."""
    from forge_cli.pool.store import DataPool
    from forge_cli.pool.types import NewCompletion

    now = [1000.0]
    pool = DataPool.sqlite(run_dir / "pool.sqlite", clock=lambda: now[0])
    for i, members in enumerate([[(True, 9, 9.0)], *groups]):  # first a held-out evaluation's group: not training
        group = pool.submit_group("calc-1-t", len(members), "tool-call-unlisted", evaluation=i == 0)
        for t, (solved, completions, seconds, *warmups) in zip(group.trajectories, members):
            pool.start_trajectory(t.id)
            start, turn = now[0], seconds / completions
            for k in range(completions):
                expression = "1 + 1" if k < sum(warmups) else "12 + 34"
                pool.append_completion(NewCompletion(t.id, [1, 2 + k], [3], [-0.5], policy_version=0,
                                                     started_at=start + k * turn, finished_at=start + (k + 0.5) * turn,
                                                     tool_calls=[{"name": "calculator", "arguments": {"expression": expression}}]))
            now[0] = start + seconds
            pool.finish_trajectory(t.id, rewards={"outcome": 1.0 if solved else 0.0})
    pool.close()


def write_metrics(runs: Path, name: str, lines: list) -> None:
    """A run folder ``runs/name`` with these metrics lines."""
    (runs / name).mkdir(parents=True)
    (runs / name / "config.json").write_text("{}")
    (runs / name / "metrics.jsonl").write_text("".join(json.dumps(x.line()) + "\n" for x in lines))


def rl_metrics(before: float, after: float, seconds: float, calls: float) -> list:
    """A `forge train` run's metrics: held-out before, ten steps of 6 s, held-out after."""
    from forge_cli.records.metrics import EvalMetrics, StepMetrics

    return [EvalMetrics(step=0, success=before, solved_seconds=2.0, solved_tool_calls=2.0),
            *[StepMetrics(step=s, time_s=6.0 * s, trajectories=32) for s in range(1, 11)],
            EvalMetrics(step=10, success=after, solved_seconds=seconds, solved_tool_calls=calls)]


def test_learning_benchmark_reads_each_part_of_a_seed_from_its_runs(tmp_path):
    """``benchmarks/learning.py --parts none`` on runs written here: before = the step-0 evaluation,
    after = the last; the control's = its last warm-start evaluation; the completion-time reduction
    = 1 − (solved seconds with the reward) / (solved seconds without), per seed, then the mean; the
    speed part's training side = the solved trajectories of the first and last quarter of the pool's groups."""
    from forge_cli.records.metrics import WarmstartMetrics

    runs = tmp_path / "runs"
    write = lambda name, lines: write_metrics(runs, name, lines)

    write("main-s0", rl_metrics(0.25, 0.625, 1.2, 1.25))
    write("time0-s0", rl_metrics(0.25, 0.5, 2.0, 2.0))
    write("loaded-s0", rl_metrics(0.25, 0.5, 1.5, 1.5))
    write("grpo-s0", rl_metrics(0.25, 0.375, 1.5, 1.5))
    write("control-s0", [WarmstartMetrics(step=s, heldout_success=0.25 + s / 100 if s % 5 == 0 else None,
                                          solved_seconds=1.8 if s % 5 == 0 else None) for s in range(1, 21)])
    write("speed-s0", rl_metrics(0.25, 0.5, 1.0, 1.0))  # the completion-time task: RL from the habit policy ...
    write("speed0-s0", rl_metrics(0.25, 0.375, 2.0, 2.5))  # ... without the completion-time reward ...
    # what each sampled for training, four groups a quarter: (solved, completions, seconds) per trajectory
    quarters = {"speed-s0": [[(True, 3, 2.0), (False, 2, 1.0)], [(True, 3, 2.5)], [(True, 2, 1.0)],
                             [(True, 2, 1.0), (True, 3, 1.5), (False, 1, 0.5)]],
                "speed0-s0": [[(True, 3, 2.0, 1), (True, 3, 2.0, 1)], [(False, 3, 2.0)], [(True, 3, 2.0)],
                              [(True, 3, 2.0, 1), (True, 2, 2.5), (False, 3, 3.0, 2), (False, 4, 4.0, 1)]]}
    for name, groups in quarters.items():
        pool_of(runs / name, [g for g in groups for _ in range(4)])
    write("speedcontrol-s0", [WarmstartMetrics(step=s, heldout_success=0.25 if s == 20 else None,  # ... its SFT control
                                               solved_seconds=2.5 if s == 20 else None) for s in range(1, 21)])
    out = tmp_path / "learning.json"
    done = subprocess.run([sys.executable, "benchmarks/learning.py", "--seeds", "0", "--parts", "none", "--work", str(tmp_path),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mean gain" in done.stdout
    result = json.loads(out.read_text())
    (row,) = result["seeds"]
    assert (row["before"], row["after"], row["rl_steps"], row["rl_s"]) == (0.25, 0.625, 10, 60.0)
    assert result["mean_gain"] == pytest.approx(0.375) and result["sft_control_mean_gain"] == pytest.approx(0.45 - 0.25)
    assert result["grpo_mean_gain"] == pytest.approx(0.125) and result["loaded_mean_gain"] == pytest.approx(0.25)
    assert result["completion_time_reduction"] == pytest.approx(1 - 1.2 / 2.0)
    assert result["tool_calls_reduction"] == pytest.approx(1 - 1.25 / 2.0)
    assert result["completion_time_success_change"] == pytest.approx(0.125)
    assert result["completion_time_reduction_vs_control"] == pytest.approx(1 - 1.2 / 1.8)
    assert row["curve"] == [[0, 0.25], [10, 0.625]]
    assert (row["speed_before_solved_tool_calls"], row["speed_solved_tool_calls"], row["speed0_solved_tool_calls"]) == (2.0, 1.0, 2.5)
    assert result["speed_time_reduction"] == pytest.approx(0.5) and result["speed_calls_reduction"] == pytest.approx(0.6)
    assert result["speed_success_change"] == pytest.approx(0.125)
    assert result["speed_time_reduction_vs_control"] == pytest.approx(1 - 1.0 / 2.5)
    assert row["speed_train_first"] == {"solved": 4, "completions": 3.0, "seconds": pytest.approx(2.0), "warmups": 0.0,
                                        "seconds_without_warmups": pytest.approx(2.0),
                                        "by_warmups": {"0": {"trajectories": 8, "success": 0.5}},
                                        "groups": 4, "contrast_groups": 0.0, "blind_groups": 0.0}
    assert row["speed_train_last"] == {"solved": 8, "completions": 2.5, "seconds": pytest.approx(1.25), "warmups": 0.0,
                                       "seconds_without_warmups": pytest.approx(1.25),
                                       "by_warmups": {"0": {"trajectories": 12, "success": pytest.approx(8 / 12)}},
                                       "groups": 4, "contrast_groups": 0.0, "blind_groups": 0.0}
    # weight 0's last quarter: a 3-turn trajectory of 2 s whose first turn (2/3 s) is a warm-up, and one of 2.5 s
    # (solved), two failed ones with warm-ups that only the success by warm-up count sees
    without = (2.0 - 2.0 / 3 + 2.5) / 2
    assert row["speed0_train_last"] == {"solved": 8, "completions": 2.5, "seconds": pytest.approx(2.25), "warmups": 0.5,
                                        "seconds_without_warmups": pytest.approx(without),
                                        "by_warmups": {"0": {"trajectories": 4, "success": 1.0},
                                                       "1": {"trajectories": 8, "success": 0.5},
                                                       "2": {"trajectories": 4, "success": 0.0}},
                                        "groups": 4, "contrast_groups": 1.0, "blind_groups": 0.0}
    # weight 0's first quarter: both solved runs of each group make one warm-up, which a group-relative reward cannot see
    assert (row["speed0_train_first"]["contrast_groups"], row["speed0_train_first"]["blind_groups"]) == (0.0, 1.0)
    assert result["speed_train_time_reduction"] == pytest.approx(1 - 1.25 / 2.25)
    assert result["speed_train_completions_reduction"] == pytest.approx(0.0)
    assert result["speed_train_time_headroom"] == pytest.approx(1 - without / 2.25)
    assert result["speed_train_warmups_reduction"] == pytest.approx(1.0)  # none left with the reward
    # at each run's own pace: weight 0 spends 2.25 / without of its time for what it would take without warm-ups
    assert result["speed_train_paced_time_reduction"] == pytest.approx(1 - 1.0 / (2.25 / without))
    # a second sitting measures seed 1 and keeps seed 0: the means are over both
    runs = tmp_path / "later" / "runs"
    write("main-s1", rl_metrics(0.25, 0.375, 1.2, 1.25))
    again = [sys.executable, "benchmarks/learning.py", "--seeds", "1", "--parts", "none", "--work", str(tmp_path / "later"),
             "--out", str(out)]
    done = subprocess.run([*again, "--merge"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    merged = json.loads(out.read_text())
    assert [r["seed"] for r in merged["seeds"]] == [0, 1] and merged["seeds"][0] == row
    assert merged["mean_gain"] == pytest.approx((0.375 + 0.125) / 2) and len(merged["commands"]) == 2
    assert merged["sft_control_mean_gain"] == pytest.approx(0.2)  # seed 1 has no control: the mean of those that have
    other = subprocess.run([*again, "--merge", "--minutes", "5"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert other.returncode != 0 and "--merge" in other.stderr  # not averaged with runs of another budget
    # a third sitting runs seed 1's control alone: its main run's figures come from the JSON
    runs = tmp_path / "third" / "runs"
    write("control-s1", [WarmstartMetrics(step=s, heldout_success=0.5 if s == 10 else None) for s in range(1, 11)])
    third = [sys.executable, "benchmarks/learning.py", "--seeds", "1", "--parts", "none", "--work", str(tmp_path / "third"),
             "--out", str(out)]
    done = subprocess.run([*third, "--merge"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    later = json.loads(out.read_text())
    assert later["seeds"][0] == row and later["seeds"][1]["after"] == 0.375 and later["seeds"][1]["control_gain"] == 0.25
    assert later["sft_control_mean_gain"] == pytest.approx((0.2 + 0.25) / 2) and len(later["commands"]) == 3
    alone = subprocess.run(third, cwd=ROOT, capture_output=True, text=True, timeout=120)  # no JSON row to take it from
    assert alone.returncode != 0 and "no main run" in alone.stderr
    # the speed part needs no main run; a part that does is refused before anything runs
    runs = tmp_path / "fourth" / "runs"
    write("speed-s3", rl_metrics(0.25, 0.5, 1.5, 1.0))
    write("speed0-s3", rl_metrics(0.25, 0.5, 2.0, 2.0))
    fourth = [sys.executable, "benchmarks/learning.py", "--seeds", "3", "--work", str(tmp_path / "fourth"), "--out", str(out)]
    done = subprocess.run([*fourth, "--parts", "none", "--merge"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    speed_only = json.loads(out.read_text())
    assert speed_only["seeds"][-1]["seed"] == 3 and "before" not in speed_only["seeds"][-1]
    assert speed_only["mean_gain"] == later["mean_gain"] and speed_only["habit_minutes"] == 4.0
    assert speed_only["speed_time_reduction"] == pytest.approx((0.5 + 0.25) / 2)
    refused = subprocess.run([*fourth, "--parts", "control"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "no main run" in refused.stderr and not (runs / "control-s3").exists()
    other = subprocess.run([*fourth, "--parts", "none", "--merge", "--warmups", "0.5"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert other.returncode != 0 and "--warmups" in other.stderr  # speed rows of another habit are not averaged
    capped = subprocess.run([*fourth, "--parts", "none", "--merge", "--max-warmups", "3"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert capped.returncode != 0 and "--max-warmups 3" in capped.stderr  # nor a costlier one
    assert speed_only["max_warmups"] == 2
    made = subprocess.run([*fourth, "--parts", "none", "--merge", "--habit-model", "forge_cli/engine/warm_policy"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert made.returncode != 0 and "--habit-model warm_policy" in made.stderr  # nor one made beforehand
    weighed = subprocess.run([*fourth, "--parts", "none", "--merge", "--speed-weight", "1.0"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert weighed.returncode != 0 and "--speed-weight 1.0" in weighed.stderr  # nor another weight's
    write("speed-s0", rl_metrics(0.25, 0.5, 1.2, 1.0))  # ... but measuring every kept speed row again may change the habit
    write("speed0-s0", rl_metrics(0.25, 0.5, 2.0, 2.0))
    redone = subprocess.run([*fourth[:3], "0", "3", *fourth[4:], "--parts", "none", "--merge", "--speed-weight", "1.0"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert redone.returncode == 0, redone.stderr[-3000:]
    changed = json.loads(out.read_text())
    assert changed["speed_weight"] == 1.0 and changed["seeds"][0]["speed_time_reduction"] == pytest.approx(0.4)
    assert changed["seeds"][0]["after"] == row["after"]  # the main run's figures kept
    absent = subprocess.run([*fourth, "--parts", "speed", "--habit-model", str(tmp_path / "nothing")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert absent.returncode != 0 and "not a model directory" in absent.stderr and (runs / "speed-s3" / "metrics.jsonl").is_file()


def test_learning_benchmark_measures_the_speed_policies_side_by_side(tmp_path, tiny_model):
    """`--parts speedeval`: each final policy of a seed's speed part (the RL runs' last checkpoints, the SFT
    control's saved model) goes through a real `forge rollout` on the held-out tasks, round after round; the
    row keeps each round's figures, read from the rollouts' pools, and the medians of the per-round ratios.
    (A scripted policy writes the text here, the same for all three: no completion is saved or lost.)"""
    from forge_cli.pool.store import DataPool
    from forge_cli.rewards.components import duration

    work = tmp_path / "work"
    runs = work / "runs"
    for name in ("speed-s0", "speed0-s0"):
        write_metrics(runs, name, rl_metrics(0.25, 0.5, 1.0, 1.0))
        step = runs / name / "checkpoints" / "step-00000010"
        step.mkdir(parents=True)
        (step / "model").symlink_to(tiny_model)
        (runs / name / "checkpoints" / "latest").write_text("step-00000010")
    (work / "speedcontrol-model-s0").symlink_to(tiny_model)
    out = tmp_path / "learning.json"
    done = subprocess.run([sys.executable, "benchmarks/learning.py", "--seeds", "0", "--parts", "speedeval", "--work", str(work),
                           "--out", str(out), "--eval-rounds", "2", "--eval-tasks", "2", "--eval-samples", "2",
                           "--set", "model.engine.type=scripted", "--set", "model.engine.policy=forge_cli.tasks.demo_policies:calc",
                           "--set", "gateway.port=0"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = json.loads(out.read_text())["seeds"]
    rounds = row["speedeval_rounds"]
    assert len(rounds) == 2 and all(set(r) == {"speed", "speed0", "speedcontrol"} for r in rounds)
    policies = {"speed": runs / "speed-s0" / "checkpoints" / "step-00000010" / "model",
                "speed0": runs / "speed0-s0" / "checkpoints" / "step-00000010" / "model",
                "speedcontrol": work / "speedcontrol-model-s0"}
    tasks = set()
    for k, measured in enumerate(rounds):
        began = {}
        for policy, figures in measured.items():
            run = runs / f"speedeval-{policy}-r{k}-s0"
            assert json.loads((run / "config.json").read_text())["model"]["path"] == str(policies[policy])
            pool = DataPool.sqlite(run / "pool.sqlite", create=False)
            trajectories = [t for g in pool.groups() for t in g.trajectories]
            pool.close()
            began[policy] = min(t.started_at for t in trajectories)
            assert len(trajectories) == 4 and figures["trajectories"] == 4
            tasks.add(frozenset(t.task_id for t in trajectories))
            assert figures["success"] == 1.0 and figures["completions"] == 2.0  # the calculator, then the answer
            assert figures["seconds"] == pytest.approx(sum(duration(t) for t in trajectories) / 4)
        order = ["speed", "speed0", "speedcontrol"]
        assert sorted(began, key=began.get) == order[k:] + order[:k]  # the order turns round by round
    assert len(tasks) == 1 and len(next(iter(tasks))) == 2  # every policy on the same two held-out tasks
    assert row["speedeval_completions_reduction"] == 0.0 and row["speedeval_success_change"] == 0.0
    cuts = sorted(1 - r["speed"]["seconds"] / r["speedcontrol"]["seconds"] for r in rounds)
    assert row["speedeval_time_reduction_vs_control"] == pytest.approx(sum(cuts) / 2)  # the median of two


def test_learning_benchmark_lets_both_speed_runs_go_on(tmp_path, tiny_model):
    """`--parts speedmore`: the speed part's two RL runs (real `forge train` runs here, a scripted policy
    writing the text) go on from their last checkpoints for --minutes more each, in the same run folders:
    later steps, none repeated, the clock going on; the row reads the whole runs. (The minute includes the
    resumed run's start; about a hundred steps fit in half of it here.)"""
    import os

    from forge_cli.report.metrics import read_metrics

    work = tmp_path / "work"
    runs = work / "runs"
    sets = {"model.engine.type": "scripted", "model.engine.policy": "forge_cli.tasks.demo_policies:calc",
            "gateway.port": 0, "gateway.socket": "", "pool.max_active_groups": 2, "train.groups_per_step": 1,
            "train.group_size": 2, "train.engine": "torch", "rollout.task": "calc", "rollout.concurrency": 4,
            "train.eval_tasks": 2, "train.eval_samples": 2, "train.eval_every": 0, "train.checkpoint_every": 1,
            "model.path": str(tiny_model), "run.dir": str(runs)}
    cmd = [sys.executable, "-m", "forge_cli", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]]
    env = {**os.environ, "FORGE_HOME": str(tmp_path / "home")}
    first = {}
    for name in ("speed-s0", "speed0-s0"):
        done = subprocess.run([*cmd, "train", "--no-live", "--run", name, "--steps", "2"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        first[name] = read_metrics(runs / name).steps
        assert [s.step for s in first[name]] == [1, 2]
    out = tmp_path / "learning.json"
    more = subprocess.run([sys.executable, "benchmarks/learning.py", "--seeds", "0", "--parts", "speedmore", "--work",
                           str(work), "--out", str(out), "--minutes", "1.0"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert more.returncode == 0, more.stdout[-3000:] + more.stderr[-3000:]
    for name in ("speed-s0", "speed0-s0"):
        steps = read_metrics(runs / name).steps
        assert [s.step for s in steps] == list(range(1, len(steps) + 1)) and len(steps) > 2  # later steps, none again
        assert steps[:2] == first[name] and steps[2].time_s >= steps[1].time_s  # the first sitting kept, its clock going on
        assert (work / f"{name.replace('-s0', '')}-more-s0.log").is_file()
    (row,) = json.loads(out.read_text())["seeds"]
    assert row["speed_rl_s"] == read_metrics(runs / "speed-s0").steps[-1].time_s
    ran = {name: len(read_metrics(runs / name).steps) for name in ("speed-s0", "speed0-s0")}
    empty = subprocess.run([sys.executable, "benchmarks/learning.py", "--seeds", "0", "1", "--parts", "speedmore", "--work",
                            str(work), "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert empty.returncode != 0 and "needs speed-s1, speed0-s1" in empty.stderr  # seed 1 has nothing to go on from ...
    assert {name: len(read_metrics(runs / name).steps) for name in ran} == ran  # ... so seed 0's runs did not go on either


def test_prefix_tree_on_a_pool_recorded_by_the_recipe(tmp_path):
    """The recipe (`agent_pools.py`, here a white-box context policy whose truncation branches the tree) records
    a pool through a real gateway; `prefix_tree.py --from-pool` trains on exactly its completions, every mode
    to the same loss, and its token counts are the pool's."""
    from benchmarks.prefix_tree import pool_samples
    from forge_cli.train.prefix_tree import unique_tokens

    pools = tmp_path / "pools"
    done = subprocess.run([sys.executable, "benchmarks/agent_pools.py", "--agents", "--white", "tool-call-truncate",
                           "--groups", "1", "--group-size", "3", "--out", str(pools)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = pools / "runs" / "white-tool-call-truncate"
    assert json.loads((pools / "pools.json").read_text())["pools"][0]["trajectories"] == 3
    samples = pool_samples(run)
    assert len({s.completion_id for s in samples}) == len(samples) >= 6  # every call of the three trajectories

    out = tmp_path / "tree.json"
    done = subprocess.run([sys.executable, "benchmarks/prefix_tree.py", "--from-pool", str(run), "--hidden", "64", "--layers", "1",
                           "--budget", "512", "--skip", "tree_dense,tree_recompute", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["pool"] == "white-tool-call-truncate" and row["samples"] == len(samples)
    assert row["total_tokens"] == sum(len(s.tokens) for s in samples) and row["unique_tokens"] == unique_tokens(samples)
    assert row["bound"] > 1.5  # the turns of a trajectory and the trajectories of a group share their prefixes
    assert row["max_rel_loss_diff"] < 1e-4  # exact: naive, packed and the tree compute the same loss
    assert "white-tool-call-truncate" in done.stdout  # the table


def test_engine_throughput_through_the_gateway(tmp_path):
    """The same vLLM engine direct and through a gateway in its own process: every level measured both
    ways, tokens counted from real answers (a gateway that refused or failed a call would stop it)."""
    out = tmp_path / "engine.json"
    done = subprocess.run([sys.executable, "benchmarks/engine_throughput.py", "--gateway-only", "--levels", "1", "3",
                           "--seconds", "3", "--warmup", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["concurrency"] for r in rows] == [1, 3]
    for r in rows:
        assert r["through_gateway_tokens_per_s"] > 0 and min(r["direct_before_after"]) > 0
        # the ratio is of the unrounded rates; the row's rates are rounded to 0.1
        assert r["gateway_vs_direct"] == pytest.approx(r["through_gateway_tokens_per_s"] / r["direct_tokens_per_s"], rel=0.02)


def test_closed_loop_waits_for_every_session_when_a_call_outlasts_the_window():
    """A slow machine (or a level's first, slow requests) must not read as 0 tokens/s: the window
    stretches until every session has had an answer in it."""
    import asyncio

    from benchmarks.engine_throughput import closed_loop

    async def call(i: int) -> int:
        await asyncio.sleep(0.02 * (i + 1))  # each call outlasts the 1 ms window
        return 10

    rate = asyncio.run(closed_loop(call, 3, seconds=0.001, warmup=0.0))
    assert 0 < rate <= 3 * 10 / 0.02
