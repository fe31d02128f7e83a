"""The CUDA tree-attention benchmark runs end to end (on CPU: dense and tree only) and agrees."""

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
