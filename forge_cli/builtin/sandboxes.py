"""Built-in sandboxes: ``local`` (a subprocess with limits) and ``docker`` (the Docker SDK)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from forge_cli import hookimpl
from forge_cli.paths import agents_dir
from forge_cli.sandbox.docker import DockerOptions, DockerSandbox, image_problem
from forge_cli.sandbox.local import LocalSandbox
from forge_cli.specs import SandboxSpec


class LocalOptions(BaseModel):
    """``[sandboxes.local]``: how a local sandbox isolates its programs and the limits they run under."""

    model_config = ConfigDict(extra="forbid")

    isolation: Literal["auto", "bwrap", "none"] = Field("auto", description=(
        "auto: bubblewrap where it works (read-only system, no network but the gateway), else a plain subprocess "
        "and one warning; bwrap: bubblewrap or an error; none: a plain subprocess."))
    memory_mb: int | None = Field(None, gt=0, description=(
        "Memory limit in MiB: per process (RLIMIT_AS) and, where a cgroup can be made, for the whole tree; none if unset."))
    cpu_time_s: float | None = Field(None, gt=0, description="CPU-time limit per process, in seconds (RLIMIT_CPU); none if unset.")
    processes: int | None = Field(512, gt=0, description=(
        "Processes and threads at once (a pids cgroup; RLIMIT_NPROC for a non-root user); reaching it ends the program."))
    open_files: int | None = Field(4096, gt=0, description="Open files per process (RLIMIT_NOFILE).")
    disk_mb: int | None = Field(4096, gt=0, description=(
        "What it may write into its work directory and home, in MiB (checked while it runs; RLIMIT_FSIZE per file)."))
    tmp_mb: int = Field(512, gt=0, description="Size of the private /tmp (and /dev/shm) under bubblewrap, in MiB.")
    grace_s: float = Field(1.0, ge=0, description="Seconds between SIGTERM and SIGKILL when a program reaches its deadline.")
    user: str = Field("auto", pattern=r"^(auto|self|\d+(:\d+)?)$", description=(
        "Who programs run as inside bubblewrap: auto = nobody (65534) when Forge runs as root, else Forge's own user; "
        "self = Forge's own user (root's files shown read-only are then readable inside); or UID:GID (root only)."))


def local_check() -> str | None:
    """The local sandbox works everywhere: with bubblewrap's isolation where that works, else as a
    plain subprocess (``forge doctor`` says which)."""
    return None


def open_local(workdir: Path, options: Any = None, gateway: Any = None) -> "LocalSandbox":
    """A :class:`~forge_cli.sandbox.local.LocalSandbox` on ``workdir`` with ``[sandboxes.local]``'s limits
    (``gateway``, a :class:`~forge_cli.sandbox.contract.GatewayAccess`, is what a bubblewrap sandbox forwards)."""
    opts = options if isinstance(options, LocalOptions) else LocalOptions(**(options or {}))
    mib = {k: (v * 2**20 if v is not None else None) for k, v in
           (("memory", opts.memory_mb), ("disk", opts.disk_mb), ("tmp", opts.tmp_mb))}
    return LocalSandbox(workdir, memory_bytes=mib["memory"], cpu_time_s=opts.cpu_time_s, grace_s=opts.grace_s,
                        isolation=opts.isolation, gateway=gateway, processes=opts.processes,
                        open_files=opts.open_files, disk_bytes=mib["disk"], tmp_bytes=int(mib["tmp"] or 0),
                        read_only=(agents_dir(),), user=opts.user)


def docker_check() -> str | None:
    """Usable when a Docker engine answers (``$DOCKER_HOST``, the system socket, or the one
    ``scripts/docker-engine.sh`` starts) and the sandbox image is built."""
    return image_problem()


def open_docker(workdir: Path, options: Any = None, gateway: Any = None) -> "DockerSandbox":
    """A :class:`~forge_cli.sandbox.docker.DockerSandbox` on ``workdir`` with ``[sandboxes.docker]``'s
    image and limits; ``gateway`` is reached inside at ``http://127.0.0.1:PORT``."""
    opts = options if isinstance(options, DockerOptions) else DockerOptions(**(options or {}))
    return DockerSandbox(workdir, opts, gateway=gateway)


def _docker_options() -> type[BaseModel]:
    return DockerOptions


def bubblewrap_path() -> str | None:
    return shutil.which("bwrap")


@hookimpl
def register_sandboxes(register: Callable[[SandboxSpec], None]) -> None:
    register(
        SandboxSpec(
            name="local",
            description="A subprocess in its own working folder, session and clean environment, with wall-time, memory, "
            "CPU, process, file and disk limits; inside bubblewrap where installed (read-only system, private /tmp, "
            "no network but the gateway's socket).",
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
