"""The data pool: durable storage of trajectories and the schedulers that feed the trainer."""

from __future__ import annotations

from forge_cli.pool.store import DataPool, NoPool, PoolFull, open_pool
from forge_cli.pool.types import (
    Batch,
    Completion,
    CompletionReward,
    Event,
    Group,
    GroupStatus,
    NewCompletion,
    Sample,
    Sampling,
    Trajectory,
    TrajectoryStatus,
)

__all__ = [
    "Batch", "Completion", "CompletionReward", "DataPool", "Event", "Group", "GroupStatus", "NewCompletion", "NoPool", "PoolFull",
    "Sample", "Sampling", "Trajectory", "TrajectoryStatus", "open_pool",
]
