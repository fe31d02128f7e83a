"""The pool's per-completion storage (schema version 3): which agent made a completion, and the
rewards, returns and advantages written per completion for a group; pools of version 2 are
migrated on open, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from forge_cli.errors import ForgeError
from forge_cli.pool import TrajectoryStatus
from tests.conftest import open_spec

V3_COLUMNS = ("agent", "reward", "reward_to_go", "advantage", "reward_components")


def _execute(pool, *statements: str) -> None:
    with pool._tx() as cur:
        for statement in statements:
            cur.execute(statement)


def _complete(pool, tid, agent=None):
    return pool.append_completion(tid, prompt_ids=[1, 2], output_ids=[3], output_logprobs=[-0.5], policy_version=0, agent=agent)


def test_a_completion_records_its_agent(pool):
    tid = pool.submit_group("t", 1, "orchestrator").trajectories[0].id
    pool.start_trajectory(tid)
    made = [_complete(pool, tid, "planner"), _complete(pool, tid, "worker-1"), _complete(pool, tid)]
    assert [c.agent for c in made] == ["planner", "worker-1", None]
    read = pool.trajectory(tid).completions
    assert [c.agent for c in read] == ["planner", "worker-1", None]
    assert all(c.reward is None and c.reward_to_go is None and c.advantage is None for c in read)
    assert all(c.reward_components == {} for c in read)
    for bad in ("", "x" * 201, 7):
        with pytest.raises(ForgeError, match="agent must be a name"):
            _complete(pool, tid, bad)
    assert len(pool.trajectory(tid).completions) == 3  # refused before anything was written


def test_a_version_2_pool_is_migrated_on_open(pool_spec):
    pool = open_spec(pool_spec)
    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    _complete(pool, tid)
    # make it a version-2 pool: completions without the version-3 columns
    _execute(pool, *(f"ALTER TABLE completions DROP COLUMN {c}" for c in V3_COLUMNS),
             "UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    pool.close()
    old = open_spec(pool_spec)
    try:
        with old._read() as cur:
            assert cur.one("SELECT value FROM meta WHERE key = 'schema_version'")[0] == "3"
        (before,) = old.trajectory(tid).completions
        assert before.agent is None and before.reward is None and before.reward_components == {}
        after = _complete(old, tid, "worker")
        assert [c.agent for c in old.trajectory(tid).completions] == [None, "worker"] and after.seq == 1
        assert old.trajectory(tid).status is TrajectoryStatus.RUNNING
    finally:
        old.close()
    again = open_spec(pool_spec)  # a version-3 pool opens as it is
    assert [c.agent for c in again.trajectory(tid).completions] == [None, "worker"]
    again.close()
