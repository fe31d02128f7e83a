"""The pool's per-completion storage (schema version 3): which agent made a completion, and the
rewards, returns and advantages written per completion for a group; pools of version 2 are
migrated on open, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json

import pytest

from forge_cli.errors import ForgeError
from forge_cli.pool.schema import SCHEMA_VERSION
from forge_cli.pool.types import CompletionReward, NewCompletion, TrajectoryStatus
from tests.conftest import open_spec

V3_COLUMNS = ("agent", "reward", "reward_to_go", "advantage", "reward_components")
V4_COLUMNS = ("tool_calls", "history")  # the gateway's parsed calls and prompt history (3 -> 4)
V6_COLUMNS = ("prompt_shared", "prompt_base")  # a prompt stored as the completion it extends (5 -> 6)
V7_COLUMNS = ("prompt_root_trajectory", "prompt_root_seq")  # ... or as another trajectory's whole-stored one (6 -> 7)


def _execute(pool, *statements: str) -> None:
    with pool._tx() as cur:
        for statement in statements:
            cur.execute(statement)


def _complete(pool, tid, agent=None):
    return pool.append_completion(NewCompletion(tid, prompt_ids=[1, 2], output_ids=[3], output_logprobs=[-0.5], policy_version=0,
                                                agent=agent))


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
    _execute(pool, *(f"ALTER TABLE completions DROP COLUMN {c}" for c in V3_COLUMNS + V4_COLUMNS + V6_COLUMNS + V7_COLUMNS),
             "ALTER TABLE trajectories DROP COLUMN infra",
             "ALTER TABLE groups DROP COLUMN rewards_pending", "ALTER TABLE groups DROP COLUMN submitted_version",
             "UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    pool.close()
    old = open_spec(pool_spec)
    try:
        with old._read() as cur:
            assert cur.one("SELECT value FROM meta WHERE key = 'schema_version'")[0] == str(SCHEMA_VERSION)
        (before,) = old.trajectory(tid).completions
        assert before.agent is None and before.reward is None and before.reward_components == {}
        assert before.tool_calls is None and before.history is None  # not recorded before version 4
        after = _complete(old, tid, "worker")
        assert [c.agent for c in old.trajectory(tid).completions] == [None, "worker"] and after.seq == 1
        assert old.trajectory(tid).status is TrajectoryStatus.RUNNING
    finally:
        old.close()
    again = open_spec(pool_spec)  # a version-4 pool opens as it is
    assert [c.agent for c in again.trajectory(tid).completions] == [None, "worker"]
    again.close()


def _finished_group(pool, turns=(2, 0, 1), pending=True):
    group = pool.submit_group("t", len(turns), "react", rewards_pending=pending)
    for t, k in zip(group.trajectories, turns):
        pool.start_trajectory(t.id)
        for _ in range(k):
            _complete(pool, t.id, "main")
        pool.finish_trajectory(t.id, rewards={"outcome": 1.0})
    return pool.group(group.id)


def test_per_completion_rewards_are_written_for_a_group_and_read_back(pool):
    group = _finished_group(pool)
    assert group.rewards_pending
    ids = [c.id for t in group.trajectories for c in t.completions]
    written = [
        CompletionReward(cid, reward=-0.1 * i, reward_to_go=0.5 + i, advantage=1.25 - i, components={"process": -0.1 * i})
        for i, cid in enumerate(ids)
    ]
    pool.set_completion_rewards(group.id, written)
    again = pool.group(group.id)
    assert not again.rewards_pending
    read = {c.id: c for t in again.trajectories for c in t.completions}
    for w in written:
        c = read[w.completion_id]
        # stored as doubles: exactly what was written
        assert (c.reward, c.reward_to_go, c.advantage, c.reward_components) == (w.reward, w.reward_to_go, w.advantage, w.components)
        assert c.agent == "main"
    # exported with the completions
    out = io.StringIO()
    pool.export_jsonl(out)
    exported = [c for line in out.getvalue().splitlines() for c in json.loads(line)["completions"]]
    assert {c["id"]: c["advantage"] for c in exported} == {w.completion_id: w.advantage for w in written}


def test_a_group_awaiting_its_rewards_is_not_taken_until_they_are_written(pool):
    waiting = _finished_group(pool, pending=True)
    plain = _finished_group(pool, pending=False)
    batch = pool.take_batch(2, 0, window=None)
    assert [g.id for g in batch.groups] == [plain.id]  # the pending one is finished but not complete
    pool.set_completion_rewards(waiting.id, [])  # a group with no completions to reward: only cleared
    assert [g.id for g in pool.take_batch(2, 0, window=None).groups] == [waiting.id]


def test_bad_completion_rewards_are_refused_and_change_nothing(pool):
    group = _finished_group(pool)
    ids = [c.id for t in group.trajectories for c in t.completions]
    other = _finished_group(pool)
    other_id = other.trajectories[0].completions[0].id
    good = CompletionReward(ids[0], 0.0, 1.0, 0.5)
    cases = [
        ([good, good], "listed twice"),
        ([CompletionReward(ids[0], 0.0, float("nan"), 0.5)], "reward_to_go must be a finite number"),
        ([CompletionReward(ids[0], 0.0, 1.0, float("inf"))], "advantage must be a finite number"),
        ([CompletionReward(ids[0], True, 1.0, 0.5)], "reward must be a finite number"),
        ([CompletionReward(ids[0], 0.0, 1.0, 0.5, {"": 1.0})], "names must be non-empty"),
        ([good, CompletionReward(other_id, 0.0, 1.0, 0.5)], "is not a completion of group"),
        ([(ids[0], 0.0, 1.0, 0.5)], "takes CompletionReward records"),
    ]
    for rewards, message in cases:
        with pytest.raises(ForgeError, match=message):
            pool.set_completion_rewards(group.id, rewards)
    with pytest.raises(ForgeError, match="unknown group"):
        pool.set_completion_rewards("nope", [good])
    after = pool.group(group.id)
    assert after.rewards_pending and all(c.advantage is None for t in after.trajectories for c in t.completions)
    # a group with a running member cannot be rewarded yet; a consumed one no longer
    live = pool.submit_group("t", 1, "react", rewards_pending=True)
    pool.start_trajectory(live.trajectories[0].id)
    with pytest.raises(ForgeError, match="1 trajectories still queued or running"):
        pool.set_completion_rewards(live.id, [])
    pool.set_completion_rewards(other.id, [])
    pool.take_batch(1, 0, window=None)
    with pytest.raises(ForgeError, match="is consumed: its rewards can no longer change"):
        pool.set_completion_rewards(other.id, [])
