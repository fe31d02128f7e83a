"""Run one task with a smolagents ToolCallingAgent that has a shell tool, or the tools of Forge's MCP servers.

Launched by Forge's ``smolagents`` scaffold with the agent's own venv python;
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` point the model at the Forge gateway.
``--mcp-config FILE`` (an ``mcpServers`` JSON file, as claude-code reads; Forge writes it for the
scaffold's ``mcp`` option) replaces the shell tool with the tools those MCP servers list, each started
over stdio. smolagents' own MCP client needs the ``mcpadapt`` package, which its venv does not have;
this runner uses the ``mcp`` SDK of the servers' own environment instead (the servers' ``command`` is
that environment's python, so its site-packages go on ``sys.path`` *after* the agent's own) and wraps
each listed tool as a smolagents ``Tool``. Prints the agent's final answer on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any

# JSON Schema types smolagents accepts for a tool input (its AUTHORIZED_TYPES, less media)
SCHEMA_TYPES = {"string", "boolean", "integer", "number", "array", "object", "null"}


def shell_tool() -> Any:
    from smolagents import tool

    @tool
    def shell(command: str) -> str:
        """Run a shell command in the working folder and return its output.

        Args:
            command: the command line to run with /bin/sh.
        """
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
        return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"

    return shell


class MCPTools:
    """The MCP servers of an ``mcpServers`` file, connected on an event loop of their own (smolagents
    calls tools synchronously), their tools as smolagents ``Tool`` objects."""

    def __init__(self, configured: dict[str, Any]) -> None:
        self.configured = configured
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.stack = contextlib.AsyncExitStack()

    def __enter__(self) -> list[Any]:
        for entry in self.configured.values():  # the SDK lives in the servers' environment
            site = sysconfig.get_path("purelib", vars={"base": str(Path(entry["command"]).parent.parent)})
            if site not in sys.path:
                sys.path.append(site)
        self.thread.start()
        return self._run(self._connect())

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            self._run(self.stack.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    def _run(self, coroutine: Any, timeout: float | None = 300) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _connect(self) -> list[Any]:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        tools = []
        for entry in self.configured.values():
            params = StdioServerParameters(command=entry["command"], args=list(entry.get("args", [])),
                                           env=dict(os.environ))
            read, write = await self.stack.enter_async_context(stdio_client(params))
            session = await self.stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            listed = await session.list_tools()
            tools += [self._wrap(session, t) for t in listed.tools]
        return tools

    def _wrap(self, session: Any, listed: Any) -> Any:
        from smolagents import Tool

        schema = listed.input_schema or {}
        required = set(schema.get("required", []))
        tool_inputs: dict[str, dict[str, Any]] = {}
        for arg, spec in (schema.get("properties") or {}).items():
            kind = spec.get("type") or [sub.get("type") for sub in spec.get("anyOf", [])]  # Optional[X]: anyOf X, null
            kinds = [k for k in (kind if isinstance(kind, list) else [kind]) if k in SCHEMA_TYPES] or ["any"]
            tool_inputs[arg] = {"type": kinds[0] if len(kinds) == 1 else kinds,
                                "description": spec.get("description") or arg}
            if arg not in required:
                tool_inputs[arg]["nullable"] = True
        runner = self

        class MCPTool(Tool):
            name = listed.name
            description = listed.description or listed.name
            inputs = tool_inputs
            output_type = "string"
            skip_forward_signature_validation = True

            def forward(self, **arguments: Any) -> str:
                called = {k: v for k, v in arguments.items() if v is not None}
                result = runner._run(session.call_tool(listed.name, called))
                text = "\n".join(getattr(part, "text", "") for part in result.content)
                return f"error: {text}" if result.is_error else text

        return MCPTool()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: the MCP servers whose tools to use")
    args = parser.parse_args()

    from smolagents import OpenAIServerModel, ToolCallingAgent

    configured = json.loads(Path(args.mcp_config).read_text())["mcpServers"] if args.mcp_config else {}
    model = OpenAIServerModel(
        model_id=args.model, api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]
    )
    with MCPTools(configured) if configured else contextlib.nullcontext([shell_tool()]) as tools:
        agent = ToolCallingAgent(tools=tools, model=model, max_steps=args.max_steps)
        print(agent.run(args.prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
