"""The context policies against plain computations on random histories: discard-tool-output,
truncate (with a counter whose arithmetic is known) and summarize, and the Anthropic form of a
history that the gateway counts."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given
from hypothesis import strategies as st

from forge_cli.rollout import context

roles = st.sampled_from(["user", "assistant", "tool", "observation"])


def _message(i: int, role: str, size: int) -> dict:
    text = f"m{i}-" + "x" * size
    if role == "observation":
        return {"role": "user", "content": f"{context.OBSERVATION_PREFIX} {text}"}
    if role == "tool":
        return {"role": "tool", "tool_call_id": f"c{i}", "content": text}
    return {"role": role, "content": text}


histories = st.tuples(
    st.integers(0, 2), st.booleans(), st.lists(st.tuples(roles, st.integers(0, 40)), max_size=14)
).map(lambda t: [{"role": "system", "content": f"s{i}"} for i in range(t[0])]
      + ([{"role": "user", "content": "task"}] if t[1] else [])
      + [_message(i, r, n) for i, (r, n) in enumerate(t[2])])


def _head(messages: list[dict]) -> int:
    head = 0
    while head < len(messages) and messages[head]["role"] == "system":
        head += 1
    if head < len(messages) and messages[head]["role"] == "user":
        head += 1
    return head


def _turns(messages: list[dict], head: int) -> list[list[dict]]:
    turns: list[list[dict]] = []
    for m in messages[head:]:
        if not turns or m["role"] == "assistant":
            turns.append([])
        turns[-1].append(m)
    return turns


@given(messages=histories, keep=st.integers(0, 5))
def test_discard_tool_output_replaces_all_but_the_newest_observations(messages, keep):
    options = context.DiscardToolOutputOptions(keep_last=keep)
    kept, removed = context.discard_tool_output(messages, options)
    head = _head(messages)
    observations = [i for i, m in enumerate(messages) if i >= head and (
        m["role"] == "tool" or m["role"] == "user" and m["content"].startswith("Observation:"))]
    old = observations[: max(0, len(observations) - keep)]
    expected = [dict(m) for m in messages]
    for i in old:
        expected[i]["content"] = ("Observation: " if messages[i]["role"] == "user" else "") + options.placeholder
    assert kept == expected
    assert [m.get("tool_call_id") for m in kept] == [m.get("tool_call_id") for m in messages]
    if old:
        assert removed == {"replaced_messages": old, "removed_chars": sum(len(messages[i]["content"]) for i in old)}
        # a second pass removes nothing more
        assert context.discard_tool_output(kept, options) == (kept, None)
    else:
        assert removed is None


class Counter:
    """A counter with known arithmetic: 3 tokens a message plus one per character; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def count_tokens(self, messages):
        self.calls += 1
        return sum(3 + len(m["content"]) for m in messages)

    async def summarize(self, messages):
        return f"summary of {len(messages)}"


def _count(messages):
    return sum(3 + len(m["content"]) for m in messages)


@given(messages=histories, budget=st.integers(1, 400))
def test_truncate_drops_the_fewest_oldest_turns_that_fit(messages, budget):
    counter = Counter()
    kept, removed = asyncio.run(context.truncate(messages, context.TruncateOptions(context_budget_tokens=budget), counter))
    head = _head(messages)
    turns = _turns(messages, head)
    # the plain computation: drop turns from the oldest, one at a time, until it fits (the newest stays)
    expected = messages
    if _count(messages) > budget and len(turns) > 1:
        for dropped in range(1, len(turns)):
            expected = messages[:head] + [m for t in turns[dropped:] for m in t]
            if _count(expected) <= budget:
                break
    assert kept == expected
    assert (removed is None) == (kept == messages)
    if removed is not None:
        assert removed == {"removed_messages": len(messages) - len(kept), "removed_turns": removed["removed_turns"],
                           "kept_turns": len(turns) - removed["removed_turns"], "tokens_before": _count(messages),
                           "tokens_after": _count(kept), "budget": budget}
        assert kept[: head] == messages[:head] and kept[head:] == [m for t in turns[removed["removed_turns"]:] for m in t]
        # binary search: a logarithmic number of counts, not one per turn
        assert counter.calls <= 2 + max(1, len(turns)).bit_length()


@given(messages=histories, budget=st.integers(1, 400))
def test_summarize_replaces_the_history_past_the_budget(messages, budget):
    kept, removed = asyncio.run(context.summarize(messages, context.SummarizeOptions(context_budget_tokens=budget), Counter()))
    head = _head(messages)
    if _count(messages) <= budget or head == len(messages):
        assert (kept, removed) == (messages, None)
        return
    summary = f"summary of {len(messages)}"
    assert kept == messages[:head] + [{"role": "user", "content": context.SUMMARY_PREFIX + summary}]
    assert removed == {"removed_messages": len(messages) - head, "tokens_before": _count(messages), "budget": budget,
                       "summary": summary}


def test_to_anthropic_keeps_ids_arguments_and_order():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "thinking", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "raw text"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "f", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c3", "content": "r3"},
        {"role": "user", "content": "more"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]
    body = context.to_anthropic(messages, tools)
    assert body["tools"] == [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    assert body["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": [{"type": "text", "text": "thinking"},
                                          {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
                                          {"type": "tool_use", "id": "c2", "name": "g", "input": "raw text"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "r1"},
                                     {"type": "tool_result", "tool_use_id": "c2", "content": "r2"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c3", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c3", "content": "r3"}]},
        {"role": "user", "content": "more"},
    ]
    json.dumps(body)  # a JSON body as it is
