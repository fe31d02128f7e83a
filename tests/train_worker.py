"""A training process for the checkpoint test: ``python -m tests.train_worker CKPT_DIR STEPS``.

Deterministic batches (seeded by step), AdamW + a linear LR schedule, CISPO; a checkpoint after
every step; prints ``step loss rng`` after each (``rng`` is a draw from torch's generator, to
show its state is restored too). Resumes from the latest checkpoint if there is one.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from types import SimpleNamespace

import torch


def batch(step: int):
    from forge_cli.pool.types import Sample

    rng = random.Random(1000 + step)
    system = [rng.randrange(50) for _ in range(8)]
    out = []
    for _ in range(4):
        prompt = system + [rng.randrange(50) for _ in range(rng.randrange(1, 6))]
        gen = [rng.randrange(50) for _ in range(rng.randrange(2, 8))]
        out.append(Sample(prompt + gen, len(prompt), [-1.5] * len(gen), [rng.uniform(-1, 1)] * len(gen)))
    return out


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from forge_cli.train.checkpoint import TrainerState, load_checkpoint, save_checkpoint
    from forge_cli.train.step import train_step

    root, steps = Path(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / 100)
    state = load_checkpoint(root, model, opt, sched) or TrainerState(step=0, policy_version=0)
    loss_cfg = SimpleNamespace(type="cispo", eps_low=1e6, eps_high=0.28, token_mask=False)
    while state.step < steps:
        stats = train_step(model, opt, batch(state.step), loss_cfg)
        sched.step()
        state = TrainerState(step=state.step + 1, policy_version=state.policy_version + 1, pool_cursor=state.step)
        draw = float(torch.rand(1))
        save_checkpoint(root, model, opt, sched, state)
        print(state.step, repr(stats.loss), repr(draw), flush=True)


if __name__ == "__main__":
    main()
