"""Forge: reinforcement learning for LLM agents.

Importing this package is cheap: it never imports torch, vLLM, DeepSpeed or Ray.
Plugins use ``forge_cli.hookimpl`` to mark their hook implementations.
"""

from __future__ import annotations

import pluggy

from forge_cli.errors import ForgeError

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("forge")

__all__ = ["ForgeError", "__version__", "hookimpl"]
