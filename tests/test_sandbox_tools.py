"""The MCP shell tool server, spoken to by a real MCP client over stdio."""

from __future__ import annotations

import asyncio
import sys

from forge_cli.paths import data_dir


def test_shell_server_over_stdio(tmp_path):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    server = data_dir("sandboxes") / "tools" / "shell_server.py"
    params = StdioServerParameters(command=sys.executable, args=[str(server), "--root", str(tmp_path)])

    async def session_run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                wrote = await session.call_tool("write_file", {"path": "a/b.txt", "content": "hello"})
                ran = await session.call_tool("bash", {"command": "cat a/b.txt && exit 3"})
                escaped = await session.call_tool("read_file", {"path": "../outside"})
                return tools, wrote, ran, escaped

    tools, wrote, ran, escaped = asyncio.run(session_run())
    assert tools == {"bash", "read_file", "write_file"}
    assert (tmp_path / "a" / "b.txt").read_text() == "hello"
    assert "hello" in ran.content[0].text and "[exit code 3]" in ran.content[0].text
    assert escaped.is_error and "outside the working folder" in escaped.content[0].text
