"""From what the scheduler hands out to what the trainer consumes: a :class:`~forge_cli.pool.types.Batch`
plus per-completion advantages → :class:`~forge_cli.pool.types.Sample`\\ s (DESIGN.md §2, §10).

One completion gives one sample::

    tokens        = prompt_ids + output_ids
    prompt_len    = len(prompt_ids)                 # the loss mask covers exactly the output ids
    old_logprobs  = output_logprobs                 # the engine's, recorded when it sampled
    advantages    = [A] * len(output_ids)           # A: the completion's advantage (or one per token)
    age           = trainer_version - policy_version  # off-policy-ness, measured

A completion is refused (:class:`~forge_cli.errors.ForgeError`, naming its trajectory) unless its
session was opened for training (its :class:`~forge_cli.pool.types.Sampling` says ``training`` and
it was sampled with ``top_p = 1``: the recorded logprobs are then ``log_softmax(logits / T)`` over
the whole vocabulary, as the trainer computes them), it was sampled at a temperature > 0 (a greedy
pick is not a draw of the policy), every completion of the batch shares one temperature (the
trainer computes with one), and it has an advantage. A completion with no output ids gives no
sample (it has no loss term).

Pure: no torch, no pool access.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

from forge_cli.errors import ForgeError
from forge_cli.pool.types import Batch, Completion, Sample

Advantage = Union[float, Sequence[float]]  # one value for every output token, or one per output token


@dataclass(frozen=True)
class SampleBatch:
    """The samples of one scheduler take, in the batch's order (groups, trajectories, ``seq``).

    ``trajectory_ids[i]`` and ``ages[i]`` (``trainer_version − policy_version``) belong to
    ``samples[i]``; ``temperature`` is the one the completions were sampled at (what the trainer
    must compute ``log_softmax(logits / T)`` with; None for a batch with no samples); ``empty``
    holds the ids of completions with no output ids, which give no sample.
    """

    samples: list[Sample]
    trajectory_ids: list[str]
    ages: list[int]
    temperature: float | None
    trainer_version: int
    empty: list[str] = field(default_factory=list)

    @property
    def max_age(self) -> int:
        """The largest off-policy age in the batch (0 for no samples)."""
        return max(self.ages, default=0)

    @property
    def mean_age(self) -> float:
        """The mean off-policy age over the samples (0.0 for none)."""
        return sum(self.ages) / len(self.ages) if self.ages else 0.0


def build_samples(batch: Batch, advantages: Mapping[str, Advantage] | None = None, *,
                  temperature: float | None = None) -> SampleBatch:
    """The batch's completions as samples.

    ``advantages`` maps a completion id to its advantage (a number, or one per output token);
    a completion it does not name uses its recorded ``advantage`` (written with the group's
    rewards). ``temperature``: the one every completion must have been sampled at (default: the
    one they share). Raises ForgeError, naming the trajectory, on any completion the trainer cannot
    use (see the module's docstring).
    """
    if temperature is not None and not (math.isfinite(temperature) and temperature > 0):
        raise ForgeError(f"the training temperature must be a finite number > 0, got {temperature!r}")
    samples: list[Sample] = []
    trajectory_ids: list[str] = []
    ages: list[int] = []
    empty: list[str] = []
    for group in batch.groups:
        for trajectory in group.trajectories:
            for c in trajectory.completions:
                t = _check_sampling(c, temperature)
                temperature = t if temperature is None else temperature
                if not c.output_ids:
                    empty.append(c.id)
                    continue
                per_token = _advantages(c, advantages)
                old = [float(x) for x in c.output_logprobs]
                if not all(math.isfinite(x) for x in old):
                    raise ForgeError(f"{_name(c)} holds a logprob that is not finite: its ratio cannot be computed")
                try:
                    sample = Sample(tokens=list(c.prompt_ids) + list(c.output_ids), prompt_len=len(c.prompt_ids),
                                    old_logprobs=old, advantages=per_token, completion_id=c.id,
                                    policy_version=c.policy_version)
                except ForgeError as exc:
                    raise ForgeError(f"{_name(c)}: {exc}") from None
                samples.append(sample)
                trajectory_ids.append(c.trajectory_id)
                ages.append(batch.trainer_version - c.policy_version)
    return SampleBatch(samples, trajectory_ids, ages, temperature if samples else None, batch.trainer_version, empty)


def _name(c: Completion) -> str:
    return f"trajectory {c.trajectory_id}'s completion {c.seq} ({c.id})"


def _check_sampling(c: Completion, temperature: float | None) -> float:
    """The completion's sampling temperature, once it is known to be one the trainer can use."""
    sampling = c.sampling
    if sampling.training is not True:
        why = "was sampled in an ad-hoc session" if sampling.training is False else "has no record of training sampling"
        asked = sampling.asked.get("top_p") if isinstance(sampling.asked, dict) else None
        extra = f" (top_p = {asked} as asked)" if asked is not None else ""
        raise ForgeError(f"{_name(c)} {why}{extra}, not for training: its logprobs need not be the trainer's; "
                         "open the trajectory's session with training=True")
    if sampling.top_p != 1.0:
        raise ForgeError(f"{_name(c)} was sampled with top_p = {sampling.top_p}: its logprobs are not the trainer's "
                         "(a training session samples with top_p = 1)")
    t = sampling.temperature
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
        raise ForgeError(f"{_name(c)} records no usable sampling temperature (got {t!r})")
    if t == 0:
        raise ForgeError(f"{_name(c)} was sampled greedily (temperature 0): a greedy pick is not a draw of the policy")
    if temperature is not None and float(t) != temperature:
        raise ForgeError(f"{_name(c)} was sampled at temperature {t}, the batch at {temperature}: "
                         "the trainer computes every logprob at one temperature")
    return float(t)


def _advantages(c: Completion, given: Mapping[str, Advantage] | None) -> list[float]:
    """One advantage per output id of ``c``: from ``given`` if it names ``c``, else the recorded one."""
    value = given[c.id] if given is not None and c.id in given else c.advantage
    if value is None:
        raise ForgeError(f"{_name(c)} has no advantage: write its group's rewards (or pass its advantage) first")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        values = [float(value)] * len(c.output_ids)
    elif isinstance(value, Sequence) and not isinstance(value, str) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        if len(value) != len(c.output_ids):
            raise ForgeError(f"{_name(c)} has {len(c.output_ids)} output ids but {len(value)} advantages")
        values = [float(v) for v in value]
    else:
        raise ForgeError(f"{_name(c)}: an advantage must be a number or one number per output id, got {type(value).__name__}")
    if not all(math.isfinite(v) for v in values):
        raise ForgeError(f"{_name(c)} has an advantage that is not finite")
    return values
