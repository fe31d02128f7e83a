"""Three train steps with a given engine; prints one loss per line (run directly or under torchrun).

``python -m tests.ds_worker ENGINE ZERO_STAGE [BUDGET]``: with a micro-batch budget the trees are
split into trunks whose keys/values later micro-batches reuse (several backward calls per step).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import torch


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from forge_cli.train.engines import make_train_engine
    from tests.train_worker import batch

    kind, stage = sys.argv[1], int(sys.argv[2])
    budget = int(sys.argv[3]) if len(sys.argv) > 3 else None
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    engine = make_train_engine(kind, model, 1e-2, zero_stage=stage)
    cfg = SimpleNamespace(type="cispo", eps_low=1e6, eps_high=0.28, token_mask=False)
    for step in range(3):
        stats = engine.step(batch(step), cfg, attention="tree", budget=budget, split="auto")
        if getattr(engine, "rank", 0) == 0:
            print("RESULT", repr(stats.loss), flush=True)
            print("RESULT", repr(stats.mean_ratio), flush=True)
            print("MICRO", stats.micro_batches, flush=True)
    weights = engine.state_dict()
    if getattr(engine, "rank", 0) == 0:
        print("RESULT", repr(float(sum(v.double().sum() for k, v in weights.items() if k != "lm_head.weight"))), flush=True)
    engine.close()


if __name__ == "__main__":
    main()
