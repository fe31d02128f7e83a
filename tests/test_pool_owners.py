"""Running trajectories and the processes that own them: a killed owner's are failed as
"interrupted" on the next start, a live one's are not; pools from before owners are migrated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from forge_cli.errors import ForgeError
from forge_cli.pool import owners
from forge_cli.pool.schema import SCHEMA_VERSION
from forge_cli.pool.types import TrajectoryStatus
from tests.conftest import ROOT, open_spec


def _starter(spec, trajectory_ids: list[str]) -> subprocess.Popen:
    """A child process that starts ``trajectory_ids`` and then waits to be killed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.pool_workers", "starter", json.dumps(spec), json.dumps(trajectory_ids)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "started", proc.stderr.read() if proc.stderr else line
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_killed_owners_trajectories_fail_as_interrupted_and_no_others(pool_spec):
    pool = open_spec(pool_spec)
    ids = [t.id for t in pool.submit_group("t", 8, "react").trajectories]
    dead_child = _starter(pool_spec, ids[0:2])
    live_child = _starter(pool_spec, ids[2:3])
    try:
        pool.start_trajectory(ids[3])  # this (live) process
        pool.start_trajectory(ids[4], owner="some-other-host:1:x")  # cannot be checked from here: left alone
        host, pid, start = owners.this_process().rsplit(":", 2)
        assert int(pid) == os.getpid()
        reused = f"{host}:{pid}:{start}7" if start else None  # our pid, another start time: the pid was reused
        if reused:
            pool.start_trajectory(ids[5], owner=reused)
        pool.start_trajectory(ids[6])
        pool.finish_trajectory(ids[6])  # finished: not running, never touched
        # ids[7] stays queued
        dead_owner = pool.trajectory(ids[0]).owner
        assert dead_owner is not None and dead_owner.split(":")[1] == str(dead_child.pid)
        _kill(dead_child)
        before = {tid: pool.trajectory(tid) for tid in ids}

        failed = pool.fail_interrupted()

        interrupted = set(ids[0:2]) | ({ids[5]} if reused else set())
        assert failed == len(interrupted)
        for tid in ids:
            now = pool.trajectory(tid)
            if tid in interrupted:
                assert (now.status, now.error) == (TrajectoryStatus.FAILED, "interrupted")
                assert now.owner == before[tid].owner and now.finished_at is not None
            else:
                assert now == before[tid]
        assert pool.fail_interrupted() == 0
        assert pool.trajectory(ids[3]).owner == owners.this_process()
    finally:
        _kill(live_child)
        pool.close()
    # the live child is gone now: its trajectory goes too, in a pool opened afresh
    reopened = open_spec(pool_spec)
    assert reopened.fail_interrupted() == 1
    assert reopened.trajectory(ids[2]).status is TrajectoryStatus.FAILED
    reopened.close()


def test_owner_liveness():
    me = owners.this_process()
    assert owners.is_local(me) and not owners.is_dead(me)
    assert not owners.is_local("some-other-host:1:x")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    host, _, start = me.rsplit(":", 2)
    # a start time read for the child while it lives, then the child killed
    from forge_cli.pool.owners import _start_time

    child_owner = f"{host}:{child.pid}:{_start_time(child.pid)}"
    assert not owners.is_dead(child_owner)
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it has exited; not reaped yet
    assert owners.is_dead(child_owner)  # a zombie runs nothing
    child.wait()
    assert owners.is_dead(child_owner)
    for malformed in ("", "nohost", f"{host}:notapid:1", f"{host}:-1:1"):
        assert owners.is_dead(malformed), malformed


def _execute(pool, *statements: str) -> None:
    with pool._tx() as cur:
        for statement in statements:
            cur.execute(statement)


def test_a_pool_from_before_owners_is_migrated_on_open(pool_spec):
    pool = open_spec(pool_spec)
    ids = [t.id for t in pool.submit_group("t", 2, "react").trajectories]
    pool.start_trajectory(ids[0])
    # make it a version-1 pool: no owner column, none of versions 3's, 4's, 6's and 7's completion columns, nor 5's infra
    v3 = ("agent", "reward", "reward_to_go", "advantage", "reward_components", "tool_calls", "history", "prompt_shared",
          "prompt_base", "prompt_root_trajectory", "prompt_root_seq")
    _execute(pool, "ALTER TABLE trajectories DROP COLUMN owner", "ALTER TABLE trajectories DROP COLUMN infra",
             *(f"ALTER TABLE completions DROP COLUMN {c}" for c in v3),
             "ALTER TABLE groups DROP COLUMN rewards_pending", "ALTER TABLE groups DROP COLUMN submitted_version",
             "UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    pool.close()
    old = open_spec(pool_spec)
    with old._read() as cur:
        assert cur.one("SELECT value FROM meta WHERE key = 'schema_version'")[0] == str(SCHEMA_VERSION)
    assert old.trajectory(ids[0]).owner is None and old.trajectory(ids[0]).status is TrajectoryStatus.RUNNING
    assert old.fail_interrupted() == 0  # no recorded owner: nothing to tell it by, left alone
    old.start_trajectory(ids[1])
    assert old.trajectory(ids[1]).owner == owners.this_process()
    _execute(old, f"UPDATE meta SET value = '{SCHEMA_VERSION + 1}' WHERE key = 'schema_version'")
    old.close()
    with pytest.raises(ForgeError, match=f"has schema version {SCHEMA_VERSION + 1}; this Forge reads {SCHEMA_VERSION}"):
        open_spec(pool_spec)
