"""What a program inside a sandbox may do that it must not: run inside one, it tries and says.

Run as ``python3 -c "$(cat probe.py)"`` (the standard library only; its source is passed, not its
path, since Forge's own package is hidden inside a sandbox). It prints one JSON object: its ``uid``,
the capabilities it holds (``cap_eff``, from ``/proc/self/status``), its seccomp mode and
``no_new_privs``, and for each attempt its outcome — ``"allowed"`` or the errno's name:

- ``mount``: a tmpfs on a fresh folder;
- ``unshare_user`` / ``unshare_mount``: a new user / mount namespace (inside one a process holds
  every capability again);
- ``open_by_handle``: ``open_by_handle_at`` of the root folder's inode by a forged handle (how a
  process with ``CAP_DAC_READ_SEARCH`` opens the host's file system from a container);
- ``vsock`` / ``af_alg``: a socket of a family no network namespace confines (the hypervisor's
  ``AF_VSOCK``) or that exposes kernel code (``AF_ALG``);
- ``ptrace``: ``PTRACE_ATTACH`` to a child of its own (a sibling of whatever it could reach).

``forge doctor`` runs it in a real sandbox to say what isolation is in force; the hostile-agent tests
run it under each backend.
"""

import ctypes
import errno
import json
import os
import socket
import tempfile
import time


def _status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def main():
    libc = ctypes.CDLL(None, use_errno=True)

    def outcome(result):
        return "allowed" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

    found = {"uid": os.getuid(), "cap_eff": int(_status("CapEff") or "0", 16), "seccomp": int(_status("Seccomp") or "0"),
             "no_new_privs": int(_status("NoNewPrivs") or "0")}
    target = tempfile.mkdtemp()
    found["mount"] = outcome(libc.mount(b"none", target.encode(), b"tmpfs", 0, None))
    if found["mount"] == "allowed":
        libc.umount2(target.encode(), 2)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the namespace attempts in a child: a success must not change the probe itself
        result = {"unshare_user": outcome(libc.unshare(0x10000000)), "unshare_mount": outcome(libc.unshare(0x00020000))}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        found.update(json.loads(reader.read() or b"{}"))
    os.waitpid(pid, 0)
    handle = ctypes.create_string_buffer(8 + 8)  # struct file_handle: bytes, type, then an ino32+gen handle
    ctypes.memmove(handle, (8).to_bytes(4, "little") + (1).to_bytes(4, "little") + (2).to_bytes(4, "little"), 12)
    fd = libc.open_by_handle_at(os.open("/", os.O_RDONLY), handle, os.O_RDONLY)
    found["open_by_handle"] = outcome(fd)
    for name, family, kind in (("vsock", 40, socket.SOCK_STREAM), ("af_alg", 38, socket.SOCK_SEQPACKET)):
        try:  # families no network namespace confines (the hypervisor's vsock), or kernel code (crypto)
            socket.socket(family, kind).close()
            found[name] = "allowed"
        except OSError as exc:
            found[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    found["ptrace"] = outcome(libc.ptrace(16, child, None, None))  # PTRACE_ATTACH
    os.kill(child, 9)
    os.waitpid(child, 0)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
