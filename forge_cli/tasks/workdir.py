"""File tools confined to a trajectory's work directory, and the verifier that inspects its files.

:func:`confine` is the one gate: a path (relative, or absolute inside the work directory) is
resolved with every symlink followed, and refused unless it lands inside the work directory, so
``../x``, ``/etc/passwd``, ``a/../../x`` and a symlink that points out are all refused.
:func:`file_tools` gives ``read_file(path)``, ``write_file(path, content)`` and
``list_files(path=".")``; :class:`FilesMatch` compares files with what ``task.answer["files"]``
expects, line by line with line endings and trailing blanks ignored.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from forge_cli.errors import ForgeError
from forge_cli.specs import Tool
from forge_cli.sandbox.hostfiles import MAX_READ_BYTES, read_regular, write_regular
from forge_cli.tasks.types import Outcome, Task, Transcript

MAX_READ = 64_000
MAX_WRITE = 1_000_000
MAX_LISTED = 500

READ = {"type": "object", "properties": {"path": {"type": "string", "description": "relative to the work directory"}},
        "required": ["path"]}
WRITE = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
         "required": ["path", "content"]}
LIST = {"type": "object", "properties": {"path": {"type": "string", "description": "a folder; '.' by default"}}}


def confine(workdir: Path, path: object) -> Path:
    """``path`` inside ``workdir``, every symlink resolved; a ForgeError if it would leave it."""
    if not isinstance(path, str) or not path.strip():
        raise ForgeError(f"a path must be a non-empty string, not {path!r}")
    if "\x00" in path:
        raise ForgeError("a path cannot contain a NUL character")
    root = Path(os.path.realpath(workdir))
    target = Path(os.path.realpath(root / path.strip()))
    if target != root and root not in target.parents:
        raise ForgeError(f"{path!r} is outside the work directory")
    return target


def _argument(arguments: Any, name: str, default: str | None = None) -> Any:
    if isinstance(arguments, dict):
        value = arguments.get(name, default)
    elif isinstance(arguments, str) and name == "path":
        value = arguments
    else:
        value = default
    if value is None:
        raise ForgeError(f"needs the argument {name!r}")
    return value


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix() or "."


def read_text(root: Path, target: Path, max_bytes: int = MAX_READ_BYTES, *, truncate: bool = False) -> str:
    """The text of ``target`` (a path :func:`confine` gave, under ``root``), read as the host reads what an
    agent could have planted: a regular file only, no link followed, at most ``max_bytes``
    (:func:`~forge_cli.sandbox.hostfiles.read_regular`)."""
    data = read_regular(root, _relative(Path(os.path.realpath(root)), target), max_bytes=max_bytes, truncate=truncate)
    return data.decode("utf-8", errors="replace")


def file_tools(workdir: Path) -> tuple[Tool, Tool, Tool]:
    """``read_file``, ``write_file`` and ``list_files``, confined to ``workdir``."""
    root = Path(os.path.realpath(workdir))

    def read_file(arguments: Any) -> str:
        target = confine(root, _argument(arguments, "path"))
        if not target.is_file():
            raise ForgeError(f"no file {_relative(root, target)!r}")
        text = read_text(root, target, 4 * (MAX_READ + 1), truncate=True)
        if len(text) > MAX_READ:
            return text[:MAX_READ] + f"\n[... cut at {MAX_READ} characters]"
        return text

    def write_file(arguments: Any) -> str:
        target = confine(root, _argument(arguments, "path"))
        content = _argument(arguments, "content")
        if not isinstance(content, str):
            raise ForgeError(f"content must be a string, not {type(content).__name__}")
        if len(content) > MAX_WRITE:
            raise ForgeError(f"content is longer than {MAX_WRITE} characters")
        if target == root or target.is_dir():
            raise ForgeError(f"{_relative(root, target)!r} is a folder")
        write_regular(root, _relative(root, target), content.encode("utf-8"))
        return f"wrote {len(content)} characters to {_relative(root, target)}"

    def list_files(arguments: Any) -> str:
        folder = confine(root, _argument(arguments, "path", "."))
        if not folder.is_dir():
            raise ForgeError(f"no folder {_relative(root, folder)!r}")
        found: list[str] = []
        for here, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                found.append(_relative(root, Path(here) / name))
        if not found:
            return "(no files)"
        more = f"\n[... {len(found) - MAX_LISTED} more]" if len(found) > MAX_LISTED else ""
        return "\n".join(found[:MAX_LISTED]) + more

    return (Tool("read_file", "Read a file of the work directory.", READ, read_file),
            Tool("write_file", "Write (create or replace) a file of the work directory.", WRITE, write_file),
            Tool("list_files", "List the files under a folder of the work directory.", LIST, list_files))


def seed_workdir(task: Task, workdir: Path) -> None:
    """Write ``task.files`` into ``workdir`` (what the driver does before the agent starts)."""
    for path, content in task.files.items():
        target = confine(workdir, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


def normalise_file(text: str) -> str:
    """A file as :class:`FilesMatch` compares it: ``\\n`` line ends, no trailing blanks on a line or at the end."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


class FilesMatch:
    """Verifier: each file in ``task.answer["files"]`` has the expected content (score: the share that do)."""

    def verify(self, task: Task, workdir: Path, transcript: Transcript) -> Outcome:
        expected = (task.answer or {}).get("files", {}) if isinstance(task.answer, dict) else {}
        if not expected:
            raise ForgeError(f"task '{task.id}' names no expected files (answer['files'])")
        wrong: list[str] = []
        for path, want in expected.items():
            try:
                target = confine(workdir, path)
            except ForgeError:
                wrong.append(f"{path} leads out of the work directory")
                continue
            if not os.path.lexists(target):
                wrong.append(f"{path} is missing")
                continue
            try:  # a FIFO, a device or a huge sparse file planted there is refused, never read
                got = read_text(workdir, target, max(4 * len(want), 2**20))
            except ForgeError as exc:
                wrong.append(f"{path}: {exc}")
                continue
            if normalise_file(got) != normalise_file(want):
                wrong.append(f"{path} differs")
        score = (len(expected) - len(wrong)) / len(expected)
        return Outcome(score, "; ".join(wrong) if wrong else f"all {len(expected)} files as expected")


def tools(task: Task, workdir: Path) -> Sequence[Tool]:
    return file_tools(workdir)
