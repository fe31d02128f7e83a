"""Reward-to-go and group-normalised advantages: the two exact computations of the rewards.

Pure functions over plain floats (no pool, no model), so property tests can check them against
the plain formulas.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

from forge_cli.errors import ForgeError


def reward_to_go(rewards: Sequence[float], discount: float) -> list[float]:
    """``G_t = r_t + discount · G_{t+1}`` (``G_T = 0``): each turn's discounted return, in order."""
    if not 0.0 <= discount <= 1.0:
        raise ForgeError(f"the discount must be in [0, 1], got {discount}")
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = float(rewards[t]) + discount * running
        out[t] = running
    return out


def group_advantages(
    returns: Sequence[Sequence[float]],
    *,
    baseline: Literal["trajectories", "completions"] = "trajectories",
    scale: Literal["std", "none"] = "std",
    eps: float = 1e-6,
) -> list[list[float]]:
    """Normalise the per-completion returns of a group's trajectories (``returns[i][t]``).

    ``A_{i,t} = (G_{i,t} − μ) / (σ + eps)`` (``scale="none"``: without the division), where ``μ`` and
    ``σ`` (population std) are the weighted mean and std over every completion of the group with
    weight ``1 / len(returns[i])`` (``baseline="trajectories"``: each trajectory counts once) or 1
    (``"completions"``). Trajectories with no completions take no part and get ``[]``. When all the
    returns are equal (an all-equal group, one completion in all) every advantage is exactly 0.
    """
    values = [float(g) for row in returns for g in row]
    if not values or max(values) == min(values):
        return [[0.0] * len(row) for row in returns]
    weights = [
        (1.0 / len(row) if baseline == "trajectories" else 1.0) for row in returns for _ in row
    ]
    total = math.fsum(weights)
    mean = math.fsum(w * g for w, g in zip(weights, values)) / total
    std = math.sqrt(math.fsum(w * (g - mean) ** 2 for w, g in zip(weights, values)) / total)
    denominator = std + eps if scale == "std" else 1.0
    return [[(float(g) - mean) / denominator for g in row] for row in returns]
