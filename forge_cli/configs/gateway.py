"""``[gateway]``: the OpenAI/Anthropic-compatible HTTP server agents talk to."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from forge_cli.configs.common import Section


SERVE_PORT = 8000  # forge gateway serve's port when gateway.port is not set


class GatewayConfig(Section):
    """The OpenAI/Anthropic-compatible HTTP server agents talk to."""

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int | None = Field(None, ge=0, le=65535, description=(
        f"TCP port (0: any free one). Unset: forge gateway serve listens on {SERVE_PORT}; a rollout or a training run "
        "on any free port (its agents reach it through the unix socket or the URL they are given), so two can run at once."))
    auth: Literal["auto", "loopback", "strict"] = Field(
        "auto", description="auto = loopback on 127.0.0.1/localhost, strict elsewhere."
    )
    socket: str = Field(
        "auto", description='Also listen on this unix socket (sandboxed agents reach the gateway through it): '
                            '"auto" = gateway.sock in the run folder, "" = TCP only, else a path.'
    )

    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Larger request bodies get a 413.")
    body_timeout_s: float = Field(30.0, gt=0, description="A request body not fully received by then gets a 408.")
    record_requests: bool = Field(False, description=(
        "Store each call's raw request body with its completion (forge pool show --json prints it), for debugging a "
        "client; off: only what training needs is stored."))

    @field_validator("socket")
    @classmethod
    def _socket_is_auto_none_or_a_path(cls, value: str) -> str:
        if value in ("", "auto") or "/" in value or value.endswith(".sock"):
            return value
        raise ValueError(f'{value!r} is neither "auto", "" (no socket) nor a path (one with a "/" or ending in .sock)')
