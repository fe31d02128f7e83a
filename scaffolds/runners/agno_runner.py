"""Run one task with an agno ``Agent`` and a shell tool, its model agno's ``Ollama`` on the gateway's Ollama API.

Launched by Forge's ``agno`` scaffold with the agent's own venv python; ``OLLAMA_HOST`` is the gateway
(``/api/chat`` under it) and ``OLLAMA_API_KEY`` the trajectory's key, sent as a bearer token. Prints the
agent's final answer last.
``--mcp-config FILE`` (the scaffold's ``mcp`` option): the tools of those MCP servers instead of the shell
(``forge_runner``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from forge_runner import agent_tools, shell


def mcp_tool(mcp: Any, tool: Any) -> Any:
    from agno.tools.function import Function

    return Function(name=tool.name, description=tool.description, parameters=tool.schema, entrypoint=mcp.function(tool),
                    skip_entrypoint_processing=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: its servers' tools instead of the shell")
    args = parser.parse_args()

    from agno.agent import Agent
    from agno.models.ollama import Ollama

    model = Ollama(id=args.model, host=os.environ["OLLAMA_HOST"], api_key=os.environ["OLLAMA_API_KEY"])
    with agent_tools(args.mcp_config, mcp_tool, [shell]) as offered:
        agent = Agent(model=model, tools=offered, telemetry=False,
                      instructions="You are a coding agent working in the current folder. Use the shell tool to do the task.")
        print(agent.run(args.prompt).content)


if __name__ == "__main__":
    main()
