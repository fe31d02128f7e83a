"""The benchmarks run end to end on small settings: CUDA tree attention (on CPU: dense and tree only), the rollout
benchmark's sharing part, the sandbox benchmark's latency and concurrency parts."""

from __future__ import annotations

import json
import subprocess
import sys

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
    done = subprocess.run([sys.executable, "benchmarks/rollout.py", "--skip-throughput", "--groups", "1", "--out", str(out)],
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
