"""DeepSpeed ZeRO-1/2/3, in one process and in two, gives the torch engine's losses and weights —
the DeepSpeed runs with a micro-batch budget, so each step is several backward calls through
trunks whose keys/values are reused, against one unsplit torch step."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def extensions(tmp_path_factory):
    """An empty TORCH_EXTENSIONS_DIR that every DeepSpeed start here uses: nothing may be compiled
    into it (DeepSpeed's CPU shared-memory allreduce cost ~20 s per cold start before it was turned off)."""
    return str(tmp_path_factory.mktemp("torch_extensions"))


def _run(args, extensions, nproc=1):
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_port()), "TORCH_EXTENSIONS_DIR": extensions}
    if nproc == 1:
        cmd = [sys.executable, "-m", "tests.ds_worker", *args]
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
               f"--master_port={env['MASTER_PORT']}", "-m", "tests.ds_worker", *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in Path(extensions).rglob("*.so")] == [], "a cold DeepSpeed start compiled an op"
    if len(args) > 2:
        assert any(line.startswith("MICRO ") and int(line.split()[1]) > 1 for line in done.stdout.splitlines())
    return [float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]


@pytest.fixture(scope="module")
def reference(extensions):
    return _run(["torch", "0"], extensions)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_one_process(reference, extensions, stage):
    got = _run(["deepspeed", str(stage), "12"], extensions)
    assert got == pytest.approx(reference, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_two_processes(reference, extensions, stage):
    got = _run(["deepspeed", str(stage), "12"], extensions, nproc=2)
    assert got == pytest.approx(reference, rel=1e-4, abs=1e-6)
