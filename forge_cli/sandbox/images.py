"""The images of the ``docker`` sandbox, built offline: no registry is ever asked for anything.

:func:`build_images` makes

1. the **base image** (:data:`BASE_IMAGE`): a Debian root file system made by ``debootstrap
   --variant=minbase`` from Debian's package mirror with :data:`BASE_PACKAGES` (python3 for Python
   agents, the forwarder and the verifiers; Node.js for the npm agents; git, which several agents
   call), trimmed of docs and caches, packed into a tarball cached under
   ``$FORGE_HOME/cache/sandbox`` and given to the engine with ``docker import``;
2. every image under ``sandboxes/images/NAME`` (a ``Dockerfile`` that builds ``FROM`` the base,
   ``ARG BASE``), tagged ``forge-NAME:latest``, built with no network.

An image that is already there, made from the same package list (the base) or the same folder
contents (the others), is kept unless ``force``. Agents are never installed into images: the sandbox bind-mounts ``$FORGE_HOME/agents``.
Mistakes the user can fix (no engine, no debootstrap, not root) are :class:`ForgeError`\\ s.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from forge_cli.errors import ForgeError
from forge_cli.paths import data_dir, forge_home
from forge_cli.sandbox.docker import LABEL, OWNER_LABEL, RUN_LABEL, connect, engine_host, owner_alive

BASE_IMAGE = "forge-base:latest"
BASE_SUITE = "bookworm"
BASE_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-pytest", "nodejs", "git", "ca-certificates", "procps")
# What ``docker import`` sets on the base (an imported tarball has no config of its own).
_BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)
_LABEL = "forge.base.packages"
_CONTEXT_LABEL = "forge.image.context"  # on images built from a folder: the digest of its files
# Folders debootstrap leaves that an image does not need (about half the size).
_TRIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuiltImage:
    """One image :func:`build_images` made or found: its tag, whether it was built now, and how long it took."""

    tag: str
    built: bool
    seconds: float


def base_key(packages: tuple[str, ...] = BASE_PACKAGES, suite: str = BASE_SUITE) -> str:
    """A short digest of what goes into the base image (the cache's and the label's key)."""
    return hashlib.sha256(f"{suite} {' '.join(sorted(packages))}".encode()).hexdigest()[:12]


def cache_dir() -> Path:
    """Where the debootstrapped root file systems are kept between builds."""
    return forge_home() / "cache" / "sandbox"


def image_folders() -> dict[str, Path]:
    """``forge-NAME:latest`` → ``sandboxes/images/NAME`` for every folder there with a Dockerfile."""
    root = data_dir("sandboxes") / "images"
    return {f"forge-{d.name}:latest": d for d in sorted(root.iterdir()) if (d / "Dockerfile").is_file()}


def rootfs_tarball(*, force: bool = False, progress: Progress = lambda _: None,
                   packages: tuple[str, ...] = BASE_PACKAGES, suite: str = BASE_SUITE,
                   mirror: str = BASE_MIRROR) -> Path:
    """The cached rootfs tarball for ``packages``, made with debootstrap when missing (or ``force``)."""
    tar = cache_dir() / f"rootfs-{suite}-{base_key(packages, suite)}.tar"
    if tar.is_file() and tar.stat().st_size > 0 and not force:
        progress(f"rootfs cached at {tar}")
        return tar
    if shutil.which("debootstrap") is None:
        raise ForgeError("debootstrap is not installed: run scripts/system-deps.sh as root "
                         "(Debian: apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise ForgeError("building the base image runs debootstrap, which needs root")
    tar.parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="rootfs-", dir=tar.parent))
    log = tar.parent / "debootstrap.log"
    try:
        progress(f"debootstrap --variant=minbase {suite} with {', '.join(packages)} (about a minute)")
        with log.open("wb") as out:
            done = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(root), mirror],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        if done.returncode != 0:
            last = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:] or ["?"]
            raise ForgeError(f"debootstrap failed (exit {done.returncode}; see {log}): {last[0][:200]}")
        for rel in _TRIM:
            for child in (root / rel).glob("*"):
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        locale = root / "usr/share/locale"
        for child in locale.glob("*"):
            if child.name != "locale.alias":
                shutil.rmtree(child, ignore_errors=True)
        progress("packing the root file system")
        partial = tar.with_suffix(".tar.partial")
        subprocess.run(
            ["tar", "-C", str(root), "--numeric-owner", "--exclude=./dev/*", "--exclude=./proc/*",
             "--exclude=./sys/*", "-cf", str(partial), "."],
            check=True, stdin=subprocess.DEVNULL,
        )
        partial.replace(tar)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tar


def _has_image(client: Any, tag: str, label: str, value: str) -> bool:
    """Is ``tag`` there, made from what ``value`` digests (its ``label``)?"""
    import docker.errors

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(label) == value


def folder_key(folder: Path) -> str:
    """A short digest of a build folder's files (an image is rebuilt when they change)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def build_base(client: Any, *, force: bool = False, progress: Progress = lambda _: None) -> BuiltImage:
    """:data:`BASE_IMAGE` from the cached (or freshly debootstrapped) rootfs, unless it is already there."""
    key = base_key()
    if not force and _has_image(client, BASE_IMAGE, _LABEL, key):
        return BuiltImage(BASE_IMAGE, False, 0.0)
    start = time.monotonic()
    tar = rootfs_tarball(force=force, progress=progress)
    progress(f"docker import {tar.name} → {BASE_IMAGE}")
    repository, tag = BASE_IMAGE.split(":")
    client.api.import_image_from_file(str(tar), repository=repository, tag=tag,
                                      changes=[*_BASE_CHANGES, f"LABEL {_LABEL}={key}"])
    if not _has_image(client, BASE_IMAGE, _LABEL, key):
        raise ForgeError(f"docker import did not produce {BASE_IMAGE}")
    return BuiltImage(BASE_IMAGE, True, time.monotonic() - start)


def build_folder(client: Any, tag: str, folder: Path, *, force: bool = False,
                 progress: Progress = lambda _: None) -> BuiltImage:
    """``tag`` from ``folder``'s Dockerfile, ``FROM`` the base (build argument ``BASE``), with no network."""
    key = folder_key(folder)
    if not force and _has_image(client, tag, _CONTEXT_LABEL, key):
        return BuiltImage(tag, False, 0.0)
    start = time.monotonic()
    progress(f"docker build {folder.name} → {tag}")
    error = None
    for chunk in client.api.build(path=str(folder), tag=tag, rm=True, forcerm=True, pull=False, decode=True,
                                  network_mode="none", buildargs={"BASE": BASE_IMAGE}, nocache=force,
                                  labels={_CONTEXT_LABEL: key}):
        if "error" in chunk:
            error = str(chunk["error"]).strip()
        elif (line := str(chunk.get("stream", "")).strip()).startswith("Step "):
            progress(f"{tag}: {line}")
    if error:
        raise ForgeError(f"building {tag} from {folder} failed: {error}")
    return BuiltImage(tag, True, time.monotonic() - start)


def build_images(*, force: bool = False, only_base: bool = False, progress: Progress = lambda _: None) -> list[BuiltImage]:
    """The base image, then every image under ``sandboxes/images`` (see the module's docstring)."""
    client = connect()
    try:
        done = [build_base(client, force=force, progress=progress)]
        if not only_base:
            for tag, folder in image_folders().items():
                done.append(build_folder(client, tag, folder, force=force, progress=progress))
        return done
    finally:
        client.close()


def engine_status() -> dict[str, Any]:
    """What ``forge sandbox status`` shows: the engine (host, version), Forge's images and its sandbox containers."""
    client = connect(5)
    try:
        version = client.version()
        images = {}
        for tag in [BASE_IMAGE, *image_folders()]:
            try:
                image = client.images.get(tag)
                images[tag] = {"id": image.short_id, "size_mb": round(image.attrs.get("Size", 0) / 2**20)}
            except Exception:
                images[tag] = None
        containers = [
            {"name": c.name, "status": c.status, "run": c.labels.get(RUN_LABEL, ""),
             "owner_alive": owner_alive(c.labels.get(OWNER_LABEL, ""))}
            for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"})
        ]
    finally:
        client.close()
    return {"host": engine_host(), "version": version.get("Version"), "images": images, "containers": containers}
