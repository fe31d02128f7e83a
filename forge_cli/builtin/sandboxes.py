"""Built-in sandboxes: ``local`` (a subprocess with limits) and ``docker`` (the Docker SDK)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from forge_cli import hookimpl
from forge_cli.specs import SandboxSpec

if TYPE_CHECKING:
    from forge_cli.sandbox.local import LocalSandbox


class LocalOptions(BaseModel):
    """``[sandboxes.local]``: the limits every program of a local sandbox runs under by default."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int | None = Field(None, gt=0, description="Address-space limit per process, in MiB (RLIMIT_AS); none if unset.")
    cpu_time_s: float | None = Field(None, gt=0, description="CPU-time limit per process, in seconds (RLIMIT_CPU); none if unset.")
    grace_s: float = Field(1.0, ge=0, description="Seconds between SIGTERM and SIGKILL when a program reaches its deadline.")


def local_check() -> str | None:
    """The local sandbox works everywhere (it isolates nothing but the process group and its limits)."""
    return None


def open_local(workdir: Path, options: Any = None, gateway: Any = None) -> "LocalSandbox":
    """A :class:`~forge_cli.sandbox.local.LocalSandbox` on ``workdir`` with ``[sandboxes.local]``'s limits
    (``gateway``, a :class:`~forge_cli.sandbox.base.GatewayAccess`, is what a bubblewrap sandbox forwards)."""
    from forge_cli.sandbox.local import LocalSandbox

    opts = options if isinstance(options, LocalOptions) else LocalOptions(**(options or {}))
    memory = opts.memory_mb * 2**20 if opts.memory_mb is not None else None
    return LocalSandbox(workdir, memory_bytes=memory, cpu_time_s=opts.cpu_time_s, grace_s=opts.grace_s)


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
            description="A subprocess in its own working folder, session and clean environment, with wall-time, "
            "memory and CPU-time limits; no other isolation yet.",
            check=local_check,
            options=LocalOptions,
            open=open_local,
        )
    )
    register(
        SandboxSpec(
            name="docker",
            description="A container per trajectory through the Docker SDK; the gateway's unix socket is bind-mounted.",
            check=docker_check,
        )
    )
