"""A trajectory's first prompt stored as another trajectory's whole-stored completion plus its new ids
(schema 7, forge_cli/pool/prompt_bases.py): a group's members share their task prompt, every task of an
agent its system prompt. Every read — a trajectory, a group, every group, a training batch, from the
writer, another pool object or a fresh one — gives back exactly what was appended, on random groups
whose prompts share a system prefix, a task prompt or nothing, interleaved across trajectories."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.pool.prompt_bases import Base, PromptBases
from forge_cli.pool.types import NewCompletion
from tests.conftest import open_spec


def _append(pool, tid, prompt, output, n=1):
    return pool.append_completions([NewCompletion(tid, prompt_ids=list(prompt), output_ids=output,
                                                  output_logprobs=[-0.5] * len(output), policy_version=0)
                                    for _ in range(n)])


def _bases_of(pool):
    """(trajectory, seq) → (prompt_shared, prompt_base, prompt_root_trajectory, prompt_root_seq)."""
    with pool._read() as cur:
        return {(r[0], r[1]): tuple(r[2:]) for r in cur.all(
            "SELECT trajectory_id, seq, prompt_shared, prompt_base, prompt_root_trajectory, prompt_root_seq FROM completions")}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 4), members=st.integers(1, 4),
       roots=st.integers(0, 3), min_shared_root=st.integers(1, 40), system=st.integers(0, 60))
def test_every_read_is_what_was_appended(pool_spec, seed, groups, members, roots, min_shared_root, system):
    rng = random.Random(seed)

    def fresh(n):
        return [rng.randrange(5) for _ in range(n)]  # a small alphabet: accidental matches happen

    writers = [open_spec(pool_spec), open_spec(pool_spec)]  # each with its own memory of what it wrote
    for w in writers:
        w._bases = PromptBases(roots=roots, min_shared=3, min_shared_root=min_shared_root)
    try:
        prefix = fresh(system)  # the agent's system prompt: every task's first ids
        made = [writers[0].submit_group(f"task-{g}", members, "react") for g in range(groups)]
        task = {g.id: prefix + fresh(rng.randrange(0, 50)) for g in made}
        todo = []  # (trajectory, its group's task prompt, turns left)
        for g in made:
            for t in g.trajectories:
                writers[0].start_trajectory(t.id)
                todo.append([t.id, task[g.id], rng.randrange(1, 4)])
        sent: dict[str, list] = {t[0]: [] for t in todo}
        last: dict[str, list[int]] = {}
        while todo:
            item = rng.choice(todo)  # the trajectories' calls interleaved, as a gateway's sessions make them
            tid, first, _ = item
            if tid not in last:
                prompt = first if rng.random() < 0.8 else fresh(rng.randrange(1, 60))  # some start otherwise
            else:
                prompt = last[tid] + fresh(rng.randrange(0, 20))
            output, n = fresh(rng.randrange(1, 12)), rng.choice([1, 1, 1, 2])
            done = _append(writers[rng.randrange(2)], tid, prompt, output, n)
            assert [(c.prompt_ids, c.output_ids) for c in done] == [(prompt, output)] * n
            sent[tid] += [(prompt, output)] * n
            last[tid] = prompt + output
            item[2] -= 1
            if item[2] == 0:
                todo.remove(item)
                writers[rng.randrange(2)].finish_trajectory(tid, rewards={"outcome": 1.0})
        fresh_reader = open_spec(pool_spec)
        for reader in (*writers, fresh_reader):
            for g in made:
                assert {t.id: [(c.prompt_ids, c.output_ids) for c in t.completions]
                        for t in reader.group(g.id).trajectories} == {t.id: sent[t.id] for t in g.trajectories}
            for tid in sent:
                assert [(c.prompt_ids, c.output_ids) for c in reader.trajectory(tid).completions] == sent[tid]
            assert {t.id: [(c.prompt_ids, c.output_ids) for c in t.completions]  # (the pool file outlives an example)
                    for g in reader.groups() for t in g.trajectories if t.id in sent} == sent
        batch = fresh_reader.take_batch(10**6, 1, window=None)  # every group not yet taken: this example's
        assert {t.id: [(c.prompt_ids, c.output_ids) for c in t.completions]
                for g in batch.groups for t in g.trajectories} == sent
        fresh_reader.close()
        stored = _bases_of(writers[0])
        for (tid, seq), (shared, base, root, root_seq) in ((k, v) for k, v in stored.items() if k[0] in sent):
            if root is not None:  # another trajectory's root: stored whole, and it gives enough
                prompt = sent[tid][seq][0]
                assert root != tid and base is None and stored[root, root_seq][1:3] == (None, None)
                assert shared >= max(min_shared_root, len(prompt) / 2)
        if roots == 0:
            assert all(stored[key][2] is None for key in stored if key[0] in sent)
    finally:
        for w in writers:
            w.close()


def test_a_groups_task_prompt_is_stored_once(pool):
    rng = random.Random(0)
    group = pool.submit_group("t", 8, "react")
    task = [rng.randrange(150_000) for _ in range(8192)]
    for t in group.trajectories:
        pool.start_trajectory(t.id)
        _append(pool, t.id, task, [rng.randrange(150_000) for _ in range(256)])
    stored = _bases_of(pool)
    first = group.trajectories[0].id
    assert stored[first, 0] == (0, None, None, None)  # the first member's prompt is stored whole ...
    assert all(stored[t.id, 0] == (8192, None, first, 0) for t in group.trajectories[1:])  # ... the others' as it
    assert all(c.prompt_ids == task for t in pool.group(group.id).trajectories for c in t.completions)
    one_prompt = 4 * (8192 + 8 * 2 * 256) / (8 * (8192 + 256))  # the prompt once, 8 outputs and their logprobs
    assert pool.stats()["bytes_per_token"] == pytest.approx(one_prompt, abs=0.001)


def test_a_root_is_only_a_completion_stored_whole(pool):
    """A prompt that extends its own trajectory's call is no root: the one hop a read makes stays one."""
    bases = pool._bases
    group = pool.submit_group("t", 2, "react")
    a, b = (t.id for t in group.trajectories)
    for tid in (a, b):
        pool.start_trajectory(tid)
    first = list(range(300))
    _append(pool, a, first, [1])
    _append(pool, a, first + [1] + list(range(300)), [2])  # a delta of a's first call: never a root
    assert bases.find(b, first + [1] + list(range(300))) == Base(0, 301, a)  # a's first call, not its second
    assert bases.find(b, list(range(255))) is None  # below min_shared_root (256): stored whole
    assert bases.find(b, list(range(256))) == Base(0, 256, a)


def test_roots_are_the_latest_within_their_bound():
    bases = PromptBases(roots=2, min_shared=3, min_shared_root=5)
    bases.add("a", 0, list(range(10)), whole=True)
    bases.add("a", 1, list(range(20)), whole=False)  # not stored whole: no root
    bases.add("b", 0, [9] * 10, whole=True)
    bases.add("c", 0, list(range(4)), whole=True)  # shorter than min_shared_root: no root
    assert bases.find("x", list(range(8))) == Base(0, 8, "a") and bases.find("x", [9] * 12) == Base(0, 10, "b")
    assert bases.find("x", list(range(4))) is None  # shares less than a root must give
    bases.forget("a")
    assert bases.find("x", list(range(8))) == Base(0, 8, "a")  # a root outlives its trajectory's end ...
    bases.add("d", 0, [7] * 10, whole=True)
    assert bases.find("x", list(range(8))) is None  # ... until newer roots push it out
    assert bases.find("d", [7] * 6) == Base(0, 6)  # a trajectory's own call: found as its own


def test_a_damaged_root_is_an_error_not_a_wrong_prompt(pool):
    group = pool.submit_group("t", 2, "react")
    a, b = (t.id for t in group.trajectories)
    for tid in (a, b):
        pool.start_trajectory(tid)
    _append(pool, a, list(range(400)), [1])
    _append(pool, b, list(range(400)), [2])
    assert _bases_of(pool)[b, 0] == (400, None, a, 0)
    with pool._tx() as cur:  # a root that is not stored whole after all
        cur.execute("UPDATE completions SET prompt_base = 0 WHERE trajectory_id = ? AND seq = 0", (a,))
    with pytest.raises(ForgeError, match=f"extends completion 0 of trajectory {a}, which is not there .* damaged"):
        pool.trajectory(b)
    with pool._tx() as cur:  # what a reader of schema 6 sees: no base, so a row read whole, and too short
        cur.execute("UPDATE completions SET prompt_root_trajectory = NULL WHERE trajectory_id = ? AND seq = 0", (b,))
    with pytest.raises(ForgeError, match="prompt has 0 ids, not the 400 recorded"):
        pool.trajectory(b)
    with pool._tx() as cur:
        cur.execute("UPDATE completions SET prompt_root_trajectory = 'nowhere' WHERE trajectory_id = ? AND seq = 0", (b,))
    with pytest.raises(ForgeError, match="extends completion 0 of trajectory nowhere"):
        pool.trajectory(b)


def test_each_groups_task_is_stored_whole_once_beside_a_shared_system_prompt(pool):
    """A root that gives less than half a prompt (only the agent's system prompt) is not used: the prompt is
    stored whole and is the root of its group's other members."""
    rng = random.Random(1)
    system = [rng.randrange(150_000) for _ in range(300)]
    for g in range(3):
        group = pool.submit_group(f"t{g}", 4, "react")
        task = system + [rng.randrange(150_000) for _ in range(4000)]
        for t in group.trajectories:
            pool.start_trajectory(t.id)
            _append(pool, t.id, task, [rng.randrange(150_000)])
        stored = [_bases_of(pool)[t.id, 0] for t in group.trajectories]
        assert stored[0] == (0, None, None, None)
        assert all(row == (4300, None, group.trajectories[0].id, 0) for row in stored[1:])
        assert all(c.prompt_ids == task for t in pool.group(group.id).trajectories for c in t.completions)


def test_concurrent_first_calls_and_a_refused_unit(pool):
    """Eight members' first calls at once (as a gateway's sessions start), group commit, and a call refused
    in the same commit: every read is what was sent, and what was refused is no root."""
    import threading

    rng = random.Random(2)
    task = [rng.randrange(150_000) for _ in range(2000)]
    group = pool.submit_group("t", 8, "react")
    done = pool.submit_group("u", 1, "react").trajectories[0].id
    pool.start_trajectory(done)
    pool.finish_trajectory(done, rewards={"outcome": 0.0})
    for t in group.trajectories:
        pool.start_trajectory(t.id)
    barrier, errors = threading.Barrier(9), []

    def member(tid, k):
        barrier.wait()
        _append(pool, tid, task, [k])
        _append(pool, tid, task + [k] + [k, k], [k])

    def refused():
        barrier.wait()
        try:
            _append(pool, done, [7] * 2000, [1])
        except ForgeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=member, args=(t.id, k)) for k, t in enumerate(group.trajectories)]
    threads.append(threading.Thread(target=refused))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive()
    assert len(errors) == 1 and "not running" in str(errors[0])
    read = {t.id: [(c.prompt_ids, c.output_ids) for c in t.completions] for t in pool.group(group.id).trajectories}
    assert read == {t.id: [(task, [k]), (task + [k, k, k], [k])] for k, t in enumerate(group.trajectories)}
    assert pool._bases.find("later", [7] * 2000) is None  # the refused call's ids were never a root
    later = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(later)
    _append(pool, later, task, [9])  # a later member finds one of theirs
    (shared, base, root, root_seq), = [v for (tid, _), v in _bases_of(pool).items() if tid == later]
    assert shared == 2000 and root in read and root_seq == 0 and base is None
    assert [c.prompt_ids for c in pool.trajectory(later).completions] == [task]


def test_a_schema_6_pool_with_deltas_takes_roots_after_its_migration(pool_spec):
    pool = open_spec(pool_spec)
    group = pool.submit_group("t", 2, "react")
    a, b = (t.id for t in group.trajectories)
    pool.start_trajectory(a)
    first = list(range(500))
    _append(pool, a, first, [1])
    _append(pool, a, first + [1, 2], [3])  # a delta of its own trajectory, as schema 6 stores it
    with pool._tx() as cur:
        for column in ("prompt_root_trajectory", "prompt_root_seq"):
            cur.execute(f"ALTER TABLE completions DROP COLUMN {column}")
        cur.execute("ALTER TABLE groups DROP COLUMN submitted_version")  # schema 8's
        cur.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    pool.close()
    pool = open_spec(pool_spec)  # migrated on open
    try:
        pool.start_trajectory(b)
        _append(pool, b, first, [4])  # this pool object never wrote a's call: stored whole, a root
        c = pool.submit_group("t", 1, "react").trajectories[0].id
        pool.start_trajectory(c)
        _append(pool, c, first + [4, 5], [6])
        stored = _bases_of(pool)
        assert stored[a, 1] == (501, 0, None, None) and stored[b, 0] == (0, None, None, None)
        assert stored[c, 0] == (501, None, b, 0)
        assert [x.prompt_ids for x in pool.trajectory(a).completions] == [first, first + [1, 2]]
        assert [x.prompt_ids for x in pool.trajectory(c).completions] == [first + [4, 5]]
    finally:
        pool.close()
