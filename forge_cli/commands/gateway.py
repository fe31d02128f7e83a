"""``forge gateway serve``: a thin caller of :func:`forge_cli.gateway.server.serve_gateway`."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Optional

import typer

from forge_cli.commands._common import config_with, engine_flags
from forge_cli.configs.gateway import SERVE_PORT
from forge_cli.console import console, err_console
from forge_cli.gateway import event_loop


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Serve the gateway that agents talk to.", no_args_is_help=True)
    app.add_typer(group, name="gateway")

    @group.command("serve")
    def serve(
        host: Optional[str] = typer.Option(None, "--host", help="Address (default gateway.host, 127.0.0.1)."),
        port: Optional[int] = typer.Option(None, "--port", help="TCP port (default gateway.port, else 8000)."),
        model: Optional[Path] = typer.Option(None, "--model", help="HF model folder (default model.path or the default model)."),
        engine: Optional[str] = typer.Option(None, "--engine", help="vllm, hf or scripted (default model.engine.type)."),
        policy: Optional[str] = typer.Option(None, "--policy", help="Scripted engine: a JSON rules/turns file or module:function (model.engine.policy)."),
        auth: Optional[str] = typer.Option(None, "--auth", help="auto, loopback or strict (default gateway.auth)."),
        tool_format: Optional[str] = typer.Option(None, "--tool-format", help="Default tool-call format (default model.tool_format: native where the model's template takes tools)."),
        tool_parser: Optional[str] = typer.Option(None, "--tool-parser", help="vLLM's tool parser for the native format (default model.tool_parser: the model family's)."),
        reasoning_parser: Optional[str] = typer.Option(None, "--reasoning-parser", help='vLLM\'s reasoning parser (default model.reasoning_parser: the model family\'s; "none": none).'),
        run: Optional[str] = typer.Option(None, "--run", help="Name of the run under run.dir (letters, digits, '.', '_', '-'; not a path); created if new; default: a new timestamped run."),
        replicas: Optional[int] = typer.Option(None, "--replicas", help="Engine replicas behind a cache-aware router (default model.replicas, 1)."),
        unix_socket: Optional[str] = typer.Option(None, "--socket", help='Also listen on this unix socket (default gateway.socket: "auto" = RUN/gateway.sock; "" = none).'),
    ) -> None:
        """Start the gateway; every call is recorded into the run's data pool. It listens on TCP and,
        at the same time, on a unix socket (sandboxed agents reach it through that)."""
        config = config_with([("gateway.host", "--host", host), ("gateway.port", "--port", port),
                              *engine_flags(model, engine, policy),
                              ("gateway.auth", "--auth", auth), ("model.tool_format", "--tool-format", tool_format),
                              ("model.tool_parser", "--tool-parser", tool_parser),
                              ("model.reasoning_parser", "--reasoning-parser", reasoning_parser),
                              ("model.replicas", "--replicas", replicas), ("gateway.socket", "--socket", unix_socket)])
        try:
            event_loop.run(_serve_until_stopped(config, run))
        except (KeyboardInterrupt, asyncio.CancelledError):
            err_console.print("gateway stopped")


async def _serve_until_stopped(config, run: str | None) -> None:  # noqa: ANN001 — a ForgeConfig
    """Serve, print where, and wait; SIGTERM stops it like Ctrl-C (every clean-up runs)."""
    from forge_cli.gateway.server import serve_gateway  # heavy: FastAPI, uvicorn

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    status = err_console.status("starting the gateway…")
    status.start()
    try:
        async with serve_gateway(config, run, on_starting=status.update, default_port=SERVE_PORT) as gw:
            status.stop()
            console.print(f"[bold green]Forge gateway[/] {gw.url}/v1  engine {gw.run.engine.name}  auth {gw.auth}  run {gw.run_dir}")
            if gw.unix_path is not None:
                console.print(f"unix socket: {gw.unix_path}", highlight=False)
            if gw.interrupted:
                console.print(f"{gw.interrupted} trajectories left running by a process that died were marked failed "
                              "(interrupted)", highlight=False)
            console.print(f"admin key: {gw.admin_key}", highlight=False)
            await gw.wait()
    finally:
        status.stop()
