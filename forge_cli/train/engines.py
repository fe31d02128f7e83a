"""Train engines: ``torch`` (one process, the embedded default) and ``deepspeed`` (ZeRO 1/2/3,
one process or many through DeepSpeed's launcher or torchrun; gloo on CPU).

Both run the same :func:`~forge_cli.train.step.policy_loss_backward`; DeepSpeed gets its own
``backward`` and step. With several processes each rank trains on its share of the samples; the
loss is normalised by the *global* count of output tokens and scaled by the world size, because
DeepSpeed averages gradients over ranks — so the update equals the one-process update on the
whole batch. The torch optimizer is handed to DeepSpeed as is, so no op needs compiling; compiled
ops DeepSpeed may still build are cached under ``$FORGE_HOME/torch_extensions``.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch

from forge_cli.pool.types import Sample
from forge_cli.train.step import StepStats, policy_loss_backward


class TorchEngine:
    name = "torch"

    def __init__(self, model: Any, lr: float, max_grad_norm: float | None = 1.0, weight_decay: float = 0.0) -> None:
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.max_grad_norm = max_grad_norm

    def step(self, samples: Sequence[Sample], loss_cfg: Any, **kw: Any) -> StepStats:
        self.optimizer.zero_grad(set_to_none=True)
        stats = policy_loss_backward(self.model, samples, loss_cfg, **kw)
        if self.max_grad_norm is not None:
            stats.grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm))
        self.optimizer.step()
        return stats

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}


class DeepSpeedEngine:
    name = "deepspeed"

    def __init__(self, model: Any, lr: float, zero_stage: int = 1, max_grad_norm: float | None = 1.0, weight_decay: float = 0.0) -> None:
        from forge_cli.paths import forge_home

        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(forge_home() / "torch_extensions"))
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")):
            os.environ.setdefault(key, value)
        import deepspeed

        if not torch.distributed.is_initialized():
            deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": zero_stage},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 10**9,
        }
        if max_grad_norm is not None:
            config["gradient_clipping"] = max_grad_norm
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self.model = self.engine.module
        self.zero_stage = zero_stage
        self.world = torch.distributed.get_world_size()
        self.rank = torch.distributed.get_rank()

    def step(self, samples: Sequence[Sample], loss_cfg: Any, **kw: Any) -> StepStats:
        """One update on the global batch ``samples`` (this rank trains on every world-th sample)."""
        mine = list(samples)[self.rank :: self.world]
        n_global = sum(len(s.tokens) - s.prompt_len for s in samples)
        n_mine = sum(len(s.tokens) - s.prompt_len for s in mine)
        scale = self.world * n_mine / n_global  # policy_loss_backward divides by n_mine

        def backward(loss: torch.Tensor) -> None:
            self.engine.backward(loss * scale)

        stats = policy_loss_backward(self.model, mine, loss_cfg, backward=backward, **kw)
        self.engine.step()
        total = torch.tensor([stats.loss * n_mine / n_global], dtype=torch.float64)
        torch.distributed.all_reduce(total)
        stats.loss = float(total)
        stats.tokens = n_global
        return stats

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights on every rank (ZeRO-3 gathers its partitions)."""
        if self.zero_stage == 3:
            import deepspeed

            params = list(self.model.parameters())
            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return {k: v.detach() for k, v in self.model.state_dict().items()}


def make_train_engine(kind: str, model: Any, lr: float, **kw: Any) -> Any:
    if kind == "torch":
        kw.pop("zero_stage", None)
        return TorchEngine(model, lr, **kw)
    if kind == "deepspeed":
        return DeepSpeedEngine(model, lr, **kw)
    from forge_cli.errors import ForgeError

    raise ForgeError(f"unknown train engine {kind!r}: choose torch or deepspeed")
