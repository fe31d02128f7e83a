"""Context policies: the one table of their names, what each does and the options it takes.

A white-box scaffold names its policy (``context_policy = "keep-last-k"``); :class:`ScaffoldSpec`
validates the name against :data:`forge_cli.specs.CONTEXT_POLICY_KINDS`, the names of
:data:`CONTEXT_POLICIES` (or an alias: ``full`` is ``none``), when it is registered. A black-box agent manages its own context: its policy is ``agent``.
A policy is an explicit action of the loop (DESIGN §7): the loop hands its history to
:meth:`Episode.managed <forge_cli.rollout.loop.Episode.managed>` before every model call, adopts
what comes back as its history, and whatever the policy removed is reported as a trajectory event
(``context.<policy>``, with what was removed). The next completion is simply a new completion; the
prefix tree merges what is shared.

Two kinds of implementation:

- *pure* (``none``, ``discard-tool-output``, ``keep-last-k``): ``apply(messages, options)``, a
  function of the history alone;
- *gateway* (``truncate``, ``summarize``): ``apply_async(messages, options, calls)``, which may ask
  the gateway through :class:`PolicyCalls`. Token counts are the gateway's, not an estimate: the
  loop cannot tokenise (only the gateway holds the chat template and the session's tool format), so
  ``count_tokens`` asks ``POST /v1/messages/count_tokens`` for the length of exactly the prompt the
  next call would render (the history converted to Anthropic blocks by :func:`to_anthropic`, the
  tools in the session's format) — the number the gateway records as the next completion's prompt.
  ``summarize``'s summary is a model call through the same client: a recorded completion.

A *turn* is an assistant message and what answers it (tool results, observations); the *head* every
policy keeps is the leading system messages and the task after them. An *observation* is a ``tool``
message, or a user message that starts with :data:`OBSERVATION_PREFIX` (text loops such as ReAct).

A policy's options are fields of the scaffold's own ``[scaffolds.NAME]`` section: the scaffold's
options model declares them (Forge's built-in white-box scaffolds get them added by
:func:`with_policy_options`), and :func:`policy_options` reads them back out of the validated
section, defaults where the scaffold's model does not declare one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, create_model

from forge_cli.errors import ForgeError
from forge_cli.specs import context_policy_name

Messages = list[dict[str, Any]]
# (messages, options) -> (kept messages, event data or None when nothing was removed)
Apply = Callable[[Messages, Any], "tuple[Messages, dict[str, Any] | None]"]
# (messages, options, calls) -> the same, asking the gateway on the way
AsyncApply = Callable[[Messages, Any, "PolicyCalls"], "Awaitable[tuple[Messages, dict[str, Any] | None]]"]

OBSERVATION_PREFIX = "Observation:"
SUMMARY_REQUEST = ("Summarise the work so far for yourself: the task, every fact found (with its exact values), "
                   "what was tried and what is left to do. Write only the summary.")
SUMMARY_PREFIX = "Summary of the work so far:\n"


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TruncateOptions(_Options):
    """``truncate``: past the budget, drop the oldest turns (system prompt and task stay)."""

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


class PolicyCalls(Protocol):
    """What a gateway policy may ask: the rendered length of a history, and a summary of it."""

    async def count_tokens(self, messages: Messages) -> int: ...

    async def summarize(self, messages: Messages) -> str: ...


@dataclass(frozen=True)
class ContextPolicy:
    """One named policy: which kind of scaffold may use it, its options, its implementation
    (``apply`` if pure, ``apply_async`` if it asks the gateway; neither: named, not implemented)."""

    name: str
    description: str
    kind: Literal["white", "black"]
    options: type[BaseModel] | None = None
    apply: Apply | None = None
    apply_async: AsyncApply | None = None

    @property
    def implemented(self) -> bool:
        return self.apply is not None or self.apply_async is not None

    async def run(self, messages: Messages, options: Any, calls: PolicyCalls) -> tuple[Messages, dict[str, Any] | None]:
        if self.apply is not None:
            return self.apply(messages, options)
        if self.apply_async is not None:
            return await self.apply_async(messages, options, calls)
        raise ForgeError(f"context policy {self.name!r} is not implemented")


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


def is_observation(message: dict[str, Any]) -> bool:
    """A tool result: a ``tool`` message, or a text loop's user message starting with ``Observation:``."""
    if message.get("role") == "tool":
        return True
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and content.startswith(OBSERVATION_PREFIX)


def _none(messages: Messages, options: Any) -> tuple[Messages, dict[str, Any] | None]:
    return list(messages), None


def keep_last_k(messages: Messages, options: KeepLastKOptions) -> tuple[Messages, dict[str, Any] | None]:
    head = split_head(messages)
    starts = turns_of(messages, head)
    if len(starts) <= options.keep_last:
        return list(messages), None
    cut = starts[len(starts) - options.keep_last] if options.keep_last else len(messages)
    kept = messages[:head] + messages[cut:]
    return kept, {"removed_messages": cut - head, "removed_turns": len(starts) - options.keep_last,
                  "kept_turns": options.keep_last}


def discard_tool_output(messages: Messages, options: DiscardToolOutputOptions) -> tuple[Messages, dict[str, Any] | None]:
    """Every observation after the head but the newest ``keep_last`` gets the placeholder as its text."""
    head = split_head(messages)
    observed = [i for i in range(head, len(messages)) if is_observation(messages[i])]
    old = observed[: max(0, len(observed) - options.keep_last)]
    kept, replaced, chars = list(messages), [], 0
    for i in old:
        message = messages[i]
        text = message["content"] if isinstance(message.get("content"), str) else json.dumps(message.get("content"))
        prefix = OBSERVATION_PREFIX + " " if message.get("role") == "user" else ""
        new = prefix + options.placeholder
        if text == new:
            continue  # replaced before
        kept[i] = {**message, "content": new}
        replaced.append(i)
        chars += len(text)
    if not replaced:
        return list(messages), None
    return kept, {"replaced_messages": replaced, "removed_chars": chars}


async def truncate(messages: Messages, options: TruncateOptions, calls: PolicyCalls) -> tuple[Messages, dict[str, Any] | None]:
    """Past the budget, drop the fewest oldest turns that bring the history within it (the newest
    turn always stays: a history that cannot fit even then is sent as head + newest turn)."""
    budget = options.context_budget_tokens
    before = await calls.count_tokens(messages)
    if before <= budget:
        return list(messages), None
    head = split_head(messages)
    starts = turns_of(messages, head)
    if len(starts) <= 1:
        return list(messages), None

    def without(dropped: int) -> Messages:
        return messages[:head] + messages[starts[dropped]:]

    # the length only shrinks as more turns go: binary search for the fewest dropped that fit
    low, high, after = 1, len(starts) - 1, None
    while low < high:
        mid = (low + high) // 2
        n = await calls.count_tokens(without(mid))
        if n <= budget:
            high, after = mid, n
        else:
            low = mid + 1
    kept = without(low)
    if after is None:  # the fewest that fit was never counted: none fit, or only all but the newest
        after = await calls.count_tokens(kept)
    return kept, {"removed_messages": starts[low] - head, "removed_turns": low, "kept_turns": len(starts) - low,
                  "tokens_before": before, "tokens_after": after, "budget": budget}


async def summarize(messages: Messages, options: SummarizeOptions, calls: PolicyCalls) -> tuple[Messages, dict[str, Any] | None]:
    """Past the budget, the model summarises the history; head + the summary replace it."""
    budget = options.context_budget_tokens
    before = await calls.count_tokens(messages)
    head = split_head(messages)
    if before <= budget or head == len(messages):
        return list(messages), None
    summary = await calls.summarize(messages)
    kept = messages[:head] + [{"role": "user", "content": SUMMARY_PREFIX + summary}]
    return kept, {"removed_messages": len(messages) - head, "tokens_before": before, "budget": budget, "summary": summary}


CONTEXT_POLICIES: dict[str, ContextPolicy] = {
    p.name: p
    for p in (
        ContextPolicy("none", "No context management: the whole history, every turn.", "white", None, _none),
        ContextPolicy("truncate", TruncateOptions.__doc__ or "", "white", TruncateOptions, apply_async=truncate),
        ContextPolicy("discard-tool-output", DiscardToolOutputOptions.__doc__ or "", "white", DiscardToolOutputOptions,
                      discard_tool_output),
        ContextPolicy("summarize", SummarizeOptions.__doc__ or "", "white", SummarizeOptions, apply_async=summarize),
        ContextPolicy("keep-last-k", KeepLastKOptions.__doc__ or "", "white", KeepLastKOptions, keep_last_k),
        ContextPolicy("agent", "A black-box agent manages its own context.", "black"),
    )
}


def context_policy(name: str) -> ContextPolicy:
    """The policy called ``name`` (or an alias of it: :data:`forge_cli.specs.CONTEXT_POLICY_ALIASES`)."""
    return CONTEXT_POLICIES[context_policy_name(name)]


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
    model: type[BaseModel] = create_model(f"{base.__name__}[{policy.name}]", __base__=base, __doc__=base.__doc__, **fields)
    return model


# ---- asking the gateway ------------------------------------------------------------------------------------


def to_anthropic(messages: Messages, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An OpenAI chat history (and function schemas) as a ``/v1/messages/count_tokens`` body that the
    gateway renders to the same prompt: assistant tool calls become ``tool_use`` blocks with the same
    ids and arguments, ``tool`` messages ``tool_result`` blocks (consecutive ones in one user message)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        text = content if isinstance(content, str) else ("" if content is None else _text_parts(content))
        if role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.get("tool_call_id") or "", "content": text}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list) \
                    and all(b["type"] == "tool_result" for b in out[-1]["content"]):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif role == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            for call in m["tool_calls"]:
                fn = call.get("function", call)
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except ValueError:
                        pass
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": args})
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": {"developer": "system"}.get(role, role), "content": text})
    body: dict[str, Any] = {"messages": out}
    if tools:
        body["tools"] = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                          "input_schema": t["function"].get("parameters") or {"type": "object", "properties": {}}}
                         for t in tools]
    return body


def _text_parts(content: Any) -> str:
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


class GatewayCalls:
    """:class:`PolicyCalls` through a trajectory's OpenAI client: counts from the gateway's
    ``count_tokens``, summaries as chat calls (recorded completions of the trajectory, made as
    ``agent`` when one is named)."""

    def __init__(self, client: Any, model: str, *, tools: list[dict[str, Any]] | None = None,
                 headers: dict[str, str] | None = None, max_tokens: int = 512, temperature: float | None = None) -> None:
        self.client, self.model, self.tools, self.headers = client, model, tools or None, headers or {}
        self.max_tokens, self.temperature = max_tokens, temperature

    async def count_tokens(self, messages: Messages) -> int:
        import httpx

        body = {"model": self.model, **to_anthropic(messages, self.tools)}
        response = await self.client.post("/messages/count_tokens", body=body, cast_to=httpx.Response,
                                          options={"headers": self.headers})
        return int(response.json()["input_tokens"])

    async def summarize(self, messages: Messages) -> str:
        extra: dict[str, Any] = {"temperature": self.temperature} if self.temperature is not None else {}
        reply = await self.client.chat.completions.create(
            model=self.model, messages=[*messages, {"role": "user", "content": SUMMARY_REQUEST}],
            max_tokens=self.max_tokens, extra_headers=self.headers, **extra)
        return (reply.choices[0].message.content or "").strip()
