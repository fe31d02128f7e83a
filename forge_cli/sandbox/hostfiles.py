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
- :func:`clear_setid` takes the setuid and setgid bits off every file under a folder.
"""

from __future__ import annotations

import errno
import os
import stat
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


def _open_nofollow(root: Path, target: Path) -> int:
    """An fd of ``target`` (a resolved path under the resolved ``root``), opened component by
    component with ``O_NOFOLLOW``; the last one read-only and non-blocking."""
    parts = target.relative_to(root).parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
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


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a link")):
        if test(mode):
            return name
    return "not a file"


def copy_tree(src: Path, dest: Path) -> None:
    """Copy ``src`` (a folder or a file) to ``dest`` as the module's docstring says; ``dest``'s parents are made."""
    src, dest = Path(src), Path(dest)
    info = os.lstat(src)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if stat.S_ISDIR(info.st_mode):
        _copy_dir(src, dest, info)
    else:
        _copy_entry(src, dest, info)


def _copy_dir(src: Path, dest: Path, info: os.stat_result) -> None:
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        dest.unlink()  # a link where a folder goes is replaced, never followed
    dest.mkdir(exist_ok=True)
    for entry in os.scandir(src):
        try:
            sub = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(sub.st_mode):
            _copy_dir(Path(entry.path), dest / entry.name, sub)
        else:
            _copy_entry(Path(entry.path), dest / entry.name, sub)
    os.chmod(dest, stat.S_IMODE(info.st_mode) & 0o777)


def _copy_entry(src: Path, dest: Path, info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        os.symlink(os.readlink(src), dest)
        return
    if not stat.S_ISREG(info.st_mode):
        return  # a FIFO, socket or device node: not copied
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # replaced by a link or gone since the listing
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        os.set_blocking(fd, True)
        if dest.is_symlink():
            dest.unlink()
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            _copy_data(fd, out, os.fstat(fd).st_size)
            os.fchmod(out, stat.S_IMODE(info.st_mode) & 0o777)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    os.utime(dest, ns=(info.st_atime_ns, info.st_mtime_ns))


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
    followed); how many had one."""
    cleared = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            try:
                if not os.lstat(path).st_mode & (stat.S_ISUID | stat.S_ISGID):
                    continue
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue  # a link, or gone
            try:
                mode = os.fstat(fd).st_mode
                os.fchmod(fd, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
                cleared += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    return cleared
