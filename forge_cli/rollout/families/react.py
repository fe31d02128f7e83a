"""The ``react`` family: a ReAct text loop — no tools in the request; the tools are described in the
prompt and the actions parsed out of the reply by the scaffold's tool format (``react``)."""

from __future__ import annotations

import re
from typing import Any

from forge_cli.plugins import get_registry
from forge_cli.rollout.context import OBSERVATION_PREFIX
from forge_cli.rollout.loop import Episode

FINAL = "Final Answer:"
INSTRUCTIONS = f"Solve the task step by step. When you know the answer, write '{FINAL} <the answer>'."
_FINAL_RE = re.compile(r"Final Answer:\s*(.*)", re.DOTALL)


def _format(episode: Episode) -> Any:
    return get_registry().tool_format(episode.tool_format)


def system_prompt(episode: Episode, fmt: Any) -> str:
    tools = episode.tool_schemas()
    return f"{INSTRUCTIONS}\n\n{fmt.render_tools(tools)}" if tools else INSTRUCTIONS


async def run(episode: Episode) -> str | None:
    """Thought / Action / Action Input in the text; each action's result comes back as an
    ``Observation:`` user message; the answer is what follows ``Final Answer:`` (or a reply with no action)."""
    options = episode.options
    fmt = _format(episode)
    client = episode.client()
    messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt(episode, fmt)},
                                      {"role": "user", "content": episode.prompt}]
    try:
        for _ in range(options.max_turns):
            messages = await episode.managed(messages)
            reply = await client.chat.completions.create(
                model=episode.model, messages=messages, max_tokens=options.max_tokens, temperature=options.temperature,
                stop=[OBSERVATION_PREFIX])
            text = reply.choices[0].message.content or ""
            parsed = fmt.parse(text)
            messages = [*messages, {"role": "assistant", "content": text}]
            final = _FINAL_RE.search(text)
            if not parsed.calls and not parsed.errors:
                return final.group(1).strip() if final else parsed.content
            for error in parsed.errors:
                episode.report("tool.parse_error", text=error.text, reason=error.reason)
                messages.append({"role": "user", "content": f"{OBSERVATION_PREFIX} error: the action did not parse ({error.reason})"})
            for call in parsed.calls:
                result = await episode.call_tool(call.name, call.arguments)
                messages.append({"role": "user", "content": f"{OBSERVATION_PREFIX} {result}"})
    finally:
        await client.close()
    episode.report("max-turns", turns=options.max_turns)
    return None
