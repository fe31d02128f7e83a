"""The Forge loop end to end on CPU: rollouts produce while the trainer trains; each step takes P
groups, trains on their recorded samples, swaps the weights into the engine and publishes the version."""

from __future__ import annotations

import asyncio
import json

import pytest

from forge_cli.config import load_config


@pytest.mark.slow
def test_the_loop_trains_swaps_and_publishes(tiny_model, tmp_path):
    from forge_cli.pool import DataPool
    from forge_cli.train.loop import train_loop

    config = load_config(env={}, overrides={
        "model.path": str(tiny_model), "model.engine.type": "scripted", "model.engine.policy": "forge_cli.tasks.demo_policies:calc",
        "gateway.port": 0, "gateway.socket": "", "run.dir": str(tmp_path / "runs"), "pool.max_active_groups": 2,
        "train.groups_per_step": 1, "train.group_size": 2, "train.engine": "torch", "train.lr": 1e-3,
        "rollout.scaffold": "tool-call", "rollout.task": "calc", "rollout.concurrency": 4})
    seen = []
    reports = asyncio.run(train_loop(config, run="loop", steps=3, checkpoint_every=3, on_step=seen.append))
    assert [r.step for r in reports] == [1, 2, 3] and seen == reports
    assert [r.policy_version for r in reports] == [1, 2, 3]  # each step's weights went into the engine
    assert all(r.groups == 1 and r.samples == 4 for r in reports)  # 2 trajectories × (a tool call, an answer)
    assert all(r.success == 1.0 and r.max_age >= 0 for r in reports)
    run = tmp_path / "runs" / "loop"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step-00000003"
    pool = DataPool.sqlite(run / "pool.sqlite")
    consumed = [g for g in pool.groups() if g.status.value == "consumed"]
    assert len(consumed) == 3
    # admission: never more than max_active_groups submitted and not yet trained on (the staleness bound)
    assert len(pool.groups()) <= 3 + 2
    pool.close()


def test_steps_must_be_positive(tmp_path):
    from forge_cli.errors import ForgeError
    from forge_cli.train.loop import train_loop

    with pytest.raises(ForgeError, match="steps must be at least 1"):
        asyncio.run(train_loop(load_config(env={}), steps=0))
