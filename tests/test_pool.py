"""The data pool on both backends (SQLite, a real PostgreSQL): operations, storage, bad input."""

from __future__ import annotations

import io
import json
import random

import pytest

from forge_cli.errors import ForgeError
from forge_cli.pool.store import DataPool, PoolFull
from forge_cli.pool.types import Event, GroupStatus, NewCompletion, Sampling, TrajectoryStatus
from tests.conftest import open_spec


def _run_trajectory(pool, tid, turns=3, version=0, rng=None):
    rng = rng or random.Random(0)
    pool.start_trajectory(tid)
    made = []
    for _ in range(turns):
        prompt = [rng.randrange(0, 50_000) for _ in range(rng.randrange(1, 40))]
        out = [rng.randrange(0, 50_000) for _ in range(rng.randrange(1, 10))]
        lps = [-rng.random() * 5 for _ in out]
        made.append(pool.append_completion(NewCompletion(tid, prompt_ids=prompt, output_ids=out, output_logprobs=lps,
                                                         policy_version=version, sampling=Sampling(temperature=1.0),
                                                         tool_format="hermes")))
    pool.finish_trajectory(tid)
    return made


def test_lifecycle_round_trip(pool):
    group = pool.submit_group("task-1", 3, "react")
    assert group.queue_index == 0 and len(group.trajectories) == 3
    assert pool.submit_group("task-2", 1, "react").queue_index == 1
    t0 = group.trajectories[0].id
    made = _run_trajectory(pool, t0, turns=4, version=2)
    pool.append_events(t0, [Event("truncate", 1.0, {"dropped_turns": 2}), {"kind": "tool_error", "data": {"tool": "ls"}}])
    assert pool.set_rewards(t0, {"outcome": 1.0, "process": -0.25}) == 0.75
    assert pool.set_rewards(t0, {"process": -0.5}) == 0.5  # a component is replaced, not added twice
    stored = pool.trajectory(t0)
    assert stored.status is TrajectoryStatus.COMPLETED
    assert [c.seq for c in stored.completions] == [0, 1, 2, 3]
    for want, got in zip(made, stored.completions):
        assert got.prompt_ids == want.prompt_ids and got.output_ids == want.output_ids
        assert got.output_logprobs == want.output_logprobs  # float32 bits, exactly as returned
        assert got.policy_version == 2 and got.sampling == Sampling(temperature=1.0) and got.tool_format == "hermes"
    assert [e.kind for e in stored.events] == ["truncate", "tool_error"]
    assert stored.events[0].data == {"dropped_turns": 2}
    assert stored.rewards == {"outcome": 1.0, "process": -0.5} and stored.reward == 0.5
    pool.start_trajectory(group.trajectories[1].id)
    pool.fail_trajectory(group.trajectories[1].id, "agent crashed: exit code 139")
    pool.fail_trajectory(group.trajectories[2].id, "never started", timed_out=True)
    assert pool.trajectory(group.trajectories[1].id).error == "agent crashed: exit code 139"
    assert pool.trajectory(group.trajectories[2].id).status is TrajectoryStatus.TIMED_OUT


def test_groups_are_listed_in_queue_order_and_after_an_index(pool):
    made = [pool.submit_group(f"task-{i}", 1, "react") for i in range(5)]
    assert [g.id for g in pool.groups()] == [g.id for g in made]
    assert [g.id for g in pool.groups(after_index=1)] == [g.id for g in made[2:]]
    assert pool.groups(after_index=4) == [] and [g.id for g in pool.groups(after_index=-1)] == [g.id for g in made]
    assert [g.queue_index for g in pool.groups(GroupStatus.ACTIVE, after_index=2)] == [3, 4]


def test_logprobs_are_float32_and_ids_packed(pool):
    g = pool.submit_group("t", 1, "react")
    tid = g.trajectories[0].id
    pool.start_trajectory(tid)
    c = pool.append_completion(NewCompletion(tid, prompt_ids=list(range(1000)), output_ids=[2**31 - 1, 0],
                                             output_logprobs=[-0.1, -1e-9], policy_version=0))
    import struct

    assert c.output_logprobs == [struct.unpack("<f", struct.pack("<f", x))[0] for x in (-0.1, -1e-9)]
    stats = pool.stats()
    # ids: 4 bytes each, logprobs: 4 bytes per output id — no JSON text
    assert stats["bytes_per_token"] == pytest.approx((1002 * 4 + 2 * 4) / 1002, abs=1e-3)
    assert pool.trajectory(tid).completions[0].output_ids == [2**31 - 1, 0]


def test_take_batch_consumes_and_reports_ages(pool):
    groups = [pool.submit_group(f"t{i}", 2, "react") for i in range(3)]
    for g in groups[1:]:
        for t in g.trajectories:
            _run_trajectory(pool, t.id, turns=2, version=1)
    fifo = pool.take_batch(2, trainer_version=3, window=1)
    assert fifo.groups == [] and fifo.head_before == 0  # strict FIFO waits for the head
    windowed = pool.take_batch(5, trainer_version=3, window=2)
    assert [g.queue_index for g in windowed.groups] == [1]  # index 2 is outside [0, 0+2)
    assert windowed.ages == [2, 2, 2, 2]
    assert pool.group(groups[1].id).status is GroupStatus.CONSUMED
    for t in groups[0].trajectories:
        _run_trajectory(pool, t.id, turns=1, version=3)
    rest = pool.take_batch(5, trainer_version=4, window=2)
    assert [g.queue_index for g in rest.groups] == [0, 2]
    assert rest.ages == [1, 1] + [3] * 4
    stats = pool.stats(window=2)
    assert stats["groups"]["consumed"] == 3 and stats["queue"]["head"] is None
    assert stats["offpolicy_age"]["max"] == 3
    assert pool.unconsume_after(4) == 2 and pool.stats()["groups"]["active"] == 2


def test_timeouts_drop_or_train(pool_spec):
    now = [1000.0]
    pool = open_spec(pool_spec, clock=lambda: now[0])
    stuck = pool.submit_group("stuck", 2, "react", timeout_s=60)
    done = pool.submit_group("done", 1, "react", timeout_s=60)
    pool.start_trajectory(stuck.trajectories[0].id)
    _run_trajectory(pool, done.trajectories[0].id, turns=1)
    assert pool.take_batch(1, 0, window=1).groups == []
    now[0] += 61
    batch = pool.take_batch(1, 0, window=1, on_timeout="drop")
    assert batch.timed_out == [stuck.id] and [g.id for g in batch.groups] == [done.id]
    assert pool.group(stuck.id).status is GroupStatus.DROPPED
    assert {t.status for t in pool.group(stuck.id).trajectories} == {TrajectoryStatus.TIMED_OUT}
    # 'train': the timed-out head is closed and handed out with the rest
    late = pool.submit_group("late", 1, "react", timeout_s=10)
    now[0] += 11
    trained = pool.take_batch(1, 0, window=1, on_timeout="train")
    assert trained.timed_out == [late.id] and [g.id for g in trained.groups] == [late.id]
    assert trained.groups[0].timed_out and trained.groups[0].trajectories[0].status is TrajectoryStatus.TIMED_OUT
    pool.close()


def test_admission_bound(pool):
    for i in range(3):
        pool.submit_group(f"t{i}", 1, "react", max_active=3)
    with pytest.raises(PoolFull, match="admission bound is 3"):
        pool.submit_group("t3", 1, "react", max_active=3)
    assert pool.stats()["queue"]["next_index"] == 3


def test_export_jsonl(pool):
    g = pool.submit_group("t", 2, "react")
    _run_trajectory(pool, g.trajectories[0].id, turns=2)
    buf = io.StringIO()
    assert pool.export_jsonl(buf) == 2
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert lines[0]["group"]["queue_index"] == 0 and len(lines[0]["completions"]) == 2
    assert lines[0]["status"] == "completed" and lines[1]["status"] == "queued"


# what the gateway wrote before sampling was a record, and before it recorded training and what was asked
SAVED_SAMPLING = [
    {"max_tokens": 16, "temperature": 0.7, "top_p": 1.0, "stop": ["\n"], "stop_token_ids": [], "seed": None, "n": 1,
     "top_logprobs": 0, "training": True, "asked": {"top_p": 0.5}, "output_format": {"type": "json_object"}},
    {"max_tokens": 16, "temperature": 0.7, "top_p": 1.0, "stop": [], "stop_token_ids": [2], "seed": 5, "n": 2},
    {},
]


def test_sampling_is_one_record_stored_as_the_json_it_always_was(pool):
    """A completion's Sampling is stored as the JSON object the gateway always wrote, and every saved
    row (whatever keys it recorded) reads back into the record; the export writes the JSON object."""
    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    sampling = Sampling(max_tokens=16, temperature=0.7, stop=("\n",), training=True, asked={"top_p": 0.5},
                        output_format={"type": "json_object"})
    made = [pool.append_completion(NewCompletion(tid, prompt_ids=[1], output_ids=[2], output_logprobs=[-1.0], policy_version=0,
                                                 sampling=sampling)) for _ in SAVED_SAMPLING]
    assert sampling.as_dict() == SAVED_SAMPLING[0] and list(sampling.as_dict()) == list(SAVED_SAMPLING[0])
    with pool._tx() as cur:
        stored = cur.one("SELECT sampling FROM completions WHERE id = ?", (made[0].id,))[0]
        assert json.loads(stored) == SAVED_SAMPLING[0]
        for c, saved in zip(made, SAVED_SAMPLING):
            cur.execute("UPDATE completions SET sampling = ? WHERE id = ?", (json.dumps(saved), c.id))
    first, older, empty = pool.trajectory(tid).completions
    assert first.sampling == sampling
    assert older.sampling == Sampling(max_tokens=16, temperature=0.7, stop_token_ids=(2,), seed=5, n=2)
    assert older.sampling.training is None and older.sampling.asked == {}  # not recorded: the trainer refuses it
    assert empty.sampling == Sampling()
    buf = io.StringIO()
    pool.export_jsonl(buf)
    assert json.loads(buf.getvalue())["completions"][0]["sampling"] == SAVED_SAMPLING[0]
    with pytest.raises(ForgeError, match="must be a Sampling record"):
        pool.append_completion(NewCompletion(tid, prompt_ids=[1], output_ids=[2], output_logprobs=[-1.0], policy_version=0,
                                             sampling={"temperature": 1.0}))


def test_the_sampling_record_holds_every_field_the_engines_sample_with():
    """The gateway records each SamplingParams field under its own name: a field an engine gains is in
    the record or the gateway fails loudly, never silently unrecorded."""
    from dataclasses import fields

    from forge_cli.engine.base import SamplingParams
    from forge_cli.gateway.routes.common import sampling_record

    assert {f.name for f in fields(SamplingParams)} <= {f.name for f in fields(Sampling)}
    params = SamplingParams(max_tokens=7, temperature=0.5, top_p=0.9, stop=("x",), stop_token_ids=(3,), seed=11, n=2,
                            top_logprobs=4)
    record = sampling_record(params, training=True, raw={"top_k": 5, "temperature": 0.5})
    assert all(getattr(record, f.name) == getattr(params, f.name) for f in fields(SamplingParams))
    assert (record.training, record.asked) == (True, {"top_k": 5, "temperature": 0.5})  # asked: as sent


# ---- bad input: a clear ForgeError, and the pool unchanged ----------------------------------------------


def _snapshot(pool):
    return pool.stats(), [(t.id, t.status, len(t.completions), t.rewards) for g in pool.groups() for t in g.trajectories]


def test_bad_input_is_rejected_and_changes_nothing(pool):
    g = pool.submit_group("t", 2, "react")
    tid = g.trajectories[0].id
    _run_trajectory(pool, g.trajectories[1].id, turns=1)
    pool.start_trajectory(tid)
    pool.append_completion(NewCompletion(tid, prompt_ids=[1], output_ids=[2], output_logprobs=[-1.0], policy_version=0))
    before = _snapshot(pool)
    cases = [
        (lambda: pool.append_completion(NewCompletion(tid, prompt_ids=[1], output_ids=[2, 3], output_logprobs=[-1.0], policy_version=0)),
         "one value per output id: 2 ids, 1 logprobs"),
        (lambda: pool.append_completion(NewCompletion(tid, prompt_ids=[1, -5], output_ids=[2], output_logprobs=[-1.0], policy_version=0)),
         "token id outside"),
        (lambda: pool.append_completion(NewCompletion(tid, prompt_ids="1 2", output_ids=[2], output_logprobs=[-1.0], policy_version=0)),
         "must be a list of integers"),
        (lambda: pool.append_completion(NewCompletion(tid, prompt_ids=[1], output_ids=[2], output_logprobs=[0.5], policy_version=0)),
         "<= 0"),
        (lambda: pool.append_completion(NewCompletion("nope", prompt_ids=[1], output_ids=[2], output_logprobs=[-1.0], policy_version=0)),
         "unknown trajectory 'nope'"),
        (lambda: pool.append_completion(NewCompletion(g.trajectories[1].id, prompt_ids=[1], output_ids=[2], output_logprobs=[-1.0],
                                                      policy_version=0)),
         "is completed, not running"),
        (lambda: pool.append_completion(NewCompletion(tid, prompt_ids=[1], output_ids=[2], output_logprobs=[-1.0], policy_version=-1)),
         "policy_version"),
        (lambda: pool.set_rewards("nope", {"outcome": 1.0}), "unknown trajectory"),
        (lambda: pool.set_rewards(tid, {"outcome": float("nan")}), "finite number"),
        (lambda: pool.append_events("nope", [Event("x", 0.0)]), "unknown trajectory"),
        (lambda: pool.start_trajectory(g.trajectories[1].id), "is completed; cannot become running"),
        (lambda: pool.finish_trajectory("nope"), "unknown trajectory"),
        (lambda: pool.submit_group("t", 0, "react"), "n >= 1"),
    ]
    for call, message in cases:
        with pytest.raises(ForgeError, match=message):
            call()
        assert _snapshot(pool) == before, message
    # a reward for a consumed group
    pool.finish_trajectory(tid)
    batch = pool.take_batch(1, 0, window=1)
    assert [x.id for x in batch.groups] == [g.id]
    before = _snapshot(pool)
    with pytest.raises(ForgeError, match="consumed group: its reward can no longer change"):
        pool.set_rewards(tid, {"outcome": 1.0})
    assert _snapshot(pool) == before


def test_closed_pool(pool_spec):
    pool = open_spec(pool_spec)
    pool.close()
    with pytest.raises(ForgeError, match="is closed"):
        pool.submit_group("t", 1, "react")
    with pytest.raises(ForgeError, match="is closed"):
        pool.stats()


def test_unreachable_postgres_is_a_clear_error():
    with pytest.raises(ForgeError, match=r"cannot connect to the PostgreSQL pool at postgresql://u:\*\*\*@127.0.0.1:9/x"):
        DataPool.postgres("postgresql://u:secret@127.0.0.1:9/x")


def test_rewards_land_with_the_final_status(pool):
    """finish/fail carry the reward in the same transaction: a group is never handed out rewardless."""
    g = pool.submit_group("t", 2, "react")
    a, b = (t.id for t in g.trajectories)
    pool.start_trajectory(a)
    pool.finish_trajectory(a, rewards={"outcome": 1.0, "time": 0.2})
    pool.fail_trajectory(b, "exit code 1", rewards={"outcome": -1.0})
    batch = pool.take_batch(1, 0, window=1)
    got = {t.id: (t.status, t.reward, t.rewards) for t in batch.groups[0].trajectories}
    assert got[a] == (TrajectoryStatus.COMPLETED, 1.2, {"outcome": 1.0, "time": 0.2})
    assert got[b] == (TrajectoryStatus.FAILED, -1.0, {"outcome": -1.0})
    with pytest.raises(ForgeError, match="finite number"):
        pool.finish_trajectory(pool.submit_group("u", 1, "react").trajectories[0].id, rewards={"x": float("inf")})


def test_slots_free_when_the_weights_are_published(pool):
    """Admission counts a consumed group as in flight until its step's weights are out."""
    groups = [pool.submit_group(f"t{i}", 1, "react", max_active=2) for i in range(2)]
    for g in groups:
        _run_trajectory(pool, g.trajectories[0].id, turns=1)
    assert len(pool.take_batch(2, trainer_version=0, window=1, min_groups=2).groups) == 2
    with pytest.raises(PoolFull):
        pool.submit_group("t2", 1, "react", max_active=2)  # being trained on: still in flight
    pool.publish_version(1)
    assert pool.submit_group("t2", 1, "react", max_active=2).queue_index == 2


def test_all_or_nothing_take(pool):
    groups = [pool.submit_group(f"t{i}", 1, "react") for i in range(3)]
    for g in groups[:2]:
        _run_trajectory(pool, g.trajectories[0].id, turns=1)
    assert pool.take_batch(3, 0, window=None, min_groups=3).groups == []
    assert pool.stats()["groups"]["active"] == 3
    _run_trajectory(pool, groups[2].trajectories[0].id, turns=1)
    assert [g.queue_index for g in pool.take_batch(3, 0, window=None, min_groups=3).groups] == [0, 1, 2]


def test_scheduler_from_config_drives_the_pool(pool):
    from forge_cli.config import load_config
    from forge_cli.pool.scheduler import Scheduler

    config = load_config(env={}, overrides={"pool.max_active_groups": 4, "pool.scheduler.window_fraction": 0.5, "pool.group_timeout_s": 30})
    s = Scheduler.from_config(config.pool, groups_per_step=2)
    assert (s.name, s.window, s.on_timeout) == ("windowed_fifo", 2, "drop")
    groups = [s.submit(pool, f"t{i}", 1, "react") for i in range(4)]
    with pytest.raises(PoolFull):
        s.submit(pool, "t4", 1, "react")
    assert groups[0].timeout_s == 30
    for g in groups[1:3]:
        _run_trajectory(pool, g.trajectories[0].id, turns=1)
    assert s.take(pool, 0).groups == []  # index 2 is outside [0, 2): only one ready in the window
    _run_trajectory(pool, groups[0].trajectories[0].id, turns=1)
    assert [g.queue_index for g in s.take(pool, 0).groups] == [0, 1]
    fifo = Scheduler.from_config(load_config(env={}, overrides={"pool.scheduler": "fifo"}).pool, 1)
    greedy = Scheduler.from_config(load_config(env={}, overrides={"pool.scheduler": "greedy"}).pool, 1)
    assert fifo.window == 1 and greedy.window is None


def test_an_unreachable_postgresql_pool_is_a_one_line_error():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ForgeError) as info:
        DataPool.postgres(f"postgresql://forge:pw@127.0.0.1:{port}/postgres")
    message = str(info.value)
    assert message.startswith(f"cannot connect to the PostgreSQL pool at postgresql://forge:***@127.0.0.1:{port}/postgres: ")
    assert "\n" not in message and "Connection refused" in message
