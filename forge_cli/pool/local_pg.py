"""A throwaway PostgreSQL server on 127.0.0.1, for tests and benchmarks.

Uses Debian's server binaries (``/usr/lib/postgresql/<v>/bin``); as root, the server runs as the
``postgres`` user (initdb refuses root). Everything lives in one temporary folder, removed on exit.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from forge_cli.errors import ForgeError


def server_bindir() -> Path | None:
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[-3]))
    return Path(bins[-1]).parent if bins else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def throwaway_postgres(max_connections: int = 60) -> Iterator[str]:
    """Start a fresh cluster, yield its URL (user ``forge``, trust auth on loopback), stop and delete it."""
    bindir = server_bindir()
    if bindir is None:
        raise ForgeError("PostgreSQL server binaries are missing (apt-get install postgresql, or scripts/system-deps.sh)")
    # not under a 0700 root-owned tree: the server may run as 'postgres'
    base = Path(tempfile.mkdtemp(prefix="forge-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        for path in (base, sock):
            shutil.chown(path, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    try:
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "forge", "--no-sync"],
                       check=True, capture_output=True)
        opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c max_connections={max_connections}"
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-o", opts, "-w", "start"],
                       check=True, capture_output=True)
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(base, ignore_errors=True)
        raise ForgeError(f"could not start a PostgreSQL server: {exc.stderr.decode(errors='replace').strip()[-300:]}") from None
    try:
        yield f"postgresql://forge@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
