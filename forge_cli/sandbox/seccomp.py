"""The system calls no sandboxed program may make: one list, as a BPF filter for bubblewrap and as
a seccomp profile for Docker.

A policy being optimised for reward will try whatever the kernel lets it. Dropping every capability
already refuses the privileged calls (``mount``, ``open_by_handle_at``, module loading, …) but not
those an unprivileged process may make and that reach far into the kernel or out of the sandbox's
view: new user namespaces (inside one, a process holds every capability again), ``ptrace`` and
``process_vm_*`` of another process, the kernel keyring, eBPF, ``perf_event_open``,
``userfaultfd``, ``io_uring``, sockets of families a network namespace does not confine
(``AF_VSOCK`` reaches the hypervisor) or that expose kernel code (``AF_ALG``). :data:`DENIED` lists
the calls (and the privileged ones, so a backend that forgets a capability still refuses them);
each answers ``EPERM``. ``socket`` is allowed only for :data:`SOCKET_FAMILIES`; ``clone`` only without
a namespace flag (:data:`NAMESPACE_FLAGS`); ``clone3``, whose flags live in memory a filter cannot
read, answers ``ENOSYS``, so the C library falls back to ``clone`` (what Docker's own profile does).
Only the machine's own architecture is allowed: a 32-bit call (``int 0x80``, x32) is refused.

- :func:`bpf_program`: the filter compiled by libseccomp (through ``pyseccomp``) for bubblewrap's
  ``--seccomp FD``: every call allowed but these;
- :func:`docker_profile`: Docker's own default profile (an allow-list; ``docker_seccomp_default.json``,
  Docker 20.10's ``profiles/seccomp/default.json``, Apache-2.0) with :data:`DENIED` and
  ``modify_ldt`` taken out of what it allows (it lets ``ptrace`` and ``io_uring`` through), ``socket``
  allowed only for :data:`SOCKET_FAMILIES`, ``clone3`` answering ``ENOSYS``, and only the native
  architecture. The engine compiles it with its own libseccomp.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import platform
import tempfile
from pathlib import Path

DENIED = (
    # file systems and namespaces
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_by_handle_at", "name_to_handle_at",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
    # other processes' memory and state
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # kernel surfaces an unprivileged process may reach
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "add_key", "request_key", "keyctl", "fanotify_init",
    # the machine itself
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "acct", "quotactl", "quotactl_fd", "syslog", "lookup_dcookie", "iopl", "ioperm", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl", "vm86",
    "vm86old", "create_module", "get_kernel_syms", "query_module", "modify_ldt", "socketcall", "vhangup",
    "process_madvise",
)
# AF_UNIX, AF_INET, AF_INET6, AF_NETLINK: the families a sandbox's network namespace confines
SOCKET_FAMILIES = (1, 2, 10, 16)
# CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
# this machine's architecture as libseccomp and Docker name it (the only one a filter allows)
_NATIVE = {"x86_64": "X86_64", "aarch64": "AARCH64"}


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """``None`` when a filter can be built here, else why not (cached)."""
    if platform.machine() not in _NATIVE:
        return f"no seccomp filter is built for {platform.machine()} (only {', '.join(_NATIVE)})"
    try:
        bpf_program()
    except Exception as exc:  # pyseccomp missing, libseccomp.so.2 missing or refusing
        return f"cannot build a seccomp filter: {type(exc).__name__}: {exc}"
    return None


@functools.lru_cache(maxsize=1)
def bpf_program() -> bytes:
    """The filter as raw BPF (``struct sock_filter`` entries), for bubblewrap's ``--seccomp``."""
    import pyseccomp as sc

    denied = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, denied)  # the native architecture only: a 32-bit call is refused
    for name in DENIED:
        flt.add_rule(denied, name)
    for flag in NAMESPACE_FLAGS:
        flt.add_rule(denied, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    highest = max(SOCKET_FAMILIES)
    flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GT, highest))
    for family in range(highest):
        if family not in SOCKET_FAMILIES:
            flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
    with tempfile.TemporaryFile() as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def write_program(path: str | os.PathLike[str]) -> None:
    """Write :func:`bpf_program` to ``path`` (what a launcher opens and hands bubblewrap)."""
    with open(path, "wb") as fh:
        fh.write(bpf_program())


@functools.lru_cache(maxsize=1)
def docker_profile() -> str:
    """Docker's default profile less :data:`DENIED` (see the module's docstring), as JSON."""
    profile = json.loads((Path(__file__).parent / "docker_seccomp_default.json").read_text())
    native = _NATIVE.get(platform.machine(), "X86_64")
    profile["archMap"] = [{"architecture": f"SCMP_ARCH_{native}", "subArchitectures": []}]
    taken = {*DENIED, "socket", "clone3"}
    kept = []
    for rule in profile["syscalls"]:
        if rule.get("action") == "SCMP_ACT_ALLOW":
            rule = {**rule, "names": [n for n in rule["names"] if n not in taken]}
            if not rule["names"]:
                continue
        elif set(rule["names"]) & taken:
            continue
        kept.append(rule)
    kept += [{"names": ["socket"], "action": "SCMP_ACT_ALLOW",
              "args": [{"index": 0, "value": family, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]} for family in SOCKET_FAMILIES]
    kept.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS})
    profile["syscalls"] = kept
    return json.dumps(profile)
