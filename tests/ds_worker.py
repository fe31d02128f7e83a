"""Three train steps with a given engine; prints one loss per line (run directly or under torchrun).

``python -m tests.ds_worker ENGINE ZERO_STAGE [BUDGET]``: with a micro-batch budget the trees are
split into trunks whose keys/values later micro-batches reuse (several backward calls per step).

``python -m tests.ds_worker loop ZERO_STAGE SEED OUT``: the loop's trainer (``make_loop_trainer`` on
rank 0, ``run_follower`` on the others; ZERO_STAGE 0 is the torch engine, a path is a forge.toml whose
``[train]`` is used) on three random batches
drawn from SEED; every rank writes ``OUT/rank{r}.json`` (the sha256 of its weights after each step, as
rank 0 reads them to push them to the rollout engine; rank 0: each step's loss, mean ratio and output
tokens; a follower: the steps it followed; after the first step every rank's learning rate is cut
to a third through ``on_every_rank``; the modules of the gateway,
the rollout, vLLM and Ray it imported) and its last weights to ``OUT/rank{r}.pt``.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import torch


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))


def random_batch(seed: int, step: int):
    """3–9 samples (so the ranks' shares differ) that share a system prompt, some a longer prefix."""
    import random

    from forge_cli.pool.types import Sample

    rng = random.Random(seed * 1000 + step)
    system = [rng.randrange(50) for _ in range(rng.randrange(2, 10))]
    out = []
    for _ in range(rng.randrange(3, 10)):
        prompt = system + [rng.randrange(50) for _ in range(rng.randrange(1, 6))]
        gen = [rng.randrange(50) for _ in range(rng.randrange(1, 8))]
        out.append(Sample(prompt + gen, len(prompt), [rng.uniform(-4, -0.1) for _ in gen], [rng.uniform(-1, 1) for _ in gen]))
    return out


def set_lr(engine, lr: float) -> None:
    """The learning rate of ``engine``'s optimizer (DeepSpeed's or torch's)."""
    inner = getattr(engine, "engine", None)
    for group in (inner.optimizer if inner is not None else engine.optimizer).param_groups:
        group["lr"] = lr


def loop_main(stage: int | str, seed: int, out: str) -> None:
    import hashlib
    import json
    from pathlib import Path

    from forge_cli.train.distributed import make_loop_trainer, run_follower, world

    def digest(weights) -> str:
        h = hashlib.sha256()
        for key in sorted(weights):
            h.update(key.encode())
            h.update(weights[key].detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    torch.set_num_threads(1)
    rank, _ = world()
    seen: list = []
    report: dict = {"hashes": [], "steps": None}

    def record(weights) -> None:
        seen.append({k: v.detach().cpu().clone() for k, v in weights.items()})
        report["hashes"].append(digest(weights))

    if rank == 0:
        from forge_cli.config import ForgeConfig, load_config
        from forge_cli.train.distributed import on_every_rank

        if isinstance(stage, str):
            config = load_config(stage, env={})
        else:
            engine = {"type": "torch"} if stage == 0 else {"type": "deepspeed", "zero_stage": stage}
            config = ForgeConfig.model_validate({"train": {"engine": engine, "lr": 1e-2, "precision": "fp32"}})
        torch.manual_seed(0)
        trainer = make_loop_trainer(config, tiny_model())
        for step in range(3):
            stats = trainer.step(random_batch(seed, step), config.train.loss, temperature=0.7, attention="tree",
                                 split="auto", budget=12)
            report.setdefault("stats", []).append([stats.loss, stats.mean_ratio, stats.tokens])
            record(trainer.state_dict())
            if step == 0:  # a change every rank must make alike
                on_every_rank(trainer, set_lr, config.train.lr / 3)
        trainer.close()
    else:
        report["steps"] = run_follower(on_weights=record)
    torch.save(seen[-1], Path(out) / f"rank{rank}.pt")
    report["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in ("vllm", "ray")
                              or m.startswith(("forge_cli.gateway", "forge_cli.rollout")))
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(report))


def main() -> None:
    if sys.argv[1] == "loop":
        stage = sys.argv[2]
        return loop_main(int(stage) if stage.isdigit() else stage, int(sys.argv[3]), sys.argv[4])
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
