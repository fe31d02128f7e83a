"""Config sections that are one of several kinds: pydantic's discriminated unions on ``type``.

:func:`tagged_union` builds the annotation and :func:`name_table` the one table of names of such
a section (``[model.engine]``, ``[pool.scheduler]``, ``[train.engine]``, ``[train.loss]``). A name
alone stands for its table: ``"hf"`` is ``{"type": "hf"}``, in a file, a variable, a flag, or a
run's saved ``config.json``.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BaseModel, BeforeValidator, Field


def name_is_short_for_table(value: Any) -> Any:
    return {"type": value} if isinstance(value, str) else value


def tagged_union(*members: type[BaseModel]) -> Any:
    """``Annotated[Union[members], Field(discriminator="type")]`` that also takes a bare name."""
    return Annotated[Union[members], Field(discriminator="type"), BeforeValidator(name_is_short_for_table)]  # type: ignore[valid-type]


def name_table(*members: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """``{type name: member}``: the one list of names of the section."""
    return {m.model_fields["type"].default: m for m in members}
