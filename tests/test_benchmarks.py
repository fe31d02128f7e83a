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
