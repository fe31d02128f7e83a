"""Context policies: the one table of their names, what each does and the options it takes.

A white-box scaffold names its policy (``context_policy = "keep-last-k"``); :class:`ScaffoldSpec`
validates the name against :data:`CONTEXT_POLICIES` when it is registered. A black-box agent
manages its own context: its policy is ``agent``. A policy is an explicit action of the loop
(DESIGN §7): the loop hands its history to :meth:`Episode.manage` before every model call, and
whatever the policy removes is reported as a trajectory event. The next completion is simply a new
completion; the prefix tree merges what is shared.

A policy's options are fields of the scaffold's own ``[scaffolds.NAME]`` section: the scaffold's
options model declares them (Forge's built-in white-box scaffolds get them added by
:func:`with_policy_options`), and :func:`policy_options` reads them back out of the validated
section, defaults where the scaffold's model does not declare one.

``full`` and ``keep-last-k`` are implemented here; ``truncate``, ``discard-tool-output`` and
``summarize`` are named (with their options) but not yet implemented: an episode whose scaffold
names one of them is refused with a clear error until they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from forge_cli.errors import ForgeError

Messages = list[dict[str, Any]]
# (messages, options) -> (kept messages, event data or None when nothing was removed)
Apply = Callable[[Messages, Any], "tuple[Messages, dict[str, Any] | None]"]


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TruncateOptions(_Options):
    """``truncate``: past the budget, drop the oldest assistant/tool turns (system prompt and task stay)."""

    context_budget_tokens: int = Field(3072, gt=0, description="Context size past which the oldest turns are dropped.")


class DiscardToolOutputOptions(_Options):
    """``discard-tool-output``: all but the newest tool results become a short placeholder."""

    keep_last: int = Field(4, ge=0, description="Newest tool results kept verbatim.")
    placeholder: str = Field("[tool output removed]", description="What an older tool result is replaced by.")


class SummarizeOptions(_Options):
    """``summarize``: past the budget, the model summarises the history, which then replaces it."""

    context_budget_tokens: int = Field(3072, gt=0, description="Context size past which the history is summarised.")


class KeepLastKOptions(_Options):
    """``keep-last-k``: the system prompt, the task and the last k turns."""

    keep_last: int = Field(4, ge=0, description="Turns kept (a turn is an assistant message and what answers it).")


@dataclass(frozen=True)
class ContextPolicy:
    """One named policy: which kind of scaffold may use it, its options, its implementation."""

    name: str
    description: str
    kind: Literal["white", "black"]
    options: type[BaseModel] | None = None
    apply: Apply | None = None  # None: named and validated, not implemented yet


def split_head(messages: Messages) -> int:
    """How many leading messages every policy keeps: the system messages and the task after them."""
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    if head < len(messages) and messages[head].get("role") == "user":
        head += 1
    return head


def turns_of(messages: Messages, start: int) -> list[int]:
    """Where each turn after ``start`` begins: at an assistant message (or at ``start`` itself)."""
    return [i for i in range(start, len(messages)) if i == start or messages[i].get("role") == "assistant"]


def keep_last_k(messages: Messages, options: KeepLastKOptions) -> tuple[Messages, dict[str, Any] | None]:
    head = split_head(messages)
    starts = turns_of(messages, head)
    if len(starts) <= options.keep_last:
        return list(messages), None
    cut = starts[len(starts) - options.keep_last] if options.keep_last else len(messages)
    kept = messages[:head] + messages[cut:]
    return kept, {"removed_messages": cut - head, "removed_turns": len(starts) - options.keep_last,
                  "kept_turns": options.keep_last}


def _full(messages: Messages, options: Any) -> tuple[Messages, dict[str, Any] | None]:
    return list(messages), None


CONTEXT_POLICIES: dict[str, ContextPolicy] = {
    p.name: p
    for p in (
        ContextPolicy("full", "The whole history, every turn.", "white", None, _full),
        ContextPolicy("truncate", TruncateOptions.__doc__ or "", "white", TruncateOptions),
        ContextPolicy("discard-tool-output", DiscardToolOutputOptions.__doc__ or "", "white", DiscardToolOutputOptions),
        ContextPolicy("summarize", SummarizeOptions.__doc__ or "", "white", SummarizeOptions),
        ContextPolicy("keep-last-k", KeepLastKOptions.__doc__ or "", "white", KeepLastKOptions, keep_last_k),
        ContextPolicy("agent", "A black-box agent manages its own context.", "black"),
    )
}


def context_policy(name: str) -> ContextPolicy:
    policy = CONTEXT_POLICIES.get(name)
    if policy is None:
        raise ForgeError(f"no context policy named {name!r} (known: {', '.join(CONTEXT_POLICIES)})")
    return policy


def check_context_policy(scaffold: str, kind: str, name: str) -> None:
    """A scaffold's policy must be in the table and fit its kind (``agent`` for black-box only)."""
    try:
        policy = context_policy(name)
    except ForgeError as exc:
        raise ForgeError(f"scaffold '{scaffold}': {exc}") from None
    if policy.kind != kind:
        allowed = ", ".join(n for n, p in CONTEXT_POLICIES.items() if p.kind == kind)
        raise ForgeError(f"scaffold '{scaffold}': context policy {name!r} is not for {kind}-box scaffolds (use {allowed})")


def policy_options(name: str, scaffold_options: Any) -> BaseModel | None:
    """The policy's options, read from the same-named fields of a scaffold's validated options."""
    policy = context_policy(name)
    if policy.options is None:
        return None
    given = {key: getattr(scaffold_options, key) for key in policy.options.model_fields if hasattr(scaffold_options, key)}
    return policy.options.model_validate(given)


def with_policy_options(base: type[BaseModel], name: str) -> type[BaseModel]:
    """``base`` with the fields of policy ``name``'s options added: one flat ``[scaffolds.NAME]`` section."""
    policy = context_policy(name)
    if policy.options is None:
        return base
    fields: dict[str, Any] = {key: (f.annotation, f) for key, f in policy.options.model_fields.items()}
    model: type[BaseModel] = create_model(f"{base.__name__}[{name}]", __base__=base, __doc__=base.__doc__, **fields)
    return model
