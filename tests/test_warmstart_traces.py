"""The warm start's synthetic traces: the calc teacher's slips (``[train.warmstart] teacher_slips``) —
which tasks slip, where, and that the warm start then learns every finished trace, right or wrong —
and scripted policies that take keyword arguments (``module:function?key=value``)."""

from __future__ import annotations

import asyncio
import json
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_cli.config import load_config
from forge_cli.engine.default_model import EMBEDDED_SCAFFOLD_OPTIONS
from forge_cli.engine.scripted import load_policy
from forge_cli.errors import ForgeError
from forge_cli.tasks.calc import generate
from forge_cli.tasks.calculator import calculate
from forge_cli.tasks.demo_policies import (MAX_RECHECKS, WARMUP_EXPRESSION, calc, calc_expression, policy_for,
                                          recheck_count, slip)


def turns(policy, prompt: str) -> tuple[str, str, str]:
    """The expression of the policy's tool call, the calculator's result of it, and the policy's answer to that."""
    messages = [{"role": "user", "content": prompt}]
    call = policy({"messages": messages})
    expression = json.loads(re.search(r"\{.*\}", call, re.S).group(0))["arguments"]["expression"]
    result = calculate(expression)
    answer = policy({"messages": messages + [{"role": "assistant", "content": call}, {"role": "tool", "content": result}]})
    return expression, result, answer


@pytest.mark.parametrize("seed", range(40))
def test_a_slip_changes_exactly_one_digit_and_keeps_a_number(seed):
    rng = random.Random(seed)
    text = rng.choice(["347 + 1234", "-5667", "8", "(12 * 3) - 9999", "1000"])
    slipped = slip(text, random.Random(seed + 1000))
    diff = [(a, b) for a, b in zip(text, slipped) if a != b]
    assert len(slipped) == len(text) and len(diff) == 1 and diff[0][1].isdigit()
    for number in re.findall(r"\d+", slipped):
        assert not number.startswith("0") or number in re.findall(r"\d+", text)  # no leading zero, no new 0


def test_the_teachers_slips_land_on_their_share_of_tasks_the_same_way_on_both_turns():
    prompts = [generate(random.Random(i), 1).prompt for i in range(2000)]
    clean = [turns(calc, p) for p in prompts]
    sloppy = [turns(lambda c: calc(c, slips=0.3, seed=7), p) for p in prompts]
    in_expression = sum(s[0] != c[0] for s, c in zip(sloppy, clean))
    in_answer = sum(s[0] == c[0] and s[2] != s[1] for s, c in zip(sloppy, clean))
    assert all(c[0] == calc_expression(p) and c[1] == c[2] for c, p in zip(clean, prompts))  # no slips: exact
    assert abs(in_expression / 2000 - 0.2) < 0.03 and abs(in_answer / 2000 - 0.1) < 0.025
    assert all(s[1] == s[2] for s, c in zip(sloppy, clean) if s[0] != c[0])  # a miscopied call: its result answered
    again = [turns(lambda c: calc(c, slips=0.3, seed=7), p) for p in prompts[:200]]
    other = [turns(lambda c: calc(c, slips=0.3, seed=8), p) for p in prompts[:200]]
    assert again == sloppy[:200] and other != sloppy[:200]  # reproducible, and the seed decides


def episode(policy, prompt: str) -> tuple[list[str], str]:
    """The expressions of every calculator call the policy makes on ``prompt``, and its answer."""
    messages, calls = [{"role": "user", "content": prompt}], []
    for _ in range(10):
        out = policy({"messages": messages})
        if "<tool_call>" not in out:
            return calls, out
        calls.append(json.loads(re.search(r"\{.*\}", out, re.S).group(0))["arguments"]["expression"])
        messages += [{"role": "assistant", "content": out}, {"role": "tool", "content": calculate(calls[-1])}]
    raise AssertionError("the teacher never answered")


def test_the_teacher_rechecks_with_the_same_call_as_often_as_drawn_and_still_answers_what_it_got():
    """``rechecks`` r: one re-check with chance r, a second after it with chance r (at most two), each the
    same call again; the answer is the result it had (its slips unchanged); reproducible per task and seed."""
    prompts = [generate(random.Random(i), 1).prompt for i in range(3000)]
    plain = [episode(lambda c: calc(c, slips=0.3, seed=7), p) for p in prompts]
    slow = [episode(lambda c: calc(c, slips=0.3, seed=7, rechecks=0.6), p) for p in prompts]
    counts = [len(calls) - 1 for calls, _ in slow]
    assert all(len(calls) == 1 for calls, _ in plain) and max(counts) == MAX_RECHECKS == 2
    share = {k: counts.count(k) / len(counts) for k in range(3)}
    assert abs(share[0] - 0.4) < 0.03 and abs(share[1] - 0.24) < 0.03 and abs(share[2] - 0.36) < 0.03, share
    assert all(set(calls) == set(p_calls) and answer == p_answer
               for (calls, answer), (p_calls, p_answer) in zip(slow, plain))  # the same call, the same answer
    assert all(counts[i] == recheck_count(p, 0.6, seed=7) for i, p in enumerate(prompts[:300]))
    assert [episode(lambda c: calc(c, rechecks=0.6, seed=8), p)[0] for p in prompts[:300]] != [s[0] for s in slow[:300]]


def test_the_teachers_warm_ups_come_first_are_never_used_and_leave_room_for_the_answer():
    """``warmups`` w: the teacher first calls the calculator on 1+1 (once with chance w, again with chance w,
    at most two), then does exactly what it does without them (the same call, slips and answer); with
    re-checks too, warm-ups and re-checks are at most two in all, so a trace fits max_turns 5; reproducible."""
    prompts = [generate(random.Random(i), 1).prompt for i in range(3000)]
    plain = [episode(lambda c: calc(c, slips=0.3, seed=7), p) for p in prompts]
    warm = [episode(lambda c: calc(c, slips=0.3, seed=7, warmups=0.7), p) for p in prompts]
    counts = [recheck_count(p, 0.7, seed=7, habit="warmup") for p in prompts]
    for (calls, answer), (p_calls, p_answer), n in zip(warm, plain, counts):
        assert calls == [WARMUP_EXPRESSION] * n + p_calls and answer == p_answer
    share = {k: counts.count(k) / len(counts) for k in range(3)}
    assert abs(share[0] - 0.3) < 0.03 and abs(share[1] - 0.21) < 0.03 and abs(share[2] - 0.49) < 0.03, share
    both = [episode(lambda c: calc(c, seed=7, rechecks=0.6, warmups=0.7), p) for p in prompts]
    extra = [len(calls) - 1 for calls, _ in both]
    assert max(extra) == MAX_RECHECKS and EMBEDDED_SCAFFOLD_OPTIONS["tool-call"]["max_turns"] >= MAX_RECHECKS + 2
    for (calls, _), n, p in zip(both, counts, prompts):  # the warm-ups first, then the re-checks that fit
        assert len(calls) == 1 + n + min(recheck_count(p, 0.6, seed=7), MAX_RECHECKS - n) and calls[:n] == [WARMUP_EXPRESSION] * n
    assert any(calls.count(WARMUP_EXPRESSION) == 1 and len(calls) == 3 for calls, _ in both)  # one of each
    assert policy_for({"calc-1": 1.0}, warmups=0.7, seed=2).endswith(":calc?warmups=0.7&seed=2")


def test_a_costlier_warm_up_habit_makes_up_to_three_and_still_answers_within_five_turns():
    """``max_warmups`` 3: the same draw goes on to a third warm-up (the first two as with the cap of two),
    re-checks only fill what is left of three extra calls, the real call and the answer still come, a trace
    fits max_turns 5; the reference names the cap only where it is not the default; 4 is refused."""
    prompts = [generate(random.Random(i), 1).prompt for i in range(3000)]
    plain = [episode(lambda c: calc(c, slips=0.3, seed=7), p) for p in prompts]
    costly = [episode(lambda c: calc(c, slips=0.3, seed=7, warmups=0.8, max_warmups=3), p) for p in prompts]
    counts = [recheck_count(p, 0.8, seed=7, habit="warmup", most=3) for p in prompts]
    for (calls, answer), (p_calls, p_answer), n, p in zip(costly, plain, counts, prompts):
        assert calls == [WARMUP_EXPRESSION] * n + p_calls and answer == p_answer
        assert min(n, 2) == recheck_count(p, 0.8, seed=7, habit="warmup")  # the cap of two: the same draw, cut
    share = {k: counts.count(k) / len(counts) for k in range(4)}
    assert abs(share[0] - 0.2) < 0.03 and abs(share[1] - 0.16) < 0.03 and abs(share[2] - 0.128) < 0.03 \
        and abs(share[3] - 0.512) < 0.03, share
    both = [episode(lambda c: calc(c, seed=7, rechecks=0.6, warmups=0.8, max_warmups=3), p) for p in prompts]
    assert max(len(calls) - 1 for calls, _ in both) == 3 <= EMBEDDED_SCAFFOLD_OPTIONS["tool-call"]["max_turns"] - 2
    for (calls, _), n, p in zip(both, counts, prompts):
        assert len(calls) == 1 + n + min(recheck_count(p, 0.6, seed=7), 3 - n) and calls[:n] == [WARMUP_EXPRESSION] * n
    assert policy_for({"calc-1": 1.0}, warmups=0.8, max_warmups=3, seed=2).endswith(":calc?warmups=0.8&max_warmups=3&seed=2")
    assert policy_for({"calc-1": 1.0}, warmups=0.8, seed=2).endswith(":calc?warmups=0.8&seed=2")
    assert policy_for({"calc-1": 1.0}, max_warmups=3, seed=2).endswith(":calc")  # no warm-ups: nothing to cap
    assert policy_for({"calc-1": 1.0}, warmups=0.8, max_warmups=0, seed=2).endswith(":calc?warmups=0.8&max_warmups=0&seed=2")
    assert [episode(load_policy(policy_for({"calc-1": 1.0}, warmups=0.8, max_warmups=0, seed=7)), p) for p in prompts[:50]] \
        == plain_answers(prompts[:50], seed=7)  # a cap of 0: no warm-ups at all
    for bad in (4, 2.5, True):
        with pytest.raises(ForgeError, match="0 to 3 warm-up calls"):
            calc({"messages": [{"role": "user", "content": prompts[0]}]}, warmups=0.8, max_warmups=bad)


def plain_answers(prompts: list[str], seed: int) -> list:
    """The calc teacher's calls and answer on each of ``prompts`` without any habit or slip."""
    return [episode(lambda c: calc(c, seed=seed), p) for p in prompts]


def test_policy_references_carry_keyword_arguments_and_refuse_unknown_ones():
    spec = policy_for({"calc-1": 1.0}, slips=0.25, seed=3)
    assert spec == "forge_cli.tasks.demo_policies:calc?slips=0.25&seed=3"
    assert policy_for({"calc-1": 1.0}) == "forge_cli.tasks.demo_policies:calc"
    assert policy_for({"kv-search": 1.0}, slips=0.25) == "forge_cli.tasks.demo_policies:kv_search"  # calc's only
    assert policy_for({"calc": 1.0, "kv-search": 1.0}, slips=0.25).endswith(":by_tools?slips=0.25&seed=0")
    assert policy_for({"calc-1": 1.0}, rechecks=0.5, seed=2).endswith(":calc?rechecks=0.5&seed=2")
    assert episode(load_policy(policy_for({"calc-1": 1.0}, rechecks=0.9, seed=2)), generate(random.Random(3), 1).prompt) == \
        episode(lambda c: calc(c, rechecks=0.9, seed=2), generate(random.Random(3), 1).prompt)
    loaded = load_policy(spec)
    prompt = generate(random.Random(5), 1).prompt
    assert turns(loaded, prompt) == turns(lambda c: calc(c, slips=0.25, seed=3), prompt)
    with pytest.raises(ForgeError, match="takes no noise"):
        load_policy("forge_cli.tasks.demo_policies:calc?noise=1")
    with pytest.raises(ForgeError, match="takes no context"):  # the request is the policy's own first argument
        load_policy("forge_cli.tasks.demo_policies:calc?context=1")


@pytest.mark.parametrize("slips", [0.0, 0.5])
def test_the_warm_start_learns_every_finished_trace_of_a_slipping_teacher(tiny_model, tmp_path, slips):
    """Through a real scripted gateway, scaffold and calculator: without slips every trace solves its task;
    with them the wrong ones are learned too (an imperfect teacher's data is not sorted by the verifier)."""
    from forge_cli.train.warmstart import synthetic_samples

    config = load_config(env={}, overrides={"model.path": str(tiny_model), "rollout.task": "calc-1", "gateway.port": 0,
                                            "rollout.scaffold": "tool-call-unlisted", "run.dir": str(tmp_path)})
    samples = asyncio.run(synthetic_samples(config, tmp_path / "warm" / "warmstart", 48, slips))
    assert len(samples) == 2 * 48  # every trace: the call and the answer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    answers = [tokenizer.decode(s.tokens[s.prompt_len:]) for s in samples[1::2]]
    results = [re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", tokenizer.decode(s.tokens[:s.prompt_len]), re.S)[-1]
               for s in samples[1::2]]
    calls = [tokenizer.decode(s.tokens[s.prompt_len:]) for s in samples[0::2]]
    questions = [calc_expression(re.findall(r"What is .+?\?", tokenizer.decode(s.tokens[:s.prompt_len]))[-1]) for s in samples[0::2]]
    right = [f'"expression": "{q}"' in c and a.startswith(r) for q, c, a, r in zip(questions, calls, answers, results)]
    if slips:
        assert 10 <= right.count(False) <= 38, right  # about half slipped, and they are learned too
    else:
        assert all(right), list(zip(questions, calls, answers, results))


@given(first=st.integers(1, 40), added=st.lists(st.integers(0, 30), max_size=6), size=st.integers(1, 16),
       seed=st.integers(0, 2**16))
def test_a_batch_learns_what_no_step_has_learned_first_then_fills_with_learned_ones(first, added, size, seed):
    """FreshFirst against the plain computation: every completion is learned once, in the order written,
    before any is taken again; a batch is full (as far as the data allow) and has no repeats."""
    from forge_cli.train.warmstart import FreshFirst

    written = list(range(first))
    data = FreshFirst(written, random.Random(seed))
    learned = 0
    for more in [0, *added]:
        new = list(range(len(written), len(written) + more))
        written += new
        data.add(new)
        for _ in range(3):
            batch = data.batch(size)
            fresh = written[learned:learned + size]
            assert batch[:len(fresh)] == fresh  # the unlearned ones first, oldest first
            learned += len(fresh)
            assert len(batch) == min(size, len(written)) and len(set(batch)) == len(batch)
            assert set(batch[len(fresh):]) <= set(written[:learned - len(fresh)])  # then ones learned before
            assert data.learned == learned


def test_the_trace_writer_goes_on_where_its_last_batch_stopped(tiny_model, tmp_path):
    """Two batches of the writer are the next tasks of the train stream, none written twice: together
    the same tasks as one batch of both sizes."""
    from forge_cli.train.warmstart import TraceWriter

    config = load_config(env={}, overrides={"model.path": str(tiny_model), "rollout.task": "calc-1", "gateway.port": 0,
                                            "rollout.scaffold": "tool-call-unlisted", "run.dir": str(tmp_path)})

    def questions(samples):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
        return [re.findall(r"What is .+?\?", tokenizer.decode(s.tokens[:s.prompt_len]))[-1] for s in samples[0::2]]

    async def write(sizes, name):
        async with TraceWriter(config, tmp_path / name / "warmstart") as writer:
            batches = [await writer.write(n) for n in sizes]
        return batches, writer.written

    (a, b), written = asyncio.run(write([12, 8], "two"))
    (both,), _ = asyncio.run(write([20], "one"))
    assert written == 20 and len(a) == 24 and len(b) == 16
    assert len(set(questions(a))) == 12 and len(set(questions(b))) == 8 and not set(questions(a)) & set(questions(b))
    assert set(questions(a)) | set(questions(b)) == set(questions(both))


def warm_started(model, runs, run: str, **sets):
    """A short warm start of ``model`` on calc-1 (an hf engine, the torch trainer): (its result, the
    warm copy's folder, the run's warmstart metrics lines)."""
    from forge_cli.train.run import warmstart_model

    config = load_config(env={}, overrides={
        "gateway.port": 0,
        "model.path": str(model), "model.engine": "hf", "train.engine": "torch", "run.dir": str(runs),
        "rollout.task": "calc-1", "rollout.scaffold": "tool-call-unlisted", "train.eval_tasks": 2, "train.eval_samples": 1,
        "train.warmstart.traces": 16, "train.warmstart.batch_size": 8, "train.warmstart.max_minutes": 0.25,
        "train.warmstart.eval_every": 10, "train.warmstart.target_success": 1.0, **sets})
    result, folder = asyncio.run(warmstart_model(config, out=runs.parent / f"warm-{run}", run=run))
    lines = [json.loads(x) for x in (runs / run / "metrics.jsonl").read_text().splitlines()]
    return result, folder, [x for x in lines if x.get("kind") == "warmstart"]


@pytest.mark.parametrize("fresh", [0, 8])
def test_the_warm_start_learns_new_traces_while_they_are_written(tiny_model, tmp_path, fresh):
    """`forge model warmstart`'s library call, end to end (scripted traces, supervised steps, held-out
    evaluations, the warm copy saved): with ``fresh_traces`` the writer keeps adding traces while the
    steps run and the steps go on to learn them; without, one pass over the first ones, then draws from them."""
    result, folder, steps = warm_started(tiny_model, tmp_path / "runs", "ws", **{"train.warmstart.fresh_traces": fresh})
    assert len(steps) == result.steps >= 3 and result.reason == "time budget"
    assert [x["heldout_success"] for x in steps if "heldout_success" in x]  # measured on the way and at the end
    assert steps[0]["completions"] >= 32 and steps[0]["learned"] == 8  # the first 16 traces: a call and an answer each
    assert all(a["learned"] <= b["learned"] <= b["completions"] for a, b in zip(steps, steps[1:]))
    record = json.loads((folder / "warmstart.json").read_text())
    if fresh:
        assert steps[-1]["completions"] > 32 and result.traces > 16 and record["traces"] == result.traces
        assert steps[-1]["learned"] > 32  # the steps went on to the traces written while they ran
    else:
        assert {x["completions"] for x in steps} == {32} and result.traces == 16
        assert [x["learned"] for x in steps[:5]] == [8, 16, 24, 32, 32]  # one pass, then draws from the learned
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    assert (folder / "forge_model.json").is_file()  # made from the embedded default: its scaffold options follow it
    resolved = json.loads((tmp_path / "runs" / "ws" / "config.json").read_text())
    assert resolved["scaffolds"]["tool-call-unlisted"] == EMBEDDED_SCAFFOLD_OPTIONS["tool-call-unlisted"]
    assert resolved["scaffolds"]["tool-call-unlisted"]["system_prompt"] == ""  # the task alone, as it learned


def test_the_warm_start_writes_the_costlier_habit_and_every_trace_still_answers(tiny_model, tmp_path):
    """``teacher_max_warmups`` 3 reaches the traces through `forge model warmstart`'s library call: through
    the real scripted gateway and the embedded default's 5 turns, traces with three warm-ups (five
    completions) come, each trace solves its task (no slips), and the warm copy's record keeps the cap."""
    from forge_cli.pool.store import DataPool

    runs = tmp_path / "runs"
    _, folder, steps = warm_started(tiny_model, runs, "costly", **{
        "train.warmstart.teacher_warmups": 0.8, "train.warmstart.teacher_max_warmups": 3,
        "train.warmstart.teacher_rechecks": 0.0, "train.warmstart.teacher_slips": 0.0, "train.warmstart.traces": 24})
    pool = DataPool.sqlite(runs / "costly" / "warmstart" / "pool.sqlite", create=False)
    try:
        trajectories = [t for g in pool.groups() for t in g.trajectories]
    finally:
        pool.close()
    warm = [sum(1 for c in t.completions for call in c.tool_calls or [] if "1+1" in str(call.get("arguments"))) for t in trajectories]
    assert len(trajectories) == 24 and all(t.status == "completed" and t.rewards.get("outcome") == 1.0 for t in trajectories)
    assert all(len(t.completions) == 2 + n for t, n in zip(trajectories, warm)) and max(warm) == 3
    assert steps[0]["completions"] == sum(len(t.completions) for t in trajectories)
    assert json.loads((folder / "warmstart.json").read_text())["teacher_max_warmups"] == 3


def test_two_warm_starts_of_one_seed_learn_the_same_on_a_step_schedule(tiny_model, tmp_path):
    """With ``decay_steps`` the learning rate follows the step, not the clock, and the traces come in
    the task stream's order: two runs take the same steps (the clock only decides where they stop)."""
    sets = {"train.warmstart.decay_steps": 6, "train.warmstart.final_lr_fraction": 0.5, "train.warmstart.lr": 2e-3}
    _, _, one = warm_started(tiny_model, tmp_path / "runs", "one", **sets)
    _, _, two = warm_started(tiny_model, tmp_path / "runs", "two", **sets)
    from forge_cli.train.warmstart import cosine_lr

    assert min(len(one), len(two)) >= 8
    assert [x["lr"] for x in one] == [cosine_lr(2e-3, 0.5, i, 6) for i in range(len(one))]  # down to 1e-3 at step 6, then flat
    assert [x["loss"] for x in one[:len(two)]] == [x["loss"] for x in two[:len(one)]]  # bit for bit
