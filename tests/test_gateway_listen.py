"""Where the gateway listens: TCP plus a unix socket, stale sockets replaced, clear errors."""

from __future__ import annotations

import socket

import pytest

from forge_cli.errors import ForgeError
from forge_cli.gateway.listen import MAX_UNIX_PATH, open_listeners, socket_path


def test_socket_path_setting(tmp_path):
    assert socket_path("", tmp_path) is None
    assert socket_path("auto", tmp_path) == tmp_path / "gateway.sock"
    assert socket_path(str(tmp_path / "x.sock"), tmp_path) == tmp_path / "x.sock"
    deep = tmp_path / ("d" * 120) / "run-1"
    short = socket_path("auto", deep)  # too long for sun_path: a short one in the temporary folder
    assert len(str(short)) <= MAX_UNIX_PATH and short.name.endswith(".sock")


def test_tcp_and_unix_listeners_replace_a_stale_socket_and_refuse_a_live_one(tmp_path):
    path = tmp_path / "gw.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens: what a killed gateway leaves behind
    listeners = open_listeners("127.0.0.1", 0, path)
    try:
        tcp, unix = listeners
        assert tcp.getsockname()[0] == "127.0.0.1" and unix.getsockname() == str(path)
        with socket.create_connection(tcp.getsockname()[:2]):
            pass
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
        with pytest.raises(ForgeError, match="another process is listening"):
            open_listeners("127.0.0.1", 0, path)
        with pytest.raises(ForgeError, match="cannot listen on 127.0.0.1"):  # the TCP port is taken
            open_listeners("127.0.0.1", tcp.getsockname()[1])
    finally:
        for sock in listeners:
            sock.close()


def test_refuses_a_file_that_is_not_a_socket_and_a_path_too_long(tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("keep me")
    with pytest.raises(ForgeError, match="is not a socket"):
        open_listeners("127.0.0.1", 0, plain)
    assert plain.read_text() == "keep me"
    with pytest.raises(ForgeError, match="longer than a unix socket path"):
        open_listeners("127.0.0.1", 0, tmp_path / ("x" * 120))
    with pytest.raises(ForgeError, match="cannot listen on"):  # its folder cannot be made: a file is in the way
        open_listeners("127.0.0.1", 0, plain / "gw.sock")


def test_the_socket_is_as_reachable_as_the_loopback_port(tmp_path):
    """A sandbox's agent may run under another uid; connecting needs write permission."""
    import stat

    listeners = open_listeners("127.0.0.1", 0, tmp_path / "gw.sock")
    try:
        assert stat.S_IMODE((tmp_path / "gw.sock").stat().st_mode) == 0o666
    finally:
        for sock in listeners:
            sock.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_connections_to_the_tcp_listener_do_not_wait_for_acks(host):
    """Nagle's algorithm off on every accepted connection: asyncio (so uvicorn) turns it off only on a
    socket that says it is TCP, and an accepted one inherits the listener's proto. With proto 0, an
    answer written in two parts (head, then body) waited ~40 ms for the client's delayed ACK on every
    call after a keep-alive connection's first (measured: 337 vs 392 ms a 64-token answer)."""
    import asyncio

    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6")

    async def main() -> int:
        accepted: asyncio.Future = asyncio.get_running_loop().create_future()

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport):
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        [tcp] = open_listeners(host, 0)
        server = await asyncio.get_running_loop().create_server(Protocol, sock=tcp)  # as uvicorn serves them
        try:
            _, writer = await asyncio.open_connection(host, tcp.getsockname()[1])
            nodelay = await accepted
            writer.close()
            return nodelay
        finally:
            server.close()
            await server.wait_closed()

    try:
        assert asyncio.run(main()) != 0
    except OSError as exc:  # no IPv6 loopback on this host
        if host == "::1":
            pytest.skip(f"no IPv6 loopback: {exc}")
        raise
