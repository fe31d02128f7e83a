"""The ``orchestrator`` family: an orchestrator agent hands sub-tasks to worker sub-agents.

The orchestrator is a function-calling loop whose only tool is ``delegate``; each delegation
starts a worker (``worker-1``, ``worker-2``, …): a function-calling loop with the task's tools on a
branch of context of its own (its system prompt and the sub-task), whose answer is the
``delegate`` call's result (delegations run one after another). Every call of the trajectory
carries ``x-forge-agent`` (so the gateway records which completion is whose), and each worker's
run is reported as an ``agent.worker`` event.
"""

from __future__ import annotations

import asyncio
from typing import Any

from forge_cli.rollout.families.common import SYSTEM, tool_loop
from forge_cli.rollout.loop import Episode

ORCHESTRATOR = ("You are the orchestrator. Split the task into sub-tasks and hand each to a worker with the "
                "delegate tool (a worker has these tools: {tools}); combine what they report into the answer, "
                "and reply with it calling no tool.")
WORKER = SYSTEM + " You are a worker: do the sub-task you are given and reply with its result."
DELEGATE = {"type": "function", "function": {
    "name": "delegate",
    "description": "Hand a sub-task to a worker agent; returns the worker's answer.",
    "parameters": {"type": "object", "properties": {"task": {"type": "string", "description": "The sub-task."}},
                   "required": ["task"]},
}}


class OrchestratorLoop:
    """One instance per episode: the orchestrator's loop and the workers it has started."""

    def __init__(self) -> None:
        self.workers = 0
        self.lock = asyncio.Lock()

    async def run(self, episode: Episode) -> str | None:
        self.episode = episode
        self.client = episode.client()
        names = ", ".join(t.name for t in episode.tools) or "none"
        try:
            answer, _ = await tool_loop(episode, self.client, [
                {"role": "system", "content": ORCHESTRATOR.format(tools=names)},
                {"role": "user", "content": episode.prompt},
            ], agent="orchestrator", tools=[DELEGATE], local=self.delegate)
        finally:
            await self.client.close()
        return answer

    async def delegate(self, name: str, arguments: Any) -> str | None:
        """The orchestrator's ``delegate`` calls (any other name: an unknown tool, as the episode says)."""
        if name != "delegate":
            return None
        task = arguments.get("task") if isinstance(arguments, dict) else arguments
        if not isinstance(task, str) or not task.strip():
            self.episode.report("tool.error", agent="orchestrator", name=name, error="delegate needs a 'task' string")
            return "error: delegate needs a 'task' string"
        async with self.lock:
            if self.workers >= self.episode.options.max_workers:
                self.episode.report("agent.refused", agent="orchestrator", task=task)
                return f"error: no more workers (max_workers = {self.episode.options.max_workers})"
            self.workers += 1
            worker = f"worker-{self.workers}"
        answer, _ = await tool_loop(self.episode, self.client, [
            {"role": "system", "content": WORKER}, {"role": "user", "content": task}], agent=worker)
        self.episode.report("agent.worker", agent=worker, task=task, answer=answer)
        return answer if answer is not None else f"{worker} gave no answer"

