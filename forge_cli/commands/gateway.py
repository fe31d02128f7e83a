"""``forge gateway serve``: the OpenAI/Anthropic-compatible gateway in front of a rollout engine."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Serve the gateway that agents talk to.", no_args_is_help=True)
    app.add_typer(group, name="gateway")

    @group.command("serve")
    def serve(
        host: Optional[str] = typer.Option(None, "--host", help="Address (default gateway.host, 127.0.0.1)."),
        port: Optional[int] = typer.Option(None, "--port", help="TCP port (default gateway.port, 8000)."),
        model: Optional[Path] = typer.Option(None, "--model", help="HF model folder (default model.path or the default model)."),
        engine: Optional[str] = typer.Option(None, "--engine", help="vllm, hf or scripted (default model.engine)."),
        policy: Optional[str] = typer.Option(None, "--policy", help="Scripted engine: a JSON rules/turns file or module:function."),
        auth: Optional[str] = typer.Option(None, "--auth", help="auto, loopback or strict (default gateway.auth)."),
        tool_format: Optional[str] = typer.Option(None, "--tool-format", help="Default tool-call format (default model.tool_format)."),
        run: Optional[str] = typer.Option(None, "--run", help="Record into this run (created if new; default: a new timestamped run)."),
        replicas: Optional[int] = typer.Option(None, "--replicas", help="Engine replicas behind a cache-aware router (default model.replicas, 1)."),
        unix_socket: Optional[str] = typer.Option(None, "--socket", help='Also listen on this unix socket (default gateway.socket: "auto" = RUN/gateway.sock; "" = none).'),
    ) -> None:
        """Start the gateway; every call is recorded into the run's data pool. It listens on TCP and,
        at the same time, on a unix socket (sandboxed agents reach it through that)."""
        import shutil
        import signal
        import sys

        from forge_cli.cli import get_state
        from forge_cli.config import load_config
        from forge_cli.engine.default_model import resolve_model_path
        from forge_cli.errors import ForgeError
        from forge_cli.gateway.listen import open_listeners, socket_path
        from forge_cli.runs import new_run

        state = get_state()
        overrides, flag_names = dict(state.overrides), {}
        for key, flag, value in (("gateway.host", "--host", host), ("gateway.port", "--port", port),
                                 ("model.path", "--model", str(model) if model else None), ("model.engine", "--engine", engine),
                                 ("gateway.auth", "--auth", auth), ("model.tool_format", "--tool-format", tool_format),
                                 ("model.replicas", "--replicas", replicas), ("gateway.socket", "--socket", unix_socket)):
            if value is not None:
                overrides[key], flag_names[key] = value, flag
        config = load_config(state.config_path, overrides=overrides, flag_names=flag_names)
        mode = config.gateway.auth
        if mode == "auto":
            mode = "loopback" if config.gateway.host in LOOPBACK else "strict"
        model_path = resolve_model_path(config.model.path)
        if config.model.engine == "scripted" and not policy:
            raise ForgeError("--engine scripted needs --policy FILE (rules/turns JSON) or module:function")
        run_dir = new_run(config, run, exist_ok=True)
        try:
            unix_path = socket_path(config.gateway.socket, run_dir)
            listeners = open_listeners(config.gateway.host, config.gateway.port, unix_path)  # before the engine: fail fast
            # SIGTERM like Ctrl-C: uvicorn shuts down gracefully, then re-raises the signal with the
            # handler it found — this one, so the clean-up below runs (the default would just end us)
            before = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
            try:
                _serve(config, listeners, unix_path, model_path, run_dir, policy, mode)
            finally:
                signal.signal(signal.SIGTERM, before)
                for sock in listeners:
                    sock.close()
                if unix_path is not None:
                    unix_path.unlink(missing_ok=True)
        except BaseException:
            if {p.name for p in run_dir.iterdir()} <= {"config.json"}:  # it never got to record anything
                shutil.rmtree(run_dir, ignore_errors=True)
            raise


def _serve(config, listeners, unix_path, model_path, run_dir, policy, mode) -> None:  # noqa: ANN001 — the serve command's locals
    """Start the engine(s) and serve the app on ``listeners`` until interrupted."""
    import asyncio
    import secrets

    import uvicorn

    from forge_cli.commands._common import registry
    from forge_cli.console import console, err_console
    from forge_cli.engine import make_engine
    from forge_cli.errors import ForgeError
    from forge_cli.gateway.app import create_app
    from forge_cli.gateway.state import GatewayState
    from forge_cli.pool import open_pool

    port = listeners[0].getsockname()[1]  # gateway.port = 0 picks a free one
    formats = {name: entry.value for name, entry in registry().tool_formats.items()}
    if config.model.tool_format not in formats:  # before minutes of engine start
        raise ForgeError(f"no tool format named {config.model.tool_format!r} (registered: {', '.join(sorted(formats))})")
    options = {"policy": policy} if config.model.engine == "scripted" else {}
    if config.model.engine in ("vllm", "hf"):
        options["max_model_len"] = config.model.max_model_len
    with err_console.status(f"starting {config.model.replicas} {config.model.engine} engine(s) on {model_path}…"):
        engines = [make_engine(config.model.engine, model_path, **options) for _ in range(config.model.replicas)]
    if len(engines) == 1:
        eng = engines[0]
    else:
        from forge_cli.engine.router import Router

        eng = Router(engines, policy=config.model.routing)
    pool = open_pool(config.pool.url, run_dir)
    admin_key = "forge-admin-" + secrets.token_urlsafe(16)
    gw = GatewayState(eng, eng.tokenizer, formats, pool=pool, default_tool_format=config.model.tool_format,
                      model_name=model_path.name, auth=mode, admin_key=admin_key)
    url = f"http://{config.gateway.host}:{port}"
    console.print(f"[bold green]Forge gateway[/] {url}/v1  engine {eng.name}  auth {mode}  run {run_dir}")
    if unix_path is not None:
        console.print(f"unix socket: {unix_path}", highlight=False)
    console.print(f"admin key: {admin_key}", highlight=False)
    server = uvicorn.Server(uvicorn.Config(create_app(gw), log_level="warning"))
    try:
        asyncio.run(server.serve(sockets=listeners))
    finally:
        gw.close()
        asyncio.run(eng.close())
        pool.close()

