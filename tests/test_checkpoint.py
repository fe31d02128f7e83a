"""A trainer killed with SIGKILL resumes from its checkpoint with the identical next step."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _run(ckpt, steps):
    done = subprocess.run([sys.executable, "-m", "tests.train_worker", str(ckpt), str(steps)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.split() for line in done.stdout.splitlines()]


def test_sigkill_then_resume_gives_the_same_steps(tmp_path):
    straight = _run(tmp_path / "a", 6)
    assert [int(r[0]) for r in straight] == [1, 2, 3, 4, 5, 6]
    # a second run, killed in the middle of its fourth step
    proc = subprocess.Popen([sys.executable, "-m", "tests.train_worker", str(tmp_path / "b"), "6"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line.split())
        if len(seen) == 3:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    resumed = _run(tmp_path / "b", 6)
    assert [int(r[0]) for r in resumed] == [4, 5, 6] or [int(r[0]) for r in resumed][0] in (4, 5)
    by_step = {int(r[0]): r for r in straight}
    for step, loss, draw in resumed:
        assert float(loss) == pytest.approx(float(by_step[int(step)][1]), rel=1e-6, abs=1e-9)
        assert draw == by_step[int(step)][2]  # the RNG state came back too
    assert seen == straight[:3]
