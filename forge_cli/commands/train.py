"""``forge train``: a thin caller of :func:`forge_cli.train.run.train`, with a live display."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any, Optional

import typer
from rich.live import Live

from forge_cli.commands._common import config_with, scaffold_flags
from forge_cli.console import console, err_console
from forge_cli.errors import ForgeError
from forge_cli.gateway import event_loop
from forge_cli.rollout.stream import parse_mix
from forge_cli.train.display import TrainDisplay
from forge_cli.train.distributed import world


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train_command(
        minutes: Optional[float] = typer.Option(None, "--minutes", help="Wall-time budget (default train.minutes; 15 on the embedded default model, none with a model.path)."),
        steps: Optional[int] = typer.Option(None, "--steps", help="Stop after this many train steps (the run's total, counting a resumed run's earlier steps)."),
        run: Optional[str] = typer.Option(None, "--run", help="Name of the run folder under run.dir (default: a timestamp)."),
        resume: Optional[str] = typer.Option(None, "--resume", help="Continue this run from its last checkpoint (after Ctrl-C, a crash or SIGKILL), with its own config."),
        model: Optional[Path] = typer.Option(None, "--model", help="HF model folder to train (default model.path, else the embedded default, warm-started on first use)."),
        scaffold: Optional[str] = typer.Option(None, "--scaffold", help="Scaffold the policy runs in (default rollout.scaffold)."),
        scaffold_mix: Optional[str] = typer.Option(None, "--scaffold-mix", help="Mixed scaffolds by weight, like aider=1,pi=2: groups take them in a weighted round robin (default rollout.scaffold_mix; instead of --scaffold)."),
        task: Optional[str] = typer.Option(None, "--task", help="Task suite (default rollout.task)."),
        mix: Optional[str] = typer.Option(None, "--mix", help="Mixed suites by weight, like calc=2,qa=1 (default rollout.mix)."),
        warmstart: Optional[str] = typer.Option(None, "--warmstart", help="auto, always or never (default train.warmstart.when)."),
        live: Optional[bool] = typer.Option(None, "--live/--no-live", help="Redraw a live view, or print plain progress lines (every evaluation and every 10 steps: for logs). Default: live when standard output is a terminal, lines on standard output otherwise."),
    ) -> None:
        """Train the policy with RL: gateway, rollouts on tasks, data pool, windowed-FIFO scheduler,
        prefix-tree trainer, weights back into the engine. Writes RUN/metrics.jsonl, TensorBoard
        files and checkpoints (forge report RUN plots them)."""
        if steps is not None and steps < 1:
            raise ForgeError(f"--steps must be at least 1, got {steps}")
        if minutes is not None and not minutes > 0:
            raise ForgeError(f"--minutes must be > 0, got {minutes}")
        if resume is not None and (run is not None or model is not None):
            raise ForgeError("--resume continues a run with its own config: drop --run and --model")
        config = config_with([("model.path", "--model", str(model) if model else None),
                              *scaffold_flags(scaffold, scaffold_mix), ("rollout.task", "--task", task),
                              ("rollout.mix", "--mix", parse_mix(mix) if mix is not None else None),
                              ("train.warmstart.when", "--warmstart", warmstart)])

        from forge_cli.train.run import prepare_run  # heavy: the gateway, the trainer

        rank, _ = world()
        prepared = prepare_run(config, run=run, resume=resume, minutes=minutes) if rank == 0 else None
        live = console.is_terminal if live is None else live  # `make train > log`: lines into the log
        try:
            result = event_loop.run(_with_display(prepared, steps=steps, live=live and rank == 0))
        except (KeyboardInterrupt, asyncio.CancelledError):
            name = prepared.run if prepared is not None and prepared.run else "RUN"
            err_console.print(f"training stopped after checkpointing its last step, if it had taken one "
                              f"(continue with forge train --resume {name}; forge runs lists them)")
            raise typer.Exit(130) from None
        if result is not None:
            console.print(ending(result), highlight=False)


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def ending(result: Any) -> str:
    """The run's last line, one plain sentence: held-out success before → after, the best, and where
    its report goes."""
    return (f"{result.status.capitalize()} after {result.steps} steps (policy v{result.policy_version}): held-out success "
            f"{_rate(result.first_heldout_success)} → {_rate(result.last_heldout_success)} (best "
            f"{_rate(result.best_heldout_success)}); run in {result.run_dir}, plots and tables with "
            f"`forge report {result.run_dir.name}` (into {result.run_dir / 'report'}).")


PLAIN_EVERY = 10  # without a live view: a progress line every this many steps (and every evaluation)


def progress_line(kind: str, event: Any, heldout: float | None = None) -> str | None:
    """A plain progress line for logs (``--no-live``, or output that is not a terminal): every
    evaluation, every :data:`PLAIN_EVERY` RL steps and every 100 warm-start steps, each status; else None."""
    if kind == "status":
        return f"[{event.get('status')}]"
    if kind == "eval":
        return f"eval at step {event.step}: held-out success {_rate(event.success)}"
    if kind == "warmstart":
        if event.heldout_success is None and event.step % 100:
            return None
        held = "" if event.heldout_success is None else f", held-out success {_rate(event.heldout_success)}"
        return f"warm start step {event.step}: loss {event.loss:.3f}, lr {event.lr:.2g}{held}"
    if kind == "step" and (event.step % PLAIN_EVERY == 0 or event.step == 1):
        reward = "—" if event.reward_mean is None else f"{event.reward_mean:+.3f}"
        rate = "—" if event.samples_per_s is None else f"{event.samples_per_s:.1f}"
        return (f"step {event.step} (v{event.policy_version}): reward {reward}, success {_rate(event.success)} (train), "
                f"{_rate(heldout)} (held-out, last evaluation), {rate} trajectories/s")
    return None


async def _with_display(prepared: Any, *, steps: int | None, live: bool) -> Any:
    from forge_cli.train.run import execute  # heavy: the gateway, the trainer

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    if prepared is None:  # a DeepSpeed rank > 0: it follows rank 0
        return await execute(prepared)
    title = f"forge train --resume {prepared.run}" if prepared.resume else "forge train"
    view = TrainDisplay(steps=steps, minutes=prepared.minutes, title=title)

    def on_event(kind: str, event: Any) -> None:
        view.update(kind, event)
        if not live:
            line = progress_line(kind, event, heldout=view.eval.success if view.eval is not None else None)
            if line:
                console.print(line, highlight=False, soft_wrap=True)

    display = Live(view, console=err_console, refresh_per_second=2, transient=False) if live else contextlib.nullcontext()
    with display:
        return await execute(prepared, steps=steps, on_event=on_event)
