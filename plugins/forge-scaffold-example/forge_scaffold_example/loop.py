"""The ``example-sexpr`` scaffold's loop: a small tool-calling loop over the chat API.

It follows Forge's white-box loop contract (``forge_cli.rollout.loop``): it is handed an
``Episode``, talks to the gateway only through ``episode.client()`` (the trajectory's own URL
and key), sends its history through ``episode.manage`` (the scaffold's ``keep-last-k`` policy,
which reports what it drops) and returns the final answer. The gateway renders the tools in the
session's ``sexpr`` format and parses the model's ``(call NAME {...})`` back into tool calls, so
the loop itself only sees OpenAI-shaped messages.
"""

from __future__ import annotations

import json
from typing import Any

from forge_cli.rollout.loop import Episode


class SexprLoop:
    """One instance per episode (Forge makes it with no arguments and awaits ``run``)."""

    async def run(self, episode: Episode) -> str | None:
        options = episode.options  # ExampleOptions, validated from [scaffolds.example-sexpr]
        client = episode.client()
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": f"{options.persona}\nUse the tools when they help; answer in one line."},
            {"role": "user", "content": episode.prompt},
        ]
        extra: dict[str, Any] = {"tools": episode.tool_schemas()} if episode.tools else {}
        try:
            for _ in range(options.max_turns):
                reply = await client.chat.completions.create(
                    model=episode.model, messages=episode.manage(messages), max_tokens=options.max_tokens, **extra
                )
                message = reply.choices[0].message
                calls = message.tool_calls or []
                messages.append({
                    "role": "assistant",
                    "content": message.content or "",
                    **({"tool_calls": [c.model_dump() for c in calls]} if calls else {}),
                })
                if not calls:
                    return message.content
                for call in calls:
                    try:
                        arguments = json.loads(call.function.arguments or "{}")
                    except ValueError:
                        arguments = call.function.arguments
                    result = await episode.call_tool(call.function.name, arguments)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        finally:
            await client.close()
        episode.report("max-turns", turns=options.max_turns)
        return None
