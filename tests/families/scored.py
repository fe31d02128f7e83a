"""A servable model folder for a family: its real tokenizer and a tiny random Llama that only scores.

A scripted policy writes the text (in the family's own syntax) and the model computes each id's
logprob, so the gateway, its rendering and its parsers run on the family's real vocabulary without
the family's weights (which are not available offline)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.families import family_model_dir


def scored_model(family: str, where: Path) -> Path:
    """``where/<family>``: the family's tokenizer files and a 1-layer Llama over its vocabulary (seed 0)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    source = family_model_dir(family)
    folder = where / family
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "tekken.json"):  # tekken.json: Mistral's
        if (source / name).exists():
            shutil.copy(source / name, folder / name)
    tok = AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, max_position_embeddings=32768, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder
