"""Run one task with an OpenAI Agents SDK agent that has a shell tool, or the tools of Forge's MCP servers.

Installed by ``forge scaffold add openai-agents`` into the agent's own venv as its program;
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` point the SDK at the Forge gateway (Responses API), and
tracing is off. ``--mcp-config FILE`` (an ``mcpServers`` JSON file, as claude-code reads: each
server's ``command`` and ``args``; Forge writes it for the scaffold's ``mcp`` option) replaces the
built-in shell tool (``forge_runner``'s) with the tools those MCP servers list, each started over stdio
(the SDK's own MCP client). Prints the agent's final output on stdout; exits 1 if the run raised.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path

from forge_runner import shell


async def run(args: argparse.Namespace) -> str:
    from agents import Agent, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    configured = json.loads(Path(args.mcp_config).read_text())["mcpServers"] if args.mcp_config else {}
    async with contextlib.AsyncExitStack() as stack:
        servers = []
        if configured:
            from agents.mcp import MCPServerStdio

            for name, entry in configured.items():
                params = {"command": entry["command"], "args": list(entry.get("args", []))}
                server = MCPServerStdio(params=params, name=name, cache_tools_list=True,
                                        client_session_timeout_seconds=120)
                servers.append(await stack.enter_async_context(server))
            tools = []
        else:
            tools = [function_tool(shell)]
        agent = Agent(
            name="forge-agent",
            instructions="Solve the task. Use the tools to run commands and edit files. Reply with the final answer.",
            tools=tools,
            mcp_servers=servers,
            model=args.model,
        )
        result = await Runner.run(agent, args.prompt, max_turns=args.max_turns)
        return str(result.final_output)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: the MCP servers whose tools to use")
    args = parser.parse_args()
    print(asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
