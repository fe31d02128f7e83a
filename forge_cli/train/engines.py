"""Train engines: ``torch`` (one process, the embedded default) and ``deepspeed`` (ZeRO 1/2/3,
one process or many through DeepSpeed's launcher or torchrun; gloo on CPU).

Both run the same :func:`~forge_cli.train.step.policy_loss_backward`; DeepSpeed gets its own
``backward`` and step. With several processes each rank trains on its share of the samples; the
loss is normalised by the *global* count of output tokens and scaled by the world size, because
DeepSpeed averages gradients over ranks — so the update equals the one-process update on the
whole batch. The torch optimizer is handed to DeepSpeed as is and, on CPU, gloo's allreduce is used
in place of DeepSpeed's shared-memory one, so no op needs compiling and a cold start takes seconds;
compiled ops DeepSpeed may still build are cached under ``$FORGE_HOME/torch_extensions``.

Precision: ``auto`` is bf16 mixed precision on a GPU that supports it (torch: autocast over fp32
master weights; DeepSpeed: its ``bf16`` mode) and float32 everywhere else; ``bf16`` forces autocast
(on CPU too, where it is slower on most chips), ``fp32`` turns it off.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, Sequence

import torch

from forge_cli.configs.train import TRAIN_ENGINE_CONFIGS
from forge_cli.errors import ForgeError
from forge_cli.paths import forge_home
from forge_cli.pool.types import Sample
from forge_cli.train.step import StepStats, policy_loss_backward, train_step


def resolve_precision(precision: str, device: Any) -> str:
    """``auto`` → ``bf16`` on a CUDA device that supports it, else ``fp32``."""
    if precision not in ("auto", "fp32", "bf16"):
        raise ForgeError(f"unknown precision {precision!r}: choose auto, fp32 or bf16")
    if precision != "auto":
        return precision
    device = torch.device(device)
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"


def use_threads(threads: int | None) -> None:
    """Let this thread's torch operations use ``threads`` CPU threads (``None``: leave torch's choice).

    Called in the thread that trains, before each step: the loop trains in a worker thread, and
    torch's intra-op thread count is set per calling thread under OpenMP."""
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


class _Closing:
    """``with make_train_engine(...) as engine:`` calls :meth:`close` on the way out."""

    def close(self) -> None:
        """Release what the engine holds (nothing, unless a subclass says otherwise)."""

    def __enter__(self):  # noqa: ANN204
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class TorchTrainEngine(_Closing):
    name = "torch"

    def __init__(self, model: Any, lr: float, max_grad_norm: float | None = 1.0, weight_decay: float = 0.0,
                 precision: str = "auto", threads: int | None = None) -> None:
        self.model = model
        self.threads = threads
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.max_grad_norm = max_grad_norm
        self.device = next(model.parameters()).device
        self.precision = resolve_precision(precision, self.device)

    def step(self, samples: Sequence[Sample], loss_cfg: Any, **kw: Any) -> StepStats:
        autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16) if self.precision == "bf16"
                    else contextlib.nullcontext())
        use_threads(self.threads)
        with autocast:  # weights and optimizer stay float32; matmuls run in bf16
            return train_step(self.model, self.optimizer, samples, loss_cfg, max_grad_norm=self.max_grad_norm, **kw)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}


def init_distributed() -> bool:
    """Join the launcher's process group (NCCL on CUDA, gloo on CPU) unless this process is in one
    already; True if it joined here. Without a launcher it is a group of one (RANK 0, WORLD_SIZE 1).
    On CUDA each process takes the GPU of its ``LOCAL_RANK`` first, so that collectives run there."""
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(forge_home() / "torch_extensions"))
    alone = "WORLD_SIZE" not in os.environ and "MASTER_PORT" not in os.environ
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")):
        os.environ.setdefault(key, value)
    import deepspeed

    if not torch.cuda.is_available():
        # DeepSpeed's CPU backend would compile a shared-memory allreduce (~20 s per cold start;
        # gloo's allreduce does the same job). Marked incompatible, nothing compiles. DeepSpeed
        # keeps this dict for the process, so the edit holds.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    if torch.distributed.is_initialized():
        return False
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if alone:  # a group of one of our own meets through a file, not a TCP port two runs could both want
        store = tempfile.NamedTemporaryFile(prefix="forge-dist-", delete=False)
        store.close()
        os.unlink(store.name)
        deepspeed.init_distributed(dist_backend=backend, init_method=f"file://{store.name}", rank=0, world_size=1)
    else:
        deepspeed.init_distributed(dist_backend=backend)
    return True


class DeepSpeedTrainEngine(_Closing):
    name = "deepspeed"

    def __init__(self, model: Any, lr: float, zero_stage: int = 1, max_grad_norm: float | None = 1.0, weight_decay: float = 0.0,
                 precision: str = "auto", threads: int | None = None) -> None:
        import deepspeed

        self.threads = threads
        self._owns_group = init_distributed()
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
        # collectives run on this device (NCCL takes only CUDA tensors; gloo CPU ones)
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self.precision = resolve_precision(precision, self.device)
        if self.precision == "bf16":
            config["bf16"] = {"enabled": True}
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self.model = self.engine.module
        self.zero_stage = zero_stage
        self.world = torch.distributed.get_world_size()
        self.rank = torch.distributed.get_rank()

    def step(self, samples: Sequence[Sample], loss_cfg: Any, **kw: Any) -> StepStats:
        """One update on the global batch ``samples`` (this rank trains on every world-th sample)."""
        use_threads(self.threads)
        mine = list(samples)[self.rank :: self.world]
        n_out = sum(len(s.tokens) - s.prompt_len for s in samples)
        n_global = max(n_out, 1)
        n_mine = max(sum(len(s.tokens) - s.prompt_len for s in mine), 1)
        scale = self.world * n_mine / n_global  # policy_loss_backward divides by n_mine

        def backward(loss: torch.Tensor, last: bool) -> None:
            # several backward calls, one optimizer step: DeepSpeed reduces and steps at the boundary only
            self.engine.set_gradient_accumulation_boundary(last)
            # We run the module itself, not engine.forward, and a trunk's backward comes after its
            # dependants' forwards; ZeRO-3 starts accumulating (not overwriting) partitioned gradients
            # only after this flag is cleared — engine.forward does it per forward, we do it per backward.
            clear = getattr(self.engine.optimizer, "clear_backward_seen_flag", None)
            if clear is not None:
                clear()
            self.engine.backward(loss)

        # Every rank must reach the accumulation boundary. ZeRO-2 reduces gradients in every backward
        # and ZeRO-3 also gathers parameters in every forward, collectively, so there ranks must run
        # the same sequence of passes: split trees are recomputed (forward, backward, forward, …) and
        # every rank pads to the largest count of micro-batches. ZeRO-1 reduces at the boundary only.
        split = kw.pop("split", "auto")
        in_step = self.zero_stage >= 2 and self.world > 1
        if in_step:
            if split == "reuse":
                raise ForgeError(f"split = 'reuse' cannot run under ZeRO-{self.zero_stage} on several ranks (their "
                                 "forward/backward order differs); use 'recompute' or 'auto'")
            split = "recompute"
        pad_to = self._largest_count if in_step else (lambda count: max(count, 1))
        stats = policy_loss_backward(self.model, mine, loss_cfg, backward=backward, loss_scale=scale, split=split,
                                     pad_to=pad_to, **kw)
        self.engine.step()
        # the whole batch's figures: loss and mean ratio are per-rank means over n_mine tokens
        totals = torch.tensor([stats.loss * n_mine / n_global, (stats.mean_ratio or 0.0) * n_mine / n_global,
                               stats.packed_tokens, stats.micro_batches], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(totals)
        stats.loss, stats.mean_ratio = float(totals[0]), float(totals[1])
        stats.packed_tokens, stats.micro_batches = int(totals[2]), int(totals[3])
        stats.tokens = n_out
        return stats

    def close(self) -> None:
        """Leave the process group in step with the other ranks. Without this, a rank that exits while
        another still tears down gloo's threads can abort (``terminate called without an active
        exception``, SIGABRT) after all work is done — seen once in a dozen two-rank runs."""
        if self._owns_group and torch.distributed.is_initialized():
            import deepspeed.comm

            torch.distributed.barrier()
            # DeepSpeed's own teardown: it also drops the groups it cloned from this world (a later
            # engine in the same process would otherwise reuse a destroyed one)
            deepspeed.comm.destroy_process_group()
            self._owns_group = False

    def _largest_count(self, count: int) -> int:
        """The largest ``count`` of any rank."""
        most = torch.tensor([count], device=self.device)  # NCCL reduces only device tensors
        torch.distributed.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
        return int(most)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights on every rank (ZeRO-3 gathers its partitions)."""
        if self.zero_stage == 3:
            import deepspeed

            params = list(self.model.parameters())
            with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return {k: v.detach() for k, v in self.model.state_dict().items()}


# ``train.engine``: each train engine's name (forge_cli.configs.train) -> what builds it from its config
TRAIN_ENGINES: dict[str, Any] = {
    "torch": lambda config, model, lr, **kw: TorchTrainEngine(model, lr, **kw),
    "deepspeed": lambda config, model, lr, **kw: DeepSpeedTrainEngine(model, lr, zero_stage=config.zero_stage, **kw),
}


def make_train_engine(config: Any, model: Any, lr: float, **kw: Any) -> Any:
    """A train engine from its ``[train.engine]`` config, or from its name (``zero_stage`` is then
    taken from ``kw`` for DeepSpeed)."""
    if isinstance(config, str):
        member = TRAIN_ENGINE_CONFIGS.get(config)
        if member is None:
            raise ForgeError(f"unknown train engine {config!r}: choose one of {', '.join(TRAIN_ENGINE_CONFIGS)}")
        stage = kw.pop("zero_stage", None)
        config = member(**({"zero_stage": stage} if stage is not None and "zero_stage" in member.model_fields else {}))
    return TRAIN_ENGINES[config.type](config, model, lr, **kw)
