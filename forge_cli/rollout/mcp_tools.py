"""Tools a white-box loop takes from MCP servers running inside the trajectory's sandbox.

Forge ships stdio MCP servers in ``sandboxes/tools/`` (``forge_cli/_data/sandboxes/tools`` in a
wheel); :data:`SERVERS` is the one table of them, and what a scaffold's ``mcp`` option may name::

    [scaffolds.tool-call]
    mcp = ["files", "shell"]

With ``mcp`` set, an episode's tools are exactly those the named servers list, nothing of the
task suite's own. (A black-box agent that speaks MCP takes the same option and starts the servers
itself: :mod:`forge_cli.rollout.agent_mcp`.) :func:`mcp_tools` launches each server *inside* a sandbox
(:meth:`~forge_cli.sandbox.contract.Sandbox.stdio_command` gives the host argv; the MCP SDK's stdio
client starts it and speaks JSON-RPC over its stdin/stdout), turns every ``list_tools`` entry into
a :class:`~forge_cli.rollout.loop.Tool` whose schema is the server's input schema and whose run is
``call_tool``, and stops the servers when the episode ends. What the agent sees:

- a tool's text content as the tool message;
- an MCP error result (``is_error``: a path outside the work directory, an edit whose text is not
  there) as a tool error — :meth:`Episode.call_tool <forge_cli.rollout.loop.Episode.call_tool>`
  turns the :class:`~forge_cli.errors.ForgeError` raised here into ``error: …`` and a
  ``tool.error`` event;
- a server that crashed, hung past ``call_timeout_s`` or closed its pipe, as the same kind of tool
  error, on that call and every later one (its last stderr line included): never a crashed rollout.

A server that does not start (no ``mcp`` package in the sandbox's Python, a bad script) fails the
trajectory with the reason. The servers need Python with the ``mcp`` SDK inside the sandbox: the
interpreter Forge runs on where the sandbox sees it (``host_python``: its venv is visible inside
``local`` sandboxes, bubblewrap or not), run on a copy of the scripts put into the work directory
(``.forge-tools/``); else (a container: Debian's ``python3`` has no ``mcp``) the servers' own venv
under ``$FORGE_HOME/agents``, which every sandbox sees read-only, with the scripts beside it
(:func:`forge_cli.rollout.agent_mcp.tools_env`, the one black-box agents use). A ``kv-search``
task's corpus is copied into ``.forge-corpus/``. What was copied in is removed when the block ends. The ``mcp`` package is imported only
when servers start.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Literal, Sequence

from pydantic import BaseModel, Field, create_model

from forge_cli.errors import ForgeError
from forge_cli.paths import agents_dir
from forge_cli.rollout.agent_mcp import tools_dir, tools_env
from forge_cli.sandbox.base import OutputTail
from forge_cli.specs import Tool
from forge_cli.tasks import kvsearch

if TYPE_CHECKING:
    from forge_cli.sandbox.contract import Sandbox
    from forge_cli.tasks.types import Task, TaskSuite

START_TIMEOUT_S = 120.0  # importing the SDK on a loaded machine takes a while
CALL_TIMEOUT_S = 300.0
CORPUS_DIR = ".forge-corpus"  # where a task's search corpus is written, inside the work directory
TOOLS_DIR = ".forge-tools"  # where the servers are copied for a sandbox that runs this interpreter


@dataclass(frozen=True)
class McpServer:
    """One shipped MCP server: its script in ``sandboxes/tools/`` and what it serves."""

    name: str
    script: str
    description: str


SERVERS: dict[str, McpServer] = {
    s.name: s
    for s in (
        McpServer("shell", "shell_server.py", "shell(command, timeout_s?): a command line in the work directory "
                  "(timeout, output cap)"),
        McpServer("files", "files_server.py", "read_file, write_file, edit_file (exact-string replace), list_files "
                  "in the work directory"),
        McpServer("search", "search_server.py", "search(query), open(doc_id) over the task's local corpus "
                  "(a kv-search task's documents, else the work directory's files)"),
    )
}


@lru_cache(maxsize=None)
def with_mcp_option(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` (a white-box scaffold's options) with ``mcp``: the shipped servers to take the tools from."""
    names = Literal[tuple(SERVERS)]  # type: ignore[valid-type]
    field = Field(default_factory=list, description="MCP servers (" + ", ".join(SERVERS) + ") whose tools replace "
                  "the task's; they run inside the trajectory's sandbox.")
    extended: type[BaseModel] = create_model(model.__name__, __base__=model, __doc__=model.__doc__,
                                             __module__=model.__module__, mcp=(list[names], field))  # type: ignore[valid-type]
    return extended


def mcp_servers(options: Any) -> list[str]:
    """The servers a scaffold's options (validated, or the raw ``[scaffolds.NAME]`` table) name, each once."""
    raw = options.get("mcp") if isinstance(options, dict) else getattr(options, "mcp", None)
    return [server(n).name for n in dict.fromkeys(raw or ())]


def server(name: str) -> McpServer:
    """The shipped server ``name``; a ForgeError naming the others if there is none."""
    if name not in SERVERS:
        raise ForgeError(f"unknown MCP server {name!r}: choose from {', '.join(SERVERS)}")
    return SERVERS[name]


async def write_corpus(sandbox: "Sandbox", task: "Task | None") -> str:
    """Write ``task``'s search corpus into the sandbox; the folder to search, relative to the work directory."""
    if task is None or task.suite != kvsearch.NAME:
        return "."
    for doc in kvsearch.corpus_of(task).documents:
        await sandbox.write_file(f"{CORPUS_DIR}/{doc.id}.txt", doc.text)
    return CORPUS_DIR


class McpConnection:
    """One server running in a sandbox: its client session, and what became of it. ``limits`` says which
    of its sandbox's bounds a program there has reached (``Sandbox.limits_hit``), if the sandbox says."""

    def __init__(self, server: McpServer, session: Any, errlog: "StderrTail", call_timeout_s: float,
                 limits: Callable[[], str | None] | None = None) -> None:
        self.server, self.session, self.errlog, self.call_timeout_s = server, session, errlog, call_timeout_s
        self.limits = limits
        self.broken: str | None = None  # why it cannot answer any more

    def tools(self, listed: Sequence[Any]) -> list[Tool]:
        """A :class:`Tool` per listed MCP tool, calling it through this connection."""
        return [self._tool(t) for t in listed]

    def _tool(self, listed: Any) -> Tool:
        name = listed.name

        async def run(arguments: Any) -> str:
            return await self.call(name, arguments)

        schema = dict(listed.input_schema or {"type": "object", "properties": {}})
        return Tool(name, listed.description or f"{name} (MCP server {self.server.name!r})", schema, run)

    def _limit_note(self, before: str | None) -> str:
        """`` [the sandbox: …]`` when a bound was reached during a call (none before it), else ''."""
        now = self.limits() if self.limits is not None else None
        return f"\n[the sandbox's limit: {now}]" if now and now != before else ""

    async def call(self, name: str, arguments: Any) -> str:
        """``call_tool``'s text; a ForgeError (the agent's tool error) for an error result or a dead server.
        A sandbox bound reached during the call (its processes, memory, disk) is said at the end of either."""
        if arguments is None or arguments == "":
            arguments = {}
        if not isinstance(arguments, dict):
            raise ForgeError(f"the arguments of {name} must be a JSON object, not {arguments!r}"[:300])
        if self.broken is not None:
            raise ForgeError(self.broken)
        before = self.limits() if self.limits is not None else None
        try:
            result = await self.session.call_tool(name, arguments, read_timeout_seconds=self.call_timeout_s)
        except Exception as exc:  # a crashed, hung or closed server: this call and every later one fail
            detail = _describe(exc)
            words = self.errlog.last_words()
            self.broken = (f"the MCP server {self.server.name!r} stopped answering ({detail})"
                           + (f"; its last words: {words}" if words else "") + self._limit_note(before))
            raise ForgeError(self.broken) from None
        text = _text(result.content) + self._limit_note(before)
        if result.is_error:
            raise ForgeError(text or f"{name} failed")
        return text


class StderrTail:
    """A server's stderr: the write end of a pipe (what the MCP client hands the server as ``errlog``)
    and a thread that keeps the last ``size`` bytes read from it — bounded, nothing on the host's disk,
    whatever the server (or a program that reaches its stderr) writes."""

    def __init__(self, size: int = 16 * 1024) -> None:
        read_fd, write_fd = os.pipe()
        self._writer = os.fdopen(write_fd, "w")
        self._tail = OutputTail(size)

        def pump() -> None:
            with os.fdopen(read_fd, "rb", buffering=0) as reader:
                while chunk := reader.read(65536):
                    self._tail.add(chunk)

        self._thread = threading.Thread(target=pump, name="mcp-stderr", daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        return self._writer.fileno()

    def write(self, text: str) -> int:  # the client may write to it too
        return self._writer.write(text)

    def flush(self) -> None:
        self._writer.flush()

    def last_words(self) -> str:
        """The last line the server wrote to its stderr (a traceback's last line, say), or ''."""
        lines = [line.strip() for line in self._tail.text()[-8000:].splitlines() if line.strip()]
        return lines[-1][:300] if lines else ""

    def close(self) -> None:
        """Close this side's write end; the reader thread ends by itself once no process holds the other
        (never waited for here: a program the server left behind may hold it until its sandbox closes)."""
        self._writer.close()

    def __enter__(self) -> "StderrTail":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text(content: Sequence[Any]) -> str:
    """A tool result's content as one text: text blocks as they are, anything else named."""
    parts = []
    for block in content:
        kind = getattr(block, "type", "")
        parts.append(block.text if kind == "text" else f"[{kind or 'unknown'} content]")
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    """An exception (the leaf of an exception group) as ``Type: message``."""
    if isinstance(exc, BaseExceptionGroup):
        exc = _leaf(exc)
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


async def _start(stack: AsyncExitStack, server: McpServer, sandbox: "Sandbox", args: Sequence[str], python: str,
                 folder: str, start_timeout_s: float, call_timeout_s: float) -> list[Tool]:
    """Start ``server`` inside ``sandbox`` (stopped when ``stack`` closes): its tools."""
    import anyio  # the MCP SDK's own async runtime: with the sandbox extra

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    argv = sandbox.stdio_command([python, f"{folder}/{server.script}", *args])
    errlog = stack.enter_context(StderrTail())
    params = StdioServerParameters(command=argv[0], args=list(argv[1:]))
    try:
        read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))  # type: ignore[arg-type]
        session = await stack.enter_async_context(ClientSession(read, write))
        connection = McpConnection(server, session, errlog, call_timeout_s, getattr(sandbox, "limits_hit", None))
        with anyio.fail_after(start_timeout_s):
            await session.initialize()
            listed = (await session.list_tools()).tools
    except Exception as exc:
        words = errlog.last_words()
        detail = f"no answer within {start_timeout_s:g} s" if isinstance(exc, TimeoutError) else _describe(exc)
        raise ForgeError(f"the MCP server {server.name!r} did not start in the sandbox ({detail})"
                         + (f": {words}" if words else "")) from None
    return connection.tools(listed)


@asynccontextmanager
async def mcp_tools(names: Sequence[str], sandbox: "Sandbox", *, task: "Task | None" = None,
                    start_timeout_s: float = START_TIMEOUT_S, call_timeout_s: float = CALL_TIMEOUT_S
                    ) -> AsyncIterator[list[Tool]]:
    """The tools of the servers ``names`` (keys of :data:`SERVERS`), each server running inside
    ``sandbox`` (in its work directory) while the block runs; ``task``: whose corpus ``search`` serves.
    Enter and leave it in one task (the MCP client's task groups require it). What the block raises
    comes out as itself, not inside the client's exception groups."""
    chosen = [server(n) for n in dict.fromkeys(names)]
    placed: list[str] = []  # what this put into the work directory, removed afterwards
    try:
        async with AsyncExitStack() as stack:
            stack.callback(_remove, sandbox.workdir, placed)
            if getattr(sandbox, "host_python", True):  # this interpreter, on a copy of the scripts
                python, folder = sys.executable, TOOLS_DIR
                await sandbox.copy_in(tools_dir(), TOOLS_DIR)
                placed.append(TOOLS_DIR)
            else:  # the servers' own venv under FORGE_HOME/agents, which the sandbox sees read-only
                import asyncio

                env_python, env_tools = await asyncio.to_thread(tools_env, agents_dir())
                python, folder = str(env_python), str(env_tools)
            tools: list[Tool] = []
            for shipped in chosen:
                args: list[str] = []
                if shipped.name == "search":
                    corpus = await write_corpus(sandbox, task)
                    placed.extend([corpus] if corpus != "." else [])
                    args = ["--corpus", corpus]
                served = await _start(stack, shipped, sandbox, args, python, str(folder), start_timeout_s,
                                      call_timeout_s)
                clash = {t.name for t in tools} & {t.name for t in served}
                if clash:
                    raise ForgeError(f"the MCP server {shipped.name!r} serves {', '.join(sorted(clash))}, which another "
                                     "server named already serves")
                tools.extend(served)
            yield tools
    except BaseExceptionGroup as group:
        raise _leaf(group) from None


def _leaf(group: BaseExceptionGroup) -> BaseException:
    """The one exception an exception group wraps (its first, if it holds several)."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    return inner


def _remove(workdir: Path, placed: Sequence[str]) -> None:
    for name in placed:
        shutil.rmtree(workdir / name, ignore_errors=True)


@asynccontextmanager
async def episode_tools(options: Any, suite: "TaskSuite", task: "Task", workdir: Path,
                        open_sandbox: Callable[[], "Sandbox"]) -> AsyncIterator[Sequence[Tool]]:
    """The tools of one white-box episode: the suite's own, or — when the scaffold's ``options``
    name MCP servers — theirs, served from a sandbox ``open_sandbox()`` opens on ``workdir`` for the
    episode (closed after it)."""
    names = mcp_servers(options)
    if not names:
        yield suite.tools(task, workdir)
        return
    sandbox = open_sandbox()
    try:
        async with mcp_tools(names, sandbox, task=task) as tools:
            yield tools
    finally:
        await sandbox.close()
