"""Built-in sandboxes: ``local`` (a subprocess with limits) and ``docker`` (the Docker SDK)."""

from __future__ import annotations

import os
import shutil
from typing import Callable

from forge_cli import hookimpl
from forge_cli.specs import SandboxSpec


def local_check() -> str | None:
    """The local sandbox works everywhere; without bubblewrap it cannot cut the network off."""
    return None


def docker_check() -> str | None:
    """Usable when a Docker engine answers at ``$DOCKER_HOST`` (or the default socket)."""
    try:
        import docker  # heavy-ish; imported only when asked
    except ImportError:
        return "the 'docker' Python package is not installed"
    try:
        client = docker.from_env(timeout=3)
        client.ping()
        client.close()
    except Exception as exc:  # the SDK raises several unrelated types
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        return f"no Docker engine answers at {host} ({type(exc).__name__})"
    return None


def bubblewrap_path() -> str | None:
    return shutil.which("bwrap")


@hookimpl
def register_sandboxes(register: Callable[[SandboxSpec], None]) -> None:
    register(
        SandboxSpec(
            name="local",
            description="A subprocess in its own working folder with time and resource limits; "
            "no network where bubblewrap is available.",
            check=local_check,
        )
    )
    register(
        SandboxSpec(
            name="docker",
            description="A container per trajectory through the Docker SDK; the gateway's unix socket is bind-mounted.",
            check=docker_check,
        )
    )
