"""Records that cross two subsystems, one definition each (DESIGN.md, the contracts layer).

Each module here imports only the standard library, pydantic and Forge's leaf helpers
(``errors``, ``paths``): the metrics line the trainer writes and the display, ``forge report``
and TensorBoard read (:mod:`forge_cli.records.metrics`); the session request the in-process
gateway, the remote client and the admin endpoint share (:mod:`forge_cli.records.session`).
The trajectory's own records (completion, sampling, trajectory, group) are in
:mod:`forge_cli.pool.types`.
"""
