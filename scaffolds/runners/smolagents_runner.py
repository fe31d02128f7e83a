"""Run one task with a smolagents ToolCallingAgent that has a shell tool, or the tools of Forge's MCP servers.

Launched by Forge's ``smolagents`` scaffold with the agent's own venv python;
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` point the model at the Forge gateway.
``--mcp-config FILE`` (an ``mcpServers`` JSON file, as claude-code reads; Forge writes it for the
scaffold's ``mcp`` option) replaces the shell tool with the tools those MCP servers list, each started
over stdio. smolagents' own MCP client needs the ``mcpadapt`` package, which its venv does not have;
this runner uses ``forge_runner``'s client instead (the ``mcp`` SDK of the servers' own environment)
and wraps each listed tool as a smolagents ``Tool``. Prints the agent's final answer on stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from forge_runner import agent_tools, shell

# JSON Schema types smolagents accepts for a tool input (its AUTHORIZED_TYPES, less media)
SCHEMA_TYPES = {"string", "boolean", "integer", "number", "array", "object", "null"}


def mcp_tool(mcp: Any, listed: Any) -> Any:
    """An MCP server's tool as a smolagents ``Tool`` (its inputs in smolagents' own terms)."""
    from smolagents import Tool

    required = set(listed.schema.get("required", []))
    tool_inputs: dict[str, dict[str, Any]] = {}
    for arg, spec in (listed.schema.get("properties") or {}).items():
        kind = spec.get("type") or [sub.get("type") for sub in spec.get("anyOf", [])]  # Optional[X]: anyOf X, null
        kinds = [k for k in (kind if isinstance(kind, list) else [kind]) if k in SCHEMA_TYPES] or ["any"]
        tool_inputs[arg] = {"type": kinds[0] if len(kinds) == 1 else kinds, "description": spec.get("description") or arg}
        if arg not in required:
            tool_inputs[arg]["nullable"] = True
    call = mcp.function(listed)

    class MCPTool(Tool):
        name = listed.name
        description = listed.description
        inputs = tool_inputs
        output_type = "string"
        skip_forward_signature_validation = True

        def forward(self, **arguments: Any) -> str:
            return call(**arguments)

    return MCPTool()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: the MCP servers whose tools to use")
    args = parser.parse_args()

    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    model = OpenAIServerModel(
        model_id=args.model, api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]
    )
    with agent_tools(args.mcp_config, mcp_tool, [tool(shell)]) as tools:
        agent = ToolCallingAgent(tools=tools, model=model, max_steps=args.max_steps)
        print(agent.run(args.prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
