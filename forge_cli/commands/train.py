"""``forge train``: a thin caller of :func:`forge_cli.train.run.train`, with a live display."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any, Optional

import typer
from rich.live import Live

from forge_cli.commands._common import config_with
from forge_cli.console import console, err_console
from forge_cli.errors import ForgeError
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
        task: Optional[str] = typer.Option(None, "--task", help="Task suite (default rollout.task)."),
        mix: Optional[str] = typer.Option(None, "--mix", help="Mixed suites by weight, like calc=2,qa=1 (default rollout.mix)."),
        warmstart: Optional[str] = typer.Option(None, "--warmstart", help="auto, always or never (default train.warmstart.when)."),
        live: bool = typer.Option(True, "--live/--no-live", help="Redraw a live view (off: one line per step, for logs)."),
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
                              ("rollout.scaffold", "--scaffold", scaffold), ("rollout.task", "--task", task),
                              ("rollout.mix", "--mix", parse_mix(mix) if mix is not None else None),
                              ("train.warmstart.when", "--warmstart", warmstart)])

        from forge_cli.train.run import prepare_run  # heavy: the gateway, the trainer

        rank, _ = world()
        prepared = prepare_run(config, run=run, resume=resume, minutes=minutes) if rank == 0 else None
        try:
            result = asyncio.run(_with_display(prepared, steps=steps, live=live and rank == 0))
        except (KeyboardInterrupt, asyncio.CancelledError):
            name = prepared.run if prepared is not None and prepared.run else "RUN"
            err_console.print(f"training stopped after checkpointing its last step, if it had taken one "
                              f"(continue with forge train --resume {name}; forge runs lists them)")
            raise typer.Exit(130) from None
        if result is not None:
            best = "—" if result.best_heldout_success is None else f"{result.best_heldout_success:.1%}"
            console.print(f"[green]{result.status}[/] at step {result.steps} (policy v{result.policy_version}), best held-out "
                          f"success {best}; run: {result.run_dir}  (forge report {result.run_dir.name})")


async def _with_display(prepared: Any, *, steps: int | None, live: bool) -> Any:
    from forge_cli.train.run import execute  # heavy: the gateway, the trainer

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    if prepared is None:  # a DeepSpeed rank > 0: it follows rank 0
        return await execute(prepared)
    title = f"forge train --resume {prepared.run}" if prepared.resume else "forge train"
    view = TrainDisplay(steps=steps, minutes=prepared.minutes, title=title)

    def on_event(kind: str, event: Any) -> None:
        view.update(kind, event)
        if live or kind not in ("step", "eval", "warmstart"):
            return
        fields = event.line()  # what the metrics line says
        quiet = kind == "warmstart" and fields.get("heldout_success") is None and fields.get("step", 0) % 25
        if not quiet:
            keys = ("loss", "reward_mean", "success", "heldout_success", "mean_age", "policy_version")
            err_console.print(f"{kind} {fields.get('step')}: " + ", ".join(
                f"{k} {fields[k]:.4g}" if isinstance(fields.get(k), float) else f"{k} {fields[k]}" for k in keys if k in fields))

    display = Live(view, console=err_console, refresh_per_second=2, transient=False) if live else contextlib.nullcontext()
    with display:
        return await execute(prepared, steps=steps, on_event=on_event)
