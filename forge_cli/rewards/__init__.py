"""Rewards (DESIGN.md §6): named components summed into a trajectory's reward, each logged; the
per-completion credit and its discounted reward-to-go; advantages normalised inside the group.

- :mod:`forge_cli.configs.rewards`: ``RewardsConfig``, the ``[rewards]`` section;
- :mod:`.components`: the built-in components (outcome, process, completion time);
- :mod:`.returns`: ``reward_to_go`` and ``group_advantages``, the exact computations;
- :mod:`.group`: ``compute_group_rewards`` and ``apply_group_rewards`` (compute and write to the pool).

Nothing here touches the model; a completion's text comes from the caller (``texts``).
"""

from __future__ import annotations

from forge_cli.rewards.group import GroupRewards, TrajectoryRewards, apply_group_rewards, compute_group_rewards
from forge_cli.rewards.returns import group_advantages, reward_to_go

__all__ = [
    "GroupRewards", "TrajectoryRewards",
    "apply_group_rewards", "compute_group_rewards", "group_advantages", "reward_to_go",
]
