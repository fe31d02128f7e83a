"""Composition in one place: what a training run is made of, built once for ``forge train`` and
``forge model warmstart`` alike.

:func:`build_training` opens the run (:func:`forge_cli.run.open_run`: folder, lock, pool, engine)
served by the gateway, the trainer's own copy of the policy and its train engine, the metrics log
and the run's text log; the block that uses it only trains. Closing it closes them in reverse.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from forge_cli.gateway.server import Gateway, open_and_serve
from forge_cli.records.metrics import MetricsRecord
from forge_cli.run import Run
from forge_cli.train.distributed import make_loop_trainer
from forge_cli.train.metrics import MetricsLog, run_log
from forge_cli.train.resume import trainer_model

# (kind, what): "step", "eval", "warmstart": the line's record (forge_cli.records.metrics); "rollout", "status": a dict
OnEvent = Callable[[str, Any], None]


@dataclass(frozen=True)
class Training:
    """A composed training run: the run (folder, pool, rollout engine), the gateway serving it, the
    trainer's model and train engine, the metrics log, and ``tell`` (the run's log and the caller's
    ``on_event``)."""

    config: Any
    run: Run
    gateway: Gateway
    model: Any
    trainer: Any
    log: MetricsLog
    tell: OnEvent


@contextlib.asynccontextmanager
async def build_training(config: Any, run: str | None = None, *, resume: bool = False,
                         on_event: OnEvent | None = None) -> AsyncIterator[Training]:
    """Compose the run called ``run`` for training (``resume``: the trainer's model from its latest
    checkpoint's folder, as :func:`forge_cli.train.resume.trainer_model` finds it)."""
    shown = on_event or (lambda kind, fields: None)
    async with open_and_serve(config, run) as (the_run, gateway), contextlib.AsyncExitStack() as stack:
        logger = stack.enter_context(run_log(the_run.dir))

        def tell(kind: str, fields: Any) -> None:
            if kind != "rollout":
                said = fields.line() if isinstance(fields, MetricsRecord) else fields
                logger.info("%s %s", kind, {k: v for k, v in said.items() if k != "group_ids"})
            shown(kind, fields)

        model = trainer_model(config, the_run.dir, resume)
        trainer = make_loop_trainer(config, model)
        stack.callback(trainer.close)
        log = MetricsLog(the_run.dir)
        stack.callback(log.close)
        yield Training(config, the_run, gateway, model, trainer, log, tell)
