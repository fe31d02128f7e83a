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


@pytest.mark.parametrize("engine", ["torch", "deepspeed"])
def test_the_loops_checkpoint_resumes_the_identical_next_step(tiny_model, tmp_path, engine):
    """What ``forge train --resume`` does — weights into the model before the engine wraps it, then
    the optimizer's state — gives the step the uninterrupted run takes, under either engine."""
    import random

    import torch

    from forge_cli.config import load_config
    from forge_cli.train.checkpoint import load_checkpoint
    from forge_cli.configs.train import CISPOLossConfig
    from forge_cli.train.distributed import make_loop_trainer
    from forge_cli.train.resume import _save, optimizer_of, trainer_model
    from tests.test_prefix_tree import forest

    config = load_config(env={}, overrides={"model.path": str(tiny_model), "train.engine": engine, "train.lr": 1e-2})
    rng = random.Random(3)
    batches = [[s for s in forest(rng, vocab=200)] for _ in range(3)]
    for batch in batches:  # the behaviour logprobs near the model's, advantages of both signs
        for s in batch:
            s.old_logprobs[:] = [-5.0] * len(s.old_logprobs)
    kw = dict(temperature=1.0, attention="auto", split="auto", budget=4096)
    straight = make_loop_trainer(config, trainer_model(config, tmp_path, False))
    for batch in batches:
        straight.step(batch, CISPOLossConfig(), **kw)
    expected = {k: v.clone() for k, v in straight.state_dict().items()}

    first = trainer_model(config, tmp_path, False)
    trainer = make_loop_trainer(config, first)
    for batch in batches[:2]:
        trainer.step(batch, CISPOLossConfig(), **kw)
    _save(config, tmp_path, first, trainer, step=2, version=2)
    resumed_model = trainer_model(config, tmp_path, True)  # the checkpoint's weights
    resumed = make_loop_trainer(config, resumed_model)
    state = load_checkpoint(tmp_path / "checkpoints", None, optimizer_of(resumed))
    assert (state.step, state.policy_version) == (2, 2)
    resumed.step(batches[2], CISPOLossConfig(), **kw)
    got = resumed.state_dict()
    for engine_ in (resumed, trainer, straight):  # one process group for the three (closing leaves it)
        engine_.close()
    for name, value in expected.items():
        assert torch.allclose(got[name], value, rtol=1e-5, atol=1e-6), name


def test_the_newest_checkpoints_and_the_first_are_kept(tmp_path):
    """Pruning keeps the newest ``keep`` and step 0 — the policy the run started from (its warm start),
    which a control or another loss starts from."""
    from pathlib import Path

    import torch

    from forge_cli.train.checkpoint import TrainerState, save_checkpoint

    class Tiny(torch.nn.Linear):
        def save_pretrained(self, path, **_):
            Path(path).mkdir(parents=True, exist_ok=True)
            torch.save(self.state_dict(), Path(path) / "weights.pt")

    model = Tiny(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    for step in range(6):
        save_checkpoint(tmp_path, model, optimizer, None, TrainerState(step=step, policy_version=step), keep=2)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000000", "step-00000004", "step-00000005"]
    assert (tmp_path / "latest").read_text() == "step-00000005"
