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


def test_a_quoted_task_with_the_agents_own_lines_after_it_is_still_read():
    """kilo sends the task in quotes, its environment details after it."""
    quoted = '"Create a file named docs/g.txt containing exactly this line: island ribbon"\n\n<environment_details>x'
    assert files_command(quoted) == "mkdir -p docs && printf '%s\\n' 'island ribbon' > docs/g.txt"
    said = 'Create a file named a.txt containing exactly this line: he said "hi"'
    assert files_command(said) == "printf '%s\\n' 'he said \"hi\"' > a.txt"


def test_a_code_tool_that_asks_for_a_language_gets_the_shell():
    """open-interpreter's one tool: ``execute(language, code)``, the language an enum of what it can run."""
    languages = {"type": "string", "enum": ["ruby", "python", "shell", "javascript"]}
    tools = offered_tools({"tools": [openai_tool("execute", language=languages, code={"type": "string"})]})
    assert call_of(shell_call(tools, "ls")) == {"name": "execute", "arguments": {"code": "ls", "language": "shell"}}
    no_shell = offered_tools({"tools": [openai_tool("execute", language={"enum": ["python"]}, code={"type": "string"})]})
    assert call_of(shell_call(no_shell, "ls")) == {"name": "execute", "arguments": {"code": "ls"}}


def test_forges_shell_mcp_server_is_preferred_to_the_agents_own_shell():
    """With ``mcp = ["shell"]`` an agent offers the server's tool beside its own (gptme with a hash after it)."""
    for server in ("mcp_shell_shell", "mcp__shell__shell", "shell-shell", "shell_shell_937c58a49dcb"):
        tools = offered_tools({"tools": [openai_tool("shell", command={"type": "string"}),
                                         openai_tool(server, command={"type": "string"})]})
        assert call_of(shell_call(tools, "ls"))["name"] == server


def test_a_required_but_nullable_argument_is_sent_as_null():
    """crewai's strict schemas make every argument required, the optional ones nullable."""
    strict = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object", "required": ["command", "timeout_s"],
              "properties": {"command": {"type": "string"}, "timeout_s": {"anyOf": [{"type": "number"}, {"type": "null"}]}}}}}
    assert call_of(shell_call(offered_tools({"tools": [strict]}), "ls"))["arguments"] == {"command": "ls", "timeout_s": None}


def test_the_files_policy_works_through_bash_and_says_so_when_there_is_no_shell():
    task = "Create a file named notes/a.txt containing exactly this line: hello world"
    context = {"messages": [{"role": "user", "content": task}], "tools": [openai_tool("bash", command={"type": "string"})]}
    call = call_of(files_shell(context))
    assert call["name"] == "bash" and call["arguments"]["command"] == files_command(task)
    assert shlex.split(call["arguments"]["command"])[:3] == ["mkdir", "-p", "notes"]
    bare = files_shell({"messages": context["messages"], "tools": [openai_tool("read_file", path={"type": "string"})]})
    assert "<tool_call>" not in bare and "no shell tool" in bare and "read_file" in bare


def test_a_dspy_agent_gets_the_fields_it_asks_for_shell_then_finish_then_the_result():
    """DSPy's ReAct sends no tools: its ChatAdapter asks for named fields. The first turn runs the task's
    command through ``shell``; once an observation is in the trajectory, ``finish``; the extract step
    asks for ``reasoning`` and ``result``. ``files_agent`` tells it from an agent with tools."""
    from forge_cli.tasks.demo_policies import files_agent

    task = "[[ ## task ## ]]\nCreate a file named a.txt containing exactly this line: hi there\n\n[[ ## trajectory ## ]]\n"
    ask = ("Respond with the corresponding output fields, starting with the field `[[ ## next_thought ## ]]`, then "
           "`[[ ## next_tool_name ## ]]` (must be formatted as a valid Python Literal['shell', 'finish']), then "
           "`[[ ## next_tool_args ## ]]` (must be formatted as a valid Python dict[str, Any]), and then ending with "
           "the marker for `[[ ## completed ## ]]`.")

    def fields(reply: str) -> dict:
        return dict(re.findall(r"\[\[ ## (\w+) ## \]\]\n(.*?)\n\n", reply, re.S))

    first = files_agent({"messages": [{"role": "system", "content": "…"}, {"role": "user", "content": task + "\n" + ask}]})
    assert first.endswith("[[ ## completed ## ]]")
    assert fields(first)["next_tool_name"] == "shell"
    assert json.loads(fields(first)["next_tool_args"]) == {"command": files_command(task)}
    seen = task + "[[ ## observation_0 ## ]]\n[exit code 0]\n\n" + ask
    assert fields(files_agent({"messages": [{"role": "user", "content": seen}]}))["next_tool_name"] == "finish"
    extract = seen.replace(ask, "Respond with the corresponding output fields, starting with the field "
                                "`[[ ## reasoning ## ]]`, then `[[ ## result ## ]]`, and then ending with the marker "
                                "for `[[ ## completed ## ]]`.")
    assert set(fields(files_agent({"messages": [{"role": "user", "content": extract}]}))) == {"reasoning", "result"}
    with_tools = {"messages": [{"role": "user", "content": task + ask}], "tools": [openai_tool("bash", command={"type": "string"})]}
    assert call_of(files_agent(with_tools))["name"] == "bash"


def test_an_agent_that_edits_only_what_it_has_read_is_shown_the_file_then_the_command_runs_again():
    """qwen-code's shell tool refuses ``sed -i FILE`` on a file its read tool has not shown: the policy reads it
    with the tool the refusal names (its own path argument), then runs the same command, then answers."""
    task = "In settings.ini, change the value of retries to 41386; leave every other line as it is."
    tools = [openai_tool("run_shell_command", command={"type": "string"}), openai_tool("read_file", absolute_path={"type": "string"})]
    messages = [{"role": "user", "content": task}]
    first = call_of(files_shell({"messages": messages, "tools": tools}))
    assert first == {"name": "run_shell_command", "arguments": {"command": files_command(task)}}

    def answered(call: dict, result: str, n: int) -> list:
        return [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}", "type": "function", "function": {
            "name": call["name"], "arguments": json.dumps(call["arguments"])}}]}, {"role": "tool", "tool_call_id": f"c{n}", "content": result}]

    refused = "File /w/settings.ini has not been read in this session. Use the read_file tool first to load it."
    messages += answered(first, refused, 1)
    read = call_of(files_shell({"messages": messages, "tools": tools}))
    assert read == {"name": "read_file", "arguments": {"absolute_path": "/w/settings.ini"}}
    messages += answered(read, "mode = 1\nretries = 2\n", 2)
    assert call_of(files_shell({"messages": messages, "tools": tools})) == first
    messages += answered(first, "", 3)
    assert files_shell({"messages": messages, "tools": tools}) == "done"
