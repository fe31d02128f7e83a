"""Scripted policies that act like competent agents on the built-in suites, in the hermes tool
format: ``--engine scripted --policy forge_cli.tasks.demo_policies:calc`` (or ``:kv_search``).

The scripted engine scores their text with the real model, so every id and logprob is real:
they drive a whole rollout (tools, context management, verification, rewards) before a model
can solve the tasks itself. Each decides from what it can still see in its context, the way an
agent would: an observation a context policy removed is looked up again.
"""

from __future__ import annotations

import json
import re
from typing import Any


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


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


def calc(context: dict[str, Any]) -> str:
    """One calculator call with the whole expression, then its result as the answer."""
    messages = context.get("messages") or []
    results = [m["content"] for m in messages if m.get("role") == "tool"]
    if results:
        return str(results[-1]).strip()
    return _call("calculator", expression=calc_expression(_user(messages)))


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
