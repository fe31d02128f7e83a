"""Forge's white-box loop families: one module per family, and the one table of them.

Each family is a loop per the contract of :mod:`forge_cli.rollout.loop` (the OpenAI client from
``episode.client()``, the history through ``await episode.managed(...)`` before every call, tools
through ``episode.call_tool``, the final answer returned). The context policy and the tool format
are the scaffold's, so one family makes many scaffolds (:mod:`forge_cli.builtin.scaffolds`):

- ``tool-call`` (:mod:`.tool_call`): OpenAI function calling — tools in the request, ``tool_calls``
  in the response (the gateway renders and parses them in the session's tool format), results as
  ``tool`` messages; ends on a message without tool calls or after ``max_turns``;
- ``react`` (:mod:`.react`): a text loop — the tools described in the prompt and the actions parsed
  out of the text by the scaffold's tool format (``react``), observations appended as user text;
- ``plan-and-execute`` (:mod:`.plan_execute`): a planner call writes numbered steps, then an
  executor (a tool-call loop on its own branch of context) carries out each step;
- ``orchestrator`` (:mod:`.orchestrator`): an orchestrator hands sub-tasks to worker sub-agents
  through a ``delegate`` tool; each worker is a tool-call loop with its own branch of context, and
  every call names its agent (``x-forge-agent: orchestrator`` / ``worker-N``).

Importing this package is cheap (pydantic only); a family's module is imported when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

SYSTEM = "You are a capable agent. Use the tools when they help; when you know the answer, reply with it and call no tool."


class ToolLoopOptions(BaseModel):
    """Options of a white-box loop (``[scaffolds.tool-call]`` etc.), before its context policy's."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(30, gt=0, description="Model calls (per agent) before the episode is cut off.")
    max_tokens: int = Field(512, gt=0, description="Largest completion per turn, in tokens.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature (the trainer uses the same).")


class ToolCallOptions(ToolLoopOptions):
    """Options of a ``tool-call`` scaffold: the loop's, and its system message."""

    system_prompt: str = Field(
        SYSTEM, description="The system message before the task; empty: none (the embedded default's: its prompts are "
                    "the task alone).")


class PlanOptions(ToolLoopOptions):
    """Options of a ``plan-and-execute`` scaffold: the loop's, and how many plan steps are carried out."""

    max_steps: int = Field(8, gt=0, description="Plan steps carried out; the rest of a longer plan is dropped.")


class OrchestratorOptions(ToolLoopOptions):
    """Options of an ``orchestrator`` scaffold: the loop's, and how many workers it may start."""

    max_workers: int = Field(8, gt=0, description="Sub-tasks handed out in all; later delegations are refused.")


@dataclass(frozen=True)
class Family:
    """One loop family: its code (``module:attr``), its options model, its default tool format, and
    the formats Forge registers built-in scaffolds of it with (``None``: every built-in
    function-calling format). The function-calling families run with any format (the gateway
    renders and parses it) and are each crossed with all of them, every combination registered only
    because the contract test (tests/test_scaffold_contract.py) runs it; a definition may name any
    other format."""

    name: str
    loop: str
    options: type[BaseModel]
    default_format: str | None  # None: the model's own (native, or hermes for the embedded model)
    description: str
    formats: tuple[str, ...] | None = None


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("tool-call", "forge_cli.rollout.families.tool_call:run", ToolCallOptions, None,
               "Function-calling tool loop over the chat API (tools in the request, tool_calls back)"),
        Family("react", "forge_cli.rollout.families.react:run", ToolLoopOptions, "react",
               "ReAct text loop: tools described in the prompt, actions parsed from the text, observations as user text",
               formats=("react",)),
        Family("plan-and-execute", "forge_cli.rollout.families.plan_execute:run", PlanOptions, None,
               "A planner call writes numbered steps; an executor tool loop carries out each step on its own context"),
        Family("orchestrator", "forge_cli.rollout.families.orchestrator:OrchestratorLoop", OrchestratorOptions, None,
               "An orchestrator delegates sub-tasks to worker sub-agents, each a tool loop on its own branch of context"),
    )
}
