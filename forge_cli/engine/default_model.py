"""The embedded default policy: a small Llama built from a config, with a locally trained tokenizer.

No hub access is possible (or needed): the byte-level BPE tokenizer is trained with
``tokenizers`` on text that ships with Python itself (a fixed list of standard-library modules)
plus Forge's own chat and tool markup, and the weights are a seeded random initialisation.
Everything is saved in Hugging Face format (``config.json``, ``model.safetensors``,
``tokenizer.json``, ``tokenizer_config.json`` with the chat template), so any tool that loads a
local HF model folder — transformers, vLLM — loads this one, and any local HF model folder can
stand in for it (``model.path``).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forge_cli.errors import ForgeError
from forge_cli.paths import forge_home

SPECIAL_TOKENS = [
    "<|endoftext|>",  # padding / document end
    "<|im_start|>",
    "<|im_end|>",  # end of a turn: the EOS of generation
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
# Modules whose source is the tokenizer's training text: every CPython has them, byte for byte
# the same within a minor version.
CORPUS_MODULES = ("json", "string", "textwrap", "argparse", "collections", "shutil", "subprocess", "pathlib", "csv", "email.message")


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int


# Positions of the default model: real agents' first prompts run to ~10k tokens (opencode), ~13k
# (codex) and ~32k (claude-code) on this tokenizer, so 8,192 refused them; RoPE has no weights per
# position, so the only cost is the KV cache a full-length sequence needs (4 KiB a token for "tiny"
# in float32: 256 MiB for one 64k sequence).
CONTEXT_POSITIONS = 65536

SIZES = {
    "tiny": ModelSize(128, 4, 4, 512, 4096),  # ~1.6M parameters: tests and CPU training
    "small": ModelSize(512, 8, 8, 1536, 16384),  # ~45M parameters
    # one layer and one head: where a scripted policy writes the text and the model only scores it (agent
    # tests, benchmarks, scaffold doctor); a real agent's 10-30k-token prompt scores ~16x faster than on tiny
    "scoring": ModelSize(32, 1, 1, 64, 4096),
}


# what init writes beside the weights (size, seed, dimensions); warm copies and checkpoints carry it
# along, so a folder made from the embedded default says so (with_embedded_options applies its scaffold options)
MARKER = "forge_model.json"
# a model folder's tokenizer and chat template: what a servable copy of the policy takes from its source
# besides the weights, and what a prompt's length depends on
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "generation_config.json", "vocab.json", "merges.txt", "tokenizer.model")


def is_embedded_default(path: Path | str | None) -> bool:
    """Whether ``path`` holds the embedded default or a copy made from it (a warm copy, a checkpoint)."""
    return path is not None and (Path(path).expanduser() / MARKER).is_file()


# scaffold options the embedded default samples with (forge train, forge model warmstart, forge rollout)
# unless the config sets them: a tiny policy's calls and answers are short, and a rambling sample should
# cost little (max_turns 5: a call, up to two re-checks of it — the calc teacher's habit, which the completion-time
# reward trains away — the answer, and one turn to spare; with teacher_max_warmups 3, three warm-ups, the call and
# the answer, no turn to spare)
_SHORT = {"max_tokens": 48, "max_turns": 5}
EMBEDDED_SCAFFOLD_OPTIONS: dict[str, dict[str, Any]] = {
    "tool-call": _SHORT,
    # its prompts are the task alone: no tool listing (the scaffold's) and no system message
    "tool-call-unlisted": {**_SHORT, "system_prompt": ""}}


def with_embedded_options(config: Any) -> None:
    """Lay :data:`EMBEDDED_SCAFFOLD_OPTIONS` under what ``config`` sets (in place) when its policy is
    the embedded default (no ``model.path``) or a copy made from it (a warm copy, a checkpoint: they
    carry its marker), so a checkpoint given as ``--model`` samples the prompts it learned on."""
    if config.model.path is None or is_embedded_default(config.model.path):
        for scaffold, options in EMBEDDED_SCAFFOLD_OPTIONS.items():
            config.scaffolds[scaffold] = {**options, **config.scaffolds.get(scaffold, {})}


def default_model_dir() -> Path:
    return forge_home() / "models" / "default"


def shipped_warm_dir() -> Path:
    """The warm policy the project ships inside the package (``forge_cli/engine/warm_policy``): the
    embedded default warm-started by the recipe its ``warmstart.json`` records (docs/training.md)."""
    return Path(__file__).resolve().parent / "warm_policy"


def starting_policy(path: Path | str | None) -> str:
    """What a run's ``model.path`` is, in words: the shipped warm policy, a warm copy of the embedded
    default, the embedded default, or the folder."""
    if path is None:
        return "the embedded default"
    folder = Path(path).expanduser().resolve()
    if folder == shipped_warm_dir():
        return "the shipped warm policy"
    if (folder / "warmstart.json").is_file() and is_embedded_default(folder):
        return "a warm copy of the embedded default"
    return "the embedded default" if is_embedded_default(folder) else str(folder)


def chat_template() -> str:
    return (Path(__file__).with_name("chat_template.jinja")).read_text()


def _corpus() -> list[str]:
    texts = []
    for name in CORPUS_MODULES:
        module = importlib.import_module(name)
        texts.append(Path(module.__file__).read_text(encoding="utf-8"))
    template = chat_template()
    markup = [
        '<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call><|im_end|>\n',
        "<|im_start|>tool\n<tool_response>\nREADME.md\nsrc\n</tool_response><|im_end|>\n",
        template,
    ]
    return texts + markup * 20


def build_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE tokenizer (any text round-trips) wrapped for transformers, with the chat template.

    Every digit is a token of its own (the pre-tokenizer splits digits before BPE sees them, as
    Llama's and Qwen's tokenizers do): a number is then the same tokens wherever it appears, so
    copying one — from a question into a tool call, from a tool result into an answer — is copying
    tokens. With merged digits (`` 8``, ``35``, ``17`` by context) the tiny default model learned
    the copies far more slowly (benchmarks/RESULTS.md, "Learning")."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = chat_template()
    return hf


def init_default_model(path: Path | None = None, size: str = "tiny", seed: int = 0, force: bool = False) -> Path:
    """Create the default policy in ``path`` (default ``$FORGE_HOME/models/default``); returns the folder."""
    if size not in SIZES:
        raise ForgeError(f"unknown model size {size!r}: choose one of {', '.join(SIZES)}")
    path = Path(path or default_model_dir())
    if (path / "config.json").exists() and not force:
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    dims = SIZES[size]
    tokenizer = build_tokenizer(dims.vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=dims.hidden_size,
        intermediate_size=dims.intermediate_size,
        num_hidden_layers=dims.num_hidden_layers,
        num_attention_heads=dims.num_attention_heads,
        num_key_value_heads=dims.num_attention_heads,
        max_position_embeddings=CONTEXT_POSITIONS,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    (path / MARKER).write_text(json.dumps({"size": size, "seed": seed, **asdict(dims)}, indent=2))
    return path


def resolve_model_path(configured: Path | None) -> Path:
    """``model.path`` if set (it must be an HF model folder), else the default model (which must exist)."""
    path = Path(configured).expanduser() if configured else default_model_dir()
    if not (path / "config.json").is_file():
        hint = "run `forge model init`" if configured is None else "point model.path at a Hugging Face model folder"
        raise ForgeError(f"no model at {path} ({hint})")
    return path
