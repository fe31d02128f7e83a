"""Scripted policies that act like competent agents on the built-in suites, in the hermes tool
format: ``--engine scripted --policy forge_cli.tasks.demo_policies:calc`` (or ``:kv_search``).

The scripted engine scores their text with the real model, so every id and logprob is real:
they drive a whole rollout (tools, context management, verification, rewards) before a model
can solve the tasks itself. Each decides from what it can still see in its context, the way an
agent would: an observation a context policy removed is looked up again.
"""

from __future__ import annotations

import json
import random
import re
import shlex
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.tasks.swe_units import repair


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# Forge's own shell MCP server's tool (the scaffold's mcp = ["shell"]) as agents name it — gemini-cli and
# qwen-code, claude-code and codex, opencode and kilo, copilot: where it is offered, it is the one to use
MCP_SHELL_TOOLS = ("mcp_shell_shell", "mcp__shell__shell", "shell_shell", "shell-shell")
# what agents name their shell tool, in the order a policy prefers them when several are offered
SHELL_TOOLS = (*MCP_SHELL_TOOLS, "shell", "bash", "Bash", "run_shell_command", "execute_command", "exec_command", "run_command",
               "shell_command", "execute_bash", "terminal", "run_terminal_cmd", "execute")
COMMAND_KEYS = ("command", "cmd", "script", "commands", "code")  # its argument that takes the command line


def offered_tools(context: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tools the request offered, by name, with their parameters' JSON schema."""
    offered = {}
    for tool in context.get("tools") or []:
        spec = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            offered[spec["name"]] = spec.get("parameters") or spec.get("input_schema") or {}
    return offered


def shell_call(tools: dict[str, dict[str, Any]], command: str) -> str | None:
    """A call of the agent's *own* shell tool (whatever it names it, :data:`SHELL_TOOLS`) that runs
    ``command``, its argument named as the tool's schema names it (an argv list where it takes one);
    None when the agent offers no shell tool."""
    hashed = sorted(n for n in tools if n.rpartition("_")[0] in MCP_SHELL_TOOLS)  # gptme adds a hash: shell_shell_1a2b…
    name = (next((n for n in MCP_SHELL_TOOLS if n in tools), None) or (hashed[0] if hashed else None)
            or next((n for n in SHELL_TOOLS if n in tools), None))
    if name is None:
        return None
    properties = tools[name].get("properties") or {}
    key = next((k for k in COMMAND_KEYS if k in properties), next(iter(properties), "command"))
    value: Any = ["bash", "-lc", command] if (properties.get(key) or {}).get("type") == "array" else command
    arguments = {key: value}
    for other in tools[name].get("required") or []:
        spec = properties.get(other) or {}
        choices = spec.get("enum") or []
        shell = next((c for c in ("shell", "bash", "sh") if c in choices), None)
        if other != key and shell is not None:  # a language to choose (open-interpreter's execute): the shell
            arguments[other] = shell
        elif other != key and any(s.get("type") == "null" for s in spec.get("anyOf") or ()):
            arguments[other] = None  # required but nullable (OpenAI's strict schemas, crewai's): null
    return _call(name, **arguments)


def _user(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def _seen(messages: list[dict[str, Any]]) -> str:
    """Everything tools answered that is still in the context (tool messages, or observations as user text)."""
    return "\n".join(str(m.get("content") or "") for m in messages[1:] if m.get("role") in ("tool", "user"))


def calc_expression(prompt: str) -> str:
    """The question's expression with its ``Let x = …`` definitions substituted."""
    definitions = dict(re.findall(r"Let (\w+) = ([^.]+?)\.(?:\s|$)", prompt))
    asked = re.search(r"What is (.+?)\?", prompt)
    expr = asked.group(1) if asked else "0"
    for _ in range(len(definitions) + 1):  # later definitions may use earlier ones
        for name, value in definitions.items():
            expr = re.sub(rf"\b{re.escape(name)}\b", f"({value})", expr)
    return expr


def slip(text: str, rng: random.Random) -> str:
    """``text`` with one of its digits changed to another (a number's first digit never to 0: no
    leading zeros, no division by zero)."""
    places = [i for i, ch in enumerate(text) if ch.isdigit()]
    if not places:
        return text
    i = rng.choice(places)
    first = i == 0 or not text[i - 1].isdigit()
    digits = [d for d in "0123456789" if d != text[i] and not (first and d == "0")]
    return text[:i] + rng.choice(digits) + text[i + 1:]


# the most re-checks the calc teacher makes on one task (``rechecks``): with ``max_turns`` 5 a
# sampled policy that re-checks once more than its teacher ever did still gets to answer
MAX_RECHECKS = 2


# what the calc teacher tries the calculator on first (``warmups``), as an agent checks that a tool works
WARMUP_EXPRESSION = "1+1"

# the most warm-up calls it can be asked to make (``max_warmups``): three, the real call and the answer
# are the embedded scaffold's ``max_turns`` 5
MAX_WARMUPS = 3


def recheck_count(prompt: str, rechecks: float, seed: int = 0, habit: str = "recheck",
                  most: int = MAX_RECHECKS) -> int:
    """How often the calc teacher re-checks its result on the task ``prompt``: once with probability
    ``rechecks``, and again after each re-check with the same probability, at most ``most``
    (:data:`MAX_RECHECKS`) times (from the task's text and ``seed`` alone, like its slips). ``habit``
    names the draw: ``"warmup"`` draws how many warm-up calls it makes first, independently."""
    rng = random.Random(f"{seed}\0{habit}\0{prompt}")
    count = 0
    while count < most and rng.random() < rechecks:
        count += 1
    return count


def calc(context: dict[str, Any], slips: float = 0.0, seed: int = 0, rechecks: float = 0.0,
         warmups: float = 0.0, max_warmups: int = MAX_RECHECKS) -> str:
    """One calculator call with the whole expression, then its result as the answer.

    ``slips``: the fraction of tasks on which this teacher miscopies one digit, as an imperfect
    teacher (a person, a weaker model) does — two in three times in the expression it sends to the
    calculator, else in the result it answers with. ``rechecks``: how often, having the result, it
    sends the same call again to re-check it before answering (:func:`recheck_count`): right, but
    slow — each re-check is another model call and tool call. ``warmups``: how often it first tries
    the calculator on :data:`WARMUP_EXPRESSION` (as an agent checks that a tool works), drawn like the
    re-checks; that result is never used, so nothing but the time it costs argues against it — what
    the completion-time reward alone teaches RL to drop; at most ``max_warmups`` of them
    (:data:`MAX_RECHECKS` unless set; :data:`MAX_WARMUPS` at most). Warm-ups and re-checks together are
    at most ``max(MAX_RECHECKS, max_warmups)`` (the warm-ups first, the re-checks in what is left), so a
    trace fits ``max_turns`` 5. Which tasks, which
    digit and how many re-checks and warm-ups follow from the task's text and ``seed`` alone, so the
    turns of a task agree and a run is reproducible."""
    messages = context.get("messages") or []
    prompt = _user(messages)
    rng = random.Random(f"{seed}\0{prompt}")
    slipped = rng.random() < slips
    where = "expression" if rng.random() < 2 / 3 else "answer"
    results = [m["content"] for m in messages if m.get("role") == "tool"]
    if not isinstance(max_warmups, int) or isinstance(max_warmups, bool) or not 0 <= max_warmups <= MAX_WARMUPS:
        raise ForgeError(f"the calc teacher makes 0 to {MAX_WARMUPS} warm-up calls (max_warmups), not {max_warmups}")
    first = recheck_count(prompt, warmups, seed, habit="warmup", most=max_warmups) if warmups else 0
    if len(results) < first:
        return _call("calculator", expression=WARMUP_EXPRESSION)
    results = results[first:]
    expression = calc_expression(prompt)
    if slipped and where == "expression":
        expression = slip(expression, rng)
    if results and len(results) > min(recheck_count(prompt, rechecks, seed), max(MAX_RECHECKS, max_warmups) - first):
        answer = str(results[-1]).strip()
        return slip(answer, rng) if slipped and where == "answer" else answer
    return _call("calculator", expression=expression)


def kv_search(context: dict[str, Any]) -> str:
    """Follow "the partner of …" hop by hop: search an entry, open its document, read the fact."""
    messages = context.get("messages") or []
    question = _user(messages)
    seen = _seen(messages)
    last = str(messages[-1].get("content") or "") if messages else ""
    if last.startswith("Summarise the work so far"):  # the summarize policy's request: keep every fact and entry
        facts = re.findall(r"The (?:partner|code) of [a-z]+-[a-z]+ is [A-Za-z0-9-]+\.|doc-\d+: Entry: [a-z]+-[a-z]+", seen)
        return question + "\n" + "\n".join(dict.fromkeys(facts))
    start = re.search(r"of ([a-z]+-[a-z]+)\?", question)
    if start is None:
        return "I cannot tell what is asked."
    hops = question.count("the partner of")
    partners = dict(re.findall(r"The partner of ([a-z]+-[a-z]+) is ([a-z]+-[a-z]+)\.", seen))
    codes = dict(re.findall(r"The code of ([a-z]+-[a-z]+) is ([A-Z]+-\d+)\.", seen))
    entity = start.group(1)
    for _ in range(hops):
        if entity not in partners:
            break
        entity = partners[entity]
    else:
        if entity in codes:
            return codes[entity]
    doc = re.search(rf"(doc-\d+): Entry: {re.escape(entity)}\b", seen)
    return _call("open", doc_id=doc.group(1)) if doc else _call("search", query=entity)


def files_command(prompt: str) -> str | None:
    """A shell command that does what a ``files`` task asks (create a file with a line, or set a key)."""
    # an agent may quote the task or add its own lines after it (kilo does both): one line, quotes dropped
    create = re.search(r"(\"?)Create a file named (\S+) containing exactly this line: (.+?)\1$", prompt, re.M)
    if create:
        path, line = create.group(2), create.group(3).strip()
        folder = path.rpartition("/")[0]
        make = f"mkdir -p {shlex.quote(folder)} && " if folder else ""
        return f"{make}printf '%s\\n' {shlex.quote(line)} > {shlex.quote(path)}"
    change = re.search(r"In (\S+), change the value of (\w+) to (\S+?);", prompt)
    if change:
        path, key, value = change.groups()
        return f"sed -i 's/^{key} = .*/{key} = {value}/' {shlex.quote(path)}"
    copy = re.search(r"Make a copy of (\S+) named (\S+) with every letter in upper case", prompt)
    if copy:
        source, target = copy.groups()
        folder = target.rpartition("/")[0]
        make = f"mkdir -p {shlex.quote(folder)} && " if folder else ""
        return f"{make}tr '[:lower:]' '[:upper:]' < {shlex.quote(source)} > {shlex.quote(target)}"
    if "Sort the lines of names.txt" in prompt:
        return "sort -o names.txt names.txt && wc -l < names.txt | tr -d ' ' > count.txt"
    if "numbers.txt holds one integer per line" in prompt:
        return "awk '{s += $1} END {print s}' numbers.txt > total.txt"
    return None


def files_shell(context: dict[str, Any]) -> str:
    """For an agent with a shell tool (whatever it calls it: ``shell``, ``bash``, ``run_shell_command``,
    …, :func:`shell_call`): one command that does the task, then the answer (through ``final_answer``
    where the agent offers it). An agent that will not let a command edit a file it has not read
    (:data:`READ_FIRST`) is shown the file with the tool it names, and the command runs again."""
    messages = context.get("messages") or []
    tools = offered_tools(context)
    command = files_command(_user_task(messages))
    calls = tool_history(messages)
    if calls and command is not None and len(calls) < 4:
        name, _, result = calls[-1]
        guard = READ_FIRST.search(result)
        if guard and guard.group(2) in tools:  # the agent refused to edit a file it has not shown (qwen-code): read it
            schema = tools[guard.group(2)]
            key = next(iter(schema.get("required") or schema.get("properties") or ["path"]))
            return _call(guard.group(2), **{key: guard.group(1)})
        if len(calls) >= 2 and READ_FIRST.search(calls[-2][2]):  # read it: the command again
            return shell_call(tools, command) or "done"
    if any(m.get("role") == "assistant" for m in messages):
        return _call("final_answer", answer="done") if "final_answer" in tools else "done"
    if command is None:
        return "I cannot tell what is asked."
    return shell_call(tools, command) or f"I have no shell tool (offered: {', '.join(sorted(tools)) or 'none'})."


# an agent that edits only what it has read (qwen-code's shell tool on `sed -i FILE`): the file and the tool to read it with
READ_FIRST = re.compile(r"File (\S+) has not been read in this session\. Use the (\w+) tool first")


DSPY_FIELD = re.compile(r"`\[\[ ## (\w+) ## \]\]`")


def files_dspy(context: dict[str, Any]) -> str:
    """For a DSPy ``ReAct`` agent (no API tools: DSPy's ChatAdapter asks for named fields between
    ``[[ ## NAME ## ]]`` markers): the fields its last message asks for, ``shell`` with one command that
    does the ``files`` task, then ``finish`` once an observation is in its trajectory, then the result."""
    messages = context.get("messages") or []
    asked = _user(messages[-1:]) if messages and messages[-1].get("role") == "user" else ""
    command = files_command(asked) or "true"
    done = "[[ ## observation_0 ## ]]" in asked
    values = {"next_thought": "The file is made." if done else "One shell command does it.",
              "next_tool_name": "finish" if done else "shell",
              "next_tool_args": json.dumps({} if done else {"command": command}),
              "reasoning": "The shell command made the file.", "result": "done"}
    fields = DSPY_FIELD.findall(asked.rsplit("Respond with", 1)[-1])
    return "".join(f"[[ ## {f} ## ]]\n{values.get(f, 'done')}\n\n" for f in fields if f != "completed") + "[[ ## completed ## ]]"


def files_agent(context: dict[str, Any]) -> str:
    """Any agent on a ``files`` task: :func:`files_dspy` where its last message asks for DSPy's fields,
    else :func:`files_shell` (its own shell tool). What ``forge scaffold doctor`` runs."""
    messages = context.get("messages") or []
    if not context.get("tools") and messages and DSPY_FIELD.search(_user(messages[-1:])):
        return files_dspy(context)
    return files_shell(context)


def _user_task(messages: list[dict[str, Any]]) -> str:
    """The task text: the last user message that asks for a file (agents wrap the prompt in their own text)."""
    for m in reversed(messages):
        text = str(m.get("content") or "")
        if m.get("role") == "user" and files_command(text) is not None:
            return text
    return _user(messages)


def tool_history(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], str]]:
    """The tool calls made so far, in order: ``(name, arguments, result)`` (``""`` while unanswered).
    Calls come in the gateway's shape (``name``, ``arguments``) or OpenAI's (``function``); each
    call's result is the tool message that answers it, by ``tool_call_id`` or else by position."""
    calls: list[tuple[str, dict[str, Any], str]] = []
    waiting: list[int] = []  # indices of calls whose results come next
    by_id: dict[str, int] = {}
    for m in messages:
        if m.get("role") == "assistant":
            waiting = []
            for call in m.get("tool_calls") or []:
                function = call.get("function") or call
                arguments = function.get("arguments") or {}
                if isinstance(arguments, str):
                    try:
                        arguments = json.loads(arguments or "{}")
                    except ValueError:
                        arguments = {}
                by_id[str(call.get("id"))] = len(calls)
                waiting.append(len(calls))
                calls.append((str(function.get("name")), arguments if isinstance(arguments, dict) else {}, ""))
        elif m.get("role") == "tool":
            index = by_id.get(str(m.get("tool_call_id"))) if m.get("tool_call_id") else None
            if index is None and waiting:
                index = waiting[0]
            if index is not None:
                if index in waiting:
                    waiting.remove(index)
                name, arguments, _ = calls[index]
                calls[index] = (name, arguments, str(m.get("content") or ""))
    return calls


def swe_mini(context: dict[str, Any]) -> str:
    """Fix a swe-mini repository with the suite's tools: read the modules the failing tests point at
    (through ``api.py`` when a test goes through it), ``edit_file`` each planted bug away (it knows
    the catalogue's bug patterns, :func:`forge_cli.tasks.swe_units.repair`), run the tests, answer."""
    messages = context.get("messages") or []
    prompt = _user(messages)
    package = re.search(r"package `(\w+)`", prompt)
    if package is None:
        return "I cannot tell which package to fix."
    history = tool_history(messages)
    read = {args.get("path"): result for name, args, result in history if name == "read_file"}
    wanted = [f"{package.group(1)}/{module}.py" for module in dict.fromkeys(re.findall(r"\(tests\.test_(\w+)\.", prompt))]
    wanted += re.findall(r'File "(' + package.group(1) + r'/\w+\.py)"', prompt)
    for text in read.values():  # the api module names the modules its entry points come from
        wanted += [f"{package.group(1)}/{m}.py" for m in re.findall(rf"^from {package.group(1)}\.(\w+) import", text, re.M)]
    for path in dict.fromkeys(wanted):
        if path not in read:
            return _call("read_file", path=path)
    edited = {(args.get("path"), args.get("old")) for name, args, _ in history if name == "edit_file"}
    for path, text in read.items():
        for old, new in repair(text)[1]:
            if (path, old) not in edited:
                return _call("edit_file", path=path, old=old, new=new)
    runs = [result for name, _, result in history if name == "run_tests"]
    if not runs:
        return _call("run_tests")
    return "Fixed: the tests pass." if runs[-1].rstrip().endswith("OK") else "I could not make the tests pass."


# suite -> the demo policy that solves it (what the warm start's synthetic traces come from)
DEMO_POLICIES: dict[str, str] = {"calc": "calc", "calc-1": "calc", "kv-search": "kv_search", "files": "files_shell",
                                 "swe-mini": "swe_mini"}
# the suites whose teacher slips with ``slips`` (calc's): only their unsolved traces are learned too
SLIPPING_SUITES = frozenset(name for name, policy in DEMO_POLICIES.items() if policy == "calc")


def by_tools(context: dict[str, Any], slips: float = 0.0, seed: int = 0, rechecks: float = 0.0,
             warmups: float = 0.0, max_warmups: int = MAX_RECHECKS) -> str:
    """The demo policy of whichever suite the offered tools belong to (for a mix of suites);
    ``slips``, ``seed``, ``rechecks``, ``warmups`` and ``max_warmups`` go to :func:`calc`."""
    tools = {t.get("function", t).get("name") for t in context.get("tools") or [] if isinstance(t, dict)}
    if "calculator" in tools:
        return calc(context, slips=slips, seed=seed, rechecks=rechecks, warmups=warmups, max_warmups=max_warmups)
    if {"search", "open"} <= tools:
        return kv_search(context)
    if "run_tests" in tools:
        return swe_mini(context)
    return files_shell(context)


def policy_for(weights: dict[str, float], slips: float = 0.0, seed: int = 0, rechecks: float = 0.0,
               warmups: float = 0.0, max_warmups: int = MAX_RECHECKS) -> str:
    """The scripted engine's ``policy`` reference that writes traces for the suites of ``weights``
    (a mix gets :func:`by_tools`), with ``slips``, ``rechecks``, ``warmups`` and ``max_warmups`` (named
    only where warm-ups are made and it is not the default) for the calc teacher; a
    ForgeError if a suite has no demo policy."""
    missing = [name for name in weights if name not in DEMO_POLICIES]
    if missing:
        raise ForgeError(f"no demo policy writes warm-start traces for {', '.join(missing)} (there are demo policies "
                         f"for {', '.join(DEMO_POLICIES)}): set train.warmstart.when = \"never\" or warm-start on those")
    names = {DEMO_POLICIES[name] for name in weights}
    name = names.pop() if len(names) == 1 else "by_tools"
    if not any(suite in SLIPPING_SUITES for suite in weights):
        return f"{__name__}:{name}"
    options = {k: v for k, v in (("slips", slips), ("rechecks", rechecks), ("warmups", warmups)) if v}
    if warmups and max_warmups != MAX_RECHECKS:  # the cap only where it is not the default (0 included)
        options["max_warmups"] = max_warmups
    return f"{__name__}:{name}" + ("?" + "&".join(f"{k}={v}" for k, v in options.items()) + f"&seed={seed}" if options else "")
