"""Sandboxes: where a black-box agent program runs (DESIGN §7, §10).

- :mod:`forge_cli.sandbox.contract` — the :class:`~forge_cli.sandbox.contract.Sandbox` protocol every
  backend implements (async ``exec`` with a wall-time limit, ``write_file``/``read_file``,
  ``copy_in``/``copy_out``, ``close``), the :class:`~forge_cli.sandbox.contract.ExecResult` an
  ``exec`` returns and the :class:`~forge_cli.sandbox.contract.GatewayAccess` a backend is opened
  with; :mod:`forge_cli.sandbox.base`, what the backends share.
- :mod:`forge_cli.sandbox.local` — the ``local`` backend: a subprocess in the trajectory's work
  directory, in its own session and process group, with a clean environment, a wall-time limit
  and rlimits; inside bubblewrap where it works (:mod:`~forge_cli.sandbox.bwrap`: a read-only
  system, only ``lo``, the gateway through :mod:`~forge_cli.sandbox.forward`), with a cgroup per
  exec bounding its processes and memory (:mod:`~forge_cli.sandbox.cgroup`).
- :mod:`forge_cli.sandbox.docker` — the ``docker`` backend: a container per trajectory (no network
  but the gateway's socket, a read-only root, memory/pids/CPU limits, always removed), from images
  built offline (:mod:`~forge_cli.sandbox.images`, ``forge sandbox build``).

Importing this package is cheap (the standard library only).
"""

from __future__ import annotations

from forge_cli.sandbox.contract import ExecResult, Sandbox

__all__ = ["ExecResult", "Sandbox"]
