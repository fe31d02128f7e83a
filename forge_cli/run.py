"""The run context: one run's shared state, apart from any server.

A :class:`Run` holds what every part of a run shares: its folder and the lock that makes it one
process's, the data pool, and the rollout engine (one, or the router over ``model.replicas`` of
them). :func:`open_run` composes it and tears it down. The gateway serves a run
(:func:`forge_cli.gateway.server.serve_gateway`), the rollout driver records into it and the
trainer updates its engine's weights: each is a consumer of the run, none owns it.

Order at start: the run folder and its lock (one process per run), then ``prepare`` (the gateway
binds its listeners here, so a port in use fails in milliseconds, not after minutes of engine
start), the engine(s), the pool (trajectories a dead process left ``running`` are failed as
"interrupted"). A new run's folder is removed only when the block fails before
:meth:`Run.mark_started` (a consumer that failed to start); a block that ends normally keeps it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from forge_cli.engine import make_engine
from forge_cli.engine.default_model import is_embedded_default, resolve_model_path
from forge_cli.engine.router import Router
from forge_cli.pool.store import open_pool
from forge_cli.runs import claim_run


@dataclass
class Run:
    """One run's shared state. ``interrupted``: trajectories a dead process had left running, failed
    at start; ``started``: its consumers are up (a failure from then on keeps the run folder)."""

    config: Any
    dir: Path
    pool: Any
    engine: Any
    model_name: str
    interrupted: int
    started: bool = False
    model_type: str | None = None  # config.json's model_type: the model's family (its tool and reasoning parsers)

    @property
    def version(self) -> int:
        """The policy version the rollout engine samples with."""
        return self.engine.version

    def mark_started(self) -> None:
        """The run's consumers are up: from now on a failure keeps the run folder."""
        self.started = True


FORGE_FAMILY = "forge"  # the embedded default's family: Forge's template, trained on Forge's hermes text


def model_family(configured: Path | None, model_path: Path | None) -> str | None:
    """The served model's family: ``forge`` for the embedded default and folders made from it (a
    warm copy, a checkpoint), else its ``config.json``'s ``model_type`` (None: not known)."""
    if configured is None or is_embedded_default(configured):
        return FORGE_FAMILY
    return model_type_of(model_path)


def model_type_of(model_path: Path | None) -> str | None:
    """The ``model_type`` in a model folder's ``config.json`` (None: no folder, no file, or none said)."""
    try:
        data = json.loads((model_path / "config.json").read_text()) if model_path is not None else None
    except (OSError, ValueError):
        return None
    value = data.get("model_type") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


async def build_engine(config: Any, model_path: Path, stack: contextlib.AsyncExitStack) -> Any:
    """``model.replicas`` engines of ``[model.engine]``, behind the router when there are several;
    each is closed by ``stack``, so a replica that fails to start leaves none of the others running."""
    engines = []
    for _ in range(config.model.replicas):
        engine = make_engine(config.model.engine, model_path, max_model_len=config.model.max_model_len)
        stack.push_async_callback(engine.close)
        engines.append(engine)
    if len(engines) == 1:
        return engines[0]
    return Router(engines, policy=config.model.routing)


@contextlib.asynccontextmanager
async def open_run(config: Any, name: str | None = None, *, engine: Any = None,
                   on_starting: Callable[[str], None] | None = None,
                   prepare: Callable[[Path, contextlib.AsyncExitStack], None] | None = None) -> AsyncIterator[Run]:
    """The run called ``name`` (created if new; default: a timestamped one), its engine and pool.

    ``engine``: an engine already built (default: built from ``[model.engine]``). ``prepare(run_dir,
    stack)`` runs once the run is this process's, before the engine starts. ``on_starting(message)``
    is told what is being started (the CLI shows a spinner).
    """
    model_path = resolve_model_path(config.model.path) if engine is None else None
    lock = claim_run(config, name)  # one process per run: refused here, before anything is changed
    run = None

    def forget_failed_start() -> None:  # still under the lock: nobody else can be starting on it
        if (run is None or not run.started) and lock.created:
            shutil.rmtree(lock.run_dir, ignore_errors=True)

    async with contextlib.AsyncExitStack() as stack:
        stack.callback(lock.release)
        stack.callback(forget_failed_start)
        if prepare is not None:
            prepare(lock.run_dir, stack)
        if engine is None:
            if on_starting is not None:
                on_starting(f"starting {config.model.replicas} {config.model.engine.type} engine(s) on {model_path}…")
            engine = await build_engine(config, model_path, stack)
        pool = open_pool(config.pool.url, lock.run_dir)
        stack.callback(pool.close)
        interrupted = pool.fail_interrupted()
        run = Run(config, lock.run_dir, pool, engine, getattr(model_path, "name", None) or "forge", interrupted,
                  model_type=model_family(config.model.path, model_path))
        yield run
        run.mark_started()  # a block that ended well keeps what it recorded, started or not
