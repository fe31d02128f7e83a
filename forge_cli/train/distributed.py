"""One Forge loop on several trainer processes (DeepSpeed's launcher or torchrun).

Rank 0 runs the whole loop — gateway, rollout engine, pool, scheduler — and trains; ranks > 0 only
train. They never start vLLM, the gateway or the pool: each follows rank 0 over a gloo group of its
own (:data:`FOLLOW_TIMEOUT`, so a follower may wait through a long rollout), where rank 0 sends

- once, at start: the model's class, its Hugging Face config, dtype and parameter names, and the
  train engine's config — a follower builds the same architecture from them (its values are not initialised:
  DeepSpeed's ``initialize`` broadcasts rank 0's parameters to every rank), so it needs no model
  folder, no warm start and no checkpoint of its own;
- per step: the samples and the step's keyword arguments (``broadcast_object_list``, which pickles
  them: measured on this CPU against int32/float64 tensors packed per field, 2 M tokens take 130 ms
  pickled and 310 ms packed — pickling lists is C code, packing them is not);
- ``state_dict`` when rank 0 reads the weights (a collective under ZeRO-3);
- ``call``: a function that every rank applies to its engine (:func:`on_every_rank`: a learning
  rate, an optimizer state cleared — what rank 0 alone must not change);
- ``stop`` at the end.

Each rank then trains on its share of the samples (:class:`~forge_cli.train.engines.DeepSpeedTrainEngine`),
so every rank holds the same weights after every step.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any, Callable, Sequence

from forge_cli.errors import ForgeError

FOLLOW_TIMEOUT = timedelta(hours=24)  # how long a follower waits for rank 0's next message


def world() -> tuple[int, int]:
    """(rank, world size) as the launcher set them (``RANK``, ``WORLD_SIZE``); (0, 1) without one."""
    raw_rank, raw_size = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if raw_size is None:
        if raw_rank not in (None, "0"):
            raise ForgeError(f"RANK is {raw_rank} but WORLD_SIZE is not set: start the trainers with DeepSpeed's "
                             "launcher or torchrun")
        return 0, 1
    try:
        rank, size = int(raw_rank if raw_rank is not None else "0"), int(raw_size)
    except ValueError:
        raise ForgeError(f"RANK={raw_rank!r} and WORLD_SIZE={raw_size!r} must be whole numbers") from None
    if size < 1 or not 0 <= rank < size:
        raise ForgeError(f"RANK={rank} does not fit WORLD_SIZE={size}")
    return rank, size


def _engine_args(config: Any) -> tuple[Any, float, dict[str, Any]]:
    """How the loop builds its train engine from ``config``: (``[train.engine]``, lr, keyword arguments)."""
    return config.train.engine, config.train.lr, {"precision": config.train.precision,
                                                    "threads": config.train.threads}


def make_loop_trainer(config: Any, model: Any) -> Any:
    """The loop's trainer: the plain ``[train.engine]`` in a single process; on rank 0 of several,
    a :class:`RankZeroTrainer` that the other ranks follow (:func:`run_follower`)."""
    from forge_cli.train.engines import make_train_engine

    rank, size = world()
    engine_cfg, lr, kw = _engine_args(config)
    if size == 1:
        return make_train_engine(engine_cfg, model, lr, **kw)
    if rank != 0:
        raise ForgeError(f"rank {rank} follows rank 0 (run_follower); only rank 0 runs the loop")
    _check_several(engine_cfg, size)
    group = _control_group()
    dtype = next(model.parameters()).dtype
    names = [name for name, _ in model.named_parameters()]
    _send(group, [type(model), model.config, dtype, names, engine_cfg, lr, kw])
    return RankZeroTrainer(make_train_engine(engine_cfg, model, lr, **kw), group)


def _check_several(engine_cfg: Any, size: int) -> None:
    if getattr(engine_cfg, "type", engine_cfg) != "deepspeed":
        raise ForgeError(f"WORLD_SIZE={size}: several trainer processes need train.engine = \"deepspeed\" "
                         f"(got {getattr(engine_cfg, 'type', engine_cfg)!r})")


def _control_group() -> Any:
    """The process group (joined if need be) and, on it, the gloo group rank 0 sends its messages on."""
    import torch

    from forge_cli.train.engines import init_distributed

    init_distributed()
    return torch.distributed.new_group(backend="gloo", timeout=FOLLOW_TIMEOUT)


def _send(group: Any, message: list[Any]) -> None:
    import torch

    torch.distributed.broadcast_object_list([message], src=0, group=group)


def _receive(group: Any) -> list[Any]:
    import torch

    box: list[Any] = [None]
    torch.distributed.broadcast_object_list(box, src=0, group=group)
    return box[0]


def _leave() -> None:
    """Leave the process group in step with the other ranks (see ``DeepSpeedTrainEngine.close``)."""
    import torch

    if torch.distributed.is_initialized():
        import deepspeed.comm

        torch.distributed.barrier()
        deepspeed.comm.destroy_process_group()  # and the groups DeepSpeed cloned from this world


class RankZeroTrainer:
    """Rank 0's train engine when several ranks train: each call the other ranks must make too is
    sent to them first. Everything else (``model``, ``engine``, ``rank``, ``zero_stage``, …) is the
    wrapped engine's, so code that reads a DeepSpeed engine's parts reads them through this too."""

    def __init__(self, engine: Any, group: Any) -> None:
        self._inner = engine
        self._group = group
        self._lock = threading.Lock()  # the loop steps in a thread and reads weights on its event loop
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_inner"], name)

    def step(self, samples: Sequence[Any], loss_cfg: Any, **kw: Any) -> Any:
        """One update on the global batch ``samples``, on every rank."""
        with self._lock:
            samples = list(samples)
            _send(self._group, ["step", samples, loss_cfg, kw])
            return self._inner.step(samples, loss_cfg, **kw)

    def state_dict(self) -> dict[str, Any]:
        """The full weights (under ZeRO-3 every rank takes part in gathering them)."""
        with self._lock:
            _send(self._group, ["state_dict"])
            return self._inner.state_dict()

    def on_every_rank(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(engine, *args)`` on every rank's engine (``fn`` must be importable: it is sent by
        name), rank 0's result returned — for what must change alike everywhere (a learning rate,
        an optimizer state cleared)."""
        with self._lock:
            _send(self._group, ["call", fn, args])
            return fn(self._inner, *args)

    def close(self) -> None:
        """Tell the followers to stop, then leave the process group with them."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                _send(self._group, ["stop"])
            except RuntimeError:  # a follower is gone (the launcher stops the rest): nobody to leave with
                return
            self._inner.close()
            _leave()

    def __enter__(self) -> RankZeroTrainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def on_every_rank(trainer: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(engine, *args)`` on every rank (:meth:`RankZeroTrainer.on_every_rank`), or on the one
    engine of a single process."""
    if isinstance(trainer, RankZeroTrainer):
        return trainer.on_every_rank(fn, *args)
    return fn(trainer, *args)


def follow(engine: Any, group: Any = None, on_weights: Callable[[dict[str, Any]], None] | None = None) -> int:
    """On a rank > 0: do what rank 0 sends (step, state_dict) until it sends stop; the steps taken.
    ``group``: the one rank 0 sends on (default: a new gloo group — rank 0 must make it at the same point);
    ``on_weights`` gets this rank's weights each time rank 0 reads its own."""
    group = group if group is not None else _control_group()
    steps = 0
    while True:
        message = _receive(group)
        kind = message[0]
        if kind == "stop":
            return steps
        if kind == "step":
            _, samples, loss_cfg, kw = message
            engine.step(samples, loss_cfg, **kw)
            steps += 1
        elif kind == "state_dict":
            weights = engine.state_dict()
            if on_weights is not None:
                on_weights(weights)
        elif kind == "call":
            _, fn, args = message
            fn(engine, *args)
        else:
            raise ForgeError(f"rank 0 sent an unknown message {kind!r}")


def run_follower(on_weights: Callable[[dict[str, Any]], None] | None = None) -> int:
    """A rank > 0 of ``forge train``: build the model rank 0 announces and its train engine, follow
    rank 0 until it stops (``on_weights``: :func:`follow`'s), leave the process group; the steps
    taken. Reads no config and no model folder: all of it comes from rank 0."""
    from transformers import initialization

    from forge_cli.train.engines import make_train_engine

    rank, size = world()
    if rank == 0:
        raise ForgeError("rank 0 runs the loop (make_loop_trainer); run_follower is for ranks > 0")
    group = _control_group()
    model_cls, model_config, dtype, names, engine_cfg, lr, kw = _receive(group)
    _check_several(engine_cfg, size)
    with initialization.no_init_weights():  # DeepSpeed's initialize broadcasts rank 0's parameters
        model = model_cls(model_config)
    model.tie_weights()  # which no_init_weights skips: an untied head would be a parameter rank 0 has not
    mine = [name for name, _ in model.named_parameters()]
    if mine != names:  # DeepSpeed would broadcast one list into the other and hang or mix them up
        odd = sorted(set(mine) ^ set(names)) or ["(their order)"]
        raise ForgeError(f"rank {rank} built {model_cls.__name__} with other parameters than rank 0 ({odd[0]}, "
                         f"{len(odd)} in all): are its transformers and model code the same version?")
    model.to(dtype).train()
    engine = make_train_engine(engine_cfg, model, lr, **kw)
    steps = follow(engine, group, on_weights)
    # only after a stop: a rank 0 that died is the launcher's to report (it stops every rank)
    engine.close()
    _leave()
    return steps
