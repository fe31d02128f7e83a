"""Field types every request model shares: JSON's own types, strictly.

Pydantic's default (lax) mode turns ``true`` into ``1``, ``"yes"`` into ``True`` and ``"5"`` into
``5``; a client that sends those has a bug the gateway should name, not guess around. ``Float``
also accepts integers (``"temperature": 1``), as JSON does not tell them apart, but never a
non-finite value.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict

Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Float = Annotated[float, Strict(), AllowInfNan(False)]

MAX_TOKENS = 2**31 - 1  # no model has a longer context; larger is a client bug


class LooseModel(BaseModel):
    model_config = ConfigDict(extra="allow")


class JsonSchemaSpec(LooseModel):
    """OpenAI chat's ``response_format.json_schema``."""

    name: str = Field(min_length=1, max_length=64)
    description: Optional[str] = None
    schema_: Optional[dict[str, Any]] = Field(None, alias="schema")
    strict: Optional[Bool] = None


class ChatResponseFormat(LooseModel):
    """OpenAI chat's ``response_format``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaSpec] = None


class ResponsesFormat(LooseModel):
    """The Responses API's ``text.format`` (the schema sits at the top level)."""

    type: Literal["text", "json_object", "json_schema"]
    name: Optional[str] = None
    description: Optional[str] = None
    schema_: Optional[dict[str, Any]] = Field(None, alias="schema")
    strict: Optional[Bool] = None


class AnthropicFormat(LooseModel):
    """Anthropic's ``output_config.format`` (and the beta's top-level ``output_format``)."""

    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


def output_format(kind: str, *, name: str | None = None, schema: dict[str, Any] | None = None,
                  strict: bool | None = None) -> dict[str, Any] | None:
    """The requested output format in one shape for every API (``None``: plain text)."""
    if kind == "text":
        return None
    return {"type": kind, "name": name, "schema": schema, "strict": strict}
