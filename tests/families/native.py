"""Mistral and gpt-oss through their own code renderers (no Jinja template ships for either offline).

* Mistral: mistral-common's ``MistralTokenizer`` on the folder's ``tekken.json`` (Mistral-Nemo's tekken
  v3); a conversation in OpenAI's shape goes through ``ChatCompletionRequest.from_openai`` and
  ``encode_chat_completion``. transformers' ``MistralCommonBackend`` (what ``family_tokenizer("mistral")``
  returns) and vLLM's ``vllm.tokenizers.mistral.MistralTokenizer`` wrap the same code.
* gpt-oss: ``openai_harmony`` (the ``oss-harmony`` distribution vLLM depends on) with the folder's
  ``encodings/o200k_base.tiktoken``, rebuilt from quicktok's o200k vocabulary, byte-identical to the
  file harmony would download (it checks its hash): ``TIKTOKEN_ENCODINGS_BASE`` points at it while
  the encoding loads. Python tiktoken reads the same file from ``tiktoken-cache/`` with
  ``TIKTOKEN_CACHE_DIR`` (:func:`tiktoken_env`).

* DeepSeek V3.2 (on the deepseek_v3 folder's vocabulary, which holds V3.2's tokens): vLLM's own encoder,
  ``vllm.tokenizers.deepseek_v32_encoding.encode_messages(messages, thinking_mode="chat" | "thinking",
  drop_thinking=True, add_default_bos_token=True) -> str``. Messages are OpenAI-shaped dicts with two
  differences: the tools ride on a system message, ``{"role": "system", "tools": [OpenAI tools]}``
  (vLLM's ``get_deepseek_v32_tokenizer`` inserts one at index 0 when ``apply_chat_template`` gets
  tools), and an assistant's thinking is under ``"reasoning"`` (not ``reasoning_content``); its
  ``tool_calls`` are OpenAI's (arguments a mapping or a JSON string); tool messages follow in call
  order. It writes V3.2's DSML calls (``<｜DSML｜function_calls>``...), which vLLM's ``deepseek_v32`` tool
  parser reads (and ``deepseek_r1`` splits the thinking), not ``deepseek_v3``: for V3's own call
  syntax use the folder's Jinja template. ``deepseek_v4_encoding.py`` and ``deepseek_v41_encoding.py``
  are the V4 analogues. :func:`render_deepseek_v32` calls it as vLLM's wrapper does.

``render_mistral(messages, tools)`` and ``render_gpt_oss(messages, tools)`` return ``(text, ids)``;
``mistral_completion`` and ``gpt_oss_completion`` return ``(text, ids)`` of the last (assistant)
message as the model generates it; ``parse_gpt_oss(ids)`` reads a completion back into harmony messages.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from tests.families import family_model_dir
from tests.families._vocab import package_dir


@functools.cache
def mistral_tokenizer() -> Any:
    """mistral-common's tokenizer on the family folder's ``tekken.json``."""
    package_dir("mistral_common", "mistral-common")
    from mistral_common.protocol.instruct.validator import ValidationMode
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    # agnostic mode: a conversation may end in an assistant message (serving and test modes refuse it)
    return MistralTokenizer.from_file(str(family_model_dir("mistral") / "tekken.json"), mode=ValidationMode.agnostic)


def render_mistral(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> tuple[str, list[int]]:
    """OpenAI-shaped ``messages`` (tool calls' ids: 9 letters or digits, as Mistral's validator wants)
    and ``tools``, rendered by mistral-common: (text with special tokens, ids). A conversation ending
    in a user or tool message is a prompt; one ending in an assistant message is closed by ``</s>``."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    tokenized = mistral_tokenizer().encode_chat_completion(ChatCompletionRequest.from_openai(messages, tools=tools))
    return tokenized.text, list(tokenized.tokens)


def mistral_completion(messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]] | None = None) -> tuple[str, list[int]]:
    """The last (assistant) message as generated: the full rendering less the prompt's, less ``</s>``."""
    _, prompt = render_mistral(messages[:-1], tools)
    _, full = render_mistral(messages, tools)
    assert full[:len(prompt)] == prompt and full[-1] == mistral_tokenizer().instruct_tokenizer.tokenizer.eos_id
    ids = full[len(prompt):-1]
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

    return mistral_tokenizer().instruct_tokenizer.tokenizer.decode(ids, special_token_policy=SpecialTokenPolicy.KEEP), ids


def tiktoken_env() -> dict[str, str]:
    """The variables that make harmony and Python tiktoken find o200k_base offline."""
    folder = family_model_dir("gpt_oss")
    return {"TIKTOKEN_ENCODINGS_BASE": str(folder / "encodings"), "TIKTOKEN_CACHE_DIR": str(folder / "tiktoken-cache")}


@functools.cache
def harmony_encoding() -> Any:
    """harmony's gpt-oss encoding, loaded offline (the variables are set only while it loads)."""
    package_dir("openai_harmony", "oss-harmony (or openai-harmony), which vLLM brings")
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    saved = {name: os.environ.get(name) for name in ("TIKTOKEN_ENCODINGS_BASE", "TIKTOKEN_CACHE_DIR")}
    os.environ.update(tiktoken_env())
    try:
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def harmony_conversation(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> Any:
    """OpenAI-shaped messages as a harmony ``Conversation``, the way gpt-oss serving maps them: system
    text as the developer's instructions, tools as the developer's function tools; an assistant's
    ``reasoning_content`` in the analysis channel, its content in the final channel, each tool call in
    the commentary channel to ``functions.NAME`` as JSON; a tool result from ``functions.NAME``."""
    from openai_harmony import (
        Author,
        Conversation,
        DeveloperContent,
        Message,
        Role,
        SystemContent,
        ToolDescription,
    )

    out = [Message.from_role_and_content(Role.SYSTEM, SystemContent.new())]
    instructions = "\n\n".join(m["content"] for m in messages if m["role"] in ("system", "developer"))
    if instructions or tools:
        developer = DeveloperContent.new()
        if instructions:
            developer = developer.with_instructions(instructions)
        if tools:
            developer = developer.with_function_tools([
                ToolDescription.new(t["function"]["name"], t["function"].get("description", ""),
                                    parameters=t["function"].get("parameters")) for t in tools])
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
                names[call.get("id", "")] = fn["name"]
                args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
                out.append(Message.from_role_and_content(Role.ASSISTANT, args).with_channel("commentary")
                           .with_recipient(f"functions.{fn['name']}").with_content_type("<|constrain|>json"))
        elif m["role"] == "tool":
            name = m.get("name") or names.get(m.get("tool_call_id", ""), "")
            out.append(Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{name}"), m["content"])
                       .with_channel("commentary").with_recipient("assistant"))
    return Conversation.from_messages(out)


def render_gpt_oss(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                   add_generation_prompt: bool = True) -> tuple[str, list[int]]:
    """The conversation rendered by harmony: (text, ids); with the generation prompt
    (``<|start|>assistant``) by default."""
    from openai_harmony import Role

    enc = harmony_encoding()
    conversation = harmony_conversation(messages, tools)
    ids = (enc.render_conversation_for_completion(conversation, Role.ASSISTANT) if add_generation_prompt
           else enc.render_conversation(conversation))
    return enc.decode_utf8(ids), list(ids)


def gpt_oss_completion(messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]] | None = None) -> tuple[str, list[int]]:
    """The last (assistant) message as generated after ``<|start|>assistant``: its channels, and a
    tool call closed by ``<|call|>`` (harmony's stop token for calls)."""
    _, prompt = render_gpt_oss(messages[:-1], tools)
    _, full = render_gpt_oss(messages, tools, add_generation_prompt=False)
    assert full[:len(prompt)] == prompt, "harmony's rendering of the conversation does not extend the prompt's"
    ids = full[len(prompt):]
    return harmony_encoding().decode_utf8(ids), ids


def parse_gpt_oss(completion_ids: list[int]) -> list[Any]:
    """A completion (what follows ``<|start|>assistant``) read back into harmony messages."""
    from openai_harmony import Role

    return harmony_encoding().parse_messages_from_completion_tokens(completion_ids, Role.ASSISTANT)


def render_deepseek_v32(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                        thinking: bool = True) -> str:
    """OpenAI-shaped messages through vLLM's DeepSeek V3.2 encoder, prepared as vLLM's
    ``get_deepseek_v32_tokenizer`` prepares them (tools on a system message put first; earlier
    thinking dropped when the conversation ends in a user message); ``reasoning_content`` is passed as
    the encoder's ``reasoning``. The text ends, for a prompt, with ``<｜Assistant｜><think>`` (thinking)
    or ``<｜Assistant｜></think>`` (chat)."""
    from vllm.tokenizers.deepseek_v32_encoding import encode_messages

    msgs = [{("reasoning" if k == "reasoning_content" else k): v for k, v in m.items()} for m in messages]
    if tools:
        msgs.insert(0, {"role": "system", "tools": tools})
    return encode_messages(msgs, thinking_mode="thinking" if thinking else "chat",
                           drop_thinking=msgs[-1]["role"] == "user")
