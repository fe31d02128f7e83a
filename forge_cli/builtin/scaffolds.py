"""Built-in scaffolds: the definition files in Forge's ``scaffolds/`` folder, and the systematic
family × context policy × tool format combinations of Forge's own loops.

Systematic names (scaffolds/README.md): ``FAMILY[-POLICY][_FORMAT]`` — the policy left out when it
is ``none``, the format when it is the family's default (``tool-call``, ``tool-call-truncate``,
``react-summarize``, ``orchestrator-keep-last-k``, ``tool-call-truncate_qwen3-coder``, …). Every
family is crossed with every white-box context policy and with the formats its
:class:`~forge_cli.rollout.families.Family` names (``tool-call``: every built-in function-calling
format; the tool format is the gateway's concern, the policies act on OpenAI messages). The named presets in
``scaffolds/white/*.toml`` (``react``, ``truncate-bc``, ``discard-tool-output``, ``summarize``,
``keep-last-k``) point at the same loops. Every one of them is driven through an episode by
``tests/test_scaffold_contract.py``.

A white-box scaffold's options are its family's (:mod:`forge_cli.rollout.families`) plus those of
its context policy, and ``mcp`` (the MCP servers its tools come from: :mod:`forge_cli.rollout.mcp_tools`);
black-box scaffolds share the options of a launched agent (:class:`forge_cli.specs.AgentOptions`, which
every black-box scaffold gets whatever plugin registers it), ``mcp`` refused in one line for the agents
that take no MCP servers (:mod:`forge_cli.rollout.agent_mcp`). Both are what ``[scaffolds.NAME]`` in
``forge.toml`` may set.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from pydantic import BaseModel

from forge_cli import hookimpl
from forge_cli.builtin.tool_formats import TEXT_FORMATS
from forge_cli.paths import data_dir
from forge_cli.rollout.agent_mcp import supports_mcp, unsupported
from forge_cli.rollout.context import CONTEXT_POLICIES, context_policy, with_policy_options
from forge_cli.rollout.families import FAMILIES, Family, ToolLoopOptions
from forge_cli.rollout.mcp_tools import with_mcp_option
from forge_cli.specs import AgentOptions, ScaffoldSpec, agent_options

__all__ = ["AgentOptions", "ToolLoopOptions", "load_definitions", "scaffold_name", "systematic_scaffolds"]


def _black_options(spec: ScaffoldSpec) -> type[BaseModel]:
    """A black-box agent's options: ``mcp`` for those that take MCP servers, refused (one line) for the others."""
    return agent_options(None, None if supports_mcp(spec) else unsupported(spec))


def _white_options(spec: ScaffoldSpec) -> type[BaseModel]:
    family = FAMILIES.get(spec.family or "")
    return with_mcp_option(with_policy_options(family.options if family else ToolLoopOptions, spec.context_policy))


def load_definitions() -> list[ScaffoldSpec]:
    """Every ``scaffolds/{white,black}/*.toml``, with the options model of its kind attached."""
    root = data_dir("scaffolds")
    specs = []
    for path in sorted(root.glob("white/*.toml")) + sorted(root.glob("black/*.toml")):
        spec = ScaffoldSpec.from_toml(path)
        options = _white_options(spec) if spec.kind == "white" else _black_options(spec)
        specs.append(dataclasses.replace(spec, options=options))
    return specs


def scaffold_name(family: str, policy: str, tool_format: str | None) -> str:
    """The systematic name of a combination: ``FAMILY[-POLICY][_FORMAT]``."""
    policy = context_policy(policy).name
    name = family if policy == "none" else f"{family}-{policy}"
    return name if tool_format == FAMILIES[family].default_format else f"{name}_{tool_format}"


def _formats(family: Family) -> tuple[str | None, ...]:
    if family.formats is not None:
        return family.formats

    # None: the model's own format (native, or hermes for the embedded model), then Forge's text
    # formats. The ReAct format is the react family's (text parsed by the loop); hermes-unlisted is
    # Hermes for a model trained on its tools: only its preset (tool-call-unlisted) uses it
    return (None, *(f.name for f in TEXT_FORMATS if f.name not in ("react", "hermes-unlisted")))


def systematic_scaffolds() -> list[ScaffoldSpec]:
    """Every family × white-box context policy × tool format the family runs with."""
    specs = []
    policies = [name for name, p in CONTEXT_POLICIES.items() if p.kind == "white"]
    for family in FAMILIES.values():
        for policy in policies:
            for fmt in _formats(family):
                described = "" if policy == "none" else f"; context policy {policy}"
                spec = ScaffoldSpec(
                    name=scaffold_name(family.name, policy, fmt), kind="white", family=family.name, loop=family.loop,
                    context_policy=policy, tool_format=fmt,
                    description=f"{family.description}{described}; tool format {fmt or 'the model’s own'}.")
                specs.append(dataclasses.replace(spec, options=_white_options(spec)))
    return specs


@hookimpl
def register_scaffolds(register: Callable[[ScaffoldSpec], None]) -> None:
    presets = load_definitions()
    for spec in presets:
        register(spec)
    named = {spec.name for spec in presets}
    for spec in systematic_scaffolds():
        if spec.name not in named:  # the react preset is the react family's systematic 'react'
            register(spec)
