"""``harmony``: gpt-oss's own renderer and parser (openai-harmony), for a model whose template is code.

gpt-oss speaks in channels: thinking in ``analysis``, calls in ``commentary`` to
``functions.NAME``, the answer in ``final``. Its conversation is rendered by harmony itself
(``render_conversation_for_completion``), not by a Jinja template, and vLLM's ``openai`` tool parser
is a stub, so this format renders the prompt ids (``rendering = "code"``) and reads the output's
channels with harmony's parser: calls, thinking (``ParsedOutput.reasoning``) and answer at once.
A completion that harmony cannot read is a parse error, never silent.

Messages arrive in the chat-template convention (:func:`forge_cli.gateway.render.template_messages`):
system/developer text becomes the developer's instructions, tools the developer's function tools,
an assistant's ``reasoning_content`` its ``analysis`` message, its content the ``final`` one, each
call a ``commentary`` message to ``functions.NAME`` (JSON), a tool result a message from
``functions.NAME``. harmony drops earlier turns' analysis as gpt-oss was trained (counted as drift).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.specs import ParsedOutput, ParseError, ToolCall, ToolFormat


def _encoding() -> Any:
    try:
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    except ImportError as exc:
        raise ForgeError(f"tool format 'harmony' needs openai-harmony (which vLLM brings): {exc}") from None
    try:
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    except Exception as exc:  # it downloads o200k_base unless TIKTOKEN_ENCODINGS_BASE points at a copy
        raise ForgeError(f"tool format 'harmony': cannot load gpt-oss's encoding ({exc}); offline, set "
                         "TIKTOKEN_ENCODINGS_BASE to a folder holding o200k_base.tiktoken") from None


class HarmonyFormat(ToolFormat):
    name = "harmony"
    description = "gpt-oss: harmony renders the conversation (channels) and reads calls, thinking and answer back."
    rendering = "code"

    def __init__(self, encoding: Any = None) -> None:
        self._encoding = encoding
        self._lock = threading.Lock()

    def bind(self, tokenizer: Any) -> ToolFormat:
        return HarmonyFormat(_encoding())

    def _enc(self) -> Any:
        if self._encoding is None:
            raise ForgeError("tool format 'harmony' reads a model's tokens: bind it to the model's tokenizer first")
        return self._encoding

    def render_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        from openai_harmony import Role

        return list(self._enc().render_conversation_for_completion(conversation(messages, tools), Role.ASSISTANT))

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParsedOutput:
        from openai_harmony import Role

        enc = self._enc()
        try:
            with self._lock:
                tokens = enc.encode(text, allowed_special="all")
                messages = enc.parse_messages_from_completion_tokens(tokens, Role.ASSISTANT, strict=False)
        except Exception as exc:  # never raise: the text stays visible, the failure recorded
            return ParsedOutput(content=text, calls=[], errors=[ParseError(text=text, reason=f"harmony: {exc}")])
        thinking, answer, calls, errors = [], [], [], []
        for message in messages:
            body = "".join(getattr(part, "text", "") for part in message.content)
            recipient = message.recipient or ""
            if recipient.startswith("functions."):
                try:
                    args = json.loads(body) if body.strip() else {}
                except ValueError as exc:
                    errors.append(ParseError(text=body, reason=f"{recipient}: arguments are not valid JSON ({exc})"))
                    continue
                calls.append(ToolCall(recipient.removeprefix("functions."), args if isinstance(args, (dict, str)) else {"input": args}))
            elif message.channel == "analysis":
                thinking.append(body)
            else:
                answer.append(body)
        return ParsedOutput(content="".join(answer).strip(), calls=calls, errors=errors, reasoning="".join(thinking))


def conversation(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
    """Chat-template messages as a harmony ``Conversation`` (see the module's docstring)."""
    from openai_harmony import Author, Conversation, DeveloperContent, Message, Role, SystemContent, ToolDescription

    out = [Message.from_role_and_content(Role.SYSTEM, SystemContent.new())]
    instructions = "\n\n".join(m["content"] for m in messages if m["role"] in ("system", "developer") and m["content"])
    if instructions or tools:
        developer = DeveloperContent.new()
        if instructions:
            developer = developer.with_instructions(instructions)
        if tools:
            developer = developer.with_function_tools([
                ToolDescription.new(t["function"]["name"], t["function"].get("description", ""), parameters=t["function"].get("parameters"))
                for t in tools])
        out.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    names: dict[str, str] = {}
    for m in messages:
        if m["role"] == "user":
            out.append(Message.from_role_and_content(Role.USER, m["content"]))
        elif m["role"] == "assistant":
            if m.get("reasoning_content"):
                out.append(Message.from_role_and_content(Role.ASSISTANT, m["reasoning_content"]).with_channel("analysis"))
            if m.get("content"):
                out.append(Message.from_role_and_content(Role.ASSISTANT, m["content"]).with_channel("final"))
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                names[call.get("id") or ""] = fn["name"]
                args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
                out.append(Message.from_role_and_content(Role.ASSISTANT, args).with_channel("commentary")
                           .with_recipient(f"functions.{fn['name']}").with_content_type("<|constrain|>json"))
        elif m["role"] == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id") or "", "")
            out.append(Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{name}"), m["content"])
                       .with_channel("commentary").with_recipient("assistant"))
    return Conversation.from_messages(out)
