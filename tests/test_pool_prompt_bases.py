"""A prompt stored as the earlier completion it extends plus its new ids (schema 6,
forge_cli/pool/prompt_bases.py): every read gives back exactly what was appended, on random agent
histories — prompts that extend the last call, that drift from it, that cut it short, that start over,
several agents in one trajectory, several answers to one prompt, two writers on one trajectory."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.pool.prompt_bases import Base, PromptBases
from forge_cli.pool.types import NewCompletion
from forge_cli.token_ids import common_prefix
from tests.conftest import open_spec

STEP = st.tuples(
    st.sampled_from(["extend", "extend", "extend", "drift", "cut", "fresh", "answers"]),
    st.integers(0, 1),     # which agent of the trajectory
    st.integers(0, 1),     # which of two pool objects writes it
    st.integers(0, 2**32 - 1),  # the step's own randomness
)


def _calls(steps, rng_seed):
    """(writer, [NewCompletion-making (prompt, output) pairs]) per step, as an agent's history makes them."""
    last: dict[int, list[int]] = {}
    out = []
    for kind, agent, writer, seed in steps:
        rng = random.Random(seed ^ rng_seed)
        def fresh(n):
            return [rng.randrange(6) for _ in range(n)]  # a small alphabet: accidental matches happen
        before = last.get(agent)
        if before is None or kind == "fresh":
            prompt = fresh(rng.randrange(1, 160))
        elif kind == "extend" or kind == "answers":
            prompt = before + fresh(rng.randrange(0, 40))
        elif kind == "drift":  # a template that renders an earlier turn otherwise
            prompt = list(before)
            at = rng.randrange(len(prompt))
            prompt[at] = (prompt[at] + 1) % 6
            prompt += fresh(rng.randrange(0, 40))
        else:  # "cut": a context policy that dropped the end and went on
            prompt = before[: rng.randrange(0, len(before) + 1)] + fresh(rng.randrange(1, 40))
        outputs = [fresh(rng.randrange(1, 30)) for _ in range(rng.randrange(2, 4) if kind == "answers" else 1)]
        last[agent] = prompt + outputs[0]
        out.append((writer, f"agent-{agent}", prompt, outputs))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=14), seed=st.integers(0, 2**32 - 1))
def test_every_read_is_what_was_appended(pool_spec, steps, seed):
    writers = [open_spec(pool_spec), open_spec(pool_spec)]  # each with its own memory of what it wrote
    try:
        tid = writers[0].submit_group("t", 1, "react").trajectories[0].id
        writers[0].start_trajectory(tid)
        sent = []
        for writer, agent, prompt, outputs in _calls(steps, seed):
            made = writers[writer].append_completions([
                NewCompletion(tid, prompt_ids=list(prompt), output_ids=out, output_logprobs=[-0.5] * len(out),
                              policy_version=0, agent=agent) for out in outputs])
            assert [(c.prompt_ids, c.output_ids) for c in made] == [(prompt, out) for out in outputs]
            sent += [(prompt, out, agent) for out in outputs]
        for reader in (writers[1], open_spec(pool_spec)):
            read = reader.trajectory(tid).completions
            assert [(c.prompt_ids, c.output_ids, c.agent) for c in read] == sent
        with writers[0]._read() as cur:  # nothing is stored twice where a prompt extends what was sent before
            shared = cur.all("SELECT prompt_shared, prompt_base, seq FROM completions WHERE trajectory_id = ?", (tid,))
        assert all(base is None or (base < seq and n >= 32) for n, base, seq in shared)
    finally:
        for w in writers:
            w.close()


def _turns(pool, tid, prompts_outputs):
    for prompt, output in prompts_outputs:
        pool.append_completion(NewCompletion(tid, prompt_ids=prompt, output_ids=output,
                                             output_logprobs=[-1.0] * len(output), policy_version=0))


def _stored_prompt_ids(pool, tid):
    with pool._read() as cur:
        return [(n // 4, shared, base) for n, shared, base in cur.all(
            "SELECT LENGTH(prompt_ids), prompt_shared, prompt_base FROM completions WHERE trajectory_id = ? ORDER BY seq", (tid,))]


def test_an_agents_turns_store_only_their_new_ids(pool):
    rng = random.Random(0)
    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    prompt, turns = [rng.randrange(150_000) for _ in range(3000)], []
    for _ in range(4):
        output = [rng.randrange(150_000) for _ in range(50)]
        turns.append((prompt, output))
        prompt = prompt + output + [rng.randrange(150_000) for _ in range(100)]  # the tool's result
    _turns(pool, tid, turns)
    assert _stored_prompt_ids(pool, tid) == [(3000, 0, None), (100, 3050, 0), (100, 3200, 1), (100, 3350, 2)]
    assert [c.prompt_ids for c in pool.trajectory(tid).completions] == [p for p, _ in turns]
    assert pool.stats()["bytes_per_token"] < 1.5  # (3,300 + 4 x 50 x 2) x 4 bytes for 13,800 tokens


def test_n_answers_to_one_prompt_store_it_once(pool):
    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    prompt = list(range(500))
    made = pool.append_completions([NewCompletion(tid, prompt_ids=prompt, output_ids=[7, i], output_logprobs=[-1.0, -1.0],
                                                  policy_version=0) for i in range(3)])
    assert [c.seq for c in made] == [0, 1, 2]
    assert _stored_prompt_ids(pool, tid) == [(500, 0, None), (0, 500, 0), (0, 500, 0)]
    assert [c.prompt_ids for c in pool.trajectory(tid).completions] == [prompt] * 3


def test_a_refused_completion_leaves_nothing_behind_to_extend(pool):
    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    _turns(pool, tid, [(list(range(100)), [1, 2])])
    for bad in ([-1], [2**31], ["7"], [1.5]):  # after a shared prefix, the new ids are checked as any
        with pytest.raises(ForgeError, match="prompt_ids"):
            _turns(pool, tid, [(list(range(100)) + [1, 2] + bad, [3])])
    with pytest.raises(ForgeError, match="one value per output id"):  # refused after its base was found
        pool.append_completion(NewCompletion(tid, prompt_ids=list(range(100)) + [1, 2, 5], output_ids=[3],
                                             output_logprobs=[], policy_version=0))
    other = pool.submit_group("t", 1, "react").trajectories[0].id  # queued, not running: refused in the transaction
    with pytest.raises(ForgeError, match="not running"):
        _turns(pool, other, [(list(range(100)), [1, 2])])
    _turns(pool, tid, [(list(range(100)) + [1, 2, 9], [4])])
    assert [c.prompt_ids[-1] for c in pool.trajectory(tid).completions] == [99, 9]
    assert _stored_prompt_ids(pool, tid)[1] == (1, 102, 0)
    assert pool._bases.find(other, list(range(100))) is None  # what was refused was never remembered


def test_shared_ids_are_compared_by_value_and_stored_as_the_earlier_calls(pool):
    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    first, output = list(range(100)), [1, 2]
    made = pool.append_completion(NewCompletion(tid, prompt_ids=first, output_ids=output, output_logprobs=[-1.0, -1.0],
                                                policy_version=0))
    first[50] = made.prompt_ids[60] = 999  # the caller's lists, changed after the call: nothing the pool kept
    as_floats = [float(x) for x in range(100)] + [True, 2.0] + [5]  # equal to the ids before: the same ids
    _turns(pool, tid, [(as_floats, [3])])
    with pytest.raises(ForgeError, match="prompt_ids must be a list of integers"):  # a new id is checked as any
        _turns(pool, tid, [(list(range(100)) + [1, 2, 7.0], [3])])
    read = [c.prompt_ids for c in pool.trajectory(tid).completions]
    assert read == [list(range(100)), list(range(100)) + [1, 2, 5]] and {type(x) for x in read[1]} == {int}
    assert _stored_prompt_ids(pool, tid)[1] == (1, 102, 0)
    with pytest.raises(ForgeError, match="append_completion takes a NewCompletion"):
        pool.append_completions([NewCompletion(tid, prompt_ids=list(range(100)), output_ids=[1], output_logprobs=[-1.0],
                                               policy_version=0), "a completion"])
    assert len(pool.trajectory(tid).completions) == 2


def test_a_finished_trajectory_is_forgotten(pool):
    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    _turns(pool, tid, [(list(range(100)), [1, 2])])
    assert pool._bases.find(tid, list(range(100)) + [1]) == Base(0, 101)
    pool.finish_trajectory(tid, rewards={"outcome": 1.0})
    assert pool._bases.find(tid, list(range(100))) is None and pool._bases.tokens == 0


def test_a_damaged_base_is_an_error_not_a_wrong_prompt(pool):
    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    _turns(pool, tid, [(list(range(100)), [1, 2]), (list(range(100)) + [1, 2, 3], [4])])
    with pool._tx() as cur:
        cur.execute("UPDATE completions SET prompt_base = 5 WHERE trajectory_id = ? AND seq = 1", (tid,))
    with pytest.raises(ForgeError, match="extends completion 5 .* the pool is damaged"):
        pool.trajectory(tid)
    with pool._tx() as cur:
        cur.execute("UPDATE completions SET prompt_base = 0, prompt_shared = 90 WHERE trajectory_id = ? AND seq = 1", (tid,))
    with pytest.raises(ForgeError, match="has 91 ids, not the 103 recorded: the pool is damaged"):
        pool.trajectory(tid)


def test_prompt_bases_keep_the_latest_within_their_bounds():
    bases = PromptBases(max_tokens=250, per_trajectory=2, min_shared=3)
    bases.add("a", 0, list(range(100)))
    bases.add("a", 1, list(range(50)) + [7] * 50)
    assert bases.find("a", list(range(60))) == Base(0, 60)  # the longest, not merely the latest
    assert bases.find("a", list(range(50)) + [7, 7]) == Base(1, 52)
    assert bases.find("a", [1, 2, 3]) is None  # shares less than min_shared
    bases.add("a", 2, list(range(10)))  # the third: the oldest goes
    assert bases.find("a", list(range(60))) == Base(1, 50) and bases.tokens == 110
    bases.add("b", 0, list(range(100)))
    bases.add("c", 0, list(range(100)))  # 310 > 250: "a", the least recently used, goes whole
    assert bases.find("a", list(range(10))) is None and bases.tokens == 200
    bases.add("d", 0, list(range(300)))  # larger than the bound alone: not kept
    assert bases.find("d", list(range(300))) is None and bases.tokens == 200
    bases.forget("b")
    assert bases.tokens == 100 and bases.find("c", list(range(5))) == Base(0, 5)


@settings(max_examples=300, deadline=None)
@given(a=st.lists(st.integers(0, 3), max_size=300), tail=st.lists(st.integers(0, 3), max_size=300),
       cut=st.integers(0, 300), start=st.integers(0, 40), shared_objects=st.booleans())
def test_common_prefix_is_the_plain_loops(a, tail, cut, start, shared_objects):
    head = a[:cut] if shared_objects else [int(str(x)) for x in a[:cut]]  # the same int objects, or equal ones
    b = [7] * start + head + tail
    plain = 0
    while plain < min(len(a), len(b) - start) and a[plain] == b[start + plain]:
        plain += 1
    assert common_prefix(a, b, start) == plain
    assert common_prefix(b[start:], a) == plain


def test_threads_appending_to_one_trajectory_extend_each_others_calls(pool):
    """Six threads record calls of one trajectory at once (group commit), each prompt extending a call
    another thread may have just made: every row read back is what its call sent."""
    import threading

    tid = pool.submit_group("t", 1, "react").trajectories[0].id
    pool.start_trajectory(tid)
    fulls, lock, sent = [list(range(200))], threading.Lock(), {}

    def writer(seed):
        rng = random.Random(seed)
        for _ in range(10):
            with lock:
                before = rng.choice(fulls)
            prompt = before[: rng.randrange(len(before) // 2, len(before) + 1)] + [rng.randrange(50) for _ in range(20)]
            output = [rng.randrange(50) for _ in range(5)]
            made = pool.append_completion(NewCompletion(tid, prompt_ids=list(prompt), output_ids=output,
                                                        output_logprobs=[-1.0] * 5, policy_version=0))
            with lock:
                fulls.append(prompt + output)
                sent[made.seq] = (prompt, output)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive()
    read = pool.trajectory(tid).completions
    assert [(c.prompt_ids, c.output_ids) for c in read] == [sent[i] for i in range(60)]
    assert sum(base is not None for _, _, base in _stored_prompt_ids(pool, tid)) > 30  # most were stored as deltas
