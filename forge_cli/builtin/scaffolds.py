"""Built-in scaffolds: the definition files in Forge's ``scaffolds/`` folder.

A white-box scaffold's options are the ``tool-loop`` family's plus those of its context policy
(``truncate-bc`` takes ``context_budget_tokens``, ``keep-last-k`` takes ``keep_last``, ``react``
neither); black-box scaffolds share the options of a launched agent. Both are what
``[scaffolds.NAME]`` in ``forge.toml`` may set. The ``tool-loop`` family has no code yet, so these
definitions name no ``loop``: they are listed, and ``forge scaffold show`` says they cannot run.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from forge_cli import hookimpl
from forge_cli.paths import data_dir
from forge_cli.rollout.context import with_policy_options
from forge_cli.specs import ScaffoldSpec


class ToolLoopOptions(BaseModel):
    """Options of a white-box ``tool-loop`` scaffold (``[scaffolds.truncate-bc]`` etc.), before its policy's."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(30, gt=0, description="Model calls before the episode is cut off.")
    max_tokens: int = Field(512, gt=0, description="Largest completion per turn, in tokens.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature (the trainer uses the same).")


class AgentOptions(BaseModel):
    """Options of a black-box agent (``[scaffolds.opencode]`` etc.)."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(900.0, gt=0, description="Wall-clock budget of one run; then it is killed.")
    extra_args: list[str] = Field(default_factory=list, description="Appended to the launch command.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the agent.")


def load_definitions() -> list[ScaffoldSpec]:
    """Every ``scaffolds/{white,black}/*.toml``, with the options model of its kind attached."""
    root = data_dir("scaffolds")
    specs = []
    for path in sorted(root.glob("white/*.toml")) + sorted(root.glob("black/*.toml")):
        spec = ScaffoldSpec.from_toml(path)
        options = with_policy_options(ToolLoopOptions, spec.context_policy) if spec.kind == "white" else AgentOptions
        specs.append(dataclasses.replace(spec, options=options))
    return specs


@hookimpl
def register_scaffolds(register: Callable[[ScaffoldSpec], None]) -> None:
    for spec in load_definitions():
        register(spec)
