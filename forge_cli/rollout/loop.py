"""The white-box loop contract: what a loop is handed, how a scaffold finds its loop, one episode.

A white-box scaffold names its loop in its definition, ``loop = "package.module:attr"`` (or, in
Python, the object itself). The object is either

- an async function ``async def run(episode: Episode) -> str | None``, or
- a class: one instance per episode is made with no arguments and ``await instance.run(episode)``
  is called.

It returns the episode's final answer (``None`` if it has none). The loop talks to the gateway
only through the official OpenAI client that :meth:`Episode.client` returns (the trajectory's own
base URL and key, so every call is recorded into this trajectory), runs the task's tools with
:meth:`Episode.call_tool`, passes its history through ``await`` :meth:`Episode.managed` before every
call (the scaffold's context policy; the loop adopts what comes back as its history — the sync
:meth:`Episode.manage` serves only pure policies) and reports anything else worth keeping with
:meth:`Episode.report`. A trajectory with several agents (an orchestrator's workers) names the one
making a call with :meth:`Episode.agent_headers` (``x-forge-agent``, recorded with the completion).
It never touches token ids. Forge's own loops are :mod:`forge_cli.rollout.families`.

At registration only the reference's syntax is checked and its module *found*
(``importlib.util.find_spec``: the module's parent packages are imported, the module itself is
not), so ``forge --help`` imports no loop. :func:`resolve_loop` imports it, when an episode runs or
``forge scaffold show`` asks.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence

from forge_cli.configs.common import validate_options
from forge_cli.errors import ForgeError
from forge_cli.plugins import get_registry
from forge_cli.pool.types import Event
from forge_cli.rollout.context import GatewayCalls, Messages, context_policy, policy_options
from forge_cli.specs import Tool

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from forge_cli.plugins import Registry
    from forge_cli.specs import ScaffoldSpec

@dataclass
class Episode:
    """One run of a white-box scaffold on one task, as its loop sees it.

    ``options`` is the scaffold's ``[scaffolds.NAME]`` section validated by its options model
    (``{}`` when it has none); ``policy_options`` the context policy's share of it.
    """

    scaffold: "ScaffoldSpec"
    base_url: str
    api_key: str
    prompt: str
    options: Any
    model: str = "forge"
    tools: Sequence[Tool] = ()
    events: list[Event] = field(default_factory=list)
    policy_options: Any = None
    _policy_client: Any = field(default=None, repr=False)  # the client context policies ask through

    @property
    def context_policy(self) -> str:
        return self.scaffold.context_policy

    @property
    def tool_format(self) -> str:
        return self.scaffold.tool_format

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools]

    def client(self, **kwargs: Any) -> "AsyncOpenAI":
        """The official OpenAI client pointed at this trajectory (no retries: a retry would be recorded twice)."""
        try:
            from openai import AsyncOpenAI
        except ImportError:
            raise ForgeError("white-box loops need the 'openai' package (pip install openai)") from None
        return AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **{"max_retries": 0, **kwargs})

    def report(self, kind: str, **data: Any) -> Event:
        """Record something that happened (a context-management action, a tool error) as a trajectory event."""
        event = Event(kind=kind, at=time.time(), data=data)
        self.events.append(event)
        return event

    def manage(self, messages: Messages) -> Messages:
        """The history to send next, after a *pure* context policy; a removal is reported as an event."""
        policy = context_policy(self.context_policy)
        if policy.apply is None:
            raise ForgeError(f"context policy {policy.name!r} asks the gateway: use 'await episode.managed(messages)'")
        kept, removed = policy.apply(messages, self.policy_options)
        if removed is not None:
            self.report(f"context.{policy.name}", **removed)
        return kept

    @staticmethod
    def agent_headers(agent: str | None) -> dict[str, str]:
        """The ``extra_headers`` that name the agent making a call (``{}`` for the trajectory's only agent)."""
        return {"x-forge-agent": agent} if agent else {}

    async def managed(self, messages: Messages, *, tools: list[dict[str, Any]] | None = None,
                      agent: str | None = None) -> Messages:
        """The history to send next, after the scaffold's context policy (any policy: ``truncate`` and
        ``summarize`` ask the gateway for token counts, ``summarize`` for a summary, as ``agent``);
        ``tools``: the schemas the next call sends (counted with the prompt). A removal is reported as
        a ``context.<policy>`` event (with ``agent`` when one is named)."""
        policy = context_policy(self.context_policy)
        if self._policy_client is None and policy.apply is None:
            self._policy_client = self.client()
        calls = GatewayCalls(self._policy_client, self.model, tools=tools, headers=self.agent_headers(agent),
                             max_tokens=getattr(self.options, "max_tokens", 512),
                             temperature=getattr(self.options, "temperature", None))
        kept, removed = await policy.run(messages, self.policy_options, calls)
        if removed is not None:
            self.report(f"context.{policy.name}", **({"agent": agent} if agent else {}), **removed)
        return kept

    async def call_tool(self, name: str, arguments: Any) -> str:
        """Run one of the task's tools; an unknown tool or one that raises becomes its (reported) result text."""
        tool = next((t for t in self.tools if t.name == name), None)
        if tool is None:
            self.report("tool.unknown", name=name)
            return f"error: there is no tool named {name!r}"
        try:
            if inspect.iscoroutinefunction(tool.run):
                result = await tool.run(arguments)
            else:  # a plain function may take long: never on the loop that also serves the gateway
                import asyncio

                result = await asyncio.to_thread(tool.run, arguments)
                if inspect.isawaitable(result):
                    result = await result
        except Exception as exc:  # a tool's failure is the agent's observation, not a crash
            self.report("tool.error", name=name, error=f"{type(exc).__name__}: {exc}")
            return f"error: {type(exc).__name__}: {exc}"
        return str(result)


@dataclass(frozen=True)
class EpisodeResult:
    """What a loop returned, and the events it reported (the driver writes them to the pool)."""

    answer: str | None
    events: list[Event]


def resolve_loop(spec: "ScaffoldSpec") -> Callable[["Episode"], Awaitable[str | None]]:
    """Import a scaffold's loop and return ``run(episode)``; a clear ForgeError if it cannot."""
    if spec.kind != "white":
        raise ForgeError(f"scaffold '{spec.name}' is black-box: it is launched, it has no loop")
    ref = spec.loop
    if ref is None:
        raise ForgeError(f"scaffold '{spec.name}' names no loop (its {spec.family} family has no code yet)")
    target: Any = ref
    if isinstance(ref, str):
        module_name, _, attr = ref.partition(":")
        try:
            target = importlib.import_module(module_name)
            for part in attr.split("."):
                target = getattr(target, part)
        except Exception as exc:
            raise ForgeError(f"scaffold '{spec.name}': loop {ref!r} does not resolve ({type(exc).__name__}: {exc})") from None
    if inspect.isclass(target):
        method = getattr(target, "run", None)
        if method is None or not inspect.iscoroutinefunction(method):
            raise ForgeError(f"scaffold '{spec.name}': loop class {target.__name__} has no 'async def run(self, episode)'")
        cls = target
        return lambda episode: cls().run(episode)
    if not (inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(getattr(target, "__call__", None))):
        raise ForgeError(f"scaffold '{spec.name}': loop {ref!r} is not an async function or a class with async run()")
    return target


def loop_status(spec: "ScaffoldSpec") -> str | None:
    """``None`` when the scaffold's loop resolves, else why it cannot run (for ``forge scaffold show``)."""
    try:
        resolve_loop(spec)
    except ForgeError as exc:
        return str(exc)
    return None


def loop_label(spec: "ScaffoldSpec") -> str | None:
    ref = spec.loop
    if ref is None or isinstance(ref, str):
        return ref
    return f"{getattr(ref, '__module__', '?')}:{getattr(ref, '__qualname__', repr(ref))}"


async def run_episode(
    scaffold: "str | ScaffoldSpec",
    *,
    base_url: str,
    api_key: str,
    prompt: str,
    options: Mapping[str, Any] | Any = None,
    model: str = "forge",
    tools: Sequence[Tool] = (),
    registry: "Registry | None" = None,
    source: str = "forge.toml",
) -> EpisodeResult:
    """Run one episode of a white-box scaffold in a trajectory's gateway session.

    ``base_url`` and ``api_key`` are the session's (``/admin/sessions`` or
    ``GatewayState.create_session``, opened with the scaffold's tool format). ``options`` is the
    raw ``[scaffolds.NAME]`` table (validated here by the scaffold's options model; ``source``
    names it in errors) or an already validated options instance. Exceptions from the loop
    propagate: the caller fails the trajectory.
    """
    if registry is None:
        registry = get_registry()
    spec = registry.scaffold(scaffold) if isinstance(scaffold, str) else scaffold
    run = resolve_loop(spec)
    if options is None or isinstance(options, Mapping):
        validated = validate_options(spec.options, dict(options or {}), f"{source} [scaffolds.{spec.name}]")
    elif spec.options is not None and not isinstance(options, spec.options):
        raise ForgeError(f"scaffold '{spec.name}': options must be a {spec.options.__name__}, not {type(options).__name__}")
    else:
        validated = options
    policy = context_policy(spec.context_policy)
    if not policy.implemented:
        raise ForgeError(f"scaffold '{spec.name}': its context policy {policy.name!r} is not implemented yet")
    episode = Episode(scaffold=spec, base_url=base_url, api_key=api_key, prompt=prompt, options=validated,
                      model=model, tools=tools, policy_options=policy_options(policy.name, validated))
    try:
        answer = await run(episode)
    finally:
        if episode._policy_client is not None:
            await episode._policy_client.close()
    if answer is not None and not isinstance(answer, str):
        raise ForgeError(f"scaffold '{spec.name}': its loop returned {type(answer).__name__}, not a string or None")
    return EpisodeResult(answer=answer, events=list(episode.events))
