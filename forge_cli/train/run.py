"""``forge train`` and ``forge model warmstart`` as library calls: which policy a run starts from,
its time budget, then the loop (:mod:`forge_cli.train.loop`).

The embedded default (no ``model.path``) starts from a warm policy at once: a warm copy made here
(``FORGE_HOME/models/default-warm``, by ``forge model warmstart``) or else the one the project ships
(:func:`shipped_warm_dir`), whichever was warm-started on what the run trains (suite, scaffold and
its options, teacher: ``warmstart.json`` says). With neither, the run creates the default model
(``forge model init``), warm-starts it inside the run and keeps the warm copy for later runs. A run of the embedded default is bounded to :data:`DEFAULT_MINUTES` unless told otherwise;
a user's model has no bound unless ``--minutes``/``train.minutes`` sets one.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_cli.engine.default_model import (
    default_model_dir,
    init_default_model,
    shipped_warm_dir,
    resolve_model_path,
    with_embedded_options,
)
from forge_cli.errors import ForgeError
from forge_cli.plugins import get_registry
from forge_cli.pool.store import redact_url
from forge_cli.rollout.driver import preflight
from forge_cli.rollout.records import request_from_config
from forge_cli.rollout.stream import check_mix
from forge_cli.runs import check_run_name, resolve_run, run_config
from forge_cli.tasks.demo_policies import policy_for
from forge_cli.tasks.suites import resolve_suite
from forge_cli.train.compose import build_training
from forge_cli.train.distributed import run_follower, world
from forge_cli.train.loop import train_loop
from forge_cli.train.warmstart import keep_warm_model, recorded_key, run_warmstart, warm_key, warm_record

DEFAULT_MINUTES = 15.0
@dataclass(frozen=True)
class StartPlan:
    """What a new run starts from."""

    config: Any  # with model.path set to the policy it starts from
    warmstart: bool
    save_warm_to: Path | None  # where the warm-started embedded default is kept
    minutes: float | None


def warm_model_dir() -> Path:
    return default_model_dir().with_name("default-warm")


def plan(config: Any, *, minutes: float | None = None) -> StartPlan:
    """The policy, warm start and budget of a new run (see the module's docstring)."""
    when = config.train.warmstart.when
    config = config.model_copy(deep=True)
    embedded = config.model.path is None
    budget = minutes if minutes is not None else config.train.minutes
    if budget is None and embedded:
        budget = config.train.minutes = DEFAULT_MINUTES  # saved with the run: a resumed run gets as long again
    with_embedded_options(config)
    if not embedded:
        resolve_model_path(config.model.path)  # a clear error for a folder that is not a model
        return StartPlan(config, when == "always", None, budget)
    if when == "auto":  # a warm copy made here first (forge model warmstart), else the shipped one
        for folder in (warm_model_dir(), shipped_warm_dir()):
            if (folder / "config.json").is_file() and _warmed_for(folder, config):
                config.model.path = str(folder)
                return StartPlan(config, False, None, budget)
    config.model.path = str(init_default_model())  # creates it on first use
    return StartPlan(config, when != "never", warm_model_dir() if when == "auto" else None, budget)


@dataclass(frozen=True)
class PreparedRun:
    """A run ready to start: checked, its policy chosen (what :func:`prepare_run` returns)."""

    config: Any
    run: str | None
    resume: bool
    minutes: float | None
    warmstart: bool = False
    save_warm_to: Path | None = None


def prepare_run(config: Any, *, run: str | None = None, resume: str | None = None, minutes: float | None = None) -> PreparedRun:
    """Check a ``forge train`` before anything starts (one ForgeError for what would fail it) and
    choose its policy: a new run (``run`` names it), or ``resume`` an existing run with its own config."""
    if resume is not None:
        run_dir = resolve_run(config, resume)
        saved = run_config(config, run_dir)
        saved.run.dir = run_dir.parent
        if not (run_dir / "checkpoints" / "latest").is_file() and not (run_dir / "pool.sqlite").exists():
            raise ForgeError(f"run {run_dir.name} has nothing to resume (no checkpoint, no pool)")
        check(saved, warmstart=False)
        return PreparedRun(saved, run_dir.name, True, minutes if minutes is not None else saved.train.minutes)
    if run is not None:
        existing = Path(config.run.dir) / check_run_name(run)
        if existing.is_dir() and any(existing.iterdir()):
            raise ForgeError(f"run {run} exists ({existing}): continue it with --resume {run}, or choose another --run")
    check(config, warmstart=config.train.warmstart.when != "never")
    p = plan(config, minutes=minutes)
    return PreparedRun(p.config, run, False, p.minutes, p.warmstart, p.save_warm_to)


def _warmed_for(folder: Path, config: Any) -> bool:
    """Whether the kept warm copy was warm-started on what ``config`` trains (suite, mix, scaffold
    and its options: the prompts) and from the same teacher (its slips)."""
    try:
        record = json.loads((folder / "warmstart.json").read_text())
    except (OSError, ValueError):
        return False
    return recorded_key(record, config) == warm_key(config)


async def train(config: Any, *, run: str | None = None, resume: str | None = None, steps: int | None = None,
                minutes: float | None = None, on_event: Any = None) -> Any:
    """``forge train``: :func:`prepare_run`, then :func:`execute`."""
    return await execute(prepare_run(config, run=run, resume=resume, minutes=minutes), steps=steps, on_event=on_event)


async def execute(prepared: PreparedRun, *, steps: int | None = None, on_event: Any = None) -> Any:
    """Run a prepared ``forge train``; returns the loop's :class:`~forge_cli.train.loop.TrainResult`
    (None on a DeepSpeed rank > 0, which follows rank 0 instead)."""
    rank, _ = world()
    if rank > 0:
        await asyncio.to_thread(run_follower)
        return None
    p = prepared
    return await train_loop(p.config, run=p.run, steps=steps, minutes=p.minutes, resume=p.resume,
                            warmstart=p.warmstart, save_warm_to=p.save_warm_to, on_event=on_event)


def check(config: Any, *, warmstart: bool) -> None:
    """What would fail the run once started fails it now, in one line, before a model is built or
    an engine started: the scaffold, its options, the suites of ``[rollout]`` (and a demo policy for
    each if the run may warm-start), the reward weights, a PostgreSQL pool that does not answer."""
    registry = get_registry()
    request = request_from_config(config, groups=None)
    for name in check_mix(request.weights):
        resolve_suite(name, request.verifier, registry)
    for scaffold in check_mix(request.scaffolds, "scaffold mix"):
        preflight(config, request, registry.scaffold(scaffold), registry)
    if warmstart and config.model.path is None:
        policy_for(request.weights)
    if config.pool.url.startswith("postgres"):
        try:
            import psycopg

            psycopg.connect(config.pool.url, connect_timeout=5).close()
        except ImportError:
            raise ForgeError("pool.url names PostgreSQL but psycopg is not installed") from None
        except psycopg.Error as exc:
            raise ForgeError(f"the PostgreSQL pool at {redact_url(config.pool.url)} does not answer: "
                             f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None


async def warmstart_model(config: Any, *, out: Path | None = None, run: str | None = None,
                    on_event: Any = None) -> tuple[Any, Path]:
    """``forge model warmstart``: warm-start ``model.path`` (default: the embedded default, created
    if need be) in a run of its own and save the result at ``out`` (default: the embedded default's
    warm copy, which ``forge train`` then starts from). Returns (the result, the folder)."""

    config = config.model_copy(deep=True)
    embedded = config.model.path is None
    with_embedded_options(config)  # the warm copy learns the prompts forge train will sample
    if embedded:
        config.model.path = str(init_default_model())
    source = resolve_model_path(config.model.path)
    target = Path(out) if out is not None else warm_model_dir() if embedded else source.with_name(source.name + "-warm")
    return await _warmstart(config, target, run, on_event), target


async def _warmstart(config: Any, target: Path, run: str | None, on_event: Any) -> Any:
    async with build_training(config, run) as t:
        result = await run_warmstart(config, t.run, t.gateway, t.trainer, log=t.log, on_event=on_event)
        await asyncio.to_thread(keep_warm_model, t.model, Path(config.model.path), target, warm_record(config, result),
                                t.trainer.state_dict)
        return result
