"""forge_cli.train.batch: a scheduler's Batch plus advantages → Samples, against the plain construction
on random batches; and every completion the trainer cannot use refused, naming its trajectory."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.pool.types import Batch, Completion, Group, GroupStatus, Sampling, Trajectory, TrajectoryStatus
from forge_cli.train.batch import build_samples

TRAINING = Sampling(max_tokens=16, temperature=0.7, top_p=1.0, stop=(), stop_token_ids=(), seed=None, n=1, top_logprobs=0,
                    training=True, asked={"top_p": 0.5})

ids = st.lists(st.integers(0, 2**31 - 1), max_size=8)
logprob = st.floats(-30.0, 0.0, allow_nan=False)
adv = st.floats(-5.0, 5.0, allow_nan=False)


@st.composite
def batches(draw):
    """A random batch: groups of trajectories of completions, each with a recorded advantage, and a
    mapping that overrides some of them (a number or one per token)."""
    trainer_version = draw(st.integers(0, 50))
    groups, overrides, n = [], {}, 0
    for g in range(draw(st.integers(0, 3))):
        trajectories = []
        for m in range(draw(st.integers(1, 3))):
            tid = f"t{g}-{m}"
            completions = []
            for seq in range(draw(st.integers(0, 4))):
                n += 1
                out = draw(ids)
                c = Completion(
                    id=f"c{n}", trajectory_id=tid, seq=seq, prompt_ids=draw(ids.filter(bool)), output_ids=out,
                    output_logprobs=draw(st.lists(logprob, min_size=len(out), max_size=len(out))),
                    policy_version=draw(st.integers(0, trainer_version)), sampling=TRAINING, advantage=draw(adv),
                )
                completions.append(c)
                kind = draw(st.sampled_from(["recorded", "number", "per-token"]))
                if kind == "number":
                    overrides[c.id] = draw(adv)
                elif kind == "per-token":
                    overrides[c.id] = draw(st.lists(adv, min_size=len(out), max_size=len(out)))
            trajectories.append(Trajectory(tid, f"g{g}", "task", "s", g, TrajectoryStatus.COMPLETED, completions=completions))
        groups.append(Group(f"g{g}", g, "task", len(trajectories), GroupStatus.CONSUMED, 0.0, trajectories=trajectories))
    batch = Batch(groups, trainer_version, [], 0, None)
    return batch, overrides


@settings(max_examples=200, deadline=None)
@given(batches())
def test_samples_are_the_plain_construction(drawn):
    batch, overrides = drawn
    got = build_samples(batch, overrides)
    want, want_traj, want_ages, want_empty = [], [], [], []
    for g in batch.groups:
        for t in g.trajectories:
            for c in t.completions:
                if not c.output_ids:
                    want_empty.append(c.id)
                    continue
                a = overrides.get(c.id, c.advantage)
                per_token = list(a) if isinstance(a, list) else [a] * len(c.output_ids)
                want.append((c.prompt_ids + c.output_ids, len(c.prompt_ids), c.output_logprobs, per_token, c.id,
                             c.policy_version))
                want_traj.append(t.id)
                want_ages.append(batch.trainer_version - c.policy_version)
    assert [(list(s.tokens), s.prompt_len, list(s.old_logprobs), list(s.advantages), s.completion_id, s.policy_version)
            for s in got.samples] == want
    assert all(s.output_ids == s.tokens[s.prompt_len:] for s in got.samples)
    assert got.trajectory_ids == want_traj and got.ages == want_ages and got.empty == want_empty
    assert got.max_age == max(want_ages, default=0)
    assert math.isclose(got.mean_age, sum(want_ages) / len(want_ages) if want_ages else 0.0)
    assert got.temperature == (0.7 if want else None) and got.trainer_version == batch.trainer_version


def _one(**changes) -> Batch:
    c = Completion(id="c1", trajectory_id="traj-abc", seq=3, prompt_ids=[1, 2], output_ids=[3, 4],
                   output_logprobs=[-0.5, -1.0], policy_version=0, sampling=TRAINING, advantage=1.0)
    c = dataclasses.replace(c, **changes)
    t = Trajectory("traj-abc", "g", "task", "s", 0, TrajectoryStatus.COMPLETED, completions=[c])
    return Batch([Group("g", 0, "task", 1, GroupStatus.CONSUMED, 0.0, trajectories=[t])], 2, [2], 0, None)


@pytest.mark.parametrize("changes, needle", [
    ({"sampling": dataclasses.replace(TRAINING, training=False, top_p=0.5)}, "ad-hoc session (top_p = 0.5 as asked)"),
    ({"sampling": Sampling(temperature=1.0, top_p=1.0)}, "no record of training sampling"),
    ({"sampling": dataclasses.replace(TRAINING, top_p=0.9)}, "top_p = 0.9"),
    ({"sampling": dataclasses.replace(TRAINING, temperature=0.0)}, "greedily"),
    ({"sampling": dataclasses.replace(TRAINING, temperature="hot")}, "no usable sampling temperature"),
    ({"advantage": None}, "has no advantage"),
    ({"advantage": float("nan")}, "not finite"),
    ({"output_logprobs": [-0.5, float("-inf")]}, "logprob that is not finite"),
    ({"prompt_ids": []}, "at least one prompt token"),
])
def test_what_the_trainer_cannot_use_is_refused_naming_the_trajectory(changes, needle):
    with pytest.raises(ForgeError) as err:
        build_samples(_one(**changes))
    assert needle in str(err.value) and "trajectory traj-abc's completion 3" in str(err.value)


def test_advantages_given_must_fit_the_output():
    for bad, needle in (([1.0], "2 output ids but 1 advantages"), ("1", "a number or one number per output id"),
                        ([1.0, True], "a number or one number per output id"), ([1.0, math.inf], "not finite")):
        with pytest.raises(ForgeError, match="traj-abc") as err:
            build_samples(_one(), {"c1": bad})
        assert needle in str(err.value)
    assert build_samples(_one(advantage=None), {"c1": [0.25, -0.5]}).samples[0].advantages == [0.25, -0.5]


def test_one_temperature_per_batch():
    batch = _one()
    other = dataclasses.replace(batch.groups[0].trajectories[0].completions[0], id="c2", seq=4,
                                sampling=dataclasses.replace(TRAINING, temperature=1.0))
    t = dataclasses.replace(batch.groups[0].trajectories[0], completions=[*batch.groups[0].trajectories[0].completions, other])
    mixed = dataclasses.replace(batch, groups=[dataclasses.replace(batch.groups[0], trajectories=[t])])
    with pytest.raises(ForgeError, match="completion 4 .* at temperature 1.0, the batch at 0.7"):
        build_samples(mixed)
    with pytest.raises(ForgeError, match="completion 3 .* at temperature 0.7, the batch at 1.0"):
        build_samples(mixed, temperature=1.0)
    with pytest.raises(ForgeError, match="finite number > 0"):
        build_samples(batch, temperature=0.0)
    assert build_samples(batch, temperature=0.7).temperature == 0.7
