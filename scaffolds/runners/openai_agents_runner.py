"""Run one task with an OpenAI Agents SDK agent that has a shell tool, or the tools of Forge's MCP servers.

Installed by ``forge scaffold add openai-agents`` into the agent's own venv as its program;
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` point the SDK at the Forge gateway (Responses API), and
tracing is off. ``--mcp shell,files`` replaces the built-in shell tool with the tools those Forge
MCP servers list (their scripts in ``--tools``, run over stdio by this venv's python, which has the
``mcp`` SDK the Agents SDK depends on). Prints the agent's final output on stdout; exits 1 if the
run raised.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path


async def run(args: argparse.Namespace) -> str:
    from agents import Agent, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    names = [n.strip() for n in args.mcp.split(",") if n.strip()]
    async with contextlib.AsyncExitStack() as stack:
        servers = []
        if names:
            from agents.mcp import MCPServerStdio

            for name in names:
                script = Path(args.tools) / f"{name}_server.py"
                if not script.is_file():
                    raise SystemExit(f"no Forge MCP server {name!r} at {script}")
                server = MCPServerStdio(params={"command": sys.executable, "args": [str(script)]}, name=name,
                                        cache_tools_list=True, client_session_timeout_seconds=120)
                servers.append(await stack.enter_async_context(server))
            tools = []
        else:
            @function_tool
            def shell(command: str) -> str:
                """Run a shell command in the working folder and return its output."""
                done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
                return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"

            tools = [shell]
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
    parser.add_argument("--mcp", default="", help="Forge MCP servers (comma-separated: shell, files, search) to use")
    parser.add_argument("--tools", default=".forge-tools", help="the folder of Forge's MCP server scripts")
    args = parser.parse_args()
    print(asyncio.run(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
