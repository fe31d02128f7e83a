"""Waiting on observable state in tests: poll a predicate until it holds, failing with a clear message
after a generous timeout. The timeout is a safety net for a broken build, never the synchronisation:
a test that passes does so because the state it waits for appeared, on a fast machine or a slow one.

(tests/test_test_hygiene.py keeps sleeps out of the tests; these two helpers are where the polling
interval lives.)"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

TIMEOUT_S = 120.0  # a safety net: far past what any wait here takes on a loaded machine
INTERVAL_S = 0.01


def wait_until(predicate: Callable[[], Any], *, what: str, timeout: float = TIMEOUT_S,
               interval: float = INTERVAL_S) -> Any:
    """Call ``predicate`` until it returns something truthy, and return that; AssertionError naming
    ``what`` was awaited if ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(interval)
    return value


async def until(predicate: Callable[[], Any], *, what: str, timeout: float = TIMEOUT_S,
                interval: float = INTERVAL_S) -> Any:
    """:func:`wait_until` inside an event loop: the loop runs on between the polls."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)
    return value
