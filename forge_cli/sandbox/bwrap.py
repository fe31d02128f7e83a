"""The bubblewrap layout of a ``local`` sandbox: what the program sees, and the ``bwrap`` argv for it.

Inside (:func:`bwrap_argv`):

- a root of its own, with the host's **system folders read-only** (``/usr``, ``/etc``, ``/opt``, the
  ``/bin``-style links of a merged ``/usr``), the Python Forge runs on (its base installation and
  its venv) and ``$FORGE_HOME/agents`` read-only, plus any ``read_only`` paths the caller adds.
  Nothing else of the host is there: not its home, not ``FORGE_HOME`` (runs, keys, the pool), not
  ``/run`` or ``/var`` (no host unix socket can be reached through the file system), and
  ``/etc/shadow``-style secrets are hidden behind ``/dev/null``;
- **not Forge's own package** (``forge_cli``), wherever the folder holding it is mounted (a wheel in
  the venv, a system-wide install under ``/usr``): an empty read-only folder stands there, so no program inside can run the task
  generators that would rebuild a task's answer (the ``qa`` table, the ``swe-mini`` catalogue);
- the trajectory's **work directory, writable, at :data:`VIEW_WORKDIR`** and the sandbox's home folder
  (``HOME``), writable, at :data:`VIEW_HOME` (``Layout.view``): every sandbox shows its program the
  same two paths, whatever folders the host gave the trajectory, so an agent that writes its working
  directory or home into its prompt (claude-code at token ~830 of 29k, codex at ~12k) sends the same
  prompt in every trajectory of a group — the prefix the trainer's tree shares — and learns nothing
  of the host's layout. ``$workdir`` in a launch recipe is the path inside. Where the host already
  shows something under ``/forge`` (a Python installed there), both stay at their host paths;
- a read-only root (bubblewrap's own, remounted read-only once it is laid out); a private **/tmp**,
  a tmpfs of ``tmp_bytes`` (``TMPDIR=/tmp``), and a private ``/dev/shm`` of the
  same size; a minimal ``/dev`` (null, zero, full, random, urandom, tty, pts) and its own ``/proc``;
- its own **network namespace** (``--unshare-net``: only ``lo``, which bwrap brings up), its own pid
  namespace (``--unshare-pid``), ``--die-with-parent`` (if the host process dies, so does the
  sandbox), ``--new-session`` (no terminal to inject input into) and the environment cleared
  (``--clearenv``) to exactly the sandbox's own;
- **no capability**: ``--cap-drop ALL``. Bubblewrap drops them on its own only for a non-root
  user; run as root (0.8, Debian's) it kept them all, and a program inside could mount, and open
  the host's root file system by handle (``open_by_handle_at``). The launcher
  (:mod:`~forge_cli.sandbox.launch`) adds ``--seccomp FD``: the filter of
  :mod:`~forge_cli.sandbox.seccomp` (no new namespaces, no ``ptrace``, …);
- **an unprivileged user** (``Layout.user``; the local sandbox's ``user = "auto"`` when Forge runs as
  root): bubblewrap sets the sandbox up as root (so it can show folders root alone may reach, such as
  a Python under ``/root``), and ``forward.py`` starts the command as that user — keeping
  ``CAP_SETUID``/``CAP_SETGID`` only for that, and giving them up once it has. Root's own files that
  the read-only system shows (``/etc/ssl/private``, a daemon's key) are then as closed to the
  program as to any other user, and the exit status forward.py writes is out of its reach. ``/tmp``,
  ``/dev/shm`` and ``/var/tmp`` are writable by all (sticky);
- with a :class:`~forge_cli.sandbox.contract.GatewayAccess`: the gateway's unix socket bound at
  :data:`SOCKET_INSIDE` and ``forward.py`` at :data:`FORWARD_INSIDE`, run in front of the command
  so that ``http://127.0.0.1:PORT`` inside reaches the gateway.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from forge_cli.sandbox.contract import SOCKET_INSIDE, VIEW_HOME, VIEW_WORKDIR, GatewayAccess

SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers")
PACKAGE = Path(__file__).resolve().parents[1]  # forge_cli: hidden inside (its generators can rebuild answers)
FORWARD_INSIDE = "/run/forge/forward.py"
STATUS_INSIDE = "/run/forge/status"


def bwrap_path() -> str | None:
    """Where ``bwrap`` is installed, if it is."""
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """``None`` when bubblewrap can make a sandbox with its own network here, else why not (cached)."""
    path = bwrap_path()
    if path is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    try:
        done = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                               "--unshare-pid", "--die-with-parent", "--", "true"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} cannot run: {exc}"
    if done.returncode != 0:
        return f"{path} cannot create a sandbox here: {done.stderr.strip()[:160]}"
    return None


def python_dirs() -> list[Path]:
    """The folders of the Python Forge runs on (its base installation, its venv), real paths."""
    found: list[Path] = []
    for prefix in (sys.base_prefix, sys.prefix):
        real = Path(os.path.realpath(prefix))
        if real not in found and str(real) not in SYSTEM_DIRS and not str(real).startswith("/usr/"):
            found.append(real)
    return found


def python_inside() -> str:
    """A python3 that runs inside the sandbox (the real file of this interpreter)."""
    return os.path.realpath(sys.executable)


@dataclass(frozen=True)
class Layout:
    """What one sandbox mounts (see the module's docstring); paths are host paths."""

    workdir: Path
    home: Path
    tmp_bytes: int
    read_only: tuple[Path, ...] = ()
    gateway: GatewayAccess | None = None
    status_dir: Path | None = None
    user: tuple[int, int] | None = None  # (uid, gid) the command runs as; None: the caller's
    forwarder: Path = field(default_factory=lambda: Path(__file__).with_name("forward.py"))

    @property
    def inside(self) -> tuple[Path, Path]:
        """Where the program sees its work directory and home: VIEW_WORKDIR and VIEW_HOME, unless a folder
        the sandbox shows lies under their root (then at their host paths)."""
        root = VIEW_WORKDIR.parent
        if any(p == root or root in p.parents for p in (*python_dirs(), *self.read_only)):
            return self.workdir, self.home
        return VIEW_WORKDIR, VIEW_HOME


_SET_UP = ("/", "/tmp", "/dev", "/proc", "/run", "/var/tmp", "/dev/shm")  # made by the layout itself


def _parents(paths: Sequence[Path]) -> list[str]:
    """``--perms 0755 --dir`` for each folder above ``paths`` that the layout does not make otherwise (not
    one of :data:`_SET_UP`, not inside a system folder), shallowest first, each once."""
    args: list[str] = []
    made: set[Path] = set()
    for path in paths:
        for parent in reversed(Path(path).parents):
            text = str(parent)
            if parent in made or text in _SET_UP or any(text == d or text.startswith(d + "/") for d in SYSTEM_DIRS):
                continue
            made.add(parent)
            args += ["--perms", "0755", "--dir", text]
    return args


def bwrap_argv(layout: Layout, command: Sequence[str], env: Mapping[str, str], status_file: str | None = None) -> list[str]:
    """The host argv that runs ``command`` in ``layout`` with exactly the environment ``env``
    (``status_file``: its exit status is written to that name in ``layout.status_dir``)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError("bwrap")
    args = [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox"]
    if layout.user is not None:  # forward.py may start the command as another user, then gives these up too
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for secret in SECRET_FILES:
        if os.path.isfile(secret):
            args += ["--ro-bind", "/dev/null", secret]
    size = str(int(layout.tmp_bytes))
    args += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
             "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm", "--dir", "/run", "--perms", "1777",
             "--dir", "/var/tmp"]
    shown = [p for p in (*python_dirs(), *layout.read_only) if p.exists()]
    # the folders above what is mounted, made open to all (bubblewrap would make them root's alone): the sandbox's
    # user must reach the Python it runs, its work directory and its home; they hold nothing else
    workdir, home = layout.inside
    args += _parents([*shown, home, workdir])
    for path in shown:  # after /tmp's tmpfs: a path under /tmp stays visible
        args += ["--ro-bind", str(path), str(path)]
    mounted = [*shown, *(Path(d) for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d))]
    if any(PACKAGE == p or p in PACKAGE.parents for p in mounted):  # Forge's own code (its suites' answer keys)
        args += ["--perms", "0555", "--size", "4096", "--tmpfs", str(PACKAGE)]
    for host, seen in ((layout.home, home), (layout.workdir, workdir)):
        args += ["--bind", str(host), str(seen)]
    # forward.py runs in front of the command: the gateway's port, and the exact exit status
    args += ["--ro-bind", str(layout.forwarder), FORWARD_INSIDE]
    front = [python_inside(), "-S", FORWARD_INSIDE]
    if layout.gateway is not None:
        args += ["--ro-bind", str(layout.gateway.socket), SOCKET_INSIDE]
        front += ["--port", str(layout.gateway.port), "--socket", SOCKET_INSIDE]
    if status_file is not None and layout.status_dir is not None:
        args += ["--bind", str(layout.status_dir), STATUS_INSIDE]
        front += ["--status", f"{STATUS_INSIDE}/{status_file}"]
    if layout.user is not None:
        front += ["--user", f"{layout.user[0]}:{layout.user[1]}"]
    inner = [*front, "--", *(str(c) for c in command)]
    args += ["--remount-ro", "/", "--chdir", str(workdir), "--clearenv"]  # its own root: not a writable tmpfs
    for key, value in env.items():
        args += ["--setenv", key, value]
    return [*args, "--", *inner]
