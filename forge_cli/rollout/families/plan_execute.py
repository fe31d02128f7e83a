"""The ``plan-and-execute`` family: a planner call writes numbered steps, then an executor (a
function-calling loop) carries out each step on a branch of context of its own, seeded with the
task, the plan and the results of the steps before."""

from __future__ import annotations

import re

from forge_cli.rollout.families.common import SYSTEM, tool_loop
from forge_cli.rollout.loop import Episode

PLANNER = ("You are the planner. Do not solve the task: write a short plan for it as numbered steps, "
           "one per line ('1. ...'), the last step giving the answer. Tools the executor will have: {tools}.")
EXECUTOR = SYSTEM + " You are the executor: carry out the current step of the plan and reply with its result."
_STEP = re.compile(r"^\s*(\d+)[.)]\s+(.+?)\s*$", re.MULTILINE)


def parse_plan(text: str) -> list[str]:
    """The numbered lines of a plan, in order (the whole text as one step when none are numbered)."""
    steps = [m.group(2) for m in _STEP.finditer(text)]
    return steps or ([text.strip()] if text.strip() else [])


def step_prompt(task: str, steps: list[str], results: list[str], index: int) -> str:
    plan = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(steps))
    done = "".join(f"\nResult of step {i + 1}: {r}" for i, r in enumerate(results))
    return f"Task: {task}\n\nPlan:\n{plan}\n{done}\n\nNow do step {index + 1}: {steps[index]}"


async def run(episode: Episode) -> str | None:
    """Plan once (agent ``planner``), then one executor branch per step (agent ``executor``); the
    answer is the last step's result. Each step is reported as a ``plan.step`` event."""
    options = episode.options
    client = episode.client()
    try:
        names = ", ".join(t.name for t in episode.tools) or "none"
        plan_messages = await episode.managed([{"role": "system", "content": PLANNER.format(tools=names)},
                                               {"role": "user", "content": episode.prompt}], agent="planner")
        reply = await client.chat.completions.create(
            model=episode.model, messages=plan_messages, max_tokens=options.max_tokens, temperature=options.temperature,
            extra_headers=episode.agent_headers("planner"))
        steps = parse_plan(reply.choices[0].message.content or "")
        if len(steps) > options.max_steps:
            episode.report("plan.cut", steps=len(steps), kept=options.max_steps)
            steps = steps[: options.max_steps]
        episode.report("plan", agent="planner", steps=steps)
        results: list[str] = []
        for i in range(len(steps)):
            answer, _ = await tool_loop(episode, client, [
                {"role": "system", "content": EXECUTOR},
                {"role": "user", "content": step_prompt(episode.prompt, steps, results, i)},
            ], agent="executor")
            episode.report("plan.step", agent="executor", step=i + 1, text=steps[i], result=answer)
            if answer is None:
                return None
            results.append(answer)
    finally:
        await client.close()
    return results[-1] if results else None
