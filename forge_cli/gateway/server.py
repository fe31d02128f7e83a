"""The gateway as a library call: :func:`serve_gateway` composes engines, router, pool, state and
uvicorn (TCP and a unix socket) on the caller's event loop, and tears them all down.

``forge gateway serve`` is a thin caller of it; so are the rollout driver and ``forge train``,
which open trajectory sessions in-process (:meth:`Gateway.open_session`) — no HTTP to
themselves for that.

Order at start: the run folder and its lock (one gateway per run), the listeners *bound but not
listening* (a port in use fails in milliseconds, not after minutes of engine start), the tool
format, the engine(s), the pool (trajectories a dead process left ``running`` are failed as
"interrupted"), and only then ``listen()``: a client that connects before the engine is ready is
refused at once instead of queueing, and ``/health`` answers only when the gateway can serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from forge_cli.errors import ForgeError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
SHUTDOWN_GRACE_S = 5.0  # in-flight calls get this long to finish when the gateway stops


@dataclass(frozen=True)
class SessionInfo:
    """A trajectory's session, as an agent is pointed at it."""

    id: str
    api_key: str
    base_url: str  # http://HOST:PORT/s/<session>/v1: the key alone works too, on /v1
    trajectory_id: str | None
    tool_format: str


@dataclass
class Gateway:
    """A running gateway. ``url`` is ``http://HOST:PORT`` (agents use ``url + "/v1"``)."""

    state: Any  # GatewayState
    engine: Any
    pool: Any
    run_dir: Path
    url: str
    unix_path: Path | None
    auth: str
    interrupted: int  # trajectories a dead process had left running, failed at start
    _server: Any = None
    _task: asyncio.Task | None = None

    @property
    def admin_key(self) -> str:
        return self.state.admin_key

    async def open_session(self, *, task_id: str = "adhoc", scaffold: str = "external", tool_format: str | None = None,
                           trajectory_id: str | None = None, training: bool = False,
                           token_budget: int | None = None) -> SessionInfo:
        """Open a trajectory's session in-process (what ``POST /admin/sessions`` does over HTTP).
        ``training``: sampled as the trainer computes logprobs (top_p = 1, no top_k, no penalties);
        otherwise ad hoc, its completions marked not for training. ``token_budget``: output tokens the
        trajectory may sample in all (each call's max_tokens is cut to what is left; then a 409)."""
        with _as_forge_error():
            session = await self.state.create_session(task_id=task_id, scaffold=scaffold, tool_format=tool_format,
                                                      trajectory_id=trajectory_id, training=training, token_budget=token_budget)
        return SessionInfo(session.id, session.api_key, f"{self.url}/s/{session.id}/v1", session.trajectory_id,
                           session.tool_format or self.state.default_tool_format)

    async def finish_session(self, session_id: str, *, status: str = "completed", rewards: dict[str, float] | None = None,
                             error: str | None = None) -> None:
        """End a session's trajectory (``completed`` or ``failed``) and forget the session."""
        with _as_forge_error():
            await self.state.finish_session(session_id, status=status, rewards=rewards, error=error)

    async def close_session(self, session_id: str) -> int:
        """Forget a session whose trajectory its driver ends itself (its history freed; its key answers
        409); the output tokens it sampled."""
        session = self.state.sessions.get(session_id)
        if session is None:
            return 0
        self.state.forget(session)
        return session.tokens_out

    @property
    def model_name(self) -> str:
        return self.state.model_name

    def output_text(self, output_ids: list[int]) -> str:
        """A completion's output as the gateway parsed it: special tokens kept, the closing EOS dropped."""
        return output_text(self.state.tokenizer, self.engine.eos_token_id, output_ids)

    async def wait(self) -> None:
        """Until the server stops (``stop()``, or uvicorn's own exit)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def stop(self) -> None:
        """Ask the server to stop; :func:`serve_gateway`'s exit waits for it."""
        if self._server is not None:
            self._server.should_exit = True


def auth_mode(config: Any) -> str:
    """``gateway.auth``: ``auto`` is loopback on 127.0.0.1/localhost/::1, strict anywhere else."""
    mode = config.gateway.auth
    return ("loopback" if config.gateway.host in LOOPBACK else "strict") if mode == "auto" else mode


async def build_engine(config: Any, model_path: Path, stack: contextlib.AsyncExitStack) -> Any:
    """``model.replicas`` engines of ``[model.engine]``, behind the router when there are several;
    each is closed by ``stack``, so a replica that fails to start leaves none of the others running."""
    from forge_cli.engine import make_engine

    engines = []
    for _ in range(config.model.replicas):
        engine = make_engine(config.model.engine, model_path, max_model_len=config.model.max_model_len)
        stack.push_async_callback(engine.close)
        engines.append(engine)
    if len(engines) == 1:
        return engines[0]
    from forge_cli.engine.router import Router

    return Router(engines, policy=config.model.routing)


@contextlib.asynccontextmanager
async def serve_gateway(
    config: Any,
    run: str | None = None,
    *,
    engine: Any = None,
    tool_formats: dict[str, Any] | None = None,
    on_starting: Callable[[str], None] | None = None,
) -> AsyncIterator[Gateway]:
    """Serve the gateway for the run named ``run`` (created if new; default: a timestamped one).

    ``engine``: an engine already built (``forge train`` shares its engine with the trainer);
    default: built from ``[model.engine]``. ``tool_formats``: default, every registered one.
    ``on_starting(message)`` is told what is being started (the CLI shows a spinner).
    A start that fails leaves no run folder behind unless the run already held records.
    """
    import uvicorn

    from forge_cli.engine.default_model import resolve_model_path
    from forge_cli.gateway.app import create_app
    from forge_cli.gateway.listen import open_listeners, socket_path
    from forge_cli.gateway.state import GatewayState
    from forge_cli.pool import open_pool
    from forge_cli.runs import claim_run

    if tool_formats is None:
        from forge_cli.plugins import get_registry

        tool_formats = {name: entry.value for name, entry in get_registry().tool_formats.items()}
    if config.model.tool_format not in tool_formats:  # before minutes of engine start
        raise ForgeError(f"no tool format named {config.model.tool_format!r} (registered: {', '.join(sorted(tool_formats))})")
    model_path = resolve_model_path(config.model.path) if engine is None else None
    mode = auth_mode(config)
    lock = claim_run(config, run)  # one server per run: refused here, before anything is changed
    run_dir, started = lock.run_dir, False

    def forget_failed_start() -> None:  # still under the lock: nobody else can be starting on it
        if not started and lock.created:
            shutil.rmtree(run_dir, ignore_errors=True)  # a start that failed on a new run leaves nothing behind

    async with contextlib.AsyncExitStack() as stack:
        stack.callback(lock.release)
        stack.callback(forget_failed_start)
        unix_path = socket_path(config.gateway.socket, run_dir)
        listeners = open_listeners(config.gateway.host, config.gateway.port, unix_path, listen=False)
        stack.callback(_close_listeners, listeners, unix_path)
        if engine is None:
            if on_starting is not None:
                on_starting(f"starting {config.model.replicas} {config.model.engine.type} engine(s) on {model_path}…")
            engine = await build_engine(config, model_path, stack)
        pool = open_pool(config.pool.url, run_dir)
        stack.callback(pool.close)
        interrupted = pool.fail_interrupted()
        state = GatewayState(engine, engine.tokenizer, tool_formats, pool=pool, default_tool_format=config.model.tool_format,
                             model_name=getattr(model_path, "name", None) or "forge", auth=mode,
                             admin_key="forge-admin-" + secrets.token_urlsafe(16))
        stack.callback(state.close)
        app = create_app(state, max_body_bytes=config.gateway.max_body_bytes, body_timeout_s=config.gateway.body_timeout_s)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning",
                                               timeout_graceful_shutdown=SHUTDOWN_GRACE_S))
        server.capture_signals = contextlib.nullcontext  # signals are the caller's, not a library's
        task = asyncio.create_task(server.serve(sockets=listeners))  # asyncio listen()s as it starts serving
        stack.push_async_callback(_stop, server, task)
        while not server.started:
            if task.done():  # it failed to start: say why
                task.result()
                raise ForgeError("the gateway's HTTP server stopped while starting")
            await asyncio.sleep(0.01)
        port = listeners[0].getsockname()[1]  # gateway.port = 0 picks a free one
        host = config.gateway.host if ":" not in config.gateway.host else f"[{config.gateway.host}]"
        started = True
        yield Gateway(state, engine, pool, run_dir, f"http://{host}:{port}", unix_path, mode, interrupted, server, task)


def output_text(tokenizer: Any, eos_token_id: int | None, output_ids: list[int]) -> str:
    ids = list(output_ids)
    if ids and ids[-1] == eos_token_id:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False)


@contextlib.contextmanager
def _as_forge_error() -> Any:
    """In-process callers get the library's error, not the HTTP one."""
    from forge_cli.gateway.errors import APIError

    try:
        yield
    except APIError as exc:
        raise ForgeError(exc.message) from None


async def _stop(server: Any, task: asyncio.Task) -> None:
    server.should_exit = True
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _close_listeners(listeners: list[Any], unix_path: Path | None) -> None:
    for sock in listeners:
        sock.close()
    if unix_path is not None:
        unix_path.unlink(missing_ok=True)
