"""The gateway as a library call: :func:`serve_gateway` serves a run (:class:`forge_cli.run.Run`:
its folder, pool and engine) over HTTP — TCP and a unix socket — on the caller's event loop.

``forge gateway serve`` is a thin caller of it; so are the rollout driver and ``forge train``,
which open trajectory sessions in-process (:meth:`Gateway.open_session`) — no HTTP to
themselves for that. The run is not the server's: :func:`forge_cli.run.open_run` composes it, and
the trainer reaches the engine and the pool through the run, never through the gateway.

Order at start: the run (its folder and lock, then the listeners *bound but not listening* — a
port in use fails in milliseconds, not after minutes of engine start —, the engine(s), the pool),
the tool format checked before all of it, and only then ``listen()``: a client that connects
before the engine is ready is refused at once instead of queueing, and ``/health`` answers only
when the gateway can serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from forge_cli.errors import ForgeError
from forge_cli.gateway.app import create_app
from forge_cli.gateway.errors import APIError
from forge_cli.gateway.listen import open_listeners, socket_path
from forge_cli.gateway.state import GatewayState
from forge_cli.gateway.token_text import output_text
from forge_cli.plugins import get_registry
from forge_cli.records.session import SessionInfo, SessionRequest
from forge_cli.run import Run, open_run

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
SHUTDOWN_GRACE_S = 5.0  # in-flight calls get this long to finish when the gateway stops


@dataclass
class Gateway:
    """A running gateway over a run. ``url`` is ``http://HOST:PORT`` (agents use ``url + "/v1"``).
    It offers what a rollout driver needs of a gateway (:class:`forge_cli.rollout.remote.DriverGateway`);
    ``run_dir`` and ``pool`` are the run's, named as the driver reads them."""

    state: Any  # GatewayState
    run: Run
    url: str
    unix_path: Path | None
    auth: str
    _server: Any = None
    _task: asyncio.Task | None = None

    @property
    def admin_key(self) -> str:
        return self.state.admin_key

    @property
    def run_dir(self) -> Path:
        return self.run.dir

    @property
    def pool(self) -> Any:
        return self.run.pool

    @property
    def interrupted(self) -> int:
        return self.run.interrupted

    async def open_session(self, request: SessionRequest = SessionRequest()) -> SessionInfo:
        """Open a trajectory's session in-process (what ``POST /admin/sessions`` does over HTTP)."""
        with _as_forge_error():
            session = await self.state.create_session(request)
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
        return output_text(self.state.tokenizer, self.run.engine.eos_token_id, output_ids)

    async def wait(self) -> None:
        """Until the server stops (``stop()``, or uvicorn's own exit)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def stop(self) -> None:
        """Ask the server to stop; :func:`serve_run`'s exit waits for it."""
        if self._server is not None:
            self._server.should_exit = True


def auth_mode(config: Any) -> str:
    """``gateway.auth``: ``auto`` is loopback on 127.0.0.1/localhost/::1, strict anywhere else."""
    mode = config.gateway.auth
    return ("loopback" if config.gateway.host in LOOPBACK else "strict") if mode == "auto" else mode


@contextlib.asynccontextmanager
async def serve_gateway(
    config: Any,
    run: str | None = None,
    *,
    engine: Any = None,
    tool_formats: dict[str, Any] | None = None,
    on_starting: Callable[[str], None] | None = None,
    default_port: int = 0,
) -> AsyncIterator[Gateway]:
    """Open the run named ``run`` (:func:`forge_cli.run.open_run`) and serve it: the gateway, for a
    caller that needs nothing else of the run (``forge gateway serve``, a rollout)."""
    async with open_and_serve(config, run, engine=engine, tool_formats=tool_formats, on_starting=on_starting,
                              default_port=default_port) as (_, gw):
        yield gw


@contextlib.asynccontextmanager
async def open_and_serve(
    config: Any,
    run: str | None = None,
    *,
    engine: Any = None,
    tool_formats: dict[str, Any] | None = None,
    on_starting: Callable[[str], None] | None = None,
    default_port: int = 0,
) -> AsyncIterator[tuple[Run, Gateway]]:
    """The run named ``run`` (created if new) and the gateway serving it, both: a caller that uses the
    run itself (the trainer: its engine and pool) holds it, not the server.

    ``engine``: an engine already built; default: built from ``[model.engine]``. ``tool_formats``:
    default, every registered one. ``on_starting(message)`` is told what is being started.
    ``default_port``: the TCP port when ``gateway.port`` is not set (0: any free one).
    """
    tool_formats = registered_formats() if tool_formats is None else tool_formats
    check_tool_format(config, tool_formats)  # before minutes of engine start (what needs the model is checked after)
    listeners: list[Any] = []

    def bind(run_dir: Path, stack: contextlib.AsyncExitStack) -> None:
        unix_path = socket_path(config.gateway.socket, run_dir)
        port = default_port if config.gateway.port is None else config.gateway.port
        listeners.extend(open_listeners(config.gateway.host, port, unix_path, listen=False))
        stack.callback(_close_listeners, list(listeners), unix_path)

    async with open_run(config, run, engine=engine, on_starting=on_starting, prepare=bind) as the_run:
        async with serve_run(config, the_run, listeners, tool_formats) as gw:
            yield the_run, gw


def registered_formats() -> dict[str, Any]:
    """Every registered tool format, by name."""
    return {name: entry.value for name, entry in get_registry().tool_formats.items()}


def registered_reasoning_parsers() -> dict[str, Any]:
    """Every registered reasoning parser, by name."""
    return {name: entry.value for name, entry in get_registry().reasoning_parsers.items()}


def check_tool_format(config: Any, tool_formats: dict[str, Any]) -> None:
    """The names in ``[model]`` exist (whether they fit the model is known once its tokenizer is loaded)."""
    for what, name in (("tool_format", config.model.tool_format), ("tool_parser", config.model.tool_parser)):
        if name is not None and name not in tool_formats:
            near = difflib.get_close_matches(name, tool_formats, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            raise ForgeError(f"model.{what}: no tool format named {name!r} ({hint}forge plugins lists the {len(tool_formats)} registered)")


@contextlib.asynccontextmanager
async def serve_run(config: Any, run: Run, listeners: list[Any], tool_formats: dict[str, Any]) -> AsyncIterator[Gateway]:
    """Serve ``run`` on ``listeners`` (bound, not listening: a TCP one, and a unix one or not) until
    the block exits."""
    import uvicorn  # heavy: the HTTP server


    mode = auth_mode(config)
    tcp = next(sock for sock in listeners if sock.family != socket.AF_UNIX)
    unix = next((Path(sock.getsockname()) for sock in listeners if sock.family == socket.AF_UNIX), None)
    async with contextlib.AsyncExitStack() as stack:
        state = await asyncio.to_thread(  # binding a vLLM parser imports vLLM: seconds
            GatewayState, run.engine, run.engine.tokenizer, tool_formats, pool=run.pool,
                             default_tool_format=config.model.tool_format, reasoning_parsers=registered_reasoning_parsers(),
                             model_type=run.model_type, tool_parser=config.model.tool_parser,
                             reasoning_parser=config.model.reasoning_parser, model_name=run.model_name, auth=mode,
                             record_requests=config.gateway.record_requests,
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
        port = tcp.getsockname()[1]  # gateway.port = 0 picks a free one
        host = config.gateway.host if ":" not in config.gateway.host else f"[{config.gateway.host}]"
        run.mark_started()
        yield Gateway(state, run, f"http://{host}:{port}", unix, mode, server, task)


@contextlib.contextmanager
def _as_forge_error() -> Any:
    """In-process callers get the library's error, not the HTTP one."""
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
