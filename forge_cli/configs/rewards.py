"""``[rewards]``: which components make a trajectory's reward, their weights, the discount of the
reward-to-go, how advantages are normalised, and each built-in component's own settings.

Torch-free and light: :mod:`forge_cli.config` imports it on the CLI's start-up path. The components
themselves are in :mod:`forge_cli.rewards`.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from forge_cli.configs.common import Section
from forge_cli.names import NAME_RE


DEFAULT_WEIGHTS = {"outcome": 1.0, "process": 1.0, "completion_time": 0.1}


class ProcessRewardsConfig(Section):
    """``[rewards.process]``: the penalty of each kind of bad intermediate behaviour, credited to the
    completion that showed it (the component's value is minus their sum)."""

    parse_error: float = Field(0.1, ge=0, description="Per tool call that failed to parse (the completion's parse_errors).")
    unknown_tool: float = Field(0.1, ge=0, description="Per call to a tool the request did not offer.")
    invalid_arguments: float = Field(
        0.1, ge=0, description="Per call whose arguments fail the tool's JSON schema (needs the completion's text).")
    language_mixing: float = Field(
        0.1, ge=0, description="Times the fraction of the output's words not in its main script (needs the text).")
    min_words: int = Field(
        4, ge=1, description="Language mixing is only judged on outputs with at least this many words.")


class CompletionTimeRewardsConfig(Section):
    """``[rewards.completion_time]``: how a correct run's speed is measured against its group."""

    source: Literal["trajectory", "generation"] = Field("trajectory", description=(
        "trajectory: wall-clock time from start to finish (falls back to the first completion's start to the "
        "last one's end); generation: the sum of the completions' generation times."))
    correct_score: float = Field(
        1.0, gt=0, le=1, description="A completed run whose outcome score is at least this is correct.")


class RewardsConfig(Section):
    """``[rewards]``: a trajectory's reward is ``Σ weight[name] · component[name]``, each logged;
    ``weights`` are laid over the defaults (so ``process = 0.5`` keeps the others), 0 turns one off.

    Per completion ``t`` the credited reward ``r_t`` is the weighted per-completion part of every
    component plus, on the last completion, their weighted trajectory-level part;
    ``G_t = r_t + discount · G_{t+1}`` is its reward-to-go, and its advantage is ``G_t`` normalised
    over the group (see :func:`forge_cli.rewards.returns.group_advantages`).
    """

    weights: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_WEIGHTS),
        description="Component name -> weight, over the defaults; a component of weight 0 is not computed.",
    )
    discount: float = Field(1.0, ge=0, le=1, description="gamma of the per-completion reward-to-go.")
    baseline: Literal["trajectories", "completions"] = Field("trajectories", description=(
        "trajectories: each trajectory counts once in the group's mean and std (GRPO when discount = 1 and "
        "there are no per-completion rewards); completions: every completion counts once."))
    scale: Literal["std", "none"] = Field("std", description="std: divide by the group's std; none: only subtract the mean.")
    eps: float = Field(1e-6, gt=0, description="Added to the std before dividing.")
    process: ProcessRewardsConfig = Field(default_factory=ProcessRewardsConfig)
    completion_time: CompletionTimeRewardsConfig = Field(default_factory=CompletionTimeRewardsConfig)

    @field_validator("weights", mode="before")
    @classmethod
    def _over_defaults(cls, weights: object) -> object:
        return {**DEFAULT_WEIGHTS, **weights} if isinstance(weights, dict) else weights

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, weights: dict[str, float]) -> dict[str, float]:
        for name, weight in weights.items():
            if not NAME_RE.match(name):
                raise ValueError(f"{name!r} is not a reward name (lowercase letters, digits, '-' or '_')")
            if not math.isfinite(weight):
                raise ValueError(f"the weight of {name!r} must be finite, got {weight}")
        return weights
