"""``forge rollout``: a thin caller of :func:`forge_cli.rollout.driver.rollout`, with a live display."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.live import Live
from rich.table import Table

from forge_cli.commands._common import config_with, engine_flags, scaffold_flags
from forge_cli.console import console, err_console
from forge_cli.engine.default_model import with_embedded_options
from forge_cli.gateway import event_loop
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.records import request_from_config
from forge_cli.rollout.stream import parse_mix


def register(app: typer.Typer) -> None:
    @app.command("rollout")
    def rollout_command(
        scaffold: Optional[str] = typer.Option(None, "--scaffold", help="Scaffold to run (default rollout.scaffold; forge scaffold list)."),
        scaffold_mix: Optional[str] = typer.Option(None, "--scaffold-mix", help="Mixed scaffolds by weight, like aider=1,pi=2: groups take them in a weighted round robin (default rollout.scaffold_mix; instead of --scaffold)."),
        task: Optional[str] = typer.Option(None, "--task", help="Task suite (calc, kv-search, files, reasoning, qa, …) or a JSONL file of tasks."),
        mix: Optional[str] = typer.Option(None, "--mix", help="Mixed suites by weight, like calc=2,qa=1: each group's suite drawn from run.seed (default rollout.mix; instead of --task)."),
        verifier: Optional[str] = typer.Option(None, "--verifier", help="For a JSONL task file: module:function that verifies a task."),
        split: Optional[str] = typer.Option(None, "--split", help="train or heldout (default rollout.split)."),
        groups: Optional[int] = typer.Option(None, "--groups", help="Tasks to run, one group each (default rollout.groups)."),
        n: Optional[int] = typer.Option(None, "--n", help="Trajectories per group (default train.group_size)."),
        concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Trajectories running at once (default rollout.concurrency)."),
        timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds a trajectory may run (default rollout.trajectory_timeout_s)."),
        max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Output tokens a trajectory may sample in all (default rollout.max_tokens_per_trajectory: none)."),
        run: Optional[str] = typer.Option(None, "--run", help="Name of the run under run.dir to record into (created if new; default: a timestamped one)."),
        model: Optional[Path] = typer.Option(None, "--model", help="HF model folder (default model.path or the default model)."),
        engine: Optional[str] = typer.Option(None, "--engine", help="vllm, hf or scripted (default model.engine.type)."),
        policy: Optional[str] = typer.Option(None, "--policy", help="Scripted engine: a JSON rules/turns file or module:function."),
        executor: Optional[str] = typer.Option(None, "--executor", help="local or ray (default rollout.executor)."),
        sandbox: Optional[str] = typer.Option(None, "--sandbox", help="Where black-box agents run: local (bubblewrap where installed) or docker (default rollout.sandbox; an agent whose [scaffolds.NAME] sets sandbox runs there)."),
        gateway: Optional[str] = typer.Option(None, "--gateway", help="Use a running `forge gateway serve` at this URL (with --run NAME: its run) instead of serving one."),
        admin_key: Optional[str] = typer.Option(None, "--admin-key", envvar="FORGE_ADMIN_KEY", help="--gateway: the admin key it printed."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="executor ray: a cluster's address (default: a local Ray)."),
    ) -> None:
        """Run a scaffold on tasks: every call recorded, every trajectory verified and rewarded, into
        the run's pool (then `forge pool stats RUN`). Ends with a summary table."""
        config = config_with([*scaffold_flags(scaffold, scaffold_mix), ("rollout.task", "--task", task),
                              ("rollout.mix", "--mix", parse_mix(mix) if mix is not None else None),
                              ("rollout.verifier", "--verifier", verifier), ("rollout.split", "--split", split),
                              ("rollout.groups", "--groups", groups), ("train.group_size", "--n", n),
                              ("rollout.concurrency", "--concurrency", concurrency),
                              ("rollout.trajectory_timeout_s", "--timeout", timeout), ("rollout.executor", "--executor", executor),
                              ("rollout.sandbox", "--sandbox", sandbox),
                              ("rollout.max_tokens_per_trajectory", "--max-tokens", max_tokens),
                              ("rollout.ray_address", "--ray-address", ray_address), *engine_flags(model, engine, policy)])
        # the model samples here: a copy of the embedded default gets the prompts it learned on (a script
        # writes its own text; behind --gateway this process does not know what the served engine is)
        if config.model.engine.type != "scripted" and gateway is None:
            with_embedded_options(config)
        request = request_from_config(config, gateway_url=gateway, admin_key=admin_key)
        try:
            summary = event_loop.run(_with_display(config, request, run))
        except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C, or SIGTERM
            err_console.print("rollout interrupted: its unfinished trajectories were failed (interrupted)")
            raise typer.Exit(130) from None
        _print_summary(summary)


async def _with_display(config: Any, request: Any, run: str | None) -> Any:
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)

    def table(p: Any) -> Table:
        t = Table(title=f"forge rollout: {request.scaffold_label} on {request.label}", title_justify="left")
        for column in ("running", "finished", "failed", "timed out", "infra", "success", "tokens/s", "elapsed"):
            t.add_column(column, justify="right")
        success = f"{p.solved}/{p.finished - p.infra}" if p.finished > p.infra else "—"
        elapsed = time.monotonic() - p.started_at
        t.add_row(str(p.running), f"{p.finished}/{p.total}", str(p.failed), str(p.timed_out),
                  str(p.infra) + (f" ({p.retried} retried)" if p.retried else ""), success,
                  f"{p.output_tokens / elapsed:.0f}" if elapsed > 0 else "—", f"{elapsed:.0f} s")
        return t

    with Live(console=err_console, refresh_per_second=4, transient=False) as live:
        summary = await rollout(config, request, run=run, on_progress=lambda p: live.update(table(p)))
    return summary


def _print_summary(summary: Any) -> None:
    t = Table(title="rollout summary", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    for label, value in summary.rows():
        t.add_row(label, value)
    console.print(t)
    console.print(f"run: {summary.run_dir}  (forge pool stats {summary.run_dir.name})", highlight=False)
