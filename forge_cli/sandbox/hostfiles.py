"""Host-side access to files a sandboxed program could have planted: read and copied without trusting them.

Whatever the agent leaves in its work directory is the adversary's: a FIFO that blocks the reader
forever, a link to a host file, a sparse file of a terabyte, a setuid program. The host touches
such files only through these functions:

- :func:`read_regular` opens a path only after resolving it inside its root, then walks the
  resolved path one component at a time without following a link (a folder swapped for a link in
  between is refused), opens the file non-blocking, and reads it only if it is a regular file no
  larger than ``max_bytes`` (by its size, before any byte is read: a sparse file counts whole);
- :func:`copy_tree` copies folders, regular files (the same way, holes kept: a sparse file stays
  sparse) and links (as links, never followed); FIFOs, sockets and device nodes are left out; no
  setuid/setgid/sticky bit survives;
- :func:`write_regular` writes a file the same way (no link followed on the way or at the end);
- :func:`clear_setid` takes the setuid and setgid bits off every file under a folder.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
from pathlib import Path, PurePosixPath

from forge_cli.errors import ForgeError

MAX_READ_BYTES = 16 * 2**20  # what a host-side read of a sandbox file takes at most, by default
_CHUNK = 1 << 20


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def resolve_inside(root: Path, path: str) -> Path:
    """``path`` (relative, POSIX-style) resolved inside ``root``; a ForgeError if it is absolute, has
    ``..`` or would leave ``root`` through a link."""
    rel = PurePosixPath(path)
    if not path or "\x00" in path or rel.is_absolute() or ".." in rel.parts:
        raise ForgeError(f"sandbox path {path!r} must be relative to the work directory and stay inside it")
    real_root = Path(os.path.realpath(root))
    target = Path(os.path.realpath(real_root / rel))
    if target != real_root and real_root not in target.parents:
        raise ForgeError(f"sandbox path {path!r} leaves the work directory {root} (through a link)")
    return target


def _open_nofollow(root: Path, target: Path, *, folder: bool = False) -> int:
    """An fd of ``target`` (a resolved path under the resolved ``root``), opened component by
    component with ``O_NOFOLLOW``; the last one read-only and non-blocking (``folder``: as a folder)."""
    parts = target.relative_to(root).parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1 and not folder
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK | os.O_NOCTTY if last else os.O_DIRECTORY)
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_regular(root: Path, path: str, *, max_bytes: int = MAX_READ_BYTES, truncate: bool = False) -> bytes:
    """The bytes of the regular file ``path`` under ``root`` (see the module's docstring). A file larger
    than ``max_bytes`` is a ForgeError, or (``truncate``) its first ``max_bytes`` bytes."""
    real_root = Path(os.path.realpath(root))
    target = resolve_inside(real_root, path)
    try:
        fd = _open_nofollow(real_root, target)
    except OSError as exc:
        why = "it is a link or was replaced by one" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else \
            (exc.strerror or str(exc))
        raise ForgeError(f"cannot read {path!r}: {why}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ForgeError(f"cannot read {path!r}: it is not a regular file ({_kind(info.st_mode)})")
        if info.st_size > max_bytes and not truncate:
            raise ForgeError(f"cannot read {path!r}: it is {_size(info.st_size)}, more than the {_size(max_bytes)} "
                             "a host-side read takes")
        os.set_blocking(fd, True)
        chunks, left = [], min(info.st_size, max_bytes) if not truncate else max_bytes
        while left > 0:
            chunk = os.read(fd, min(_CHUNK, left))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_regular(root: Path, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` under ``root`` (folders made as needed), never through a link: the
    folders are opened one at a time without following one, and a link (or anything but a regular
    file) standing at ``path`` is replaced, not written through."""
    real_root = Path(os.path.realpath(root))
    target = resolve_inside(real_root, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = _open_nofollow(real_root, target.parent, folder=True)
    try:
        try:
            if not stat.S_ISREG(os.lstat(target.name, dir_fd=folder).st_mode):
                os.unlink(target.name, dir_fd=folder)  # a link, FIFO or device: gone, not followed (a folder: EISDIR)
        except FileNotFoundError:
            pass
        fd = os.open(target.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o644, dir_fd=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    finally:
        os.close(folder)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a link")):
        if test(mode):
            return name
    return "not a file"


MAX_DEPTH = 128  # folders deeper than this under a copied or walked root are left out
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def copy_tree(src: Path, dest: Path) -> None:
    """Copy ``src`` (a folder or a file) to ``dest`` as the module's docstring says; ``dest``'s parents are made.

    Every step goes through folder descriptors (``openat`` without following links), so no path is
    resolved twice and no path is too long; a hard link is made again as a hard link (a file linked 65,000
    times is copied once); folders past :data:`MAX_DEPTH` and entries that cannot be read are left out."""
    src, dest = Path(src), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    src_parent = os.open(src.parent, _DIR_FLAGS)
    dest_parent = os.open(dest.parent, _DIR_FLAGS)
    try:
        _copy_at(src_parent, src.name, dest_parent, (dest.name,), os.lstat(src), _Copy(dest_parent))
    finally:
        os.close(src_parent)
        os.close(dest_parent)


class _Copy:
    """One :func:`copy_tree`: the destination's parent folder (``top``, open throughout) and the first copy
    of each file with several names, as its path from ``top``."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.linked: dict[tuple[int, int], str] = {}


def _copy_at(src_dir: int, name: str, dest_dir: int, dest: tuple[str, ...], info: os.stat_result, job: _Copy) -> None:
    """Copy the entry ``name`` of the folder ``src_dir`` to ``dest[-1]`` in ``dest_dir`` (``dest``: its path
    from ``job.top``)."""
    mode, dest_name = info.st_mode, dest[-1]
    if stat.S_ISDIR(mode):
        if len(dest) > MAX_DEPTH:
            return
        _replace_non_folder(dest_dir, dest_name)
        src_fd = os.open(name, _DIR_FLAGS, dir_fd=src_dir)
        try:
            dest_fd = os.open(dest_name, _DIR_FLAGS, dir_fd=dest_dir)
            try:
                for entry in os.scandir(src_fd):
                    try:
                        _copy_at(src_fd, entry.name, dest_fd, (*dest, entry.name), entry.stat(follow_symlinks=False),
                                 job)
                    except OSError:
                        continue  # gone, replaced, not readable, a path too long to link: left out
                os.fchmod(dest_fd, stat.S_IMODE(mode) & 0o777)
            finally:
                os.close(dest_fd)
        finally:
            os.close(src_fd)
    elif stat.S_ISLNK(mode):
        _unlink_at(dest_dir, dest_name)
        os.symlink(os.readlink(name, dir_fd=src_dir), dest_name, dir_fd=dest_dir)
    elif stat.S_ISREG(mode):
        _unlink_at(dest_dir, dest_name)
        key = (info.st_dev, info.st_ino)
        if info.st_nlink > 1 and key in job.linked:  # another name of a file already copied
            os.link(job.linked[key], dest_name, src_dir_fd=job.top, dst_dir_fd=dest_dir, follow_symlinks=False)
            return
        _copy_file_at(src_dir, name, dest_dir, dest_name, info)
        if info.st_nlink > 1:
            job.linked[key] = "/".join(dest)
    # a FIFO, socket or device node: not copied


def _replace_non_folder(dest_dir: int, name: str) -> None:
    """Make ``name`` in ``dest_dir`` a folder: what else stands there (a link, a file) is removed, never followed."""
    try:
        if stat.S_ISDIR(os.lstat(name, dir_fd=dest_dir).st_mode):
            return
        os.unlink(name, dir_fd=dest_dir)
    except FileNotFoundError:
        pass
    os.mkdir(name, 0o700, dir_fd=dest_dir)


def _unlink_at(dest_dir: int, name: str) -> None:
    try:
        if stat.S_ISDIR(os.lstat(name, dir_fd=dest_dir).st_mode):
            raise IsADirectoryError(name)  # a folder where a file goes: this entry is left out
        os.unlink(name, dir_fd=dest_dir)
    except FileNotFoundError:
        pass


def _copy_file_at(src_dir: int, name: str, dest_dir: int, dest_name: str, info: os.stat_result) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return  # replaced by something else since the listing
        os.set_blocking(fd, True)
        out = os.open(dest_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=dest_dir)
        try:
            _copy_data(fd, out, os.fstat(fd).st_size)
            os.fchmod(out, stat.S_IMODE(info.st_mode) & 0o777)
            os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _copy_data(src: int, dest: int, size: int) -> None:
    """Copy the data of ``src`` to ``dest`` hole by hole: a sparse file stays sparse (a 1 TiB file of one
    written byte takes one block here too, not a terabyte of zeros)."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(src, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            raise
        end = min(os.lseek(src, start, os.SEEK_HOLE), size)
        os.lseek(src, start, os.SEEK_SET)
        os.lseek(dest, start, os.SEEK_SET)
        left = end - start
        while left > 0 and (chunk := os.read(src, min(_CHUNK, left))):
            os.write(dest, chunk)
            left -= len(chunk)
        pos = end
    os.ftruncate(dest, size)


def clear_setid(root: Path) -> int:
    """Take the setuid and setgid bits off every regular file and folder under ``root`` (links are not
    followed, folders past :data:`MAX_DEPTH` not entered); how many had one."""
    cleared = 0
    try:
        stack = [(os.open(root, _DIR_FLAGS), 0)]
    except OSError:
        return 0
    while stack:
        folder, depth = stack.pop()
        try:
            for entry in os.scandir(folder):
                try:
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISLNK(info.st_mode):
                        continue
                    is_dir = stat.S_ISDIR(info.st_mode)
                    if not (info.st_mode & (stat.S_ISUID | stat.S_ISGID) or (is_dir and depth < MAX_DEPTH)):
                        continue
                    fd = os.open(entry.name, (_DIR_FLAGS if is_dir else os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                                              | os.O_CLOEXEC), dir_fd=folder)
                except OSError:
                    continue  # gone, or replaced by a link
                mode = os.fstat(fd).st_mode
                if mode & (stat.S_ISUID | stat.S_ISGID):
                    os.fchmod(fd, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
                    cleared += 1
                if stat.S_ISDIR(mode) and depth < MAX_DEPTH:
                    stack.append((fd, depth + 1))
                else:
                    os.close(fd)
        except OSError:
            pass
        finally:
            os.close(folder)
    return cleared


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything under it, however deep (``shutil.rmtree`` recurses in Python and
    gives up on a deep enough tree: then ``rm -rf``); a missing path is nothing to do."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, timeout=600)


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Give ``root`` and everything under it (links themselves, never their targets; folders to
    :data:`MAX_DEPTH`) to ``uid:gid``: the work directory handed to a sandbox's user, or given back."""
    try:
        os.chown(root, uid, gid, follow_symlinks=False)
        stack = [(os.open(root, _DIR_FLAGS), 0)]
    except OSError:
        return
    while stack:
        folder, depth = stack.pop()
        try:
            for entry in os.scandir(folder):
                try:
                    os.chown(entry.name, uid, gid, dir_fd=folder, follow_symlinks=False)
                    if depth < MAX_DEPTH and entry.is_dir(follow_symlinks=False):
                        stack.append((os.open(entry.name, _DIR_FLAGS, dir_fd=folder), depth + 1))
                except OSError:
                    continue  # gone, or replaced by a link since the listing
        except OSError:
            pass
        finally:
            os.close(folder)


def hand_over(root: Path, target: Path, uid: int, gid: int) -> None:
    """Give ``target`` (a path under ``root`` the host just wrote) and the folders between it and ``root``
    (some made by that write) to ``uid:gid``: a sandbox's user must be able to write where the host wrote."""
    chown_tree(target, uid, gid)
    real_root = Path(os.path.realpath(root))
    for parent in Path(target).parents:
        if parent == real_root or real_root not in parent.parents:
            break
        try:
            os.chown(parent, uid, gid, follow_symlinks=False)
        except OSError:
            pass
