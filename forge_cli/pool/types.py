"""The records every part of Forge shares (DESIGN.md §2): one LLM call, one trajectory, one group.

Frozen dataclasses, torch-free. The pool stores them; the gateway writes completions (a
:class:`NewCompletion` with its :class:`Sampling`); the scheduler hands groups to the trainer,
which turns each completion into one :class:`Sample`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any, Sequence

from forge_cli.errors import ForgeError


# why a trajectory failed when its policy could not have caused it (an infrastructure failure): such a
# trajectory is never trained as a reward of 0 (its group is retried or dropped: forge_cli.rollout.driver)
INFRA_CAUSES = ("sandbox", "install", "launch", "verifier", "gateway")


class TrajectoryStatus(str, enum.Enum):
    """Where a trajectory is in its life. The last three are terminal."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"

    @property
    def terminal(self) -> bool:
        return self in (TrajectoryStatus.COMPLETED, TrajectoryStatus.FAILED, TrajectoryStatus.TIMED_OUT)


class GroupStatus(str, enum.Enum):
    """A group is ``active`` from submission until the scheduler hands it out (``consumed``) or
    drops it after a timeout (``dropped``). An ``evaluation`` group (a held-out evaluation's) is
    recorded like any other but is never in the generation queue: no scheduler takes it and the
    admission bound does not count it."""

    ACTIVE = "active"
    CONSUMED = "consumed"
    DROPPED = "dropped"
    EVALUATION = "evaluation"


@dataclass(frozen=True)
class Sampling:
    """How one completion was sampled: the gateway writes it, the trainer checks it
    (``train/batch.py``), the pool stores it as one JSON object (:meth:`as_dict`).

    At the top level, what the engine used (``max_tokens`` … ``top_logprobs``); ``training``,
    whether the session was opened for training (None: not recorded); ``asked``, the request's own
    sampling fields exactly as sent (a field in ``asked`` with no top-level counterpart — ``top_k``,
    penalties — was not applied); ``output_format``, the structured output asked for, if any.
    A field a saved completion does not record keeps its default here (:meth:`from_dict`).
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    n: int = 1
    top_logprobs: int = 0
    training: bool | None = None
    asked: dict[str, Any] = field(default_factory=dict)
    output_format: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON stores it (``stop``s as lists; no ``output_format`` when none was asked)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["stop"], data["stop_token_ids"] = list(self.stop), list(self.stop_token_ids)
        if self.output_format is None:
            del data["output_format"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sampling:
        """The record a stored JSON object describes: absent keys keep their defaults, unknown keys are
        ignored, values are kept as they were stored (the trainer refuses those it cannot use)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("stop", "stop_token_ids"):
            if isinstance(values.get(name), list):
                values[name] = tuple(values[name])
        return cls(**values)


HISTORY_KINDS = ("first", "exact", "reused", "drifted")


@dataclass(frozen=True)
class PromptHistory:
    """How a completion's prompt matched what its trajectory sampled before (token drift).

    ``kind``: ``first`` (no earlier completion of the session to match), ``exact`` (the prompt's
    rendered ids begin with an earlier completion's prompt and output ids), ``reused`` (its text
    begins with an earlier completion's text but re-tokenising gave other ids: the sampled ids were
    reused), ``drifted`` (the rendering differs from what was sampled — a template that drops
    earlier thinking, a history the agent edited: the completion starts a new branch of the
    trajectory's prefix tree). ``at``: for ``drifted``, the first prompt position whose id differs
    from the closest earlier completion's ids. ``family``: the model family (config.json's model_type)."""

    kind: str
    at: int | None = None
    family: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": self.at, "family": self.family}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PromptHistory":
        return cls(str(data.get("kind", "first")), data.get("at"), data.get("family"))


@dataclass(frozen=True)
class NewCompletion:
    """One LLM call to record (:meth:`DataPool.append_completion`): a :class:`Completion` before the
    pool gives it its id and its ``seq``. ``started_at``/``finished_at`` default to the time it is
    recorded; ``agent`` names which agent of the trajectory made the call (None: not told)."""

    trajectory_id: str
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    policy_version: int
    sampling: Sampling = field(default_factory=Sampling)
    finish_reason: str = "stop"
    started_at: float | None = None
    finished_at: float | None = None
    tool_format: str | None = None
    parse_errors: list[dict[str, Any]] = field(default_factory=list)
    request: dict[str, Any] | None = None
    agent: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    history: PromptHistory | None = None


@dataclass(frozen=True)
class Completion:
    """One LLM call, exactly as the engine saw and sampled it.

    ``output_logprobs[i]`` is the engine's log-probability of ``output_ids[i]`` under the
    sampling temperature it used; ``policy_version`` is the weights version that sampled it.
    ``agent`` names which agent of the trajectory made the call (an orchestrator's worker, a
    request's agent header), None when not told. ``reward`` (the reward credited to this call),
    ``reward_to_go`` (its discounted return) and ``advantage`` (group-normalised) stay None until
    the group's rewards are written (:meth:`DataPool.set_completion_rewards`);
    ``reward_components`` are the named parts of ``reward``. ``tool_calls`` are the calls the gateway
    parsed and returned; ``history`` how the prompt matched earlier samples (:class:`PromptHistory`).
    """

    id: str
    trajectory_id: str
    seq: int
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    policy_version: int
    sampling: Sampling = field(default_factory=Sampling)
    finish_reason: str = "stop"
    started_at: float = 0.0
    finished_at: float = 0.0
    tool_format: str | None = None
    parse_errors: list[dict[str, Any]] = field(default_factory=list)
    request: dict[str, Any] | None = None
    agent: str | None = None
    reward: float | None = None
    reward_to_go: float | None = None
    advantage: float | None = None
    reward_components: dict[str, float] = field(default_factory=dict)
    # the calls the gateway parsed ({"name", "arguments"} each; None: not recorded, an older pool)
    # and how the prompt's history matched what was sampled (None: not recorded)
    tool_calls: list[dict[str, Any]] | None = None
    history: PromptHistory | None = None


@dataclass(frozen=True)
class CompletionReward:
    """What the rewards write for one completion: the reward credited to it (``components`` are
    its named parts), its discounted reward-to-go and its group-normalised advantage."""

    completion_id: str
    reward: float
    reward_to_go: float
    advantage: float
    components: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Event:
    """Something that happened in a trajectory: a context-management action, a tool error, …"""

    kind: str
    at: float
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Trajectory:
    """One scaffold run on one task. ``reward`` is the sum of ``rewards``' named components;
    ``owner`` is the process that started it (:mod:`forge_cli.pool.owners`); ``infra``, for one
    that failed for a reason its policy could not cause, that cause (:data:`INFRA_CAUSES`)."""

    id: str
    group_id: str
    task_id: str
    scaffold: str
    queue_index: int
    status: TrajectoryStatus
    reward: float | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    events: list[Event] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    owner: str | None = None
    infra: str | None = None


@dataclass(frozen=True)
class Group:
    """The n trajectories of one task sampled together; the scheduler's unit.

    ``rewards_pending``: submitted by a driver that writes per-completion rewards
    (:meth:`DataPool.set_completion_rewards`); the scheduler hands it out only once they are written.
    """

    id: str
    queue_index: int
    task_id: str
    n: int
    status: GroupStatus
    submitted_at: float
    timeout_s: float | None = None
    timed_out: bool = False
    consumed_at: float | None = None
    consumed_step: int | None = None
    trajectories: list[Trajectory] = field(default_factory=list)
    rewards_pending: bool = False


@dataclass(frozen=True)
class Batch:
    """What one scheduler take hands to the trainer.

    ``ages`` holds ``trainer_version - policy_version`` for every completion in the batch: the
    measured off-policy-ness. ``head_before``/``window`` record where the queue stood.
    """

    groups: list[Group]
    trainer_version: int
    ages: list[int]
    head_before: int
    window: int | None
    timed_out: list[str] = field(default_factory=list)

    @property
    def completions(self) -> list[Completion]:
        return [c for g in self.groups for t in g.trajectories for c in t.completions]


@dataclass(frozen=True)
class Sample:
    """What the trainer consumes: one completion as tokens, a loss mask, old logprobs, advantages.

    ``tokens = prompt_ids + output_ids``; the loss covers exactly the output ids, so
    ``len(old_logprobs) == len(advantages) == len(output_ids)``.
    """

    tokens: Sequence[int]
    prompt_len: int
    old_logprobs: Sequence[float]
    advantages: Sequence[float]
    completion_id: str = ""
    policy_version: int = 0

    def __post_init__(self) -> None:
        n_out = len(self.tokens) - self.prompt_len
        if self.prompt_len < 1:
            raise ForgeError("a sample needs at least one prompt token (the first output token needs a predictor)")
        if n_out < 0 or len(self.old_logprobs) != n_out or len(self.advantages) != n_out:
            raise ForgeError(
                f"a sample with {len(self.tokens)} tokens and prompt_len {self.prompt_len} needs {max(n_out, 0)} old "
                f"logprobs and advantages, got {len(self.old_logprobs)} and {len(self.advantages)}"
            )

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.prompt_len :]
