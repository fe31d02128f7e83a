"""What Forge's MCP tool servers share: the work-directory root, the one path gate, output caps.

The servers run *inside* a sandbox (over stdio, launched by Forge's MCP client on the host) with
whatever Python the sandbox has and the ``mcp`` SDK; they never import ``forge_cli``, so this
module is their own copy of the confinement rule (``forge_cli.tasks.workdir.confine`` is the
host's): a path, relative or absolute, is resolved with every symlink followed and refused unless
it lands inside the root. ``../x``, ``/etc/passwd``, ``a/../../x`` and a link that points out are
all refused with a :class:`ToolError`, which the client sees as a tool error.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

__all__ = ["ToolError", "confine", "cut", "parser", "relative"]


def parser(description: str | None) -> argparse.ArgumentParser:
    """The command line every server takes: ``--root`` (default: the current directory, which is
    the sandbox's work directory when it is launched through ``Sandbox.stdio_command``)."""
    args = argparse.ArgumentParser(description=description)
    args.add_argument("--root", type=Path, default=Path.cwd(), help="the folder the tools act in")
    return args


def confine(root: Path, path: object) -> Path:
    """``path`` inside ``root`` (already resolved), every symlink followed; a ToolError if it would leave it."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError(f"a path must be a non-empty string, not {path!r}")
    if "\x00" in path:
        raise ToolError("a path cannot contain a NUL character")
    target = Path(os.path.realpath(root / path.strip()))
    if target != root and root not in target.parents:
        raise ToolError(f"{path!r} is outside the working folder")
    return target


def relative(root: Path, path: Path) -> str:
    """``path`` as the agent names it: relative to the root, ``.`` for the root itself."""
    return path.relative_to(root).as_posix() or "."


def cut(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text``, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters cut]"
