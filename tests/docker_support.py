"""What the docker sandbox's tests share: a real engine (skipped, with the reason, only where none
answers — CI starts one with scripts/docker-engine.sh) with the sandbox image built."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def docker_engine() -> Any:
    """A ``docker.DockerClient`` on the engine Forge uses, with ``forge-agent-base`` built (built now if missing)."""
    from forge_cli.errors import ForgeError
    from forge_cli.sandbox.docker import DEFAULT_IMAGE, connect, image_problem

    try:
        client = connect(10)
    except ForgeError as exc:
        pytest.skip(f"no Docker engine answers: {exc}")
    if image_problem(DEFAULT_IMAGE) is not None:  # an engine without the image: build it (the rootfs is cached)
        from forge_cli.sandbox.images import build_images

        build_images()
    yield client
    client.close()


def sandbox_containers(client: Any) -> list[Any]:
    """Every container of a Forge sandbox the engine holds, running or not."""
    from forge_cli.sandbox.docker import LABEL

    return client.containers.list(all=True, filters={"label": f"{LABEL}=1"})


def exists(client: Any, cid: str | None) -> bool:
    """Does the engine still hold container ``cid``?"""
    import docker.errors

    if cid is None:
        return False
    try:
        client.containers.get(cid)
    except docker.errors.NotFound:
        return False
    return True


def sandbox_spec(request: Any, backend: str) -> Any:
    """The registry's ``SandboxSpec`` of ``backend`` (``local`` in bubblewrap, or ``docker`` on a real engine),
    the test skipped with the reason where that backend does not work here."""
    from forge_cli.plugins import get_registry
    from forge_cli.sandbox.bwrap import unavailable

    if backend == "docker":
        request.getfixturevalue("docker_engine")
    elif unavailable() is not None:
        pytest.skip(f"no bubblewrap sandbox here: {unavailable()}")
    return get_registry().sandboxes[backend].value
