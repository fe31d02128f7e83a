"""The session request: what opening one trajectory's gateway session asks for.

One definition for every way a session is opened: the in-process gateway
(:meth:`forge_cli.gateway.server.Gateway.open_session`), the remote client
(:class:`forge_cli.rollout.remote.RemoteGateway`, over ``POST /admin/sessions``), the admin endpoint
that validates that body, and the gateway's state that makes the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field, Strict


class SessionRequest(BaseModel):
    """``POST /admin/sessions``'s body, and the in-process call's argument. ``training: true``: the
    session samples as the trainer computes logprobs (top_p = 1, no top_k, no penalties, whatever
    the agent asks); without it the session is ad hoc and its completions are marked not for
    training. ``trajectory_id``: a driver's trajectory, already in the pool (default: a new one of
    its own). ``token_budget``: output tokens the trajectory may sample in all (each call's
    max_tokens is cut to what is left; then a 409)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str = Field("adhoc", min_length=1, max_length=512)
    scaffold: str = Field("external", min_length=1, max_length=128)
    tool_format: Optional[str] = None
    trajectory_id: Optional[str] = None
    training: Annotated[bool, Strict()] = False
    token_budget: Optional[Annotated[int, Strict()]] = Field(None, ge=1, description="Output tokens the trajectory may sample in all.")


@dataclass(frozen=True)
class SessionInfo:
    """A trajectory's open session, as an agent is pointed at it: ``base_url`` is
    ``http://HOST:PORT/s/<session>/v1`` (the key alone works too, on ``/v1``)."""

    id: str
    api_key: str
    base_url: str
    trajectory_id: str | None
    tool_format: str
