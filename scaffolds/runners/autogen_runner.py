"""Run one task with an AutoGen ``AssistantAgent`` (autogen-agentchat) and a shell tool, its model
``OpenAIChatCompletionClient`` on the gateway.

Launched by Forge's ``autogen`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point the model at the Forge gateway. The agent loops over tool calls (up to
``--max-steps``) until it answers without one. Prints the agent's final answer last.
``--mcp-config FILE`` (the scaffold's ``mcp`` option): the tools of those MCP servers instead of the shell
(``forge_runner``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from forge_runner import agent_tools, shell


def mcp_tool(mcp: Any, tool: Any) -> Any:
    from autogen_core.tools import BaseTool

    call = mcp.function(tool)

    class McpTool(BaseTool):
        async def run(self, args: Any, cancellation_token: Any) -> str:
            return await asyncio.to_thread(call, **args.model_dump())

    return McpTool(mcp.arguments(tool), str, tool.name, tool.description)


async def run(model: str, prompt: str, max_steps: int, tools: list[Any]) -> str:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model=model, base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0,
        model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                    "structured_output": False})
    agent = AssistantAgent("forge_agent", model_client=client, tools=tools, max_tool_iterations=max_steps,
                           system_message="You are a coding agent working in the current folder. Use the shell tool to do the task.")
    try:
        result = await agent.run(task=prompt)
    finally:
        await client.close()
    return str(result.messages[-1].content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: its servers' tools instead of the shell")
    args = parser.parse_args()
    with agent_tools(args.mcp_config, mcp_tool, [shell]) as offered:
        print(asyncio.run(run(args.model, args.prompt, args.max_steps, offered)))


if __name__ == "__main__":
    main()
