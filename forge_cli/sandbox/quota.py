"""A hard disk limit for a work directory: a file system of its own, laid over it while a sandbox is open.

Polling a folder's size stops a writer only after the poll, and counting blocks misses files that
take none (a policy made 200,000 empty files under a 10 MiB limit). :class:`WorkdirQuota` gives the
work directory (and any other folder the sandbox names, e.g. its home) a file system of exactly
the limit instead: a sparse ext4 image in the sandbox's own folder, loop-mounted (``nosuid``,
``nodev``), with one inode per :data:`INODE_BYTES` of the limit (:func:`inode_budget`, ext4's
default ratio). The work directory is a bind mount of the image's ``work`` folder at its own path
(so programs inside and out see it where they did, and Docker's bind mount picks it up). A write
past the limit, of blocks or of inodes, fails at once with ``ENOSPC`` — in whatever process makes
it: the agent, an MCP server, the host. :meth:`WorkdirQuota.full` tells a watcher it happened.

:meth:`WorkdirQuota.release` gives the work directory back as a plain folder of the host with what
the image held (copied by :func:`~forge_cli.sandbox.hostfiles.copy_tree`: no FIFO, device or setuid
bit comes out), then unmounts and deletes the image. The mounts are listed in the sandbox's folder
(:data:`MOUNTS_FILE`), so the sweep of a dead owner's folders (:func:`sweep`) can undo them.

It needs root (mounting), loop devices and ``mkfs.ext4`` (Debian's e2fsprogs); :func:`unavailable`
says what is missing, and a sandbox then falls back to polling (``forge doctor`` says which).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Sequence

from forge_cli.errors import ForgeError
from forge_cli.sandbox.hostfiles import clear_setid, copy_tree, remove_tree

INODE_BYTES = 16 * 1024  # one inode per this much of the limit (ext4's default ratio)
MIN_INODES = 256
MOUNTS_FILE = "mounts"  # in the sandbox's folder: one mount point a line, innermost first
_SBIN = "/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin"
_lock = threading.Lock()
_warned = False  # "the disk limit is polled" is said once a process
log = logging.getLogger("forge.sandbox")


def inode_budget(size_bytes: int) -> int:
    """How many files, folders and links a limit of ``size_bytes`` allows (also what polling counts)."""
    return max(MIN_INODES, int(size_bytes) // INODE_BYTES)


def disk_usage(roots: Sequence[Path]) -> tuple[int, int]:
    """(bytes on disk, entries) under ``roots``, links not followed: what polling compares with the limit
    where no quota file system can be mounted."""
    total = entries = 0
    stack = [str(r) for r in roots]
    while stack:
        try:
            with os.scandir(stack.pop()) as found:
                for entry in found:
                    entries += 1
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total, entries


def lay(workdir: Path, folder: Path, size_bytes: int, *, folders: Sequence[str] = ()) -> "WorkdirQuota | None":
    """:meth:`WorkdirQuota.create`, or ``None`` (and one warning a process) where none can be mounted: the
    limit is then polled."""
    why = unavailable()
    if why is None:
        try:
            return WorkdirQuota.create(workdir, folder, size_bytes, folders=folders)
        except (ForgeError, OSError) as exc:
            why = str(exc)
    global _warned
    if not _warned:
        _warned = True
        log.warning("the disk limit is polled: %s (a fast writer can overshoot it between checks)", why)
    return None


def over_limit(fs: "WorkdirQuota | None", roots: Sequence[Path], size_bytes: int | None) -> bool:
    """Whether ``roots`` hold a disk limit of ``size_bytes``' worth: its quota file system ``fs`` is full,
    or (no ``fs``: polled) their size or their number of files is over the limit."""
    if size_bytes is None:
        return False
    if fs is not None:
        return fs.full()
    used, files = disk_usage(roots)
    return used > size_bytes or files > inode_budget(size_bytes)


def _tool(name: str) -> str:
    """Where the system tool ``name`` is (``/sbin`` included), or its bare name when it is nowhere."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{_SBIN}") or name


def _run(argv: Sequence[str]) -> None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ForgeError(f"{Path(argv[0]).name} did not run: {exc}") from None
    if done.returncode != 0:
        raise ForgeError(f"{Path(argv[0]).name} failed: {(done.stderr or done.stdout).strip()[:300]}")


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """``None`` when a quota file system can be made here, else why not (cached; tried once for real)."""
    if os.geteuid() != 0:
        return "not root (mounting a file system of the limit needs root)"
    if any(_tool(name) == name for name in ("mkfs.ext4", "mount", "umount")):
        return "mkfs.ext4, mount or umount is missing (Debian: e2fsprogs, mount)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices here (/dev/loop-control)"
    with tempfile.TemporaryDirectory(prefix="forge-quota-probe-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        try:
            WorkdirQuota.create(work, Path(tmp), 2**20).release()
        except (ForgeError, OSError) as exc:
            return f"a quota file system cannot be mounted here: {exc}"
    return None


def _mount_device(path: Path) -> str | None:
    """``MAJOR:MINOR`` of the file system mounted topmost at ``path`` (from this process's mountinfo), or None."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    needle = str(path).replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")
    found = None
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4 and fields[4] == needle:
            found = fields[2]
    return found


def _mounted(path: Path) -> bool:
    return _mount_device(path) is not None


def _unmount(path: Path) -> None:
    """Unmount ``path`` if something is mounted there (lazily if it is still busy)."""
    if not _mounted(path):
        return
    done = subprocess.run([_tool("umount"), str(path)], capture_output=True, timeout=60)
    if done.returncode != 0 and _mounted(path):
        subprocess.run([_tool("umount"), "-l", str(path)], capture_output=True, timeout=60)


class WorkdirQuota:
    """The file system of one sandbox's limit (see the module's docstring)."""

    def __init__(self, workdir: Path, folder: Path, size_bytes: int, inodes: int) -> None:
        self.workdir, self.folder, self.size_bytes, self.inodes = workdir, folder, size_bytes, inodes
        self.image, self.mountpoint = folder / "disk.img", folder / "disk"
        self._released = False

    @classmethod
    def create(cls, workdir: Path, folder: Path, size_bytes: int, *, folders: Sequence[str] = ()) -> "WorkdirQuota":
        """Lay a file system of ``size_bytes`` over ``workdir`` (what it holds is copied in), its image
        and mount point in ``folder`` (the sandbox's own); ``folders`` are made beside ``work`` in it."""
        workdir = Path(os.path.realpath(workdir))
        quota = cls(workdir, Path(folder), int(size_bytes), inode_budget(size_bytes))
        try:
            quota._mount(folders)
        except BaseException:
            quota.release(keep=False)
            raise
        return quota

    def _mount(self, folders: Sequence[str]) -> None:
        # ext4 without a journal or reserved blocks; the image sparse, so only what is written takes disk
        overhead = self.inodes * 256 + self.size_bytes // 40 + 128 * 1024  # measured: ext4 keeps ~2 % besides its inodes
        with open(self.image, "wb") as fh:
            fh.truncate(self.size_bytes + overhead)
        _run([_tool("mkfs.ext4"), "-q", "-F", "-m", "0", "-N", str(self.inodes), "-b", "4096",
              "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard", str(self.image)])
        self.mountpoint.mkdir(exist_ok=True)
        self._note(self.mountpoint)
        with _lock:  # loop devices are claimed one at a time
            _run([_tool("mount"), "-o", "loop,nosuid,nodev", str(self.image), str(self.mountpoint)])
        shutil.rmtree(self.mountpoint / "lost+found", ignore_errors=True)
        work = self.mountpoint / "work"
        copy_tree(self.workdir, work)
        info = self.workdir.stat()
        os.chown(work, info.st_uid, info.st_gid)
        os.chmod(work, info.st_mode & 0o777)
        for name in folders:
            (self.mountpoint / name).mkdir(mode=0o700)
        self._note(self.workdir)
        _run([_tool("mount"), "--bind", str(work), str(self.workdir)])

    def _note(self, mountpoint: Path) -> None:
        """Record a mount point first (for the sweep), innermost first."""
        path = self.folder / MOUNTS_FILE
        old = path.read_text().splitlines() if path.exists() else []
        path.write_text("\n".join([str(mountpoint), *old]) + "\n")

    def path(self, name: str) -> Path:
        """A folder ``name`` of ``folders`` on the quota's file system."""
        return self.mountpoint / name

    def full(self) -> bool:
        """The limit's bytes are in use, or no inode is left: a write has failed, or the next will. (ext4
        keeps a small reserve: free blocks alone never reach 0.)"""
        try:
            st = os.statvfs(self.mountpoint)
        except OSError:
            return False
        return (st.f_blocks - st.f_bfree) * st.f_frsize >= self.size_bytes or st.f_favail == 0

    def usage(self) -> tuple[int, int]:
        """(bytes, inodes) in use on the quota's file system."""
        st = os.statvfs(self.mountpoint)
        return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree

    def release(self, *, keep: bool = True) -> None:
        """Give the work directory back as a host folder holding what the image held (``keep``), unmount
        and delete the image. Safe to call twice."""
        if self._released:
            return
        self._released = True
        work = self.mountpoint / "work"
        device = _mount_device(self.mountpoint)
        bound = device is not None and _mount_device(self.workdir) == device
        try:
            if bound:
                _unmount(self.workdir)
            if keep and bound and work.is_dir() and _mount_device(self.workdir) != device:
                for entry in os.scandir(self.workdir):  # what was there before (copied in): replaced by the image's
                    if entry.is_dir(follow_symlinks=False):
                        remove_tree(Path(entry.path))
                    else:
                        os.unlink(entry.path)
                copy_tree(work, self.workdir)
                clear_setid(self.workdir)
        finally:  # whatever the copy met, the image goes
            _unmount(self.mountpoint)
            if not _mounted(self.mountpoint):
                self.image.unlink(missing_ok=True)
                try:
                    self.mountpoint.rmdir()
                except OSError:
                    pass
                (self.folder / MOUNTS_FILE).unlink(missing_ok=True)


def sweep(folder: Path) -> None:
    """Undo the mounts a dead sandbox recorded in its ``folder`` (before the folder is deleted): only
    those of its own image, never a mount another sandbox has made at the same path since."""
    disk = folder / "disk"
    device = _mount_device(disk)
    if device is None:
        return
    try:
        points = [Path(p.strip()) for p in (folder / MOUNTS_FILE).read_text().splitlines() if p.strip()]
    except OSError:
        points = []
    for point in points:
        if point != disk and _mount_device(point) == device:
            _unmount(point)
    _unmount(disk)
