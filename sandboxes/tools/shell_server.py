"""An MCP tool server: ``bash``, ``read_file`` and ``write_file`` confined to one working folder.

Run it with stdio transport (what MCP clients launch): ``python shell_server.py --root DIR``.
Paths are resolved inside ``--root``; a path that escapes it is refused.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

OUTPUT_LIMIT = 16_000


def build_server(root: Path, timeout_s: float = 120.0) -> MCPServer:
    root = root.resolve()
    server = MCPServer(name="forge-shell", instructions=f"Tools act inside {root}.")

    def inside(path: str) -> Path:
        target = (root / path).resolve()
        if target != root and root not in target.parents:
            raise ToolError(f"path {path!r} is outside the working folder")
        return target

    @server.tool()
    def bash(command: str) -> str:
        """Run a shell command in the working folder; returns its output and exit code."""
        try:
            done = subprocess.run(command, shell=True, cwd=root, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"[timed out after {timeout_s:.0f} s]"
        return (done.stdout + done.stderr)[-OUTPUT_LIMIT:] + f"\n[exit code {done.returncode}]"

    @server.tool()
    def read_file(path: str) -> str:
        """Read a text file (relative to the working folder)."""
        target = inside(path)
        if not target.is_file():
            raise ToolError(f"no file {path!r}")
        return target.read_text(errors="replace")[:OUTPUT_LIMIT]

    @server.tool()
    def write_file(path: str, content: str) -> str:
        """Write a text file (relative to the working folder), creating folders as needed."""
        target = inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return f"wrote {len(content)} characters to {path}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=Path.cwd())
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    build_server(args.root, args.timeout).run("stdio")


if __name__ == "__main__":
    main()
