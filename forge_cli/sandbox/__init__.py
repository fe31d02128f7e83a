"""Sandboxes: where a black-box agent program runs (DESIGN §7, §10).

- :mod:`forge_cli.sandbox.base` — the :class:`~forge_cli.sandbox.base.Sandbox` protocol every
  backend implements (async ``exec`` with a wall-time limit, ``write_file``/``read_file``,
  ``copy_in``/``copy_out``, ``close``) and the :class:`~forge_cli.sandbox.base.ExecResult` an
  ``exec`` returns.
- :mod:`forge_cli.sandbox.local` — the ``local`` backend: a subprocess in the trajectory's work
  directory, in its own session and process group, with a clean environment, a wall-time limit
  (the whole group is killed at the deadline) and memory / CPU-time limits through rlimits. It
  isolates nothing else (network, file system); that is a later backend's job.

Importing this package is cheap (the standard library only).
"""

from __future__ import annotations

from forge_cli.sandbox.base import ExecResult, Sandbox

__all__ = ["ExecResult", "Sandbox"]
