"""A group's rewards: every component of every trajectory, the per-completion credit, the
reward-to-go and the group-normalised advantages; and writing them to the pool.

``compute_group_rewards`` is the one place components are called (one trajectory at a time, with
only the context arguments each declares); ``apply_group_rewards`` is what the rollout driver
calls once every member of a group it submitted with ``rewards_pending=True`` is terminal.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from forge_cli.configs.rewards import RewardsConfig
from forge_cli.errors import ForgeError, one_line
from forge_cli.plugins import get_registry
from forge_cli.pool.types import CompletionReward
from forge_cli.rewards.returns import group_advantages, reward_to_go
from forge_cli.specs import RewardSpec, RewardValue

if TYPE_CHECKING:
    from forge_cli.pool.types import Trajectory

if TYPE_CHECKING:
    from forge_cli.pool.store import DataPool


@dataclass(frozen=True)
class TrajectoryRewards:
    """One trajectory's rewards: each weighted component (what is logged), their sum, and what each
    of its completions is credited (empty for a trajectory with no completions)."""

    trajectory_id: str
    components: dict[str, float]
    total: float
    completions: list[CompletionReward] = field(default_factory=list)


@dataclass(frozen=True)
class GroupRewards:
    """The rewards of a group's trajectories, in the order given."""

    trajectories: list[TrajectoryRewards]

    @property
    def completion_rewards(self) -> list[CompletionReward]:
        return [c for t in self.trajectories for c in t.completions]

    def of(self, trajectory_id: str) -> TrajectoryRewards:
        return next(t for t in self.trajectories if t.trajectory_id == trajectory_id)


def _declared(fn: Callable[..., Any]) -> tuple[set[str], bool]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set(), True
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def _component(spec: RewardSpec, label: str, trajectory: Trajectory, context: dict[str, Any]) -> RewardValue:
    """Call one component the way the contract says and check what it returned."""
    names, var_kw = _declared(spec.compute)
    kwargs = context if var_kw else {k: v for k, v in context.items() if k in names}
    try:
        raw = spec.compute(trajectory, **kwargs)
    except ForgeError:
        raise
    except Exception as exc:
        raise ForgeError(f"{label} raised {type(exc).__name__}: {one_line(str(exc))}") from None
    value = raw if isinstance(raw, RewardValue) else RewardValue(raw)
    numbers = [value.value, *(value.per_completion or ())]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in numbers):
        raise ForgeError(f"{label} returned {raw!r} for trajectory {trajectory.id}: not finite numbers")
    n = len(trajectory.completions)
    if value.per_completion is not None and len(value.per_completion) != n:
        raise ForgeError(
            f"{label} returned {len(value.per_completion)} per-completion values for trajectory {trajectory.id}, "
            f"which has {n} completions"
        )
    return value


def active_components(registry_rewards: Mapping[str, Any] | None, settings: RewardsConfig) -> list[tuple[str, RewardSpec, str]]:
    if registry_rewards is None:
        registry_rewards = get_registry().rewards
    out = []
    for name, weight in settings.weights.items():
        if weight == 0:
            continue
        entry = registry_rewards.get(name)
        if entry is None:
            known = ", ".join(sorted(registry_rewards)) or "none"
            raise ForgeError(f"[rewards] weights names '{name}', which no plugin registered (registered: {known})")
        spec = getattr(entry, "value", entry)
        plugin = getattr(entry, "plugin", None)
        out.append((name, spec, f"reward '{name}'" + (f" (plugin '{plugin}')" if plugin else "")))
    return out


def compute_group_rewards(
    group: Sequence[Trajectory],
    *,
    outcomes: Mapping[str, Any],
    settings: RewardsConfig | None = None,
    texts: Mapping[str, Sequence[str | None]] | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    components: Mapping[str, Any] | None = None,
) -> GroupRewards:
    """The rewards of one group's trajectories (each with its completions in ``seq`` order).

    ``outcomes``: trajectory id → its verifier's Outcome, or None/absent when it was not verified.
    ``texts``: trajectory id → each completion's output text (None where not decoded; without texts
    the process reward sees only the recorded parse errors). ``components``: name → RewardSpec (or
    registry entry); the registry's rewards by default. Only components with a non-zero weight in
    ``settings.weights`` are computed, each times its weight.
    """
    settings = settings or RewardsConfig()
    specs = active_components(components, settings)
    texts = texts or {}
    per_traj: list[tuple[Trajectory, dict[str, float], list[float], list[dict[str, float]]]] = []
    for trajectory in group:
        context = {
            "group": list(group), "outcome": outcomes.get(trajectory.id), "outcomes": dict(outcomes),
            "texts": list(texts.get(trajectory.id, ())), "tools": list(tools), "settings": settings,
        }
        n = len(trajectory.completions)
        credited = [0.0] * n
        parts: list[dict[str, float]] = [{} for _ in range(n)]
        logged: dict[str, float] = {}
        for name, spec, label in specs:
            value = _component(spec, label, trajectory, context)
            weight = settings.weights[name]
            per = [weight * float(x) for x in (value.per_completion or ())]
            logged[name] = weight * float(value.value) + math.fsum(per)
            for i, x in enumerate(per):
                credited[i] += x
                parts[i][name] = parts[i].get(name, 0.0) + x
            if n:  # a trajectory-level value is earned at the end
                credited[-1] += weight * float(value.value)
                parts[-1][name] = parts[-1].get(name, 0.0) + weight * float(value.value)
        per_traj.append((trajectory, logged, credited, parts))
    returns = [reward_to_go(credited, settings.discount) for _, _, credited, _ in per_traj]
    advantages = group_advantages(returns, baseline=settings.baseline, scale=settings.scale, eps=settings.eps)
    out = []
    for (trajectory, logged, credited, parts), g, a in zip(per_traj, returns, advantages):
        completions = [
            _completion_reward(c.id, credited[i], g[i], a[i], parts[i]) for i, c in enumerate(trajectory.completions)
        ]
        out.append(TrajectoryRewards(trajectory.id, logged, math.fsum(logged.values()), completions))
    return GroupRewards(out)


def apply_group_rewards(
    pool: "DataPool",
    group_id: str,
    *,
    outcomes: Mapping[str, Any],
    settings: RewardsConfig | None = None,
    texts: Mapping[str, Sequence[str | None]] | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    components: Mapping[str, Any] | None = None,
) -> GroupRewards:
    """Read a finished group from ``pool``, compute its rewards and write them in one transaction
    (each trajectory's named components, each completion's reward, reward-to-go and advantage);
    from then on the scheduler may hand the group out."""
    group = pool.group(group_id)
    result = compute_group_rewards(
        group.trajectories, outcomes=outcomes, settings=settings, texts=texts, tools=tools, components=components
    )
    pool.set_completion_rewards(
        group_id, result.completion_rewards,
        trajectory_rewards={t.trajectory_id: t.components for t in result.trajectories if t.components},
    )
    return result


def _completion_reward(*fields: Any) -> "CompletionReward":
    return CompletionReward(*fields)
