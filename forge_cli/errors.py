"""The one exception type a user of Forge sees."""

from __future__ import annotations

import re


class ForgeError(Exception):
    """A user-facing error: bad input, bad config, a missing dependency.

    The CLI prints it as one red line and exits 1; the gateway turns it into a 4xx response in
    the provider's error shape. Its message must say what was wrong and, where possible, how to
    fix it, on one line (:func:`one_line` folds what a library gave in several). Never raise it
    for a bug in Forge itself.
    """


class InfraError(ForgeError):
    """A trajectory failed for a reason its policy could not cause: ``cause`` is one of
    ``forge_cli.pool.types.INFRA_CAUSES`` (the sandbox did not start, the agent's install is broken,
    it ended before its first model call, the verifier failed, the gateway stopped). The rollout
    retries or drops its group; it is never trained as a reward of 0."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def one_line(text: str) -> str:
    """``text`` with every line break (and the blanks around it) folded into one space."""
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()
