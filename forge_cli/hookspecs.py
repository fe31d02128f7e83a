"""The hooks a Forge plugin implements.

A plugin is a module (or object) with functions marked ``@forge_cli.hookimpl``, published under
the entry-point group ``forge``. Forge's own built-ins are plugins of exactly this kind.

Every ``register_*`` hook receives a ``register`` callback. Call it once per thing; the host
validates each one, and an invalid or duplicate registration is rejected with one warning line
naming your plugin — the rest of Forge keeps working. See ``docs/plugins.md`` for a walk-through.

How the host calls these hooks (``forge_cli.plugins.collect``):

- one plugin at a time, so each registration is attributed to its plugin and an exception
  costs only that plugin's registrations for that hook;
- with only the arguments your implementation declares (as pluggy does), so a hookspec here may
  gain an argument later without breaking your plugin;
- in load order: Forge's built-ins, then entry points, then plugins passed in-process. On a
  duplicate name the **first registration wins**, so a third party can never silently replace a
  built-in (or an earlier plugin's) scaffold, tool format, sandbox, task set or reward; the later
  one is ignored with a warning. ``tryfirst``/``trylast`` do not change this;
- ``wrapper=True``/``hookwrapper=True`` implementations are refused with a warning and never run:
  each plugin's hook is called on its own, so there is nothing for a wrapper to wrap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    import typer

    from forge_cli.specs import ReasoningParser, RewardSpec, SandboxSpec, ScaffoldSpec, ToolFormat
    from forge_cli.tasks.types import TaskSuite

hookspec = pluggy.HookspecMarker("forge")


@hookspec
def register_scaffolds(register: Callable[["ScaffoldSpec"], None]) -> None:
    """Register agent scaffolds (harnesses) by calling ``register(ScaffoldSpec(...))``.

    A white-box scaffold names its ``family``, its ``loop`` (``"package.module:attr"``: the code
    Forge runs, see :mod:`forge_cli.rollout.loop`), its ``context_policy`` (a name from
    :data:`forge_cli.rollout.context.CONTEXT_POLICIES`) and its default ``tool_format``; a
    black-box scaffold carries an :class:`~forge_cli.specs.InstallRecipe` and a
    :class:`~forge_cli.specs.LaunchSpec`. Names are unique across all plugins: the first
    registration wins.
    """


@hookspec
def register_tool_formats(register: Callable[["ToolFormat"], None]) -> None:
    """Register tool-call formats by calling ``register(MyFormat())``.

    A format is a :class:`~forge_cli.specs.ToolFormat` instance: it parses tool calls out of
    generated text and, with ``rendering = "text"``, writes tool schemas and earlier calls into the
    prompt (with ``"template"`` the model's chat template does). ``parse`` must never raise. Forge
    registers ``native`` (the model's own template and parser) and every tool-call parser vLLM
    ships, under vLLM's name.
    """


@hookspec
def register_reasoning_parsers(register: Callable[["ReasoningParser"], None]) -> None:
    """Register reasoning parsers by calling ``register(MyParser())``.

    A parser is a :class:`~forge_cli.specs.ReasoningParser` instance: ``split(text)`` returns the
    model's thinking and its answer (``model.reasoning_parser`` names the one a gateway uses).
    ``split`` must never raise. Forge registers every reasoning parser vLLM ships under vLLM's name.
    """


@hookspec
def register_sandboxes(register: Callable[["SandboxSpec"], None]) -> None:
    """Register sandboxes (where agents run) by calling ``register(SandboxSpec(...))``.

    ``check()`` says whether the sandbox is usable on this machine (``None``) or why not.
    """


@hookspec
def register_tasks(register: Callable[["TaskSuite"], None]) -> None:
    """Register task suites by calling ``register(TaskSuite(...))`` (:mod:`forge_cli.tasks.types`).

    ``make(split, n, seed)`` returns ``n`` :class:`~forge_cli.tasks.types.Task` records of the
    ``"train"`` or ``"heldout"`` split (the same seed gives the same tasks; the splits never share
    a task); ``verifier.verify(task, workdir, transcript)`` returns an ``Outcome``;
    ``tools(task, workdir)`` are the tools a white-box loop gets. A JSONL file of tasks becomes a
    suite with :func:`forge_cli.tasks.user.load_user_suite`.
    """


@hookspec
def register_rewards(register: Callable[["RewardSpec"], None]) -> None:
    """Register reward components by calling ``register(RewardSpec(...))``.

    ``compute(trajectory, **context)`` returns a float (a trajectory-level value) or a
    :class:`~forge_cli.specs.RewardValue`: a trajectory-level ``value`` and/or ``per_completion``
    values, one per completion, credited to the turn that earned them. It gets only the context
    arguments it declares (``group``, ``outcome``, ``outcomes``, ``texts``, ``tools``, ``settings``;
    see :class:`~forge_cli.specs.RewardSpec`). A trajectory's reward is the sum of its components,
    each times its ``[rewards] weights`` entry and each logged by name; only components named in
    ``weights`` are computed. A component that raises, returns a non-finite number or the wrong
    number of per-completion values stops the group's rewards with a one-line ForgeError naming it.
    """


@hookspec
def register_commands(app: "typer.Typer") -> None:
    """Add commands to the ``forge`` CLI: ``@app.command()`` or ``app.add_typer(...)``.

    Called at start-up for every ``forge`` invocation, so keep imports inside the command
    functions (``forge --help`` must stay fast).
    """
