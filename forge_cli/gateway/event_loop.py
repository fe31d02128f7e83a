"""The event loop a gateway is served on: uvloop's where it is installed, else asyncio's own.

uvicorn picks uvloop itself when it makes the loop (``uvicorn.run``); Forge serves the gateway inside
a loop of its own making (beside the engine, the rollouts, the trainer), so it makes the same choice
here. Nothing else changes: uvloop is a drop-in ``asyncio`` loop (``benchmarks/RESULTS.md``, "Gateway
overhead", says what it saves). ``FORGE_EVENT_LOOP=asyncio`` keeps asyncio's loop (to compare, or to
rule uvloop out when something misbehaves).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Coroutine, TypeVar

from forge_cli.errors import ForgeError

T = TypeVar("T")
ENV = "FORGE_EVENT_LOOP"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop's loop when it is installed and not turned off by ``FORGE_EVENT_LOOP``."""
    choice = os.environ.get(ENV, "auto")
    if choice not in ("auto", "uvloop", "asyncio"):
        main.close()
        raise ForgeError(f"{ENV}={choice!r}: expected auto, uvloop or asyncio")
    if choice != "asyncio":
        try:
            import uvloop  # heavy: a compiled library the gateway's extra brings
        except ImportError:
            if choice == "uvloop":
                main.close()
                raise ForgeError(f"{ENV}=uvloop but uvloop is not installed (pip install uvloop)") from None
        else:
            return uvloop.run(main)
    return asyncio.run(main)
