"""Run one task with a Google ADK ``Agent`` (Gemini model, a shell tool) on the gateway's Gemini API.

Launched by Forge's ``google-adk`` scaffold with the agent's own venv python; ``GOOGLE_GEMINI_BASE_URL``
is the gateway (google-genai's own setting) and ``GOOGLE_API_KEY`` the trajectory's key. Prints the
agent's final answer last.
``--mcp-config FILE`` (the scaffold's ``mcp`` option): the tools of those MCP servers instead of the shell
(``forge_runner``).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from forge_runner import agent_tools, shell


def mcp_tool(mcp: Any, tool: Any) -> Any:
    from google.adk.tools import BaseTool
    from google.genai import types

    call = mcp.function(tool)

    class McpTool(BaseTool):
        def _get_declaration(self) -> Any:
            return types.FunctionDeclaration(name=tool.name, description=tool.description,
                                             parameters_json_schema=tool.schema)

        async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
            return await asyncio.to_thread(call, **args)

    return McpTool(name=tool.name, description=tool.description)


async def run(model: str, prompt: str, tools: list[Any]) -> str:
    from google.adk.agents import Agent
    from google.adk.models.google_llm import Gemini
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    # a Gemini model object, not a name: ADK's registry knows only names like gemini-*
    agent = Agent(name="forge_agent", model=Gemini(model=model), tools=tools,
                  instruction="You are a coding agent working in the current folder. Use the shell tool to do the task.")
    runner = InMemoryRunner(agent=agent, app_name="forge")
    session = await runner.session_service.create_session(app_name="forge", user_id="forge")
    message = types.Content(role="user", parts=[types.Part(text=prompt)])
    final = ""
    async for event in runner.run_async(user_id="forge", session_id=session.id, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            final = "".join(part.text or "" for part in event.content.parts)
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: its servers' tools instead of the shell")
    args = parser.parse_args()
    with agent_tools(args.mcp_config, mcp_tool, [shell]) as offered:
        print(asyncio.run(run(args.model, args.prompt, offered)))


if __name__ == "__main__":
    main()
