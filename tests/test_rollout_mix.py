"""Mixed-domain rollouts and the trainer's task stream: seeded suite proportions, each task with its own
suite's verifier and tools, per-suite counts, a stream resumable at any group, never a held-out task,
drawn lazily under admission (a staleness cap's too), cancelled without leaving anything running."""

from __future__ import annotations

import asyncio
from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.config import load_config
from forge_cli.errors import ForgeError
from forge_cli.rollout import driver, stream
from forge_cli.rollout.records import RolloutRequest
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.stream import CHUNK, TaskStream, check_mix, parse_mix
from forge_cli.tasks.suites import task_suite
from forge_cli.tasks.types import Outcome, Task, TaskSuite
from tests.test_rollout_driver import hanging, scripted_config
from tests.waiting import until

CHEAP = ("calc", "reasoning", "qa")  # built-in suites that draw fast (qa: a finite table)


def built_in(names):
    return {name: task_suite(name) for name in names}


def ids(pairs):
    return [(name, task.id) for name, task in pairs]


# ---- the stream, on the built-in suites -------------------------------------------------------------


def test_mixed_proportions_follow_the_weights_reproducibly():
    """4000 groups of {calc: 2, reasoning: 1, qa: 1}: the chi-square statistic against 2:1:1 stays under
    the 0.1 % critical value for 2 degrees of freedom; the same seed gives the same suites, another not."""
    weights = {"calc": 2.0, "reasoning": 1.0, "qa": 1.0}
    counts = stream.replay(weights, seed=7, upto=4000)
    expected = {name: 4000 * w / 4.0 for name, w in weights.items()}
    chi2 = sum((counts[k] - expected[k]) ** 2 / expected[k] for k in weights)
    assert chi2 < 13.82, counts
    suites = list(islice(stream.choices(weights, 7), 200))
    assert suites == list(islice(stream.choices(weights, 7), 200))
    assert suites != list(islice(stream.choices(weights, 8), 200))
    tasks = list(TaskStream(built_in(CHEAP), weights, "train", 7, count=300))
    assert [name for name, _ in tasks] == list(islice(stream.choices(weights, 7), 300))
    assert all(task.suite == name for name, task in tasks)  # each group's task is of the suite drawn for it


@settings(max_examples=25, deadline=None)
@given(first=st.integers(0, 3 * CHUNK), count=st.integers(1, 2 * CHUNK), seed=st.integers(0, 10**6),
       mixed=st.booleans())
def test_a_stream_started_at_k_is_the_tail_of_the_one_started_at_0(first, count, seed, mixed):
    """Across chunk boundaries, bounded or not, one suite or a mix (with qa's finite table among them)."""
    weights = {"calc": 2.0, "reasoning": 1.0, "qa": 1.0} if mixed else {"qa": 1.0}
    suites = built_in(weights)
    whole = ids(islice(TaskStream(suites, weights, "train", seed), first + count))
    assert ids(islice(TaskStream(suites, weights, "train", seed, first=first), count)) == whole[first:]
    assert ids(TaskStream(suites, weights, "train", seed, first=first, count=count)) == whole[first:]


def test_a_short_bounded_stream_is_what_the_suite_makes():
    """A rollout of a few groups runs what it always has: suite.make(split, n, seed); that is also the
    start of the unbounded stream (every built-in suite's n tasks are a prefix of its n + 1)."""
    from forge_cli.plugins import get_registry

    for name in sorted(get_registry().tasks):
        suite = task_suite(name)
        for split in ("train", "heldout"):
            made = [t.id for t in suite.make(split, 5, 3)]
            assert [t.id for _, t in TaskStream({name: suite}, {name: 1.0}, split, 3, count=5)] == made
            assert [t.id for _, t in islice(TaskStream({name: suite}, {name: 1.0}, split, 3), 5)] == made


def test_the_train_stream_never_meets_held_out():
    """Thousands of train tasks over many chunks and seeds: every one of the train split by its content,
    none among the held-out tasks of the same suites; qa's whole finite table shows it directly."""
    weights = {"calc": 1.0, "reasoning": 1.0, "qa": 1.0}
    suites = built_in(weights)
    qa_heldout = {t.id for t in task_suite("qa").make("heldout", 44, 0)}
    for seed in (0, 1, 12345):
        tasks = [t for _, t in islice(TaskStream(suites, weights, "train", seed), 1500)]
        assert all(t.split == "train" for t in tasks)
        assert not {t.id for t in tasks} & qa_heldout
        heldout = [t for _, t in islice(TaskStream(suites, weights, "heldout", seed), 600)]
        assert all(t.split == "heldout" for t in heldout)
        assert not {t.id for t in tasks} & {t.id for t in heldout}


def test_a_finite_suite_is_streamed_in_chunks_of_all_it_has():
    qa = task_suite("qa")
    tasks = [t for _, t in islice(TaskStream({"qa": qa}, {"qa": 1.0}, "heldout", 0), 3 * 44)]
    chunks = [tasks[i:i + 44] for i in range(0, len(tasks), 44)]
    assert all(len({t.id for t in chunk}) == 44 for chunk in chunks)  # each chunk: every held-out question once
    assert [t.id for t in chunks[0]] != [t.id for t in chunks[1]]  # in another seeded order


def test_mix_and_stream_refuse_what_is_wrong():
    assert parse_mix("calc=2, qa=1") == {"calc": 2.0, "qa": 1.0}
    assert parse_mix("calc") == {"calc": 1.0}
    for bad in ("calc=x", "=2", "", "calc=0", "calc=-1", "calc=inf"):
        with pytest.raises(ForgeError):
            parse_mix(bad)
    with pytest.raises(ForgeError, match="must be a number > 0"):
        check_mix({"calc": True})
    with pytest.raises(ForgeError, match="first_group"):
        TaskStream(built_in(["calc"]), {"calc": 1.0}, "train", 0, first=-1)
    with pytest.raises(ForgeError, match="rollout.mix.calc"):
        load_config(env={}, overrides={"rollout.mix": {"calc": 0}})
    with pytest.raises(ForgeError, match="has no train tasks"):
        empty = TaskSuite("empty", "nothing", lambda split, n, seed: [], None)  # type: ignore[arg-type]
        next(TaskStream({"empty": empty}, {"empty": 1.0}, "train", 0))


# ---- through the driver ---------------------------------------------------------------------------


class Exact:
    def verify(self, task, workdir, transcript):
        return Outcome(1.0 if (transcript.answer or "").strip() == task.answer else 0.0)


class Half:
    def verify(self, task, workdir, transcript):
        return Outcome(0.5, "beta's own verifier")


def inline_suites(asked):
    """Two suites of the driver's test loop: alpha's tasks are solved (exact match on "four"), beta's
    verifier gives 0.5 whatever; both record whose tools were asked for which task."""

    def suite(name, prompt, verifier, tasks=40):
        def make(split, n, seed):
            return [Task(id=f"{name}-{seed}-{i}", suite=name, prompt=prompt, answer="four") for i in range(min(n, tasks))]

        def tools(task, workdir):
            asked.append((name, task.id))
            return ()

        return TaskSuite(name, f"{name} tasks", make, verifier, tools)

    return {"alpha": suite("alpha", "two plus two", Exact()), "beta": suite("beta", "what is it", Half()),
            "hang": suite("hang", "two plus two, then hang", Exact())}


@pytest.fixture
def configure(fake_dist, tiny_model, tmp_path, monkeypatch):
    make = scripted_config(fake_dist, tiny_model, tmp_path)
    asked: list[tuple[str, str]] = []
    suites = inline_suites(asked)

    def resolve(name, verifier, registry):  # the seam: which tasks exist
        if name not in suites:
            raise ForgeError(f"no task suite named {name!r} (registered: {', '.join(sorted(suites))})")
        return suites[name]

    monkeypatch.setattr(driver, "resolve_suite", resolve)
    make.asked = asked
    make.suites = suites
    return make


def test_a_mixed_rollout_keeps_each_suites_verifier_and_tools_and_counts_per_suite(configure, tmp_path):
    config = configure()
    weights = {"alpha": 1.0, "beta": 1.0}
    request = RolloutRequest(scaffold="one-call", suite="unused", mix=weights, groups=12, n=2, concurrency=4, seed=5,
                             first_group=3)
    seen = []
    summary = asyncio.run(rollout(config, request, run="r", on_progress=lambda p: seen.append(p)))
    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    groups = sorted(pool.groups(), key=lambda g: g.queue_index)
    expected = ids(TaskStream({k: configure.suites[k] for k in weights}, weights, "train", 5, first=3, count=12))
    assert [g.task_id for g in groups] == [task_id for _, task_id in expected]  # the stream's tasks, in its order
    suite_of = dict((task_id, name) for name, task_id in expected)
    per_suite: dict[str, list[int]] = {}
    for g in groups:
        for t in g.trajectories:
            t = pool.trajectory(t.id)
            outcome = t.rewards["outcome"]
            assert outcome == (1.0 if suite_of[g.task_id] == "alpha" else 0.5)  # its own suite's verifier judged it
            solved, ended = per_suite.setdefault(suite_of[g.task_id], [0, 0])
            per_suite[suite_of[g.task_id]] = [solved + (outcome >= 1.0), ended + 1]
    assert summary.by_suite == {name: tuple(v) for name, v in per_suite.items()}
    progress = seen[-1]
    assert {k: (c.solved, c.finished) for k, c in progress.by_suite.items()} == summary.by_suite
    assert progress.total == 24 and progress.finished == 24
    assert summary.suite == "alpha=1, beta=1"
    rows = dict(summary.rows())
    solved, ended = per_suite["beta"]
    assert rows["success on beta"] == f"{solved / ended:.1%}  ({solved}/{ended})"
    assert {(suite_of[task_id], task_id) for _, task_id in configure.asked} == set(configure.asked)  # own tools
    assert {task_id for _, task_id in configure.asked} == set(suite_of)
    pool.close()


def test_an_unknown_suite_in_the_mix_names_the_registered_ones(configure):
    config = configure()
    with pytest.raises(ForgeError, match=r"no task suite named 'nope' \(registered: alpha, beta, hang\)"):
        asyncio.run(rollout(config, RolloutRequest(scaffold="one-call", suite="x", mix={"alpha": 1.0, "nope": 2.0})))
    with pytest.raises(ForgeError, match="needs a consumer"):
        asyncio.run(rollout(config, RolloutRequest(scaffold="one-call", suite="alpha", groups=None)))


# ---- a mix of scaffolds ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(weights=st.dictionaries(st.sampled_from("abcdefg"), st.floats(0.05, 20.0), min_size=1, max_size=7),
       first=st.integers(0, 200))
def test_scaffold_turns_keep_the_weights_in_every_prefix_and_resume_at_any_group(weights, first):
    """Each scaffold's count after g groups is within 2 of g × its share, for every g; a stream of turns
    started at group k is the tail of the one started at 0; equal weights are a plain round robin."""
    total = sum(weights.values())
    whole = list(islice(stream.turns(weights), first + 150))
    counts = dict.fromkeys(weights, 0)
    for g, name in enumerate(whole, 1):
        counts[name] += 1
        assert all(abs(counts[n] - g * w / total) < 2 for n, w in weights.items()), (g, counts)
    assert list(islice(stream.turns(weights, first), 150)) == whole[first:]
    even = dict.fromkeys(weights, 1.0)
    for start in range(0, 60, len(even)):  # every block of len(even) groups has each scaffold once
        assert sorted(islice(stream.turns(even, start), len(even))) == sorted(even)


def test_a_rollout_over_a_scaffold_mix_runs_each_group_in_its_turns_scaffold(configure, tmp_path):
    """{one-call: 1, react: 2} from group 3 on: each group in the scaffold of its turn (the pool's group
    and trajectories say so, each with its own tool format), success counted per scaffold."""
    from forge_cli.pool.store import DataPool

    config = configure()
    mix = {"one-call": 1.0, "react": 2.0}
    request = RolloutRequest(scaffold="unused", suite="alpha", scaffold_mix=mix, groups=9, n=2, concurrency=4,
                             first_group=3)
    summary = asyncio.run(rollout(config, request, run="r"))
    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    groups = sorted(pool.groups(), key=lambda g: g.queue_index)
    expected = list(islice(stream.turns(mix, 3), 9))
    ran = [[pool.trajectory(t.id) for t in g.trajectories] for g in groups]
    assert [{t.scaffold for t in group} for group in ran] == [{name} for name in expected] and set(expected) == set(mix)
    formats: dict[str, set[str]] = {"one-call": set(), "react": set()}
    for group in ran:
        for t in group:
            assert t.status == "completed"
            formats[t.scaffold].update(c.tool_format for c in t.completions)
    assert formats == {"one-call": {"hermes"}, "react": {"react"}}  # one-call names none: the gateway's default
    assert {name: ended for name, (_, ended) in summary.by_scaffold.items()} == {
        name: 2 * expected.count(name) for name in mix}
    assert summary.scaffold == "one-call=1, react=2"
    assert {"success in one-call", "success in react"} <= set(dict(summary.rows()))
    pool.close()


def test_a_scaffold_mix_refuses_what_is_wrong(configure, cli):
    config = configure()
    with pytest.raises(ForgeError, match="nope"):
        asyncio.run(rollout(config, RolloutRequest(scaffold="x", suite="alpha", scaffold_mix={"one-call": 1.0, "nope": 1.0})))
    with pytest.raises(ForgeError, match="scaffold mix weight of 'react'"):
        asyncio.run(rollout(config, RolloutRequest(scaffold="x", suite="alpha", scaffold_mix={"react": -1.0})))
    both = cli("rollout", "--scaffold", "react", "--scaffold-mix", "react=1,aider=1")
    assert both.exit_code == 1 and "--scaffold and --scaffold-mix exclude each other" in both.stderr
    bad = cli("train", "--scaffold-mix", "react=x")
    assert bad.exit_code == 1 and "--scaffold-mix expects SCAFFOLD=WEIGHT" in bad.stderr
    with pytest.raises(ForgeError, match="rollout.scaffold_mix.react"):
        load_config(env={}, overrides={"rollout.scaffold_mix": {"react": 0}})


class CountingStream(TaskStream):
    drawn = 0

    def __next__(self):
        CountingStream.drawn += 1
        return super().__next__()


def count_refusals(monkeypatch) -> list[str]:
    """The task ids whose submission the pool's admission bound refused (PoolFull), as they happen."""
    from forge_cli.pool.scheduler import Scheduler
    from forge_cli.pool.store import PoolFull

    refused: list[str] = []
    real = Scheduler.submit

    def submit(self, pool, task_id, *args, **kwargs):
        try:
            return real(self, pool, task_id, *args, **kwargs)
        except PoolFull:
            refused.append(task_id)
            raise

    monkeypatch.setattr(Scheduler, "submit", submit)
    return refused


def consume_nothing(config, request, monkeypatch, settled):
    """An unbounded consumer-mode rollout that nobody takes from, cancelled once ``settled(pool, refused)``
    holds (``refused``: how many submissions the pool's bound has refused so far); the pool's groups and
    trajectories, read back."""
    from forge_cli.gateway.server import serve_gateway

    refused = count_refusals(monkeypatch)

    async def main():
        async with serve_gateway(config, "r") as gw:
            task = asyncio.create_task(rollout(config, request, gateway=gw, consumer=True))
            await until(lambda: settled(gw.pool, len(refused)), what="the rollout to stand at its admission bound")
            alive = len([t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == driver._Rollout.group.__qualname__])
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            groups = gw.pool.groups()
            return alive, groups, [gw.pool.trajectory(t.id) for g in groups for t in g.trajectories]

    return asyncio.run(main())


def test_an_unbounded_stream_is_drawn_lazily_and_a_cancel_interrupts_it(configure, monkeypatch):
    """Nobody consumes: the stream stops at the admission bound (3 groups exist, the 4th task waits), and
    the cancel fails every trajectory it started as interrupted."""
    monkeypatch.setattr(driver, "TaskStream", CountingStream)  # the name the driver draws its tasks with
    CountingStream.drawn = 0
    config = configure(**{"pool.max_active_groups": 3})
    request = RolloutRequest(scaffold="one-call", suite="hang", groups=None, n=2, concurrency=8)
    # settled: the 4th task's group was refused, and the 3 admitted groups' 6 trajectories hang after their call
    alive, groups, trajectories = consume_nothing(config, request, monkeypatch,
                                                  lambda pool, refused: refused and len(hanging()) == 6)
    assert len(groups) == 3 and alive == 3
    assert CountingStream.drawn == 4  # the next task is drawn, and waits for a slot
    assert len(trajectories) == 6 and all(t.status == "failed" and t.error == "interrupted" for t in trajectories)


def test_the_consumer_submits_under_the_staleness_cap(configure, monkeypatch):
    """bounded_staleness with S = 1 and P = 2 admits (S + 1)·P = 4 groups before any step, not N = 16;
    groups that finish stay counted until the trainer takes them."""
    config = configure(**{"pool.scheduler.type": "bounded_staleness", "pool.scheduler.max_head_offpolicyness": 1,
                          "train.groups_per_step": 2, "pool.max_active_groups": 16})
    request = RolloutRequest(scaffold="one-call", suite="alpha", groups=None, n=1, concurrency=8)
    finished_at: list[int] = []  # the refusals counted when every admitted group had finished

    def settled(pool, refused):
        """A submission refused after the admitted groups all finished: finished ones still count."""
        groups = pool.groups()
        if not finished_at:
            if groups and all(t.status.terminal for g in groups for t in g.trajectories) and len(groups) >= 4:
                finished_at.append(refused)
            return False
        return refused > finished_at[0]

    _, groups, trajectories = consume_nothing(config, request, monkeypatch, settled)
    assert len(groups) == 4
    assert all(t.status == "completed" for t in trajectories)


def test_the_consumer_reads_the_served_version_from_the_pool(configure, monkeypatch):
    """bounded_staleness's admission needs the version the engine serves and the head's submission version:
    the driver reads the one the trainer published into the pool (a gateway, in this process or not, does not
    hand it the engine). S = 1, P = 2: 4 groups at version 0; once the trainer publishes 1 and takes 2, the
    head is 1 version old and nothing more is admitted; once it publishes 2 and takes the other 2, 4 more are,
    recorded at version 2. (Each version is published before its take: between a take and a later publish the
    driver may rightly admit a group at the old version, a race the test would lose on a loaded machine.)"""
    from forge_cli.gateway.server import serve_gateway
    from forge_cli.pool.scheduler import Scheduler

    config = configure(**{"pool.scheduler.type": "bounded_staleness", "pool.scheduler.max_head_offpolicyness": 1,
                          "train.groups_per_step": 2, "pool.max_active_groups": 16})
    request = RolloutRequest(scaffold="one-call", suite="alpha", groups=None, n=1, concurrency=8)
    refused = count_refusals(monkeypatch)
    scheduler = Scheduler.from_config(config.pool, 2)

    def finished(pool, count):
        groups = pool.groups()
        return len(groups) >= count and all(t.status.terminal for g in groups for t in g.trajectories)

    async def main():
        async with serve_gateway(config, "r") as gw:
            task = asyncio.create_task(rollout(config, request, gateway=gw, consumer=True))
            try:
                await until(lambda: finished(gw.pool, 4) and refused, what="4 groups at version 0, the 5th refused")
                gw.pool.publish_version(1)
                assert [g.queue_index for g in (await asyncio.to_thread(scheduler.take, gw.pool, 0)).groups] == [0, 1]
                seen = len(refused)
                await until(lambda: len(refused) > seen + 2, what="submissions refused at version 1")
                assert len(gw.pool.groups()) == 4  # the head (version 0) is 1 old: (1 + 1 - 1)·2 = 2 in flight, held
                gw.pool.publish_version(2)  # the head is 2 old: nothing is admitted until the take
                assert [g.queue_index for g in (await asyncio.to_thread(scheduler.take, gw.pool, 1)).groups] == [2, 3]
                await until(lambda: finished(gw.pool, 8), what="4 more groups at version 2")
                assert len(gw.pool.groups()) == 8
                with gw.pool._read() as cur:
                    versions = [v for (v,) in cur.all("SELECT submitted_version FROM groups ORDER BY queue_index")]
                assert versions == [0, 0, 0, 0, 2, 2, 2, 2]
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
