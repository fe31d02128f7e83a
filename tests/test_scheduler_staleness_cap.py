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
    pool.publish_version(4)
    with pool._tx() as cur:  # make it a schema-7 pool: no submitted_version
        cur.execute("ALTER TABLE groups DROP COLUMN submitted_version")
        cur.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    pool.close()
    pool = open_spec(pool_spec)
    try:
        assert _submitted_versions(pool) == {0: 4}  # the version published when it was migrated
        s = _scheduler(cap=0, n=1, p=1)
        assert [x.id for x in s.take(pool, 4).groups] == [g.id]
        pool.publish_version(5)
        assert s.submit(pool, "t", 1, "react", version=5).queue_index == 1
        assert _submitted_versions(pool)[1] == 5
    finally:
        pool.close()


def test_a_group_records_the_version_it_was_submitted_at(pool_spec):
    pool = open_spec(pool_spec)
    try:
        pool.submit_group("t", 1, "react")
        pool.publish_version(3)
        pool.submit_group("t", 1, "react")  # default: the last published version
        pool.submit_group("t", 1, "react", version=7)
        # a version read just before a publish is recorded as the published one: admission already stopped
        # counting the step that publish ended, so an older record would bring more groups due than a step takes
        pool.submit_group("t", 1, "react", version=2)
        assert _submitted_versions(pool) == {0: 0, 1: 3, 2: 7, 3: 3}
        for bad in (-1, 1.5, True, "2"):
            with pytest.raises(ForgeError, match="version must be an integer >= 0"):
                pool.submit_group("t", 1, "react", version=bad)
        assert len(_submitted_versions(pool)) == 4  # nothing written for the refused ones
    finally:
        pool.close()


def test_a_cap_that_cannot_hold_is_refused_when_the_configuration_is_read():
    with pytest.raises(ForgeError, match=r"max_staleness = 1 cannot hold with pool.max_active_groups = 16 and "
                                         r"train.groups_per_step = 4: it needs max_active_groups <= \(max_staleness \+ 1\) "
                                         r"x groups_per_step = 8; set max_staleness to 3 or more, or max_active_groups to 8 "
                                         r"or less"):
        load_config(env={}, overrides={"pool.scheduler.type": "staleness_cap", "pool.scheduler.max_staleness": 1,
                                       "pool.max_active_groups": 16, "train.groups_per_step": 4})
    # a configuration built in code, not read: the scheduler refuses it
    pool = PoolConfig.model_validate({"scheduler": {"type": "staleness_cap", "max_staleness": 0}, "max_active_groups": 3})
    with pytest.raises(ForgeError, match="cannot hold"):
        Scheduler.from_config(pool, groups_per_step=2)
    assert Scheduler.from_config(pool, groups_per_step=3).name == "staleness_cap"
    # the other types are not bound by it; the code's defaults (N = 16, P = 4) hold with the default cap (3)
    load_config(env={}, overrides={"pool.scheduler.type": "bounded_staleness", "pool.max_active_groups": 64})
    default = PoolConfig.model_validate({"scheduler": {"type": "staleness_cap"}})
    assert Scheduler.from_config(default, groups_per_step=4).name == "staleness_cap"


def test_a_resumed_runs_backlog_is_trained_earliest_deadline_first_and_new_groups_keep_the_cap(pool_spec):
    """A resumed run gives back the groups of the steps after its checkpoint and goes on at the version it had
    reached, so more can be due at once than a step takes: each step then takes the earliest deadlines, still
    waiting for (or timing out) an unfinished due group rather than overtaking it, and a group submitted after
    the resume is trained within the cap once the backlog is gone (the review's scenario, on_timeout = "train")."""
    clock = [0.0]
    config = load_config(env={}, overrides={"pool.scheduler.type": "staleness_cap", "pool.scheduler.max_staleness": 1,
                                            "pool.max_active_groups": 4, "train.groups_per_step": 2,
                                            "pool.on_timeout": "train", "pool.group_timeout_s": 100})
    s = Scheduler.from_config(config.pool, 2)
    pool = open_spec(pool_spec, clock=lambda: clock[0])
    submitted: dict[str, int] = {}

    def submit(v: int, done: bool):
        g = s.submit(pool, "t", 1, "react", version=v)
        submitted[g.id] = v
        if done:
            _finish(pool, g)
        return g

    def take(v: int) -> list[str]:
        batch = s.take(pool, v)
        assert all(v - submitted[g.id] <= 1 for g in batch.groups if submitted[g.id] >= 5), "a new group past the cap"
        return [g.id for g in batch.groups]

    try:
        old = [pool.submit_group("t", 1, "react", version=0) for _ in range(5)]  # given back by the resume: overdue
        for g in old:
            submitted[g.id] = 0
            _finish(pool, g)
        pool.publish_version(5)
        assert take(5) == [old[0].id, old[1].id]
        pool.publish_version(6)
        g = submit(6, False)  # a straggler submitted after the resume: due at 7
        assert take(6) == [old[2].id, old[3].id]
        pool.publish_version(7)
        h = [submit(7, True) for _ in range(2)]
        assert take(7) == []  # old[4] (overdue) and g are due; g is unfinished: the step waits, it does not overtake g
        clock[0] = 1000.0  # g runs out of time: closed and taken with what it has ("train")
        batch = s.take(pool, 7)
        assert [x.id for x in batch.groups] == [old[4].id, g.id] and batch.timed_out == [g.id]
        pool.publish_version(8)
        k = submit(8, False)  # a second straggler, due at 9
        assert take(8) == [h[0].id, h[1].id]
        pool.publish_version(9)
        m = [submit(9, True) for _ in range(2)]
        assert take(9) == []  # k is due and unfinished: waited for
        _finish(pool, k)
        assert take(9) == [k.id, m[0].id]  # within the cap: 9 - 8 = 1
        assert pool.group(g.id).status.value == "consumed"
    finally:
        pool.close()
