"""Typed settings, one module per subsystem (DESIGN.md §3, the configuration layer).

Each module holds pydantic models only, named ``…Config``, and imports nothing of Forge's but the
leaf helpers (:mod:`forge_cli.errors`, :mod:`forge_cli.unions`, :mod:`forge_cli.names`,
:mod:`forge_cli.configs.common`). A section that is one of several kinds (``[model.engine]``,
``[pool.scheduler]``, ``[train.engine]``, ``[train.loss]``) is a union told apart by ``type``; the
implementation each name selects is in a table next to the implementations
(:data:`forge_cli.engine.ROLLOUT_ENGINES`, :data:`forge_cli.train.engines.TRAIN_ENGINES`,
:data:`forge_cli.train.loss.LOSSES`, :data:`forge_cli.rollout.executors.EXECUTORS`,
:data:`forge_cli.engine.router.ROUTERS`), and a test holds both lists of names equal.
:mod:`forge_cli.config` assembles them into ``ForgeConfig`` and loads the layers.
"""
