"""Built-in plugin: the reward components outcome, process and completion_time (forge_cli.rewards)."""

from __future__ import annotations

from typing import Callable

from forge_cli import hookimpl
from forge_cli.rewards.components import completion_time_reward, outcome_reward, process_reward
from forge_cli.specs import RewardSpec


@hookimpl
def register_rewards(register: Callable[[RewardSpec], None]) -> None:
    register(RewardSpec("outcome", "The task verifier's score (0 when not verified).", outcome_reward))
    register(RewardSpec(
        "process",
        "Per completion: minus the penalties for unparsable tool calls, unknown tools, arguments that fail "
        "the tool's schema and language mixing ([rewards.process]).",
        process_reward,
    ))
    register(RewardSpec(
        "completion_time",
        "A correct run's speed against the group's correct runs: (slowest - its time) / slowest; 0 for a wrong run.",
        completion_time_reward,
    ))
