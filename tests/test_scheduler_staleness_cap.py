"""``[pool.scheduler] type = "staleness_cap"`` on a real pool (SQLite and PostgreSQL): greedy takes with a cap
on each group's age, by the version the pool recorded it was submitted at (schema 8). The rule itself,
``select_capped``, is property-tested in test_scheduler.py; here the pool records and hands it the versions,
a step waits for a due straggler, a random run never trains a group past the cap, a pool from before the
column is migrated, and a cap that cannot hold is refused when the configuration is read."""

from __future__ import annotations

import random

import pytest

from forge_cli.config import load_config
from forge_cli.configs.pool import PoolConfig
from forge_cli.errors import ForgeError
from forge_cli.pool.scheduler import Scheduler
from tests.conftest import open_spec


def _scheduler(cap: int, n: int, p: int) -> Scheduler:
    config = load_config(env={}, overrides={"pool.scheduler.type": "staleness_cap", "pool.scheduler.max_staleness": cap,
                                            "pool.max_active_groups": n, "train.groups_per_step": p})
    return Scheduler.from_config(config.pool, config.train.groups_per_step)


def _finish(pool, group) -> None:
    for t in group.trajectories:
        pool.start_trajectory(t.id)
        pool.finish_trajectory(t.id, rewards={"outcome": 1.0})


def _submitted_versions(pool) -> dict[int, int | None]:
    with pool._read() as cur:
        return {int(i): v for i, v in cur.all("SELECT queue_index, submitted_version FROM groups")}


def test_a_due_straggler_is_waited_for_and_nothing_is_trained_past_the_cap(pool_spec):
    s = _scheduler(cap=1, n=4, p=2)
    pool = open_spec(pool_spec)
    try:
        groups = [s.submit(pool, f"t{i}", 1, "react", version=0) for i in range(4)]
        assert _submitted_versions(pool) == {0: 0, 1: 0, 2: 0, 3: 0}
        for g in groups[1:]:  # the head, g0, is the straggler
            _finish(pool, g)
        # step 0: all four are due by version 1 and a step takes 2, so 2 must go now: the oldest complete
        assert [g.queue_index for g in s.take(pool, 0).groups] == [1, 2]
        pool.publish_version(1)
        late = [s.submit(pool, f"u{i}", 1, "react", version=1) for i in range(2)]
        for g in late:
            _finish(pool, g)
        # step 1: g0 and g3 are due now; g0 is unfinished, so the step waits though g3 and two newer are complete
        assert s.take(pool, 1).groups == []
        _finish(pool, groups[0])
        batch = s.take(pool, 1)
        assert [g.queue_index for g in batch.groups] == [0, 3]
        assert all(age <= 1 for age in batch.ages)
        pool.publish_version(2)
        assert [g.queue_index for g in s.take(pool, 2).groups] == [4, 5]
    finally:
        pool.close()


@pytest.mark.parametrize("seed", range(3))
def test_a_random_run_never_trains_a_group_past_the_cap(pool_spec, seed):
    """Rollouts finish in a random order (some groups left unfinished for long), the trainer takes and publishes;
    every group taken is at most S versions older than the step that takes it, and the run keeps moving."""
    rng = random.Random(seed)
    S, P = rng.choice([(0, 2), (1, 2), (2, 1)])
    N = (S + 1) * P
    s = _scheduler(cap=S, n=N, p=P)
    pool = open_spec(pool_spec)
    version, submitted, pending, taken = 0, {}, [], 0
    try:
        for _ in range(120):
            while True:  # the rollout side submits while admission lets it
                try:
                    g = s.submit(pool, "t", 1, "react", version=version)
                except ForgeError:  # PoolFull
                    break
                submitted[g.queue_index] = version
                pending.append(g)
            for g in [g for g in pending if rng.random() < 0.4]:  # some finish; the rest straggle
                _finish(pool, g)
                pending.remove(g)
            batch = s.take(pool, version)
            if batch.groups:
                assert len(batch.groups) == P
                assert all(version - submitted[g.queue_index] <= S for g in batch.groups), (version, submitted)
                taken += P
                version += 1
                pool.publish_version(version)
        assert taken >= 20 and _submitted_versions(pool) == submitted
    finally:
        pool.close()


def test_a_pool_from_before_the_column_is_migrated_and_its_groups_taken(pool_spec):
    pool = open_spec(pool_spec)
    g = pool.submit_group("t", 1, "react")
    _finish(pool, g)
    with pool._tx() as cur:  # make it a schema-7 pool: no submitted_version
        cur.execute("ALTER TABLE groups DROP COLUMN submitted_version")
        cur.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    pool.close()
    pool = open_spec(pool_spec)
    try:
        assert _submitted_versions(pool) == {0: None}  # unknown: counted as submitted at the take's version
        s = _scheduler(cap=0, n=1, p=1)
        assert [x.id for x in s.take(pool, 5).groups] == [g.id]
        pool.publish_version(6)
        assert s.submit(pool, "t", 1, "react", version=6).queue_index == 1
        assert _submitted_versions(pool)[1] == 6
    finally:
        pool.close()


def test_a_group_records_the_version_it_was_submitted_at(pool_spec):
    pool = open_spec(pool_spec)
    try:
        pool.submit_group("t", 1, "react")
        pool.publish_version(3)
        pool.submit_group("t", 1, "react")  # default: the last published version
        pool.submit_group("t", 1, "react", version=7)
        assert _submitted_versions(pool) == {0: 0, 1: 3, 2: 7}
        for bad in (-1, 1.5, True, "2"):
            with pytest.raises(ForgeError, match="version must be an integer >= 0"):
                pool.submit_group("t", 1, "react", version=bad)
        assert len(_submitted_versions(pool)) == 3  # nothing written for the refused ones
    finally:
        pool.close()


def test_a_cap_that_cannot_hold_is_refused_when_the_configuration_is_read():
    with pytest.raises(ForgeError, match=r"max_staleness = 1 cannot hold with pool.max_active_groups = 16 and "
                                         r"train.groups_per_step = 4: it needs max_active_groups <= \(max_staleness \+ 1\) "
                                         r"x groups_per_step = 8"):
        load_config(env={}, overrides={"pool.scheduler.type": "staleness_cap", "pool.scheduler.max_staleness": 1,
                                       "pool.max_active_groups": 16, "train.groups_per_step": 4})
    # a configuration built in code, not read: the scheduler refuses it
    pool = PoolConfig.model_validate({"scheduler": {"type": "staleness_cap", "max_staleness": 0}, "max_active_groups": 3})
    with pytest.raises(ForgeError, match="cannot hold"):
        Scheduler.from_config(pool, groups_per_step=2)
    assert Scheduler.from_config(pool, groups_per_step=3).name == "staleness_cap"
    # the other types are not bound by it
    load_config(env={}, overrides={"pool.scheduler.type": "bounded_staleness", "pool.max_active_groups": 64})


def test_more_due_than_a_step_takes_trains_the_most_overdue_first(pool_spec):
    """A resumed run gives back the groups of the steps after its checkpoint, so more may be due at once than
    the cap's bound allows for: the step then takes the complete groups submitted earliest, and later steps,
    once the backlog is drained, the cap's own choice again."""
    s = _scheduler(cap=0, n=2, p=2)
    pool = open_spec(pool_spec)
    try:
        old = [pool.submit_group(f"t{i}", 1, "react", version=v) for i, v in enumerate([3, 1, 2, 1, 5])]
        for g in old[:4]:
            _finish(pool, g)
        # at version 5 four groups are overdue and a step takes 2: the earliest submitted complete ones
        assert [g.queue_index for g in s.take(pool, 5).groups] == [1, 3]
        assert [g.queue_index for g in s.take(pool, 5).groups] == [2, 0]  # still more due than a step: the next two
        # drained: the cap's own rule again — g4 (version 5) is due now and unfinished, so the step waits
        assert s.take(pool, 5).groups == []
        _finish(pool, old[4])
        newer = pool.submit_group("t5", 1, "react", version=5)
        _finish(pool, newer)
        assert [g.queue_index for g in s.take(pool, 5).groups] == [4, 5]
    finally:
        pool.close()
