"""The gateway's outermost layer, in plain ASGI: limits, HEAD, metrics to the last byte, and 500s.

- A body over the size limit (by ``Content-Length``) is a 413 before anything parses it; a body
  that has not fully arrived ``body_timeout_s`` after the request began is a 408 (a client that
  sends half a body and stops would otherwise hold its request open for good).
- Before a refusal is answered, what is left of the refused body is read and dropped
  (:func:`drain`: up to :data:`DRAIN_BYTES`, within the body deadline). Closing a socket with
  unread bytes in it makes the kernel reset the connection, which can destroy the answer on its way:
  the client, still sending, saw the connection drop instead of the 413.
- A response that starts before its request's body was read in full says ``Connection: close``
  (the server closes such a connection; the client then knows not to reuse it).
- ``HEAD`` is answered like ``GET``, without the body.
- Latency is observed when the last byte of the response is sent, so a streamed call counts
  its whole stream.
- An unexpected exception before the response started is logged and answered with a 500 in the
  provider's error shape, and the connection stays usable. (Starlette's own handler re-raises
  after answering, and the server then drops the keep-alive connection without saying so.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from forge_cli.gateway.errors import APIError, error_response

log = logging.getLogger("forge.gateway")
Message = dict[str, Any]
DRAIN_BYTES = 256 * 2**20  # the most of a refused body read (and dropped) so that its answer arrives whole


async def drain(receive: Callable[[], Awaitable[Message]], deadline: float | None = None,
                limit: int = DRAIN_BYTES) -> None:
    """Read and drop the rest of a request body, until its end, ``limit`` bytes or the loop time ``deadline``
    (``None``: the caller's ``receive`` keeps its own)."""
    loop = asyncio.get_running_loop()
    read = 0
    while read <= limit:
        try:
            message = await asyncio.wait_for(receive(), None if deadline is None else max(deadline - loop.time(), 0.001))
        except asyncio.TimeoutError:
            return
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


class Guard:
    def __init__(self, app: Any, state: Any, *, max_body_bytes: int, body_timeout_s: float) -> None:
        self.app = app
        self.state = state
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = scope.get("headers") or []
        length = dict(headers).get(b"content-length", b"").strip()
        if length.isdigit() and int(length) > self.max_body_bytes:
            err = APIError(413, f"the request body is {int(length)} bytes; the limit is {self.max_body_bytes}")
            await drain(receive, asyncio.get_running_loop().time() + self.body_timeout_s)
            await error_response(path, err, close=True)(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        inner = {**scope, "method": "GET", "forge.method": "HEAD"} if head else scope
        metrics = self.state.metrics
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        deadline = loop.time() + self.body_timeout_s
        body_done = not _has_body(headers)
        status: list[int] = []  # set when the response starts
        observed = False

        async def receive_() -> Message:
            nonlocal body_done
            if body_done:  # e.g. a streaming response listening for the client's disconnect
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                raise APIError(408, f"the request body did not arrive within {self.body_timeout_s:g} s") from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        def observe(code: int) -> None:
            nonlocal observed
            if observed:
                return
            observed = True
            route = inner.get("route")
            endpoint = route.path if route is not None else "unmatched"
            metrics.requests.labels(endpoint, str(code)).inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - started)

        async def send_(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                if not body_done:
                    kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                    message = {**message, "headers": [*kept, (b"connection", b"close")]}
            elif message["type"] == "http.response.body":
                last = not message.get("more_body", False)
                if head:
                    message = {**message, "body": b""}
                await send(message)
                if last:
                    observe(status[0] if status else 500)
                return
            await send(message)

        metrics.in_flight.inc()
        try:
            await self.app(inner, receive_, send_)
        except Exception as exc:
            if status:  # the response has begun: closing the connection is the only way left to end it
                observe(500)
                raise
            log.exception("internal error serving %s %s", scope["method"], path)
            err = APIError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")
            await error_response(path, err, close=not body_done)(scope, receive, send_)
        finally:
            metrics.in_flight.dec()
            if not observed:  # the client went away before the last byte
                observe(status[0] if status else 499)
