"""The one exception type a user of Forge sees."""

from __future__ import annotations


class ForgeError(Exception):
    """A user-facing error: bad input, bad config, a missing dependency.

    The CLI prints it as one red line and exits 1; the gateway turns it into a 4xx response in
    the provider's error shape. Its message must say what was wrong and, where possible, how to
    fix it. Never raise it for a bug in Forge itself.
    """
