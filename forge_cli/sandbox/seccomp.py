"""The system calls no sandboxed program may make: one list, as a BPF filter for bubblewrap and as
a seccomp profile for Docker.

A policy being optimised for reward will try whatever the kernel lets it. Dropping every capability
already refuses the privileged calls (``mount``, ``open_by_handle_at``, module loading, …) but not
those an unprivileged process may make and that reach far into the kernel or out of the sandbox's
view: new user namespaces (inside one, a process holds every capability again), ``ptrace`` and
``process_vm_*`` of another process, the kernel keyring, eBPF, ``perf_event_open``,
``userfaultfd``, ``io_uring``. :data:`DENIED` lists them (and the privileged ones, so a backend that
forgets a capability still refuses them); each answers ``EPERM``. ``clone`` is refused only with a
namespace flag (:data:`NAMESPACE_FLAGS`); ``clone3``, whose flags live in memory a filter cannot
read, answers ``ENOSYS``, so the C library falls back to ``clone`` (what Docker's own profile does).

- :func:`bpf_program`: the filter compiled by libseccomp (through ``pyseccomp``) for this machine's
  architecture and its compatibility ones, for bubblewrap's ``--seccomp FD``;
- :func:`docker_profile`: the same list as a Docker seccomp profile (JSON), which the engine compiles
  with its own libseccomp. It replaces Docker's default profile, whose allow-list lets ``ptrace``
  through on kernels since 4.8.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import platform
import tempfile

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
    "vm86old", "create_module", "get_kernel_syms", "query_module",
)
# CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
# the architectures a program of this machine may call the kernel as (libseccomp's and Docker's names)
_COMPAT = {"x86_64": ("X86_64", "X86", "X32"), "aarch64": ("AARCH64", "ARM")}


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """``None`` when a filter can be built here, else why not (cached)."""
    if platform.machine() not in _COMPAT:
        return f"no seccomp filter is built for {platform.machine()} (only {', '.join(_COMPAT)})"
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
    # a call of an architecture the filter does not list is refused too, not killed
    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, denied)
    for name in _COMPAT[platform.machine()][1:]:
        try:
            flt.add_arch(getattr(sc.Arch, name))
        except Exception:  # not supported by this libseccomp: such programs are refused (ACT_BADARCH)
            pass
    for name in DENIED:
        flt.add_rule(denied, name)
    for flag in NAMESPACE_FLAGS:
        flt.add_rule(denied, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as fh:
        flt.export_bpf(fh)
        fh.seek(0)
        return fh.read()


def write_program(path: str | os.PathLike[str]) -> None:
    """Write :func:`bpf_program` to ``path`` (what a launcher opens and hands bubblewrap)."""
    with open(path, "wb") as fh:
        fh.write(bpf_program())


def docker_profile() -> str:
    """:data:`DENIED` as a Docker seccomp profile (JSON), everything else allowed."""
    archs = _COMPAT.get(platform.machine(), ("X86_64", "X86", "X32"))
    rules: list[dict[str, object]] = [{"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}]
    rules += [{"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
               "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]}
              for flag in NAMESPACE_FLAGS]
    rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS})
    return json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "architectures": [f"SCMP_ARCH_{a}" for a in archs],
                       "syscalls": rules})
