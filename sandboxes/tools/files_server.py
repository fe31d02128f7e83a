"""An MCP tool server for the files of the working folder: ``read_file``, ``write_file``,
``edit_file`` (exact-string replacement) and ``list_files``.

Run it over stdio: ``python files_server.py [--root DIR]``. Every path goes through
:func:`confined.confine`: a path that leaves the root is refused. Text is UTF-8 and kept exactly
(line endings included): ``write_file`` then ``read_file`` gives back what was written, and
``edit_file(path, old, new, replace_all=True)`` leaves the file as Python's ``str.replace(old, new)``
would (without ``replace_all``, ``old`` must occur exactly once). The tool names and arguments are
the ``files`` suite's in-process tools' (``forge_cli/tasks/workdir.py``), plus ``edit_file``.
"""

from __future__ import annotations

import os
from pathlib import Path

from confined import ToolError, confine, cut, parser, relative
from mcp.server.mcpserver import MCPServer

MAX_READ = 64_000
MAX_WRITE = 1_000_000
MAX_LISTED = 500
FORGE_OWN = ".forge-"  # folders Forge puts into a work directory (these servers' copy, a corpus): not listed


def build_server(root: Path) -> MCPServer:
    """The server, acting in ``root``."""
    root = Path(os.path.realpath(root))
    server = MCPServer(name="forge-files", instructions=f"Reads and writes the files under {root}.")

    def text_of(target: Path) -> str:
        if not target.is_file():
            raise ToolError(f"no file {relative(root, target)!r}" + (" (it is a folder)" if target.is_dir() else ""))
        try:
            return target.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{relative(root, target)!r} is not UTF-8 text") from None

    def store(target: Path, content: str) -> None:
        if len(content) > MAX_WRITE:
            raise ToolError(f"content is longer than {MAX_WRITE} characters")
        if target == root or target.is_dir():
            raise ToolError(f"{relative(root, target)!r} is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode("utf-8"))

    @server.tool()
    def read_file(path: str) -> str:
        """Read a text file of the working folder (path relative to it)."""
        return cut(text_of(confine(root, path)), MAX_READ)

    @server.tool()
    def write_file(path: str, content: str) -> str:
        """Write (create or replace) a text file of the working folder, making folders as needed."""
        target = confine(root, path)
        store(target, content)
        return f"wrote {len(content)} characters to {relative(root, target)}"

    @server.tool()
    def edit_file(path: str, old: str, new: str, replace_all: bool = False) -> str:
        """Replace the exact text old with new in a file of the working folder. old must occur exactly
        once unless replace_all is true (then every occurrence is replaced)."""
        target = confine(root, path)
        text = text_of(target)
        if not old:
            raise ToolError("old is empty: say which text to replace")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"the old text does not occur in {relative(root, target)!r}")
        if count > 1 and not replace_all:
            raise ToolError(f"the old text occurs {count} times in {relative(root, target)!r}: give more of the "
                            "surrounding text so it occurs once, or set replace_all")
        store(target, text.replace(old, new))
        return f"replaced {count} occurrence{'s' if count > 1 else ''} in {relative(root, target)}"

    @server.tool()
    def list_files(path: str = ".") -> str:
        """List the files under a folder of the working folder ('.' by default), one path a line."""
        folder = confine(root, path)
        if not folder.is_dir():
            raise ToolError(f"no folder {relative(root, folder)!r}")
        found: list[str] = []
        for here, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith(FORGE_OWN))
            found.extend(relative(root, Path(here) / name) for name in sorted(files))
        if not found:
            return "(no files)"
        more = f"\n[... {len(found) - MAX_LISTED} more]" if len(found) > MAX_LISTED else ""
        return "\n".join(found[:MAX_LISTED]) + more

    return server


def main() -> None:
    build_server(parser(__doc__).parse_args().root).run("stdio")


if __name__ == "__main__":
    main()
