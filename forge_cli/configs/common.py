"""What every config module shares: the section base, and one way to say what is wrong with a value."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from forge_cli.errors import ForgeError


class Section(BaseModel):
    """A config table: unknown keys are errors; assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def union_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Dotted keys of ``model``'s sections that are discriminated unions (``model.engine``, …)."""
    paths = set()
    for name, info in model.model_fields.items():
        if info.discriminator is not None:
            paths.add(prefix + name)
        elif isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            paths |= union_paths(info.annotation, f"{prefix}{name}.")
    return paths


def union_tags(model: type[BaseModel], parts: list[str]) -> set[str]:
    """The ``type`` names of the union at the dotted path ``parts`` of ``model``."""
    node: Any = model
    for part in parts[:-1]:
        node = node.model_fields[part].annotation
    info = node.model_fields[parts[-1]]
    members = getattr(info.annotation, "__args__", ())
    return {m.model_fields["type"].default for m in members if isinstance(m, type) and issubclass(m, BaseModel)}


def describe_error(exc: ValidationError, model: type[BaseModel], origin_of: Callable[[str], str]) -> str:
    """One line for the first error of validating ``model``: where the value came from, its dotted
    key, and what is wrong (``forge.toml: pool.max_active_groups: …``)."""
    err = exc.errors()[0]
    unions = union_paths(model)
    parts: list[str] = []
    tag = None
    for part in err["loc"]:
        if parts and ".".join(parts) in unions and tag is None and isinstance(part, str) and part in union_tags(model, parts):
            tag = part  # pydantic's name for the union member it tried
            continue
        parts.append(str(part))
    dotted = ".".join(parts)
    kind = err["type"]
    if kind == "extra_forbidden":
        what = f"unknown key for type = {tag!r}" if tag else "unknown key"
    elif kind == "missing":
        what = "required key is missing"
    elif kind == "union_tag_invalid":
        what = f"type must be one of {err['ctx']['expected_tags']} (got {err['ctx']['tag']!r})"
    else:
        got = err.get("input")
        what = f"{err['msg']} (got {got!r})" if not isinstance(got, dict) else err["msg"]
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{origin_of(dotted)}: {dotted}: {what}{more}"


def validate_options(model: type[BaseModel] | None, raw: Mapping[str, Any], where: str,
                     origin_of: Callable[[str], str] | None = None) -> BaseModel | dict[str, Any]:
    """Validate one plugin section (``[scaffolds.NAME]``) against the model its plugin registered.

    ``where`` names the section for the error (``forge.toml [scaffolds.NAME]``); ``origin_of``, when
    given, says where a key of the section came from (the file, an environment variable, a ``--set``
    flag) and is put before ``where``. A plugin that registered no model accepts no keys.
    """

    def blame(key: str) -> str:
        return f"{origin_of(key)} {where}" if origin_of is not None else where

    if model is None:
        if raw:
            key = next(iter(raw))
            raise ForgeError(f"{blame(key)}: unknown key '{key}' (this takes no options)")
        return {}
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        raise ForgeError(describe_error(exc, model, lambda dotted: blame(dotted.split(".")[0]))) from None
