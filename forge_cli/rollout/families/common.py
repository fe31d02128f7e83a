"""What the function-calling families share: the system prompt, one agent's tool loop, messages."""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from forge_cli.rollout.context import Messages
from forge_cli.rollout.families import SYSTEM  # the families' system prompt (tool-call's default system_prompt)
from forge_cli.rollout.loop import Episode

# a call the loop answers itself (the orchestrator's delegate): (name, arguments) -> result text, or None: a task tool
LocalTool = Callable[[str, Any], "Awaitable[str | None]"]


def arguments_of(call: Any) -> Any:
    """A tool call's arguments as JSON (a raw string when they are not JSON)."""
    raw = call.function.arguments
    try:
        return json.loads(raw) if raw and raw.strip() else {}
    except ValueError:
        return raw


def assistant_message(message: Any) -> dict[str, Any]:
    """The assistant reply as a history message (its tool calls kept in OpenAI's shape)."""
    calls = message.tool_calls or []
    out: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": c.function.arguments}} for c in calls]
    return out


async def tool_loop(episode: Episode, client: Any, messages: Messages, *, agent: str | None = None,
                    tools: list[dict[str, Any]] | None = None, local: LocalTool | None = None,
                    max_turns: int | None = None) -> tuple[str | None, Messages]:
    """One agent's function-calling loop on its own history: ``(final answer or None, last history)``.

    Before every call the history goes through the scaffold's context policy (adopted as the new
    history); every call names ``agent``. ``tools`` default to the task's; ``local`` answers the calls
    the loop handles itself. Past ``max_turns`` a ``max-turns`` event is reported and there is no answer.
    """
    options = episode.options
    schemas = episode.tool_schemas() if tools is None else tools
    headers = episode.agent_headers(agent)
    limit = max_turns or options.max_turns
    extra: dict[str, Any] = {"tools": schemas} if schemas else {}
    for _ in range(limit):
        messages = await episode.managed(messages, tools=schemas, agent=agent)
        reply = await client.chat.completions.create(
            model=episode.model, messages=messages, max_tokens=options.max_tokens, temperature=options.temperature,
            extra_headers=headers, **extra)
        message = reply.choices[0].message
        messages = [*messages, assistant_message(message)]
        if not message.tool_calls:
            return message.content, messages
        for call in message.tool_calls:
            arguments = arguments_of(call)
            result = await local(call.function.name, arguments) if local is not None else None
            if result is None:
                result = await episode.call_tool(call.function.name, arguments)
            messages = [*messages, {"role": "tool", "tool_call_id": call.id, "content": result}]
    episode.report("max-turns", turns=limit, **({"agent": agent} if agent else {}))
    return None, messages
