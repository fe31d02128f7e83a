"""Built-in sandboxes: ``local`` (a subprocess with limits) and ``docker`` (the Docker SDK)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from forge_cli import hookimpl
from forge_cli.specs import SandboxSpec

if TYPE_CHECKING:
    from forge_cli.sandbox.docker import DockerSandbox
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
    """Usable when a Docker engine answers (``$DOCKER_HOST``, the system socket, or the one
    ``scripts/docker-engine.sh`` starts) and the sandbox image is built."""
    from forge_cli.sandbox.docker import image_problem

    return image_problem()


def open_docker(workdir: Path, options: Any = None, gateway: Any = None) -> "DockerSandbox":
    """A :class:`~forge_cli.sandbox.docker.DockerSandbox` on ``workdir`` with ``[sandboxes.docker]``'s
    image and limits; ``gateway`` is reached inside at ``http://127.0.0.1:PORT``."""
    from forge_cli.sandbox.docker import DockerOptions, DockerSandbox

    opts = options if isinstance(options, DockerOptions) else DockerOptions(**(options or {}))
    return DockerSandbox(workdir, opts, gateway=gateway)


def _docker_options() -> type[BaseModel]:
    from forge_cli.sandbox.docker import DockerOptions  # light: the SDK is imported only when a sandbox starts

    return DockerOptions


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
            description="A container per trajectory (Docker SDK, offline images from `forge sandbox build`): no network "
            "but the gateway's bind-mounted unix socket, read-only root, memory/pids/CPU limits, always removed.",
            check=docker_check,
            options=_docker_options(),
            open=open_docker,
        )
    )
