"""From a request's messages and tools to the exact prompt ids the engine sees, and back.

Every API (chat completions, Responses, Messages) is first normalised into :class:`Turn`s. Then
one of two renderings, by the session's tool format (``ToolFormat.rendering``):

- ``"template"`` (``native`` and vLLM's parsers): the model's chat template gets the tools
  (``apply_chat_template(messages, tools=…)``), assistant turns with structured ``tool_calls`` and
  their thinking as ``reasoning_content``, tool results with ``tool_call_id`` and ``name`` — what a
  model trained with tools saw in training;
- ``"text"`` (Forge's own formats): the format writes tool schemas into the system prompt and
  earlier calls into assistant text, for a template that takes no tools (the embedded model).

The tokenizer encodes the rendering, so ``decode(prompt_ids)`` is exactly it (a long one a chunk at a time,
the chunks an earlier call encoded remembered: ``prompt_codec``, the same ids). The output side
splits generated text into thinking (the model's reasoning parser), content and tool calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from forge_cli.gateway.errors import APIError
from forge_cli.gateway.limits import token_floor, utf8_len
from forge_cli.gateway.prompt_codec import prompt_codec
from forge_cli.specs import ParsedOutput, ParseError, ReasoningParser, Tool, ToolCall, ToolFormat, parse_calls
from forge_cli.toolformats.native import renders_own_ids

MAX_TOOLS = 512


@dataclass
class Turn:
    """One message in the gateway's own terms: role system/user/assistant/tool, text, tool calls."""

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    name: str | None = None  # a tool result's tool name
    tool_call_id: str | None = None  # a tool result's call id
    reasoning: str = ""  # an assistant turn's thinking, as the client sent it back


@dataclass
class Rendered:
    prompt_ids: list[int]
    text: str


def check_tools(tools: list[Tool]) -> None:
    if len(tools) > MAX_TOOLS:
        raise APIError(400, f"tools: {len(tools)} tools given; at most {MAX_TOOLS} are accepted", param="tools")
    seen = set()
    for i, tool in enumerate(tools):
        if tool.name in seen:
            raise APIError(400, f"tools[{i}]: duplicate tool name {tool.name!r}", param="tools")
        seen.add(tool.name)
        params = tool.parameters
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise APIError(400, f"tools[{i}] ({tool.name}): parameters must be a JSON schema of type 'object'", param="tools")
        if "properties" in params and not isinstance(params["properties"], dict):
            raise APIError(400, f"tools[{i}] ({tool.name}): parameters.properties must be an object", param="tools")


def render_prompt(
    tokenizer: Any,
    turns: list[Turn],
    tools: list[Tool],
    fmt: ToolFormat,
    *,
    tool_choice: str | None = None,
    forced_tool: str | None = None,
    max_len: int | None = None,
) -> Rendered:
    """The prompt ids for ``turns`` under the session's tool format and the model's chat template.

    With ``max_len`` (the model's context), a rendering that cannot be fewer tokens than that is
    refused (400) before it is tokenised. Slow on long inputs: call it from a worker thread.
    """
    check_tools(tools)
    if fmt.rendering == "code":  # the format renders the ids itself (gpt-oss: harmony)
        messages, schemas = template_messages(turns, tools, tool_choice=tool_choice, forced_tool=forced_tool)
        try:
            ids = fmt.render_ids(messages, schemas)
        except Exception as exc:
            raise APIError(400, f"messages: the model's renderer ({fmt.name}) rejected them: {exc}", param="messages") from None
        if max_len is not None and len(ids) >= max_len:
            raise APIError(400, f"messages: the prompt is {len(ids)} tokens; this model's context is {max_len} tokens", param="messages")
        return Rendered(ids, tokenizer.decode(ids, skip_special_tokens=False))
    if fmt.rendering == "template":
        messages, schemas = template_messages(turns, tools, tool_choice=tool_choice, forced_tool=forced_tool)
        return _apply_template(tokenizer, messages, max_len, tools=schemas)
    messages: list[dict[str, Any]] = []
    tool_text = fmt.render_tools([t.schema() for t in tools]) if tools and tool_choice != "none" else ""
    if tool_text:
        if tool_choice == "required":
            tool_text += "\n\nYou must call at least one tool."
        elif forced_tool:
            tool_text += f"\n\nYou must call the tool {forced_tool}."
        if turns and turns[0].role == "system":
            messages.append({"role": "system", "content": f"{turns[0].content}\n\n{tool_text}"})
            turns = turns[1:]
        else:
            messages.append({"role": "system", "content": tool_text})
    for turn in turns:
        if turn.role == "assistant":
            text = turn.content
            if turn.tool_calls:
                calls = fmt.format_calls(turn.tool_calls)
                text = f"{text}\n{calls}" if text else calls
            messages.append({"role": "assistant", "content": text})
        else:
            messages.append({"role": turn.role, "content": turn.content})
    return _apply_template(tokenizer, messages, max_len)


def _apply_template(tokenizer: Any, messages: list[dict[str, Any]], max_len: int | None, **kw: Any) -> Rendered:
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
        if max_len is not None:
            check_fits(tokenizer, text, max_len, "messages")
        if renders_own_ids(tokenizer):
            encoded = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, **kw)
            return Rendered(list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded), text)
    except APIError:
        raise
    except Exception as exc:  # a template may reject a role order (e.g. two system turns), mistral-common an id
        raise APIError(400, f"messages: the model's chat template rejected them: {exc}", param="messages") from None
    return Rendered(prompt_codec(tokenizer).encode(text), text)  # = tokenizer.encode(text), long prompts a chunk at a time


def template_messages(turns: list[Turn], tools: list[Tool], *, tool_choice: str | None = None,
                      forced_tool: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools as a chat template takes them (the Hugging Face convention, which the
    families' templates share): structured ``tool_calls`` (arguments as an object where they are
    one), ``reasoning_content``, ``tool_call_id`` and ``name`` on tool results. ``tool_choice``
    ``required`` or a forced tool, which templates cannot say, is a line added to the system prompt."""
    schemas = [t.schema() for t in tools] if tools and tool_choice != "none" else None
    messages: list[dict[str, Any]] = []
    for turn in turns:
        message: dict[str, Any] = {"role": turn.role, "content": turn.content}
        if turn.role == "assistant":
            if turn.tool_calls:
                message["tool_calls"] = [
                    {"id": c.id or f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for i, c in enumerate(turn.tool_calls)]
            if turn.reasoning:
                message["reasoning_content"] = turn.reasoning
        elif turn.role == "tool":
            if turn.tool_call_id is not None:
                message["tool_call_id"] = turn.tool_call_id
            if turn.name is not None:
                message["name"] = turn.name
        messages.append(message)
    must = "You must call at least one tool." if tool_choice == "required" else (
        f"You must call the tool {forced_tool}." if forced_tool else "")
    if schemas and must:
        if messages and messages[0]["role"] == "system":
            messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{must}"}
        else:
            messages.insert(0, {"role": "system", "content": must})
    return messages, schemas


def check_fits(tokenizer: Any, text: str, max_len: int, param: str) -> None:
    """400 if ``text`` is certainly ``max_len`` tokens or more (a bound that needs no tokenising)."""
    floor = token_floor(tokenizer, text)
    if floor >= max_len:
        raise APIError(400, f"{param}: the prompt is at least {floor} tokens ({utf8_len(text)} bytes of text); this model's "
                            f"context is {max_len} tokens", param=param)


def visible_text(tokenizer: Any, output_ids: list[int], stop: str | int | None) -> str:
    """The generated text as the client sees it: no end-of-sequence or stop id, cut at a stop string."""
    ids = list(output_ids)
    eos = tokenizer.eos_token_id
    if ids and (ids[-1] == eos or (isinstance(stop, int) and ids[-1] == stop)):
        ids = ids[:-1]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if isinstance(stop, str) and stop in text:
        text = text[: text.index(stop)]
    return text


def parse_output(tokenizer: Any, output_ids: list[int], stop: str | int | None, fmt: ToolFormat, tools: list[Tool],
                 reasoning: ReasoningParser | None = None) -> ParsedOutput:
    """Generated ids → the text the client sees: thinking split off by ``reasoning`` (the model's
    reasoning parser, if any), the rest into content and tool calls when tools were offered."""
    text = visible_text(tokenizer, output_ids, stop)
    thought = ""
    if reasoning is not None:
        thought, text = reasoning.split(text)
    if fmt.rendering == "code":  # its parser reads the channels: thinking, calls and answer at once
        parsed = parse_calls(fmt, text, [t.schema() for t in tools])
        thought = thought or parsed.reasoning
        if not tools:
            return ParsedOutput(content=parsed.content, calls=[], errors=parsed.errors, reasoning=thought)
    elif not tools:
        return ParsedOutput(content=text, calls=[], reasoning=thought)
    else:
        parsed = parse_calls(fmt, text, [t.schema() for t in tools])
    known = {t.name for t in tools}
    calls, errors = [], list(parsed.errors)

    for call in parsed.calls:
        if call.name not in known:
            errors.append(ParseError(text=json.dumps({"name": call.name}), reason=f"unknown tool {call.name!r}"))
            continue
        calls.append(call)
    # a call to an unknown tool stays visible as text, like an unparsable one
    content = parsed.content
    if len(calls) < len(parsed.calls):
        dropped = [c for c in parsed.calls if c.name not in known]
        content = (content + "\n" + fmt.format_calls(dropped)).strip()
    if parsed.errors:
        content = (content + "\n" + "\n".join(e.text for e in parsed.errors)).strip()
    return ParsedOutput(content=content, calls=calls, errors=errors, reasoning=thought)


def arguments_json(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False)


def arguments_object(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the JSON object the Anthropic, Gemini and Ollama APIs send (JSON text
    is parsed; arguments that are not an object are ``{"input": …}``)."""
    args = call.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return args if isinstance(args, dict) else {"input": args}
