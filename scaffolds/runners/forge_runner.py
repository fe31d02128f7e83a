"""What Forge's runners for library agents share: the shell tool, and Forge's MCP servers as tools.

:func:`shell` is the tool a runner gives its agent by default. With the scaffold's ``mcp`` option Forge
writes the servers it names into an ``mcpServers`` JSON file (``{"mcpServers": {NAME: {"command": …,
"args": […]}}}``, as claude-code reads) and passes it as ``--mcp-config FILE``; :func:`agent_tools` then
gives the agent the tools those servers list instead. :class:`ForgeMcp` starts each server over stdio and
lists its tools; each runner wraps them in its library's own tool type (:meth:`ForgeMcp.function` for
libraries that take a plain function and a JSON schema, :meth:`ForgeMcp.arguments` for those that want a
pydantic model of the arguments).

The installer copies this module into every pip agent's venv (``site-packages``), so a plugin's runner
may use it too. The ``mcp`` SDK it uses is the servers' own environment's (their ``command`` is its
python): its site-packages go on ``sys.path`` *after* the agent's own, so the agent's packages win where
both have one (crewai's venv has the SDK's 1.x, whose names this module reads too). Calls are
synchronous (on an event loop of this module's own, in a thread): an async library awaits them through
``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

CALL_TIMEOUT_S = 300.0
# JSON Schema types as Python types (for a pydantic model of a tool's arguments)
JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                              "object": dict}


def shell(command: str) -> str:
    """Run a shell command in the working folder and return its output.

    Args:
        command: the command line to run with /bin/sh.
    """
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"


class ListedTool(NamedTuple):
    """One tool an MCP server lists: its name, description and the JSON schema of its arguments."""

    name: str
    description: str
    schema: dict[str, Any]


class ForgeMcp:
    """The servers of an ``mcpServers`` file, connected while the ``with`` block runs; ``tools`` is what
    they list, ``call(name, arguments)`` runs one and returns its text (``error: …`` when it failed)."""

    def __init__(self, config_file: str) -> None:
        self.configured: dict[str, Any] = json.loads(Path(config_file).read_text())["mcpServers"]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.stack = contextlib.AsyncExitStack()
        self.tools: list[ListedTool] = []
        self.sessions: dict[str, Any] = {}  # tool name -> the server's session that serves it

    def __enter__(self) -> "ForgeMcp":
        for entry in self.configured.values():  # the SDK lives in the servers' environment
            site = sysconfig.get_path("purelib", vars={"base": str(Path(entry["command"]).parent.parent)})
            if site not in sys.path:
                sys.path.append(site)
        self.thread.start()
        self._run(self._connect())
        return self

    def __exit__(self, *exc: Any) -> None:
        with contextlib.suppress(Exception):
            self._run(self.stack.aclose(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    def _run(self, coroutine: Any, timeout: float | None = CALL_TIMEOUT_S) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _connect(self) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        for entry in self.configured.values():
            params = StdioServerParameters(command=entry["command"], args=list(entry.get("args", [])), env=dict(os.environ))
            read, write = await self.stack.enter_async_context(stdio_client(params))
            session = await self.stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            for tool in (await session.list_tools()).tools:
                schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None)  # the SDK's 2.x or 1.x name
                self.tools.append(ListedTool(tool.name, tool.description or tool.name, dict(schema or {})))
                self.sessions[tool.name] = session

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run the tool ``name``; its text content (``error: …`` where the server says it failed)."""
        given = {k: v for k, v in arguments.items() if v is not None}
        result = self._run(self.sessions[name].call_tool(name, given))
        text = "\n".join(getattr(part, "text", "") for part in result.content)
        failed = getattr(result, "is_error", None) or getattr(result, "isError", False)
        return f"error: {text}" if failed else text

    def function(self, tool: ListedTool) -> Callable[..., str]:
        """A plain function of the tool's keyword arguments (named and documented as the tool)."""

        def run(**arguments: Any) -> str:
            return self.call(tool.name, arguments)

        run.__name__, run.__doc__ = tool.name, tool.description
        return run

    def arguments(self, tool: ListedTool) -> Any:
        """A pydantic model of the tool's arguments (an optional one defaults to None)."""
        from pydantic import Field, create_model

        required = set(tool.schema.get("required") or ())
        fields: dict[str, Any] = {}
        for name, spec in (tool.schema.get("properties") or {}).items():
            kinds = spec.get("type") or [sub.get("type") for sub in spec.get("anyOf", [])]  # Optional[X]: anyOf X, null
            kinds = [JSON_TYPES[k] for k in (kinds if isinstance(kinds, list) else [kinds]) if k in JSON_TYPES] or [Any]
            kind: Any = kinds[0]
            description = spec.get("description") or name
            fields[name] = (kind, Field(description=description)) if name in required else (
                kind | None, Field(None, description=description))
        return create_model(f"{tool.name.title().replace('_', '')}Arguments", **fields)


@contextlib.contextmanager
def agent_tools(config_file: str, wrap: Callable[[ForgeMcp, ListedTool], Any], default: list[Any]) -> Iterator[list[Any]]:
    """The agent's tools while the block runs: with ``--mcp-config FILE`` the servers' tools, each wrapped
    by ``wrap`` into the library's tool type; without one, ``default`` (its shell tool)."""
    if not config_file:
        yield default
        return
    with ForgeMcp(config_file) as mcp:
        yield [wrap(mcp, tool) for tool in mcp.tools]
