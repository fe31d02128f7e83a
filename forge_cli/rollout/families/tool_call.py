"""The ``tool-call`` family: OpenAI function calling over the chat API, one agent."""

from __future__ import annotations

from forge_cli.rollout.families.common import tool_loop
from forge_cli.rollout.loop import Episode


async def run(episode: Episode) -> str | None:
    """Tools in the request, ``tool_calls`` in the response, results as ``tool`` messages; the answer
    is the first message without tool calls (``None`` after ``max_turns``)."""
    client = episode.client()
    try:
        system = episode.options.system_prompt
        first = [{"role": "system", "content": system}] if system else []
        answer, _ = await tool_loop(episode, client, [*first, {"role": "user", "content": episode.prompt}])
    finally:
        await client.close()
    return answer
