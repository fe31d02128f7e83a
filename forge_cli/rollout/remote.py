"""A running ``forge gateway serve`` as the rollout driver's gateway (``forge rollout --gateway URL``).

The driver needs from a gateway what :class:`forge_cli.gateway.server.Gateway` offers in-process:
open a trajectory's session (``POST /admin/sessions``, with the admin key the server printed),
forget it when the driver ends the trajectory (``DELETE /admin/sessions/ID``), the model's name
(``GET /v1/models``), and the run's pool, which the driver opens itself — the server's run folder
(``--run NAME``, the same name the server was started with) on SQLite, or the shared PostgreSQL
``pool.url``. The driver never takes the run's lock: the server holds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import httpx

from forge_cli.engine.default_model import resolve_model_path
from forge_cli.errors import ForgeError
from forge_cli.gateway.token_text import output_text
from forge_cli.pool.store import open_pool
from forge_cli.records.session import SessionInfo, SessionRequest
from forge_cli.runs import resolve_run


class DriverGateway(Protocol):
    """What the rollout driver needs of a gateway: the in-process one
    (:class:`forge_cli.gateway.server.Gateway`) and :class:`RemoteGateway` both offer it."""

    url: str
    run_dir: Path  # the run it records into
    pool: Any  # that run's pool
    model_name: str

    async def open_session(self, request: SessionRequest) -> SessionInfo: ...

    async def close_session(self, session_id: str) -> int: ...

    def output_text(self, output_ids: list[int]) -> str: ...


class RemoteGateway:
    """A ``forge gateway serve`` elsewhere, as a :class:`DriverGateway`."""

    def __init__(self, url: str, admin_key: str, run_dir: Path, pool: Any, tokenizer: Any, eos_token_id: int | None,
                 model_name: str, client: Any) -> None:
        self.url, self.admin_key, self.run_dir, self.pool = url.rstrip("/"), admin_key, run_dir, pool
        self.tokenizer, self.eos_token_id, self.model_name, self.client = tokenizer, eos_token_id, model_name, client

    @classmethod
    async def connect(cls, config: Any, url: str, admin_key: str, run: str | None) -> "RemoteGateway":
        if not run:
            raise ForgeError("--gateway URL needs --run NAME: the run the gateway records into (its pool is the driver's too)")
        if not admin_key:
            raise ForgeError("--gateway URL needs the admin key it printed (--admin-key, or FORGE_ADMIN_KEY)")
        client = httpx.AsyncClient(base_url=url.rstrip("/"), timeout=60, headers={"Authorization": f"Bearer {admin_key}"})
        try:
            models = await client.get("/v1/models")
            probe = await client.get("/admin/sessions")
        except httpx.HTTPError as exc:
            await client.aclose()
            raise ForgeError(f"no gateway answers at {url}: {type(exc).__name__}: {exc}") from None
        if probe.status_code == 401:
            await client.aclose()
            raise ForgeError(f"the gateway at {url} refused the admin key")
        run_dir = resolve_run(config, run)
        from transformers import (
            AutoTokenizer,  # the same model folder as the server's: the reward texts are decoded here
        )

        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(config.model.path))
        pool = open_pool(config.pool.url, run_dir, create=False)
        return cls(url, admin_key, run_dir, pool, tokenizer, tokenizer.eos_token_id, models.json()["data"][0]["id"], client)

    async def open_session(self, request: SessionRequest = SessionRequest()) -> SessionInfo:
        r = await self.client.post("/admin/sessions", json=request.model_dump(exclude_none=True))
        if r.status_code != 200:
            raise ForgeError(f"the gateway refused a session: {r.status_code} {r.text[:300]}")
        data = r.json()
        return SessionInfo(data["session"], data["api_key"], data["base_url"], data["trajectory_id"], data["tool_format"])

    async def close_session(self, session_id: str) -> int:
        r = await self.client.delete(f"/admin/sessions/{session_id}")
        return r.json().get("output_tokens", 0) if r.status_code == 200 else 0

    def output_text(self, output_ids: list[int]) -> str:
        return output_text(self.tokenizer, self.eos_token_id, output_ids)

    async def close(self) -> None:
        await self.client.aclose()
        self.pool.close()
