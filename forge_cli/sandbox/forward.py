"""The loopback forwarder: ``127.0.0.1:PORT`` inside a sandbox → the gateway's unix socket.

A sandbox with a network namespace of its own (bubblewrap's ``--unshare-net``, a container with no
network) has only ``lo``; the gateway's unix socket is bind-mounted in instead. This script runs
there, in front of the agent::

    python3 forward.py --port PORT --socket SOCK [--status FILE] [--user UID:GID] -- CMD ARGS...

It listens on ``127.0.0.1:PORT``, forwards every connection both ways to the unix socket ``SOCK``
(bytes as they are: HTTP, streaming and keep-alive included), starts ``CMD`` once it listens, passes
the signals it gets (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2) on to ``CMD``, and exits with
``CMD``'s exit status (ending itself by signal ``N`` when ``N`` ended ``CMD``) as soon as ``CMD`` ends, which stops
the forwarding (``--status FILE`` also writes that status there, ``-N`` for signal ``N``: bubblewrap
itself reports only ``128 + N``; without ``--port``/``--socket`` it forwards nothing; ``--user`` runs
``CMD`` as that user, after which this process holds no capability). It needs only the standard library of any python3 >= 3.9 and never imports
``forge_cli``: it is copied or bind-mounted into sandboxes as a single file (:data:`PATH`).
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

PATH = Path(__file__).resolve()  # the file sandboxes run (only meaningful when imported on the host)
CHUNK = 64 * 1024
PASSED_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def _pump(client: socket.socket, upstream: socket.socket) -> None:
    """Copy bytes both ways between two connected sockets until both directions are closed."""
    sel = selectors.DefaultSelector()
    sel.register(client, selectors.EVENT_READ, upstream)
    sel.register(upstream, selectors.EVENT_READ, client)
    open_ends = 2
    try:
        while open_ends:
            for key, _ in sel.select():
                src, dst = key.fileobj, key.data
                try:
                    data = src.recv(CHUNK)  # type: ignore[union-attr]
                except OSError:
                    data = b""
                if data:
                    try:
                        dst.sendall(data)
                        continue
                    except OSError:
                        return
                # this direction is done: tell the other side, stop reading it
                sel.unregister(src)
                open_ends -= 1
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
    finally:
        sel.close()
        client.close()
        upstream.close()


def _serve_one(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError as exc:
        sys.stderr.write(f"forward.py: cannot reach the gateway's socket {socket_path}: {exc}\n")
        upstream.close()
        client.close()
        return
    _pump(client, upstream)


def listen(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on ``host:port`` (``SO_REUSEADDR``; ``port`` 0: any free port)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(128)
    return server


def serve(server: socket.socket, socket_path: str) -> None:
    """Accept connections on ``server`` forever, each forwarded to ``socket_path`` in a thread."""
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            return  # closed: stop
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve_one, args=(client, socket_path), daemon=True).start()


def drop_capabilities() -> None:
    """Give up every capability this process holds (it needed CAP_SETUID/CAP_SETGID only to start CMD as
    another user): ``capset`` with empty sets, best effort."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)())  # _LINUX_CAPABILITY_VERSION_3
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forward.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, help="loopback port to listen on (with --socket)")
    parser.add_argument("--socket", help="the unix socket to forward to")
    parser.add_argument("--status", help="also write CMD's exit status here (-N: signal N), for a caller that "
                        "sees only 128 + N")
    parser.add_argument("--user", help="UID:GID to run CMD as (this process keeps its own, with no capability "
                        "once CMD has started)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if (args.port is None) != (args.socket is None):
        parser.error("give --port and --socket together")
    server = None
    if args.port is not None:
        try:
            server = listen(args.port)
        except OSError as exc:
            sys.stderr.write(f"forward.py: cannot listen on 127.0.0.1:{args.port}: {exc}\n")
            return 125
        threading.stack_size(512 * 1024)  # many connections under a tight address-space limit
        threading.Thread(target=serve, args=(server, args.socket), daemon=True).start()
    ids = {}
    if args.user:
        uid, _, gid = args.user.partition(":")
        ids = {"user": int(uid), "group": int(gid or uid), "extra_groups": []}
    try:
        child = subprocess.Popen(command, **ids)
    except OSError as exc:
        sys.stderr.write(f"forward.py: cannot start {command[0]!r}: {exc.strerror or exc}\n")
        return 127
    if ids:
        drop_capabilities()

    def pass_on(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except OSError:
            pass

    for name in PASSED_SIGNALS:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), pass_on)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for old pythons
            continue
    if server is not None:
        server.close()
    if args.status:
        try:
            with open(args.status, "w") as fh:
                fh.write(str(code))
        except OSError:
            pass
    if code < 0:  # a signal ended it: end the same way, so the caller sees the same status
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal that does not end a process (it was caught elsewhere): the shell's code
    return code


if __name__ == "__main__":
    sys.stdout.flush()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the pump threads are daemons: do not wait for open connections
