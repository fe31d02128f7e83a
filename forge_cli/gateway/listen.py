"""Where the gateway listens: TCP and, at the same time, a unix socket (DESIGN.md §3).

Sandboxed agents have no network; the socket is bind-mounted into their sandbox behind a loopback
forwarder, so they still see ``http://127.0.0.1:PORT``. Both listeners serve the same app, with the
same auth: an API key names the trajectory whichever way the request came in.
"""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from pathlib import Path

from forge_cli.errors import ForgeError

MAX_UNIX_PATH = 107  # sun_path holds 108 bytes, one of them the terminating NUL


def socket_path(setting: str, run_dir: Path) -> Path | None:
    """``gateway.socket``: ``""`` → none; ``"auto"`` → ``RUN/gateway.sock``, or a short path in the
    temporary folder when that one is too long for a unix socket; anything else is the path."""
    if not setting:
        return None
    if setting != "auto":
        return Path(setting).expanduser().absolute()
    path = (run_dir / "gateway.sock").absolute()
    if len(os.fsencode(path)) <= MAX_UNIX_PATH:
        return path
    return Path(tempfile.gettempdir()) / f"forge-{os.getpid()}-{run_dir.name[:40]}.sock"


def open_listeners(host: str, port: int, unix_path: Path | None = None, backlog: int = 2048, *,
                   listen: bool = True) -> list[socket.socket]:
    """Bound sockets, ``[tcp]`` or ``[tcp, unix]``, listening unless ``listen=False``: bound only, they
    hold the address (a port in use fails now) while connecting to them is refused at once — the
    server that serves them listens when it is ready. A stale socket file (nobody listening) is
    replaced; a live one, or any other file at the path, is an error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off only on connections whose socket says it is
    # TCP, and an accepted one inherits the listener's proto — with 0, every answer written in two parts
    # (head, body) waited ~40 ms for the client's delayed ACK on a keep-alive connection
    tcp = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((host, port))
        if listen:
            tcp.listen(backlog)
    except OSError as exc:
        tcp.close()
        raise ForgeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    if unix_path is None:
        return [tcp]
    try:
        return [tcp, _unix_listener(unix_path, backlog, listen)]
    except BaseException:
        tcp.close()
        raise


def _unix_listener(path: Path, backlog: int, listen: bool = True) -> socket.socket:
    if len(os.fsencode(path)) > MAX_UNIX_PATH:
        raise ForgeError(f"gateway.socket: {path} is longer than a unix socket path may be ({MAX_UNIX_PATH} bytes)")
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ForgeError(f"gateway.socket: {path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(str(path)) == 0:
                raise ForgeError(f"gateway.socket: another process is listening on {path}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path.unlink(missing_ok=True)  # stale: left by a gateway that did not exit cleanly
        path.parent.mkdir(parents=True, exist_ok=True)
        sock.bind(str(path))
        # as reachable as the loopback TCP port (any local user): a sandbox's agent may run under
        # another uid, and connecting needs write permission; API keys still decide what it may do
        os.chmod(path, 0o666)
        if listen:
            sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ForgeError(f"gateway.socket: cannot listen on {path}: {exc.strerror or exc}") from None
    return sock

