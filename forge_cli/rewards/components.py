"""The built-in reward components: outcome, process (per completion) and completion time.

Each is a ``compute`` function of the :class:`~forge_cli.specs.RewardSpec` contract; the built-in
plugin :mod:`forge_cli.builtin.rewards` registers them. The process component's parts —
unparsable tool calls, unknown tools, arguments that fail the tool's JSON schema, language mixing
— are plain functions here so they can be tested on their own.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from forge_cli.configs.rewards import RewardsConfig
from forge_cli.plugins import get_registry
from forge_cli.specs import RewardValue, ToolCall

if TYPE_CHECKING:  # registering the built-in components imports no pool
    from forge_cli.pool.types import Completion, Trajectory

# ---- outcome ---------------------------------------------------------------------------------


def outcome_reward(trajectory: Trajectory, outcome: Any = None) -> float:
    """The verifier's score; 0 for a trajectory that was not verified (crashed, timed out)."""
    return float(outcome.score) if outcome is not None else 0.0


# ---- completion time -------------------------------------------------------------------------


def duration(trajectory: Trajectory, source: str = "trajectory") -> float | None:
    """How long a trajectory took: its wall-clock span (``trajectory``; from its completions' times
    when the trajectory's own are missing) or its completions' summed generation time
    (``generation``); None when nothing tells."""
    cs = trajectory.completions
    if source == "generation":
        return sum(max(c.finished_at - c.started_at, 0.0) for c in cs) if cs else None
    if trajectory.started_at is not None and trajectory.finished_at is not None:
        return max(trajectory.finished_at - trajectory.started_at, 0.0)
    if cs:
        return max(max(c.finished_at for c in cs) - min(c.started_at for c in cs), 0.0)
    return None


def is_correct(trajectory: Trajectory, outcome: Any, correct_score: float) -> bool:
    """Completed, verified, and scored at least ``correct_score``."""
    return trajectory.status == "completed" and outcome is not None and outcome.score >= correct_score


def completion_time_reward(
    trajectory: Trajectory, group: Sequence[Trajectory], outcomes: Mapping[str, Any], settings: RewardsConfig
) -> float:
    """``(d_max − d) / d_max`` over the correct runs of the group (``d_max`` the slowest of them):
    the fastest correct run earns the most, the slowest correct one 0, and a wrong (or failed, or
    timed-out) run always 0, so being fast never pays without being right. In [0, 1)."""
    cfg = settings.completion_time
    if not is_correct(trajectory, outcomes.get(trajectory.id), cfg.correct_score):
        return 0.0
    mine = duration(trajectory, cfg.source)
    correct = [duration(t, cfg.source) for t in group if is_correct(t, outcomes.get(t.id), cfg.correct_score)]
    known = [d for d in correct if d is not None]
    if mine is None or not known or max(known) <= 0.0:
        return 0.0
    return (max(known) - mine) / max(known)


# ---- process -----------------------------------------------------------------------------------


def offered_tools(completion: Completion, tools: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Tool name → its JSON schema of parameters, from the recorded request's ``tools`` (OpenAI chat,
    Responses or Anthropic shape) or else from ``tools`` (the task's schemas)."""
    listed = (completion.request or {}).get("tools") or list(tools)
    out: dict[str, Any] = {}
    for tool in listed:
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        name = fn.get("name")
        if isinstance(name, str):
            out[name] = fn.get("parameters", fn.get("input_schema", {})) or {}
    return out


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_errors(value: Any, schema: Any, path: str = "arguments") -> list[str]:
    """Where ``value`` breaks ``schema``, for the JSON-schema keywords tool schemas use (``type``,
    ``enum``, ``const``, ``required``, ``properties``, ``additionalProperties``, ``items``); other
    keywords are not checked. ``[]`` means valid."""
    if not isinstance(schema, Mapping):
        return []
    errors: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return [f"{path} is not of type {'/'.join(kinds)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path} is not one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path} is not {schema['const']!r}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        errors += [f"{path}.{key} is missing" for key in schema.get("required", []) if key not in value]
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                errors += schema_errors(item, props[key], f"{path}.{key}")
            elif extra is False:
                errors.append(f"{path}.{key} is not allowed")
            elif isinstance(extra, Mapping):
                errors += schema_errors(item, extra, f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{path}[{i}]")
    return errors


_CODE = re.compile(r"```.*?(?:```|$)|`[^`\n]*`", re.S)


def _script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    first = unicodedata.name(ch, "OTHER").split(" ")[0]
    return "CJK" if first in ("CJK", "HIRAGANA", "KATAKANA", "KANGXI", "IDEOGRAPHIC") else first


def language_mixing(text: str, min_words: int = 4) -> float:
    """The fraction of the words of ``text`` (code spans left out) that are not in its main script:
    a word is a run of letters of one script, and each CJK character is a word of its own. 0 for a
    text in one script or with fewer than ``min_words`` words."""
    counts: dict[str, int] = {}
    previous: str | None = None
    for ch in _CODE.sub(" ", text):
        script = _script(ch)
        if script is not None and (script != previous or script == "CJK"):
            counts[script] = counts.get(script, 0) + 1
        previous = script
    total = sum(counts.values())
    if total < min_words:
        return 0.0
    return 1.0 - max(counts.values()) / total


def _arguments(call: Any) -> Any:
    args = call.arguments
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


def process_penalties(
    completion: Completion, text: str | None, settings: RewardsConfig, tools: Sequence[Mapping[str, Any]] = (),
    parse: Callable[[str, str], Any] | None = None,
) -> dict[str, float]:
    """The counts behind one completion's process reward: ``parse_errors`` and ``unknown_tools``
    (from its recorded parse errors: the gateway records a call to an unknown tool as one, with the
    reason "unknown tool …"), ``invalid_arguments`` (calls to an offered tool whose arguments fail
    its schema) and ``language_mixing`` (a fraction); the last two need its ``text``, and calls are
    parsed from it with ``parse(tool_format, text)``."""
    unknown = sum(1 for e in completion.parse_errors if str(e.get("reason", "")).startswith("unknown tool"))
    counts = {"parse_errors": float(len(completion.parse_errors) - unknown), "unknown_tools": float(unknown),
              "invalid_arguments": 0.0, "language_mixing": 0.0}
    if text is None:
        return counts
    content = text
    schemas = offered_tools(completion, tools)
    parsed = parse(completion.tool_format, text) if parse is not None and completion.tool_format and schemas else None
    if parsed is not None:
        content = parsed.content
    # the calls the gateway parsed and returned (recorded since pool schema 4), else parsed again
    calls = ([ToolCall(c["name"], c["arguments"]) for c in completion.tool_calls] if completion.tool_calls is not None
             else parsed.calls if parsed is not None else [])
    if schemas:
        counts["invalid_arguments"] = float(sum(
            1 for call in calls if call.name in schemas and schema_errors(_arguments(call), schemas[call.name])
        ))
    counts["language_mixing"] = language_mixing(content, settings.process.min_words)
    return counts


def _registry_parse(tool_format: str, text: str) -> Any:
    """The text parsed again by its format: None for one that reads a model's tokens (bound by the
    gateway to its tokenizer: native, vLLM's parsers), whose calls the completion records."""
    fmt = get_registry().tool_format(tool_format)
    return fmt.parse(text) if fmt.rendering == "text" else None


def process_reward(
    trajectory: Trajectory, settings: RewardsConfig, texts: Sequence[str | None] = (),
    tools: Sequence[Mapping[str, Any]] = (),
) -> RewardValue:
    """Minus each completion's weighted penalties (:func:`process_penalties`), credited to it."""
    p = settings.process
    values = []
    for i, completion in enumerate(trajectory.completions):
        text = texts[i] if i < len(texts) else None
        c = process_penalties(completion, text, settings, tools, _registry_parse)
        values.append(-(p.parse_error * c["parse_errors"] + p.unknown_tool * c["unknown_tools"]
                        + p.invalid_arguments * c["invalid_arguments"] + p.language_mixing * c["language_mixing"]))
    return RewardValue(0.0, tuple(values))
