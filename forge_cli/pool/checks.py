"""Checks of what the pool is asked to write: each raises ForgeError before anything is written."""

from __future__ import annotations

import json
import math
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.pool.types import CompletionReward

INT32_MAX = 2**31 - 1


def check_ids(name: str, values: Any) -> list[int]:
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ForgeError(f"{name} must be a list of integers")
    if values and (min(values) < 0 or max(values) > INT32_MAX):
        raise ForgeError(f"{name} holds a token id outside 0..{INT32_MAX}")
    return list(values)


def check_rewards(components: dict[str, float]) -> None:
    if not components:
        raise ForgeError("rewards need at least one named component")
    for name, value in components.items():
        if not isinstance(name, str) or not name:
            raise ForgeError(f"reward component names must be non-empty strings, got {name!r}")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ForgeError(f"reward component {name!r} must be a finite number, got {value!r}")


def completion_reward_rows(rewards: Any) -> list[tuple[float, float, float, str, str]]:
    """``(reward, reward_to_go, advantage, components JSON, completion id)`` per CompletionReward, checked."""
    rows, seen = [], set()
    for item in rewards:
        if not isinstance(item, CompletionReward):
            raise ForgeError(f"set_completion_rewards takes CompletionReward records, got {type(item).__name__}")
        if item.completion_id in seen:
            raise ForgeError(f"completion {item.completion_id} is listed twice")
        seen.add(item.completion_id)
        for what, value in (("reward", item.reward), ("reward_to_go", item.reward_to_go), ("advantage", item.advantage)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ForgeError(f"completion {item.completion_id}: {what} must be a finite number, got {value!r}")
        if item.components:
            check_rewards(item.components)
        rows.append((float(item.reward), float(item.reward_to_go), float(item.advantage),
                     json.dumps({k: float(v) for k, v in item.components.items()}), item.completion_id))
    return rows
