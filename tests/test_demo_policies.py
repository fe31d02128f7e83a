"""The scripted policies that stand in for a model in the agents' tests use each agent's *own*
tools, whatever it names them: a policy that assumed a tool named ``shell`` scored 0 ("unknown
tool") with an agent whose shell tool is ``bash``."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from forge_cli.tasks.demo_policies import SHELL_TOOLS, files_command, files_shell, offered_tools, shell_call


def call_of(text: str) -> dict:
    return json.loads(re.search(r"<tool_call>\n(.*)\n</tool_call>", text, re.S).group(1))


def openai_tool(name: str, **properties: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": "", "parameters": {
        "type": "object", "properties": properties, "required": list(properties)}}}


@pytest.mark.parametrize("name", SHELL_TOOLS)
def test_the_agents_own_shell_tool_is_called_with_its_own_argument(name):
    tools = offered_tools({"tools": [openai_tool("read_file", path={"type": "string"}),
                                     openai_tool(name, description={"type": "string"}, cmd={"type": "string"})]})
    call = call_of(shell_call(tools, "ls -la"))
    assert call == {"name": name, "arguments": {"cmd": "ls -la"}}


def test_a_shell_that_takes_an_argv_gets_one_and_anthropic_schemas_count():
    codex = offered_tools({"tools": [openai_tool("shell", command={"type": "array", "items": {"type": "string"}})]})
    assert call_of(shell_call(codex, "echo hi"))["arguments"] == {"command": ["bash", "-lc", "echo hi"]}
    claude = offered_tools({"tools": [{"name": "Bash", "input_schema": {"type": "object", "properties": {
        "command": {"type": "string"}, "timeout": {"type": "number"}}}}]})
    assert call_of(shell_call(claude, "pwd")) == {"name": "Bash", "arguments": {"command": "pwd"}}
    assert shell_call(offered_tools({"tools": [openai_tool("read_file", path={"type": "string"})]}), "ls") is None


def test_the_files_policy_works_through_bash_and_says_so_when_there_is_no_shell():
    task = "Create a file named notes/a.txt containing exactly this line: hello world"
    context = {"messages": [{"role": "user", "content": task}], "tools": [openai_tool("bash", command={"type": "string"})]}
    call = call_of(files_shell(context))
    assert call["name"] == "bash" and call["arguments"]["command"] == files_command(task)
    assert shlex.split(call["arguments"]["command"])[:3] == ["mkdir", "-p", "notes"]
    bare = files_shell({"messages": context["messages"], "tools": [openai_tool("read_file", path={"type": "string"})]})
    assert "<tool_call>" not in bare and "no shell tool" in bare and "read_file" in bare
