"""Sessions, pause/resume, weights, and the plain endpoints: ``/health``, ``/metrics``, ``/v1/models``."""

from __future__ import annotations

from typing import Literal, Optional

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from forge_cli.errors import ForgeError
from forge_cli.gateway.errors import APIError
from forge_cli.gateway.openapi import body_schema
from forge_cli.gateway.protocol.types import Float
from forge_cli.records.session import SessionRequest
from forge_cli.gateway.routes.common import api_key, read_json, state_of, validate

router = APIRouter()


@router.post("/admin/sessions", openapi_extra=body_schema(SessionRequest, required=False))
async def create_session(request: Request):
    """Open a trajectory session; returns its API key and its base URL."""
    state = state_of(request)
    state.check_admin(api_key(request))
    body = validate(SessionRequest, await read_json(request, optional=True))
    try:
        session = await state.create_session(body)
    except ForgeError as exc:  # the pool refused what the client asked for
        raise APIError(400, str(exc)) from None
    base = str(request.base_url).rstrip("/")
    return {"session": session.id, "api_key": session.api_key, "trajectory_id": session.trajectory_id,
            "base_url": f"{base}/s/{session.id}/v1", "tool_format": session.tool_format or state.default_tool_format,
            "training": session.training, "token_budget": session.token_budget}


@router.delete("/admin/sessions/{session_id}")
async def forget_session(request: Request, session_id: str):
    """Forget a session whose trajectory its driver ends in the pool itself (its history is freed; its
    key then answers 409); says how many output tokens it sampled."""
    state = state_of(request)
    state.check_admin(api_key(request))
    session = state.sessions.get(session_id)
    if session is None:
        raise APIError(404, f"no open session {session_id!r}")
    state.forget(session)
    return {"session": session_id, "trajectory_id": session.trajectory_id, "output_tokens": session.tokens_out}


@router.get("/admin/sessions")
async def list_sessions(request: Request):
    state = state_of(request)
    state.check_admin(api_key(request))
    return {"data": [{"session": s.id, "trajectory_id": s.trajectory_id, "requests": s.requests, "reused_prefix": s.reused,
                      "tool_format": s.tool_format or state.default_tool_format, "training": s.training}
                     for s in state.sessions.values()]}


class FinishSession(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["completed", "failed"] = "completed"
    rewards: Optional[dict[str, Float]] = None
    error: Optional[str] = None


@router.post("/admin/sessions/{session_id}/finish", openapi_extra=body_schema(FinishSession, required=False))
async def finish_session(request: Request, session_id: str):
    """Close a session's trajectory (completed or failed), with its reward components; the session is then forgotten."""
    state = state_of(request)
    state.check_admin(api_key(request))
    body = validate(FinishSession, await read_json(request, optional=True))
    session = await state.finish_session(session_id, status=body.status, rewards=body.rewards, error=body.error)
    return {"session": session_id, "trajectory_id": session.trajectory_id, "status": body.status}


@router.post("/admin/pause")
async def pause(request: Request):
    """Stop admitting generation (new requests wait) and return once in-flight ones are done."""
    state = state_of(request)
    state.check_admin(api_key(request))
    await state.engine.pause()
    return {"paused": True, "version": state.engine.version}


@router.post("/admin/resume")
async def resume(request: Request):
    state = state_of(request)
    state.check_admin(api_key(request))
    await state.engine.resume()
    return {"paused": False, "version": state.engine.version}


class LoadWeights(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str


@router.post("/admin/weights", openapi_extra=body_schema(LoadWeights))
async def load_weights(request: Request):
    """Load new weights from a folder (``model.safetensors``) inside a pause; bumps the policy version."""
    state = state_of(request)
    state.check_admin(api_key(request))
    body = validate(LoadWeights, await read_json(request))
    try:
        version = await state.engine.load_weights(body.path)
    except ForgeError as exc:  # a folder that is not there or does not fit: the model is untouched
        raise APIError(400, str(exc), param="path") from None
    return {"version": version}


@router.get("/")
async def root(request: Request):
    """What a client probing the base URL (``HEAD /``, as claude-code does) finds: where to go next."""
    return {"name": "forge-gateway", "health": "/health", "openapi": "/openapi.json", "models": "/v1/models"}


@router.get("/health")
async def health(request: Request):
    state = state_of(request)
    return {"status": "ok", "engine": state.engine.name, "version": state.engine.version, "paused": state.engine.paused}


@router.get("/metrics")
async def metrics(request: Request):
    return Response(state_of(request).metrics.render(), media_type="text/plain; version=0.0.4")


@router.get("/v1/models")
@router.get("/s/{session}/v1/models")
async def models(request: Request):
    state = state_of(request)
    return JSONResponse({"object": "list", "data": [{"id": state.model_name, "object": "model", "created": 0, "owned_by": "forge"}]})
