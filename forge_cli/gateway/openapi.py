"""``GET /openapi.json``: the gateway's contract, with each POST endpoint's body from its request model.

The routes read their bodies as raw JSON (to answer every mistake in the provider's own error
shape), so FastAPI cannot see the models; each route names its model with :func:`body_schema`
and :func:`document` puts the models' JSON schemas into ``components.schemas``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

REF = "#/components/schemas/{model}"
_models: dict[str, type[BaseModel]] = {}


def _key(model: type[BaseModel]) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def body_schema(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """A route's ``openapi_extra``: its JSON body is ``model`` (resolved by :func:`document`)."""
    _models[_key(model)] = model
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": {"x-forge-model": _key(model)}}}}}


def document(app: Any) -> dict[str, Any]:
    """The OpenAPI document of ``app``, every ``body_schema`` replaced by a ``$ref`` to its model."""
    from fastapi.openapi.utils import get_openapi

    spec = get_openapi(title=app.title, version=app.version, routes=app.routes,
                       description="OpenAI- and Anthropic-compatible endpoints of a Forge gateway; every call is recorded.")
    used = sorted({op["requestBody"]["content"]["application/json"]["schema"]["x-forge-model"]
                   for item in spec["paths"].values() for op in item.values()
                   if "x-forge-model" in op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})})
    models = [_models[k] for k in used]
    refs, defs = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(defs.get("$defs", {}))
    by_key = {_key(m): refs[(m, "validation")] for m in models}
    for item in spec["paths"].values():
        for op in item.values():
            schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if "x-forge-model" in schema:
                key = schema.pop("x-forge-model")
                schema.update(by_key[key])
    return spec
