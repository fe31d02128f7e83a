"""Run one task with a pydantic-ai ``Agent`` that has a shell tool, its model the gateway's (Chat Completions).

Launched by Forge's ``pydantic-ai`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point the model at the Forge gateway. Prints the agent's final answer last.
``--mcp-config FILE`` (the scaffold's ``mcp`` option): the tools of those MCP servers instead of the shell
(``forge_runner``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from forge_runner import agent_tools, shell

INSTRUCTIONS = "You are a coding agent working in the current folder. Use the shell tool to do the task, then say what you did."


def mcp_tool(mcp: Any, tool: Any) -> Any:
    from pydantic_ai import Tool

    return Tool.from_schema(mcp.function(tool), name=tool.name, description=tool.description, json_schema=tool.schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: its servers' tools instead of the shell")
    args = parser.parse_args()

    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    with agent_tools(args.mcp_config, mcp_tool, [shell]) as offered:
        agent = Agent(OpenAIChatModel(args.model, provider=provider), instructions=INSTRUCTIONS, tools=offered)
        print(agent.run_sync(args.prompt).output)


if __name__ == "__main__":
    main()
