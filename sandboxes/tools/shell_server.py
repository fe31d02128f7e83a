"""An MCP tool server with one tool, ``shell``: a command line run in the working folder.

Run it over stdio (what MCP clients launch): ``python shell_server.py [--root DIR] [--timeout S]``.
Each command runs under ``/bin/sh -c`` with the root as its cwd, stdin from ``/dev/null``, in a
session and process group of its own; at its deadline (the call's ``timeout_s``, never more than
``--timeout``) the whole group is killed. Its output (stdout and stderr together, in order) goes to
a file, not a pipe, so a chatty command cannot block; the agent gets its last ``--output-limit``
characters and the exit code. The shell can reach whatever the sandbox lets it reach: confinement
to the work directory is the sandbox's job, not this server's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path

from confined import ToolError, parser
from mcp.server.mcpserver import MCPServer

OUTPUT_LIMIT = 16_000
TIMEOUT_S = 120.0


def run_command(root: Path, command: str, timeout_s: float, output_limit: int) -> str:
    """Run ``command`` to its end or its deadline: its output's tail and how it ended."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=root, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout_s)
            ending = f"[exit code {proc.returncode}]"
        except subprocess.TimeoutExpired:
            ending = f"[timed out after {timeout_s:g} s; the command and everything it started were killed]"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # what it left behind in its group, too
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        size = out.seek(0, os.SEEK_END)
        window = 4 * output_limit  # UTF-8: at most 4 bytes a character
        out.seek(max(0, size - window))
        text = out.read().decode("utf-8", errors="replace")
    if size > window or len(text) > output_limit:
        text = "[... earlier output cut]\n" + text[-output_limit:]
    separator = "" if not text or text.endswith("\n") else "\n"
    return text + separator + ending


def build_server(root: Path, max_timeout_s: float = TIMEOUT_S, output_limit: int = OUTPUT_LIMIT) -> MCPServer:
    """The server, acting in ``root``: no command runs longer than ``max_timeout_s``."""
    root = Path(os.path.realpath(root))
    server = MCPServer(name="forge-shell", instructions=f"Runs shell commands in {root}.")

    @server.tool()
    def shell(command: str, timeout_s: float | None = None) -> str:
        """Run a shell command (sh -c) in the working folder; returns its output (the last part, if
        long) and its exit code. timeout_s: seconds before it is killed (capped by the server)."""
        if not command.strip():
            raise ToolError("the command is empty")
        if timeout_s is not None and timeout_s <= 0:
            raise ToolError(f"timeout_s must be positive, not {timeout_s}")
        return run_command(root, command, min(timeout_s or max_timeout_s, max_timeout_s), output_limit)

    return server


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--timeout", type=float, default=TIMEOUT_S, help="the longest a command may run, in seconds")
    args.add_argument("--output-limit", type=int, default=OUTPUT_LIMIT, help="characters of output returned")
    ns = args.parse_args()
    build_server(ns.root, ns.timeout, ns.output_limit).run("stdio")


if __name__ == "__main__":
    main()
