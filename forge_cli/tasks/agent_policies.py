"""Scripted policies that fix a ``swe-mini`` repository through a real black-box agent, each answering
in that agent's own protocol and tool format (``--engine scripted --policy
forge_cli.tasks.agent_policies:NAME``).

The scripted engine scores their text with the real model, so every recorded id and logprob is
real; the agent program parses the text, runs the tools it names in its sandbox and sends the
results back. Like :mod:`forge_cli.tasks.demo_policies`, each decides from what it can see in its
context: the task's prompt names the package, the agent's observations show the files, and the
catalogue's bug patterns (:func:`forge_cli.tasks.swe_units.repair`) say what to change.

One section per family of agents: the PyPI agents (mini-swe-agent, aider, openai-agents,
smolagents) first, the npm agents (opencode, codex, claude-code) after.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from forge_cli.tasks.demo_policies import tool_history
from forge_cli.tasks.swe_units import repair

# ---- shared: what the agent has seen ------------------------------------------------------------------


def _text(content: Any) -> str:
    """A message's content as text (a string, or OpenAI/Anthropic content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(part.get("text", part.get("content", ""))) if isinstance(part, dict) else str(part)
                       for part in content)
    return "" if content is None else str(content)


def _observation(content: Any) -> str:
    """A tool result as the agent showed it: mini-swe-agent sends ``{"returncode": …, "output": …}``, the
    Agents SDK an MCP tool's content as ``{"type": "text", "text": …}`` (or a list of them), claude-code an
    MCP tool's structured result as ``{"result": …}``."""
    text = _text(content)
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, list):
        return "\n".join(str(d.get("text", "")) if isinstance(d, dict) else str(d) for d in data)
    if isinstance(data, dict):
        return str(data.get("output", data.get("text", data.get("result", text))))
    return text


def package_of(messages: list[dict[str, Any]]) -> str | None:
    """The package a swe-mini prompt asks to fix (``package `NAME```), from the first message naming one."""
    for m in messages:
        found = re.search(r"package `(\w+)`", _text(m.get("content")))
        if found:
            return found.group(1)
    return None


# ---- the PyPI agents: a shell tool (mini-swe-agent, openai-agents, smolagents) and aider's text edits --

# The shell agents' plan, one command a turn: show every module of the package (``head``'s
# ``==> FILE <==`` headers), apply the catalogue's repairs with a python heredoc and run the
# tests in the same command, then answer from the tests' last line.
DONE = "Fixed: the tests pass."
NOT_DONE = "I could not make the tests pass."


def read_command(package: str) -> str:
    return f"head -n 1000 {package}/*.py"


def _shown_files(text: str, package: str) -> dict[str, str]:
    """``path -> text`` from ``head``'s output over several files."""
    parts = re.split(rf"^==> ({re.escape(package)}/\w+\.py) <==\n", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def fix_command(files: dict[str, str]) -> str:
    """One shell command that makes the catalogue's repairs in ``files`` and runs the tests."""
    edits = [(path, old, new) for path, text in sorted(files.items()) for old, new in repair(text)[1]]
    return ("python3 - <<'FORGE_EOF'\nimport pathlib\n"
            f"for path, old, new in {edits!r}:\n"
            "    p = pathlib.Path(path)\n"
            "    p.write_text(p.read_text().replace(old, new, 1))\n"
            f"print('edited', {len(edits)}, 'places')\nFORGE_EOF\n"
            "python3 -B -m unittest 2>&1 | tail -n 3")


def shell_step(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """The next move of a shell agent on swe-mini: ``("command", CMD)`` or ``("answer", TEXT)``."""
    package = package_of(messages)
    if package is None:
        return "answer", "I cannot tell which package to fix."
    observations = [(i, _observation(m.get("content"))) for i, m in enumerate(messages)
                    if i > 0 and m.get("role") in ("tool", "user")]
    shown = [(i, _shown_files(text, package)) for i, text in observations]
    shown = [(i, files) for i, files in shown if files]
    if not shown:
        return "command", read_command(package)
    at, files = shown[-1]
    ran = [text for i, text in observations if i > at and re.search(r"^Ran \d+ tests?", text, re.M)]
    if not ran:
        return "command", fix_command(files)
    return "answer", DONE if re.search(r"^OK\b", ran[-1], re.M) else NOT_DONE


def _hermes(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# mini-swe-agent ends a run when a command's output starts with this line
MINI_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def mini_swe_agent(context: dict[str, Any]) -> str:
    """mini-swe-agent: every turn one ``bash`` tool call; it submits with ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``."""
    kind, text = shell_step(context.get("messages") or [])
    if kind == "command":
        return _hermes("bash", command=text)
    return f"{text} Submitting.\n" + _hermes("bash", command=f"echo {MINI_SUBMIT}")


def smolagents(context: dict[str, Any]) -> str:
    """smolagents' ToolCallingAgent: a ``shell`` call a turn, then the ``final_answer`` tool."""
    kind, text = shell_step(context.get("messages") or [])
    return _hermes("shell", command=text) if kind == "command" else _hermes("final_answer", answer=text)


def openai_agents(context: dict[str, Any]) -> str:
    """An OpenAI Agents SDK agent: a ``shell`` call a turn; a reply without a call is its final output."""
    kind, text = shell_step(context.get("messages") or [])
    return _hermes("shell", command=text) if kind == "command" else text



def aider(context: dict[str, Any]) -> str:
    """aider in ``whole`` edit format: the repository's files are in its prompt (``--read .``, read-only);
    the reply names each file to change on a line of its own, then its whole new content in aider's fence.
    A later call of the same message (a lint or edit reflection) is answered without edits."""
    messages = context.get("messages") or []
    package = package_of(messages)
    if package is None:
        return "I cannot tell which package to fix."
    asked = max(i for i, m in enumerate(messages) if f"package `{package}`" in _text(m.get("content")))
    if any(m.get("role") == "assistant" for m in messages[asked + 1:]):
        return "The fix is in place."
    shown: dict[str, tuple[str, str]] = {}
    for m in messages[:asked + 1]:
        for path, fence, body in re.findall(rf"^({re.escape(package)}/\w+\.py)\n(`{{3,}})\n(.*?)^\2$",
                                            _text(m.get("content")), flags=re.M | re.S):
            shown[path] = (fence, body)
    fixed = [(path, fence, repair(body)[0]) for path, (fence, body) in sorted(shown.items()) if repair(body)[1]]
    if not fixed:
        return "I see no bug in the files I was shown."
    return "I will fix the planted bug.\n\n" + "\n".join(f"{path}\n{fence}\n{text}{fence}\n"
                                                            for path, fence, text in fixed)


# ---- the npm agents (opencode, codex, claude-code) ------------------------------------------------------
# Each reads the modules the failing tests point at with its own reading tool, fixes every planted bug
# with its own edit tool, runs the tests with its own shell tool, then answers (:func:`swe_fix`); an
# :class:`AgentTools` says how one agent spells those calls and how its results read back.


@dataclass(frozen=True)
class AgentTools:
    """How one agent reads a file, edits one and runs a command: tool calls in its own schema, and
    how its tool results are read back into plain text."""

    read: Callable[[str, set[str]], str]  # (absolute path, tool names offered) -> the call
    edit: Callable[[str, str, str, set[str]], str]  # (absolute path, old, new, tools) -> the call
    shell: Callable[[str, set[str]], str]  # (command line, tools) -> the call
    read_back: Callable[[str, dict[str, Any], str], tuple[str, str] | None]  # (tool, args, result) -> (path, text)
    edited: Callable[[str, dict[str, Any]], tuple[str, str] | None]  # (tool, args) -> (path, old) of an edit
    ran: Callable[[str, dict[str, Any], str], str | None]  # (tool, args, result) -> the test run's output
    output: Callable[[str], str] = str  # any tool's result -> what the tool returned (the agent's wrapping off)


TEST_COMMAND = "python3 -m unittest"


def _workdir(context: dict[str, Any]) -> str:
    """The agent's working folder, as its own prompt tells its model (each agent says it its way)."""
    text = str(context.get("prompt_text") or "")
    for pattern in (r"<cwd>([^<\n]+)</cwd>", r"Primary working directory: (\S+)", r"Working directory: (\S+)"):
        found = re.search(pattern, text)
        if found:
            return found.group(1).strip()
    return "."


def _task_text(messages: list[dict[str, Any]]) -> str:
    """The swe-mini issue among the user messages (agents wrap the prompt in text of their own)."""
    return next((t for t in (_text(m.get("content")) for m in messages if m.get("role") == "user")
                 if "package `" in t), "")


def _strip_numbers(text: str) -> str:
    """A file's text from a numbered listing (``     1\\tline`` / ``     1→line`` / ``00001| line``)."""
    lines = text.splitlines()
    numbered = re.compile(r"^\s*\d+(?:\t|→|\| )")
    if lines and all(numbered.match(line) or not line.strip() for line in lines):
        return "\n".join(numbered.sub("", line, count=1) for line in lines) + "\n"
    return text


def _relative(path: str, root: str) -> str:
    return path[len(root) + 1:] if root != "." and path.startswith(root + "/") else path.removeprefix("./")


def _is_files_tool(name: Any, tool: str) -> bool:
    return isinstance(name, str) and (name == tool or (name.endswith(tool) and "files" in name[: -len(tool)]))


def mcp_files_tool(offered: set[str], tool: str) -> str | None:
    """The name under which an agent offers the ``files`` MCP server's ``tool``: each agent qualifies it its
    own way (claude-code ``mcp__files__edit_file``, opencode ``files_edit_file``; codex sends it in a
    ``mcp__files`` namespace, which the gateway renders as the bare ``edit_file``)."""
    return next((n for n in sorted(n for n in offered if isinstance(n, str)) if _is_files_tool(n, tool)), None)


def with_mcp_files(own: AgentTools) -> AgentTools:
    """``own`` with reading and editing done through Forge's ``files`` MCP server (``read_file``,
    ``edit_file``) wherever the agent offers it; its own shell still runs the tests."""

    def read(path: str, offered: set[str]) -> str:
        name = mcp_files_tool(offered, "read_file")
        return _hermes(name, path=path) if name else own.read(path, offered)

    def edit(path: str, old: str, new: str, offered: set[str]) -> str:
        name = mcp_files_tool(offered, "edit_file")
        return _hermes(name, path=path, old=old, new=new) if name else own.edit(path, old, new, offered)

    def read_back(name: str, args: dict[str, Any], result: str) -> tuple[str, str] | None:
        if _is_files_tool(name, "read_file"):
            return str(args.get("path") or ""), _observation(own.output(result))
        return own.read_back(name, args, result)

    def edited(name: str, args: dict[str, Any]) -> tuple[str, str] | None:
        if _is_files_tool(name, "edit_file"):
            return args.get("path"), args.get("old")
        return own.edited(name, args)

    return AgentTools(read=read, edit=edit, shell=own.shell, read_back=read_back, edited=edited, ran=own.ran,
                      output=own.output)


def swe_fix(context: dict[str, Any], tools: AgentTools) -> str:
    """The next move of a competent agent on a swe-mini task: read the modules the failing tests point
    at (and those ``api.py`` imports), replace each planted bug (:func:`forge_cli.tasks.swe_units.repair`)
    with the agent's edit tool (the ``files`` MCP server's, where the agent offers it), run the tests with
    its shell, then answer."""
    messages = context.get("messages") or []
    offered = {t.get("function", t).get("name") for t in context.get("tools") or [] if isinstance(t, dict)}
    if not offered:  # a side request without tools (opencode's session title)
        return "Fix the failing tests"
    if mcp_files_tool(offered, "edit_file"):
        tools = with_mcp_files(tools)
    prompt = _task_text(messages)
    package = re.search(r"package `(\w+)`", prompt)
    if package is None:
        return "I cannot tell which package to fix."
    root = _workdir(context).rstrip("/")
    history = tool_history(messages)
    read: dict[str, str] = {}
    for name, args, result in history:
        got = tools.read_back(name, args, result)
        if got is not None and got[0] and got[1].strip():
            read[_relative(got[0], root)] = got[1]
    wanted = [f"{package.group(1)}/{m}.py" for m in dict.fromkeys(re.findall(r"\(tests\.test_(\w+)\.", prompt))]
    wanted += re.findall(r'File "(' + package.group(1) + r'/\w+\.py)"', prompt)
    for text in read.values():
        wanted += [f"{package.group(1)}/{m}.py" for m in re.findall(rf"^from {package.group(1)}\.(\w+) import", text, re.M)]
    for path in dict.fromkeys(wanted):
        if path not in read:
            return tools.read(f"{root}/{path}", offered)
    edited = {(_relative(p, root), old) for p, old in filter(None, (tools.edited(n, a) for n, a, _ in history))}
    for path, text in read.items():
        for old, new in repair(text)[1]:
            if (path, old) not in edited:
                return tools.edit(f"{root}/{path}", old, new, offered)
    runs = [out for out in (tools.ran(n, a, r) for n, a, r in history) if out is not None]
    if not runs:
        return tools.shell(TEST_COMMAND, offered)
    return DONE if re.search(r"^OK\b", runs[-1], re.M) else NOT_DONE


def _command_text(command: Any) -> str:
    return " ".join(str(c) for c in command) if isinstance(command, list) else str(command or "")


def _cat_path(command: Any) -> str | None:
    """The file of a ``cat FILE`` command line (a string or an argv)."""
    found = re.fullmatch(r"\s*cat (\S+)\s*", _command_text(command))
    return shlex.split(found.group(1))[0] if found else None


def _is_test(command: Any) -> bool:
    return TEST_COMMAND in _command_text(command)


# opencode: bash (command, description), edit (filePath, oldString, newString)


def _bash_output(result: str) -> str:
    """opencode's bash result: the command's output (a metadata block may follow it)."""
    return re.split(r"\n?<bash_metadata>", result, maxsplit=1)[0]


OPENCODE_TOOLS = AgentTools(
    read=lambda path, _: _hermes("bash", command=f"cat {shlex.quote(path)}", description="Read the module"),
    edit=lambda path, old, new, _: _hermes("edit", filePath=path, oldString=old, newString=new),
    shell=lambda command, _: _hermes("bash", command=command, description="Run the tests"),
    read_back=lambda name, args, result: ((_cat_path(args.get("command")) or "", _bash_output(result))
                                          if name == "bash" else None),
    edited=lambda name, args: (args.get("filePath"), args.get("oldString")) if name == "edit" else None,
    ran=lambda name, args, result: _bash_output(result) if name == "bash" and _is_test(args.get("command")) else None,
)


def opencode(context: dict[str, Any]) -> str:
    """opencode on a swe-mini task: ``bash`` to read and test, its ``edit`` tool to fix."""
    return swe_fix(context, OPENCODE_TOOLS)


# claude-code: Read (file_path), Edit (file_path, old_string, new_string; it refuses a file not Read), Bash


def _claude_result(result: str) -> str:
    """A tool result without the reminders claude-code appends to it."""
    return re.split(r"\n*<system-reminder>", result, maxsplit=1)[0]


CLAUDE_TOOLS = AgentTools(
    read=lambda path, _: _hermes("Read", file_path=path),
    edit=lambda path, old, new, _: _hermes("Edit", file_path=path, old_string=old, new_string=new),
    shell=lambda command, _: _hermes("Bash", command=command, description="Run the tests"),
    read_back=lambda name, args, result: ((args.get("file_path") or "", _strip_numbers(_claude_result(result)))
                                          if name == "Read" else None),
    edited=lambda name, args: (args.get("file_path"), args.get("old_string")) if name == "Edit" else None,
    ran=lambda name, args, result: result if name == "Bash" and _is_test(args.get("command")) else None,
)


def claude_code(context: dict[str, Any]) -> str:
    """claude-code on a swe-mini task: ``Read``, ``Edit``, ``Bash``."""
    return swe_fix(context, CLAUDE_TOOLS)


# codex: exec_command (cmd) or shell (command argv) to read and test; apply_patch where offered


def _codex_output(result: str) -> str:
    """The command's output inside codex's result text (``…\\nOutput:\\n<output>``)."""
    parts = re.split(r"^Output:\n", result, maxsplit=1, flags=re.M)
    if len(parts) == 2:
        return parts[1]
    try:  # older codex: {"output": "...", "metadata": {...}}
        data = json.loads(result)
    except ValueError:
        return result
    return str(data.get("output", result)) if isinstance(data, dict) else result


def _codex_run(command: str, offered: set[str]) -> str:
    if "exec_command" in offered or "shell" not in offered:
        return _hermes("exec_command", cmd=command)
    return _hermes("shell", command=["bash", "-lc", command])


def _codex_command(name: str, args: dict[str, Any]) -> Any:
    if name == "exec_command":
        return args.get("cmd")
    if name == "shell":
        command = args.get("command")
        return command[-1] if isinstance(command, list) and command else command
    return None


def _codex_patch(path: str, old: str, new: str) -> str:
    """An ``apply_patch`` envelope that replaces the lines ``old`` by ``new`` in ``path``."""
    body = "".join(f"-{line}\n" for line in old.splitlines()) + "".join(f"+{line}\n" for line in new.splitlines())
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n{body}*** End Patch\n"


# a replacement through codex's command tool: the edit as JSON, the last argument of a small python program
CODEX_EDIT = ("import json, pathlib, sys; e = json.loads(sys.argv[1]); p = pathlib.Path(e['path']); "
              "p.write_text(p.read_text().replace(e['old'], e['new'], 1))")


def _codex_edit(path: str, old: str, new: str, offered: set[str]) -> str:
    if "apply_patch" in offered:
        return _hermes("apply_patch", input=_codex_patch(path, old, new))
    edit = json.dumps({"path": path, "old": old, "new": new})
    return _codex_run(f"python3 -c {shlex.quote(CODEX_EDIT)} {shlex.quote(edit)}", offered)


def _codex_edited(name: str, args: dict[str, Any]) -> tuple[str, str] | None:
    if name == "apply_patch":
        patch = str(args.get("input") or args.get("patch") or "")
        path = re.search(r"^\*\*\* Update File: (.+)$", patch, re.M)
        old = "\n".join(line[1:] for line in patch.splitlines() if line.startswith("-"))
        return (path.group(1).strip(), old) if path else None
    try:
        argv = shlex.split(_command_text(_codex_command(name, args)))
        edit = json.loads(argv[-1]) if argv[:3] == ["python3", "-c", CODEX_EDIT] and len(argv) == 4 else None
    except ValueError:
        return None
    return (edit.get("path"), edit.get("old")) if isinstance(edit, dict) else None


CODEX_TOOLS = AgentTools(
    read=lambda path, offered: _codex_run(f"cat {shlex.quote(path)}", offered),
    edit=_codex_edit,
    shell=_codex_run,
    read_back=lambda name, args, result: ((p, _codex_output(result))
                                          if (p := _cat_path(_codex_command(name, args))) else None),
    edited=_codex_edited,
    ran=lambda name, args, result: _codex_output(result) if _is_test(_codex_command(name, args)) else None,
    output=_codex_output,
)


def codex(context: dict[str, Any]) -> str:
    """codex on a swe-mini task: its command tool to read and test, ``apply_patch`` (or a python edit) to fix."""
    return swe_fix(context, CODEX_TOOLS)


# agent -> its policy's name here
NPM_AGENT_POLICIES: dict[str, str] = {"opencode": "opencode", "codex": "codex", "claude-code": "claude_code"}
