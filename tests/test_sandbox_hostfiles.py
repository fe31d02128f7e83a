"""The host's reads and copies of what an agent left (``sandbox/hostfiles.py``) and the disk limit's file
system (``sandbox/quota.py``): against the plain computation on random trees, and against a killed owner."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.sandbox import quota
from forge_cli.sandbox.hostfiles import clear_setid, copy_tree, read_regular

needs_quota = pytest.mark.skipif(quota.unavailable() is not None, reason=f"no quota file system here: {quota.unavailable()}")

names = st.sampled_from(["a", "b", "c", "d.txt", "sub", "e"])
entry = st.tuples(st.lists(names, min_size=1, max_size=3),
                  st.sampled_from(["file", "sparse", "fifo", "link-in", "link-out", "link-dir", "dir", "setuid"]),
                  st.binary(max_size=300))


def build(root: Path, entries: list[tuple[list[str], str, bytes]]) -> None:
    """A tree an agent could leave: files, sparse files, FIFOs, links in and out, folders, setuid files."""
    root.mkdir(parents=True, exist_ok=True)
    for parts, kind, data in entries:
        path = root.joinpath(*parts)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            continue  # a file where a folder would go
        except OSError as exc:  # a link to itself on the way (`a` -> `a`): no folder can go there either
            if exc.errno != errno.ELOOP:
                raise
            continue
        if os.path.lexists(path):
            continue
        if kind in ("file", "setuid"):
            path.write_bytes(data)
            if kind == "setuid":
                os.chmod(path, 0o4755)
        elif kind == "sparse":
            with open(path, "wb") as fh:
                fh.truncate(2**22)
                fh.seek(len(data) * 1000)
                fh.write(data or b"x")
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "link-in":
            os.symlink(data.hex()[:8] or "a", path)
        elif kind == "link-out":
            os.symlink("/etc/hostname", path)
        elif kind == "link-dir":
            os.symlink("..", path)
        else:
            path.mkdir()


def plain(root: Path) -> dict[str, tuple[str, object]]:
    """What a copy must hold, by a plain walk: regular files' bytes and modes less setid, links' targets,
    folders; no FIFO."""
    found: dict[str, tuple[str, object]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir", stat.S_IMODE(info.st_mode) & 0o777)
            elif stat.S_ISREG(info.st_mode):
                found[rel] = ("file", (path.read_bytes(), stat.S_IMODE(info.st_mode) & 0o777))
    return found


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(entry, max_size=12))
@example(entries=[(["a"], "link-in", b""), (["a", "a", "a"], "file", b"")])  # a link to itself, then a path through it
def test_copy_tree_is_the_plain_walk_less_fifos_and_setid_bits_with_holes_kept(entries, tmp_path_factory):
    root = tmp_path_factory.mktemp("agent")
    build(root / "work", entries)
    copy_tree(root / "work", root / "copy")
    assert plain(root / "copy") == plain(root / "work")
    for folder, _, files in os.walk(root / "copy"):
        for name in files:
            info = os.lstat(Path(folder) / name)
            assert not stat.S_ISFIFO(info.st_mode) and not info.st_mode & (stat.S_ISUID | stat.S_ISGID)
            original = os.lstat(root / "work" / Path(folder).relative_to(root / "copy") / name)
            if stat.S_ISREG(info.st_mode):  # a sparse file takes no more blocks than it did
                assert info.st_blocks <= original.st_blocks + 8


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(entry, max_size=12), limit=st.sampled_from([64, 2**20, 2**27]))
def test_read_regular_reads_exactly_the_regular_files_inside_within_the_limit(entries, limit, tmp_path_factory):
    root = tmp_path_factory.mktemp("agent") / "work"
    build(root, entries)
    real = Path(os.path.realpath(root))
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            rel = str((Path(folder) / name).relative_to(root))
            target = Path(os.path.realpath(root / rel))
            inside = target == real or real in target.parents
            try:
                regular = inside and stat.S_ISREG(os.stat(target).st_mode)
            except OSError:  # a loop of links, a dangling one
                regular = False
            try:
                got = read_regular(root, rel, max_bytes=limit)
            except ForgeError:
                assert not regular or target.stat().st_size > limit, rel
                continue
            assert regular and got == target.read_bytes(), rel


def test_clear_setid_takes_the_bits_off_and_follows_no_link(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("x")
    os.chmod(outside, 0o4755)
    work = tmp_path / "work"
    (work / "d").mkdir(parents=True)
    (work / "d" / "s").write_text("x")
    os.chmod(work / "d" / "s", 0o6755)
    os.chmod(work / "d", 0o2755)
    os.symlink(outside, work / "link")
    assert clear_setid(work) == 2
    assert stat.S_IMODE((work / "d" / "s").stat().st_mode) == 0o755 and stat.S_IMODE((work / "d").stat().st_mode) == 0o755
    assert outside.stat().st_mode & stat.S_ISUID  # the link's target is not the sandbox's


# ---- the disk limit's file system -----------------------------------------------------------------------------


@needs_quota
@pytest.mark.parametrize("mib", [1, 10, 100])
def test_a_quota_holds_its_limit_in_bytes_and_files_and_no_more(tmp_path, mib):
    work, folder = tmp_path / "work", tmp_path / "box"
    work.mkdir()
    folder.mkdir()
    (work / "task.txt").write_text("given")
    q = quota.WorkdirQuota.create(work, folder, mib * 2**20)
    try:
        assert (work / "task.txt").read_text() == "given"  # what was there is on it
        written = 0
        with pytest.raises(OSError) as full:
            with open(work / "fill", "wb") as fh:
                while True:
                    fh.write(b"x" * 65536)
                    fh.flush()
                    written += 65536
        assert full.value.errno == 28 and q.full()
        assert mib * 2**20 - 65536 <= written <= mib * 2**20 * 1.1, written  # the limit, give or take ext4's slack
        os.unlink(work / "fill")
        made = 0
        with pytest.raises(OSError) as no_inodes:
            while True:
                open(work / f"e{made}", "w").close()
                made += 1
        assert no_inodes.value.errno == 28 and quota.inode_budget(mib * 2**20) - 16 <= made <= quota.inode_budget(mib * 2**20)
    finally:
        q.release()
    assert not q.mountpoint.exists() and not q.image.exists()
    assert (work / "task.txt").read_text() == "given" and len(list(work.glob("e*"))) == made  # given back, on disk


@needs_quota
def test_a_killed_owners_quota_mounts_are_undone_by_the_next_sandbox_and_a_live_one_is_left_alone(tmp_path):
    """A run SIGKILLed with a sandbox open leaves its image mounted over the work directory; the next
    process's first sandbox unmounts it (the work directory is a plain folder again), and never a mount
    a live sandbox has made at a path of its own."""
    from forge_cli.sandbox import local

    owner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from forge_cli.sandbox.local import LocalSandbox
        box = LocalSandbox({str(tmp_path / 'dead')!r}, disk_bytes=4 * 2**20)
        print(box._root, flush=True)
        time.sleep(300)
    """)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    root = Path(owner.stdout.readline().strip())
    assert quota._mounted(tmp_path / "dead")
    live = local.LocalSandbox(tmp_path / "live", disk_bytes=4 * 2**20)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    removed = local.sweep_leftovers()
    assert root.name in removed and not root.exists()
    assert not quota._mounted(tmp_path / "dead") and quota._mounted(tmp_path / "live")
    import asyncio

    asyncio.run(live.close())
    assert not quota._mounted(tmp_path / "live")
