"""A servable model folder for a family: its real tokenizer and a tiny random Llama that only scores.

A scripted policy writes the text (in the family's own syntax) and the model computes each id's
logprob, so the gateway, its rendering and its parsers run on the family's real vocabulary without
the family's weights (which are not available offline)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.families import family_model_dir, family_tokenizer


def scored_model(family: str, where: Path, *, own_architecture: bool = False) -> Path:
    """``where/<family>``: the family's tokenizer files and a 1-layer Llama over its vocabulary (seed
    0); ``own_architecture`` (Qwen3 only): a 1-layer Qwen3 instead, whose ``config.json`` says
    ``model_type = "qwen3"``, as a real Qwen3 folder does (the gateway reads its family from it)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    source = family_model_dir(family)
    folder = where / family
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "tekken.json"):  # tekken.json: Mistral's
        if (source / name).exists():
            shutil.copy(source / name, folder / name)
    tok = family_tokenizer(family)  # the same files, loaded once a process
    torch.manual_seed(0)
    shape = dict(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1, max_position_embeddings=32768, tie_word_embeddings=True)
    if own_architecture:
        if family != "qwen3":
            raise ValueError("own_architecture: Qwen3 only")
        Qwen3ForCausalLM(Qwen3Config(**shape, head_dim=8)).save_pretrained(folder)
    else:
        LlamaForCausalLM(LlamaConfig(**shape)).save_pretrained(folder)
    return folder
