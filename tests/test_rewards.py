"""Rewards (issue 10 §4): the components against hand-computed values, reward-to-go and group
normalisation against the plain formulas, the RewardSpec contract, and writing a group's rewards
to a real pool (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.pool.types import Completion, NewCompletion, Trajectory, TrajectoryStatus
from forge_cli.configs.rewards import RewardsConfig
from forge_cli.rewards import apply_group_rewards, compute_group_rewards, group_advantages, reward_to_go
from forge_cli.rewards.components import completion_time_reward, language_mixing, process_penalties, schema_errors
from forge_cli.specs import RewardSpec, RewardValue
from forge_cli.tasks.types import Outcome

CALC = {"type": "function", "function": {"name": "calc", "description": "", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"],
    "additionalProperties": False}}}


def _c(tid, seq, parse_errors=(), start=0.0, end=1.0, request=None, tool_format=None):
    return Completion(f"{tid}-{seq}", tid, seq, [1], [2], [-0.5], 0, started_at=start, finished_at=end,
                      parse_errors=list(parse_errors), request=request, tool_format=tool_format)


def _t(tid, status=TrajectoryStatus.COMPLETED, completions=(), start=0.0, end=1.0):
    return Trajectory(tid, "g", "task", "react", 0, status, started_at=start, finished_at=end, completions=list(completions))


# ---- reward-to-go and normalisation -------------------------------------------------------------


def test_reward_to_go_by_hand():
    assert reward_to_go([1.0, 0.0, 2.0], 0.5) == [1.5, 1.0, 2.0]
    assert reward_to_go([1.0, 0.0, 2.0], 1.0) == [3.0, 2.0, 2.0]
    assert reward_to_go([1.0, 0.0, 2.0], 0.0) == [1.0, 0.0, 2.0]
    assert reward_to_go([], 0.9) == []
    with pytest.raises(ForgeError, match="discount must be in"):
        reward_to_go([1.0], 1.5)


def test_group_advantages_by_hand():
    # trajectories baseline: weights 1/2, 1/2, 1 -> mean 0.5, var 0.25, std 0.5
    got = group_advantages([[1.0, 1.0], [0.0]], eps=0.0)
    assert got == [[1.0, 1.0], [-1.0]]
    # completions baseline: mean 2/3, std sqrt(2/9)
    got = group_advantages([[1.0, 1.0], [0.0]], baseline="completions", eps=0.0)
    assert got[0] == pytest.approx([math.sqrt(0.5)] * 2) and got[1] == pytest.approx([-math.sqrt(2.0)])
    assert group_advantages([[1.0, 1.0], [0.0]], scale="none") == [[0.5, 0.5], [-0.5]]
    # edge cases: all equal (no NaN, exactly 0), one member with one completion, an empty trajectory
    assert group_advantages([[0.1, 0.1], [0.1], [0.1]]) == [[0.0, 0.0], [0.0], [0.0]]
    assert group_advantages([[2.0]]) == [[0.0]]
    assert group_advantages([[1.0], [], [0.0]], eps=0.0) == [[1.0], [], [-1.0]]
    assert group_advantages([[], []]) == [[], []]


returns_st = st.lists(st.lists(st.floats(-100, 100), max_size=6), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(rewards=st.lists(st.floats(-100, 100), max_size=12), discount=st.floats(0, 1))
def test_reward_to_go_is_the_discounted_sum(rewards, discount):
    plain = [sum(discount ** (k - t) * rewards[k] for k in range(t, len(rewards))) for t in range(len(rewards))]
    assert reward_to_go(rewards, discount) == pytest.approx(plain, rel=1e-9, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(returns=returns_st, baseline=st.sampled_from(["trajectories", "completions"]), scale=st.sampled_from(["std", "none"]))
def test_group_advantages_are_the_weighted_normalisation(returns, baseline, scale):
    got = group_advantages(returns, baseline=baseline, scale=scale, eps=1e-6)
    assert [len(r) for r in got] == [len(r) for r in returns]
    flat = np.array([g for row in returns for g in row], dtype=np.float64)
    if flat.size == 0 or flat.max() == flat.min():
        assert all(a == 0.0 for row in got for a in row)
        return
    w = np.array([1.0 / len(row) if baseline == "trajectories" else 1.0 for row in returns for _ in row])
    mean = np.average(flat, weights=w)
    std = np.sqrt(np.average((flat - mean) ** 2, weights=w))
    plain = (flat - mean) / (std + 1e-6 if scale == "std" else 1.0)
    assert [a for row in got for a in row] == pytest.approx(plain.tolist(), rel=1e-7, abs=1e-7)
    assert all(math.isfinite(a) for row in got for a in row)


# ---- components ---------------------------------------------------------------------------------


def test_language_mixing_by_hand():
    assert language_mixing("The answer is 答案是") == pytest.approx(0.5)  # 3 Latin words, 3 CJK characters
    assert language_mixing("这是一个测试 ok") == pytest.approx(1 / 7)
    assert language_mixing("The answer is forty two") == 0.0
    assert language_mixing("hi 你好") == 0.0  # 3 words: too short to judge
    assert language_mixing("Use this code:\n```python\nprint('你好世界')\n``` and `变量` it prints a greeting") == 0.0
    assert language_mixing("Ответ: the number is сорок два") == pytest.approx(0.5)  # 3 Cyrillic, 3 Latin words
    assert language_mixing("Ответ: the number is сорок два три") == pytest.approx(3 / 7)  # the main script wins
    assert language_mixing("") == 0.0


def test_schema_errors_by_hand():
    schema = CALC["function"]["parameters"]
    assert schema_errors({"expression": "1+2"}, schema) == []
    assert schema_errors({}, schema) == ["arguments.expression is missing"]
    assert schema_errors({"expression": 3}, schema) == ["arguments.expression is not of type string"]
    assert schema_errors({"expression": "1", "x": 1}, schema) == ["arguments.x is not allowed"]
    assert schema_errors("1+2", schema) == ["arguments is not of type object"]
    assert schema_errors([1, "a"], {"type": "array", "items": {"type": "integer"}}) == ["arguments[1] is not of type integer"]
    assert schema_errors("b", {"enum": ["a"]}) == ["arguments is not one of ['a']"]
    assert schema_errors(True, {"type": "integer"}) and not schema_errors(2, {"type": "number"})


def test_process_penalties_are_credited_to_the_completion_that_made_them():
    from forge_cli.rewards.components import _registry_parse

    cfg = RewardsConfig()
    bad_call = '<tool_call>\n{"name": "calc", "arguments": {"expr": "1+2"}}\n</tool_call>'
    good_call = '<tool_call>\n{"name": "calc", "arguments": {"expression": "1+2"}}\n</tool_call>'
    errors = [{"text": "<tool_call>{", "reason": "not JSON"}, {"text": '{"name": "web"}', "reason": "unknown tool 'web'"}]
    c = _c("t", 0, errors, request={"tools": [CALC]}, tool_format="hermes")
    counts = process_penalties(c, "Let me compute. " + bad_call, cfg, parse=_registry_parse)
    assert counts == {"parse_errors": 1.0, "unknown_tools": 1.0, "invalid_arguments": 1.0, "language_mixing": 0.0}
    counts = process_penalties(c, "让我来 compute 这个 " + good_call, cfg, parse=_registry_parse)
    # the content without the call: 5 CJK characters and 1 Latin word
    assert counts["invalid_arguments"] == 0.0 and counts["language_mixing"] == pytest.approx(1 / 6)
    # without the text only the recorded parse errors count; the task's tools stand in for an unrecorded request
    assert process_penalties(c, None, cfg)["invalid_arguments"] == 0.0
    plain = _c("t", 0, tool_format="hermes")
    assert process_penalties(plain, bad_call, cfg, tools=[CALC], parse=_registry_parse)["invalid_arguments"] == 1.0


def test_completion_time_rewards_only_correct_runs():
    cfg = RewardsConfig()
    fast, slow, wrong, late = (_t("fast", end=10.0), _t("slow", end=20.0), _t("wrong", end=1.0),
                               _t("late", TrajectoryStatus.TIMED_OUT, end=30.0))
    group = [fast, slow, wrong, late]
    outcomes = {"fast": Outcome(1.0), "slow": Outcome(1.0), "wrong": Outcome(0.0), "late": Outcome(1.0)}
    got = {t.id: completion_time_reward(t, group, outcomes, cfg) for t in group}
    assert got == {"fast": 0.5, "slow": 0.0, "wrong": 0.0, "late": 0.0}  # a timed-out run is never correct
    # all wrong: nobody gains; one correct: nothing to compare with
    none_right = {k: Outcome(0.0) for k in outcomes}
    assert all(completion_time_reward(t, group, none_right, cfg) == 0.0 for t in group)
    assert completion_time_reward(fast, [fast], {"fast": Outcome(1.0)}, cfg) == 0.0
    # generation time: the completions' own durations
    gen = RewardsConfig(completion_time={"source": "generation"})
    a = _t("a", completions=[_c("a", 0, start=0, end=1), _c("a", 1, start=5, end=6)], end=100.0)
    b = _t("b", completions=[_c("b", 0, start=0, end=8)], end=1.0)
    both = {"a": Outcome(1.0), "b": Outcome(1.0)}
    assert completion_time_reward(a, [a, b], both, gen) == pytest.approx(0.75)
    # times missing on the trajectory: its completions' span
    c = Trajectory("c", "g", "task", "react", 0, TrajectoryStatus.COMPLETED, completions=[_c("c", 0, start=2, end=6)])
    assert completion_time_reward(c, [c, b], {"c": Outcome(1.0), "b": Outcome(1.0)}, cfg) == 0.0
    assert completion_time_reward(b, [c, b], {"c": Outcome(1.0), "b": Outcome(1.0)}, cfg) == pytest.approx(0.75)


# ---- a whole group --------------------------------------------------------------------------------


def _group():
    t1 = _t("t1", completions=[_c("t1", 0, [{"reason": "no closing tag"}]), _c("t1", 1)], end=10.0)
    t2 = _t("t2", completions=[_c("t2", 0)], end=20.0)
    t3 = _t("t3", completions=[_c("t3", 0)], end=1.0)  # fast but wrong
    t4 = _t("t4", TrajectoryStatus.TIMED_OUT, completions=[_c("t4", 0, [{"reason": "unknown tool 'web'"}])], end=50.0)
    t5 = _t("t5", TrajectoryStatus.FAILED)  # crashed before its first call
    outcomes = {"t1": Outcome(1.0), "t2": Outcome(1.0), "t3": Outcome(0.0)}
    return [t1, t2, t3, t4, t5], outcomes


def test_a_group_by_hand():
    group, outcomes = _group()
    result = compute_group_rewards(group, outcomes=outcomes)
    logged = {t.trajectory_id: t.components for t in result.trajectories}
    assert logged["t1"] == pytest.approx({"outcome": 1.0, "process": -0.1, "completion_time": 0.05})
    assert logged["t2"] == {"outcome": 1.0, "process": 0.0, "completion_time": 0.0}
    assert logged["t3"] == {"outcome": 0.0, "process": 0.0, "completion_time": 0.0}
    assert logged["t4"] == pytest.approx({"outcome": 0.0, "process": -0.1, "completion_time": 0.0})
    assert logged["t5"] == {"outcome": 0.0, "process": 0.0, "completion_time": 0.0}
    assert result.of("t1").total == pytest.approx(0.95) and result.of("t5").completions == []
    by_id = {c.completion_id: c for c in result.completion_rewards}
    assert by_id["t1-0"].reward == pytest.approx(-0.1) and by_id["t1-0"].components == pytest.approx({"process": -0.1})
    assert by_id["t1-1"].reward == pytest.approx(1.05)
    assert by_id["t1-1"].components == pytest.approx({"outcome": 1.0, "process": 0.0, "completion_time": 0.05})
    returns = {k: c.reward_to_go for k, c in by_id.items()}
    assert returns == pytest.approx({"t1-0": 0.95, "t1-1": 1.05, "t2-0": 1.0, "t3-0": 0.0, "t4-0": -0.1})
    # each trajectory counts once: weights 1/2, 1/2, 1, 1, 1 over 4 -> mean 0.475, variance 0.2775
    std = math.sqrt(0.2775)
    expected = {k: (g - 0.475) / (std + 1e-6) for k, g in returns.items()}
    assert {k: c.advantage for k, c in by_id.items()} == pytest.approx(expected)


def test_discount_and_weights_from_config(tmp_path):
    group, outcomes = _group()
    cfg = RewardsConfig(discount=0.5, weights={"process": 2.0, "completion_time": 0.0})
    assert cfg.weights == {"outcome": 1.0, "process": 2.0, "completion_time": 0.0}  # laid over the defaults
    result = compute_group_rewards(group, outcomes=outcomes, settings=cfg)
    assert result.of("t1").components == pytest.approx({"outcome": 1.0, "process": -0.2})  # weight 0: not computed
    assert [c.reward_to_go for c in result.of("t1").completions] == pytest.approx([-0.2 + 0.5 * 1.0, 1.0])
    from forge_cli.config import load_config

    path = tmp_path / "forge.toml"
    path.write_text('[rewards]\ndiscount = 0.9\n[rewards.weights]\nprocess = 0.5\n')
    loaded = load_config(path, env={}).rewards
    assert loaded.discount == 0.9 and loaded.weights == {"outcome": 1.0, "process": 0.5, "completion_time": 0.1}
    for text, message in (('[rewards.weights]\n"Bad Name" = 1.0\n', "not a reward name"),
                          ("[rewards]\ndiscount = 1.5\n", "rewards.discount"),
                          ("[rewards.process]\nparse_error = -1\n", "rewards.process.parse_error")):
        path.write_text(text)
        with pytest.raises(ForgeError, match=message):
            load_config(path, env={})


def test_edge_groups():
    # all equal: every advantage exactly 0; one member; all wrong
    same = [_t(f"s{i}", completions=[_c(f"s{i}", 0)], end=5.0) for i in range(3)]
    res = compute_group_rewards(same, outcomes={t.id: Outcome(1.0) for t in same})
    assert [c.advantage for c in res.completion_rewards] == [0.0, 0.0, 0.0]
    one = [_t("o", completions=[_c("o", 0), _c("o", 1)])]
    res = compute_group_rewards(one, outcomes={"o": Outcome(1.0)})
    assert [c.reward_to_go for c in res.completion_rewards] == [1.0, 1.0] and [c.advantage for c in res.completion_rewards] == [0.0, 0.0]
    wrong = [_t(f"w{i}", completions=[_c(f"w{i}", 0)], end=1.0 + i) for i in range(3)]
    res = compute_group_rewards(wrong, outcomes={t.id: Outcome(0.0) for t in wrong})
    assert all(t.total == 0.0 for t in res.trajectories) and all(c.advantage == 0.0 for c in res.completion_rewards)
    empty = [_t("e", TrajectoryStatus.FAILED)]
    res = compute_group_rewards(empty, outcomes={})
    assert res.of("e").components == {"outcome": 0.0, "process": 0.0, "completion_time": 0.0} and res.completion_rewards == []


def test_a_third_party_component_gets_only_what_it_declares_and_is_checked():
    seen = {}

    def turns(trajectory, group):  # declares group only
        seen["group"] = len(group)
        return RewardValue(0.5, tuple(1.0 for _ in trajectory.completions))

    def everything(trajectory, **context):
        seen["context"] = sorted(context)
        return 1

    specs = {"turns": RewardSpec("turns", "per turn", turns), "everything": RewardSpec("everything", "all", everything)}
    cfg = RewardsConfig(weights={"outcome": 0.0, "process": 0.0, "completion_time": 0.0, "turns": 2.0, "everything": 1.0})
    t = _t("t", completions=[_c("t", 0), _c("t", 1)])
    res = compute_group_rewards([t], outcomes={}, settings=cfg, components=specs)
    assert res.of("t").components == {"turns": 5.0, "everything": 1.0}
    assert [c.reward for c in res.completion_rewards] == [2.0, 4.0]  # 2·1; 2·1 + 2·0.5 + 1 at the end
    assert seen == {"group": 1, "context": ["group", "outcome", "outcomes", "settings", "texts", "tools"]}

    def bad(value):
        return {"bad": RewardSpec("bad", "d", lambda trajectory: value)}

    only_bad = RewardsConfig(weights={"outcome": 0.0, "process": 0.0, "completion_time": 0.0, "bad": 1.0})
    for value, message in ((float("nan"), "not finite"), ("1", "not finite"), (RewardValue(0.0, (1.0,)), "1 per-completion values")):
        with pytest.raises(ForgeError, match=message):
            compute_group_rewards([t], outcomes={}, settings=only_bad, components=bad(value))

    def raises(trajectory):
        raise KeyError("oops")

    with pytest.raises(ForgeError, match=r"reward 'bad' raised KeyError"):
        compute_group_rewards([t], outcomes={}, settings=only_bad, components={"bad": RewardSpec("bad", "d", raises)})
    with pytest.raises(ForgeError, match="which no plugin registered"):
        compute_group_rewards([t], outcomes={}, settings=RewardsConfig(weights={"nope": 1.0}))


def test_the_builtin_components_are_registered_by_a_plugin():
    from forge_cli.plugins import get_registry

    rewards = get_registry().rewards
    assert {n: rewards[n].plugin for n in ("outcome", "process", "completion_time")} == dict.fromkeys(
        ("outcome", "process", "completion_time"), "forge:rewards")


# ---- into a real pool --------------------------------------------------------------------------------


def test_apply_group_rewards_writes_the_pool(pool):
    group = pool.submit_group("calc-1", 2, "react", rewards_pending=True)
    a, b = (t.id for t in group.trajectories)
    for tid, errors in ((a, [[{"text": "<x", "reason": "bad"}], []]), (b, [[]])):
        pool.start_trajectory(tid)
        for e in errors:
            pool.append_completion(NewCompletion(tid, prompt_ids=[1], output_ids=[2], output_logprobs=[-0.1], policy_version=0,
                                                 parse_errors=e))
    pool.finish_trajectory(a)
    pool.fail_trajectory(b, "hung", timed_out=True)
    assert pool.take_batch(1, 0, window=None).groups == []  # finished, but its rewards are not written
    result = apply_group_rewards(pool, group.id, outcomes={a: Outcome(1.0)})
    stored = pool.group(group.id)
    assert not stored.rewards_pending
    ta, tb = stored.trajectories
    assert ta.rewards == pytest.approx({"outcome": 1.0, "process": -0.1, "completion_time": 0.0}) and ta.reward == pytest.approx(0.9)
    assert tb.rewards == {"outcome": 0.0, "process": 0.0, "completion_time": 0.0} and tb.status is TrajectoryStatus.TIMED_OUT
    for c in ta.completions + tb.completions:
        want = next(r for r in result.completion_rewards if r.completion_id == c.id)
        assert (c.reward, c.reward_to_go, c.advantage, c.reward_components) == (
            want.reward, want.reward_to_go, want.advantage, want.components)
    # returns 0.9, 1.0 (a) and 0.0 (b): each trajectory counts once -> mean 0.475, variance 0.226875
    std = math.sqrt(0.226875) + 1e-6
    assert [c.advantage for c in ta.completions + tb.completions] == pytest.approx(
        [(0.9 - 0.475) / std, (1.0 - 0.475) / std, -0.475 / std])
    (taken,) = pool.take_batch(1, 0, window=None).groups
    assert json.dumps([c.advantage for t in taken.trajectories for c in t.completions])
