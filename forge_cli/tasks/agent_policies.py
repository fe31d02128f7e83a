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
from typing import Any

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
    """A tool result as the agent showed it: mini-swe-agent sends ``{"returncode": …, "output": …}``."""
    text = _text(content)
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return str(data.get("output", text)) if isinstance(data, dict) else text


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
    from forge_cli.tasks.swe_units import repair

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
    return f"{text}\n" + _hermes("bash", command=f"echo {MINI_SUBMIT} && echo {json.dumps(text)}")


def smolagents(context: dict[str, Any]) -> str:
    """smolagents' ToolCallingAgent: a ``shell`` call a turn, then the ``final_answer`` tool."""
    kind, text = shell_step(context.get("messages") or [])
    return _hermes("shell", command=text) if kind == "command" else _hermes("final_answer", answer=text)


def openai_agents(context: dict[str, Any]) -> str:
    """An OpenAI Agents SDK agent: a ``shell`` call a turn; a reply without a call is its final output."""
    kind, text = shell_step(context.get("messages") or [])
    return _hermes("shell", command=text) if kind == "command" else text


# ---- the npm agents (opencode, codex, claude-code) ------------------------------------------------------
# NOTE for H6: H5 created this file with `create` at 15:06:48 and, by a race, overwrote a version of it you had
# just written (it was not yet committed, and no copy survived). Sorry: please add your section back here.
