"""What the gateway holds: the engine, the tokenizer, the tool formats, the pool, and sessions.

A session is one trajectory. On loopback (``auth = loopback``, the default there) any API key is
accepted and each distinct key is its own recorded session, so any agent can be pointed at the
gateway with no set-up (a request with no key at all is refused: all keyless clients would share
one trajectory, and splitting them per connection would cut one agent's calls apart); ``strict`` accepts only keys issued by ``POST /admin/sessions``. Either
way a request is recorded into exactly the session its key (or its ``/s/<session>/v1`` URL)
names, and nothing lets one key reach another session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from forge_cli.engine.base import Engine, GenerationOutput
from forge_cli.errors import ForgeError
from forge_cli.gateway.errors import APIError
from forge_cli.gateway.metrics import Metrics
from forge_cli.gateway.prompt_codec import prompt_codec
from forge_cli.pool.types import NewCompletion, PromptHistory, Sampling
from forge_cli.records.session import SessionRequest
from forge_cli.specs import ReasoningParser, ToolFormat
from forge_cli.token_ids import common_prefix
from forge_cli.toolformats.native import ModelFormats, renders_own_ids

MAX_ENDED = 65536  # ended sessions whose key and id are kept to answer 409 (a few MB at most)


@dataclass
class Session:
    id: str
    api_key: str
    trajectory_id: str | None
    tool_format: str | None = None
    scaffold: str | None = None  # the scaffold that opened it (drift is counted per scaffold)
    training: bool = False  # sampled for training: top_p = 1, no top_k, no penalties (see routes.common.training_params)
    token_budget: int | None = None  # output tokens the trajectory may sample in all; then its calls get a 409
    tokens_out: int = 0  # output tokens sampled so far
    created_at: float = field(default_factory=time.time)
    requests: int = 0
    reused: int = 0  # requests whose prompt began with an earlier completion's exact ids
    history: list[tuple[str, list[int]]] = field(default_factory=list)  # (text, ids) of each prompt+output
    thoughts: dict[tuple[Any, ...], str] = field(default_factory=dict)  # an answer (content, calls) -> the thinking sampled before it
    responses: dict[str, Any] = field(default_factory=dict)  # Responses API: a kept response's id -> how to continue it (routes.responses)


class GatewayState:
    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        tool_formats: dict[str, ToolFormat],
        *,
        pool: Any = None,
        default_tool_format: str | None = "hermes",  # None: the model's own (forge_cli.toolformats.native.ModelFormats)
        reasoning_parsers: dict[str, ReasoningParser] | None = None,
        model_type: str | None = None,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        model_name: str = "forge",
        auth: str = "loopback",
        admin_key: str | None = None,
        record_requests: bool = False,
        adhoc_timeout_s: float = 3600.0,
    ) -> None:
        if auth not in ("loopback", "strict"):
            raise ForgeError(f"auth must be 'loopback' or 'strict', not {auth!r}")
        self.engine = engine
        self.tokenizer = tokenizer
        # the model's formats: default (native where its template takes tools), bound on first use
        self.formats = ModelFormats(tokenizer, tool_formats, reasoning_parsers, model_type=model_type, tool_format=default_tool_format,
                                    tool_parser=tool_parser, reasoning_parser=reasoning_parser)
        self.default_tool_format = self.formats.default
        self.tokenizer = self.formats.tokenizer  # the same vocabulary; its chat template the family's own encoder where it has one
        self.pool = pool
        self.model_name = model_name
        self.auth = auth
        self.admin_key = admin_key or "forge-admin-" + secrets.token_urlsafe(16)
        self.record_requests = record_requests
        # a session opened without a trajectory gets a group of its own in the queue; its time
        # budget keeps a forgotten session from stalling a FIFO trainer reading the same pool
        self.adhoc_timeout_s = adhoc_timeout_s
        self._opened: set[str] = set()  # trajectories this gateway opened itself (not a driver's)
        self.metrics = Metrics()
        self.sessions: dict[str, Session] = {}
        self.by_key: dict[str, str] = {}
        self.ended: OrderedDict[str, None] = OrderedDict()  # "key:K" and "session:ID" of ended sessions, newest last
        self._lock = asyncio.Lock()

    # ---- sessions ---------------------------------------------------------------------------------

    async def create_session(self, request: SessionRequest, *, api_key: str | None = None) -> Session:
        """Open a session (one trajectory: its own, new in the pool, unless ``request.trajectory_id``
        names a driver's). ``request.training``: its calls are sampled as the trainer computes logprobs
        (top_p = 1, no top_k, no penalties, whatever the agent asks); otherwise they are ad hoc and
        every completion is marked ``sampling.training = False``, which the trainer refuses."""
        task_id, scaffold, tool_format = request.task_id, request.scaffold, request.tool_format
        trajectory_id, training, token_budget = request.trajectory_id, request.training, request.token_budget
        if tool_format is not None:
            try:
                await run_in_threadpool(self.formats.get, tool_format)  # binding a vLLM parser imports vLLM
            except ForgeError as exc:
                raise APIError(400, f"tool_format: {exc}", param="tool_format") from None
        if trajectory_id is None and self.pool is not None:
            group = await run_in_threadpool(lambda: self.pool.submit_group(task_id, 1, scaffold, timeout_s=self.adhoc_timeout_s))
            trajectory_id = group.trajectories[0].id
            await run_in_threadpool(self.pool.start_trajectory, trajectory_id)
            self._opened.add(trajectory_id)
        elif trajectory_id is not None and self.pool is not None:
            status = await run_in_threadpool(self.pool.trajectory_status, trajectory_id)
            if status is None:
                raise APIError(404, f"trajectory_id: no trajectory {trajectory_id!r} in the pool", param="trajectory_id")
            if status == "queued":
                await run_in_threadpool(self.pool.start_trajectory, trajectory_id)
            elif status != "running":
                raise APIError(409, f"trajectory_id: trajectory {trajectory_id} is {status}; it can no longer record", param="trajectory_id")
        # the session id is a credential too (the /s/<session>/v1 URL): as long as a key
        session = Session(id=secrets.token_urlsafe(24), api_key=api_key or "forge-" + secrets.token_urlsafe(24),
                          trajectory_id=trajectory_id, tool_format=tool_format, scaffold=request.scaffold, training=bool(training),
                          token_budget=token_budget)
        self.sessions[session.id] = session
        self.by_key[session.api_key] = session.id
        return session

    async def resolve(self, api_key: str | None, path_session: str | None) -> Session:
        """The session a request belongs to (from its /s/<session> URL, else its key)."""
        if path_session is not None:
            session = self.sessions.get(path_session)
            if session is None and "session:" + path_session in self.ended:
                raise APIError(409, "this session's trajectory has ended; it can no longer record", kind="invalid_request_error")
            if session is None:
                raise APIError(401, f"unknown session {path_session!r}", kind="authentication_error")
            if api_key in self.by_key and self.by_key[api_key] != path_session:
                raise APIError(403, "this API key belongs to another session", kind="permission_error")
            return session
        if api_key and api_key in self.by_key:
            return self.sessions[self.by_key[api_key]]
        if api_key and "key:" + api_key in self.ended:
            raise APIError(409, "this API key's trajectory has ended; it can no longer record", kind="invalid_request_error")
        if self.auth == "strict":
            what = "missing API key" if not api_key else "unknown API key"
            raise APIError(401, f"{what}: this gateway accepts only keys issued by POST /admin/sessions", kind="authentication_error")
        if not api_key:  # one shared trajectory for every keyless client would mix their calls
            raise APIError(401, "missing API key: on this gateway any key works and each distinct key is one trajectory; "
                                "pass one as 'Authorization: Bearer NAME' (OpenAI) or 'x-api-key: NAME' (Anthropic)",
                           kind="authentication_error")
        async with self._lock:  # two first requests with one new key make one session
            if api_key in self.by_key:
                return self.sessions[self.by_key[api_key]]
            return await self.create_session(SessionRequest(), api_key=api_key)

    async def finish_session(self, session_id: str, *, status: str = "completed", rewards: dict[str, float] | None = None,
                             error: str | None = None) -> Session:
        """End a session's trajectory (``completed`` or ``failed``, with its reward components) and
        forget the session: its key then answers 409, and its history is freed."""
        session = self.sessions.get(session_id)
        if session is None or session.trajectory_id is None or self.pool is None:
            raise APIError(404, f"no recorded session {session_id!r}")
        if status not in ("completed", "failed"):
            raise APIError(400, "status: must be 'completed' or 'failed'", param="status")
        try:
            if status == "completed":
                await run_in_threadpool(lambda: self.pool.finish_trajectory(session.trajectory_id, rewards=rewards))
            else:
                await run_in_threadpool(lambda: self.pool.fail_trajectory(session.trajectory_id, error or "failed", rewards=rewards))
        except ForgeError as exc:  # it had ended already (timed out, failed): nothing left to keep either
            self.forget(session)
            raise APIError(409, str(exc)) from None
        self.forget(session)
        return session

    def forget(self, session: Session) -> None:
        """Drop an ended session (its decoded history above all): memory stays flat over a long
        rollout. Its key and id are remembered, a bounded number of them, so that they answer 409."""
        self.sessions.pop(session.id, None)
        self.by_key.pop(session.api_key, None)
        session.history.clear()
        session.thoughts.clear()
        session.responses.clear()
        self._opened.discard(session.trajectory_id)
        self.ended["key:" + session.api_key] = self.ended["session:" + session.id] = None
        while len(self.ended) > 2 * MAX_ENDED:
            self.ended.popitem(last=False)

    def close(self) -> int:
        """On shutdown: the trajectories this gateway opened and nobody finished fail ("a crashing
        agent becomes a failed trajectory") instead of staying "running" for good. A driver's own
        trajectories (``/admin/sessions`` with a ``trajectory_id``) are the driver's to end.
        Returns how many were failed."""
        failed = 0
        for trajectory_id in sorted(self._opened):
            if self.pool is not None and self.pool.trajectory_status(trajectory_id) == "running":
                self.pool.fail_trajectory(trajectory_id, "the gateway stopped before the trajectory finished")
                failed += 1
        self._opened.clear()
        return failed

    def check_admin(self, api_key: str | None) -> None:
        given = (api_key or "").encode("utf-8", "surrogateescape")
        if not api_key or not secrets.compare_digest(given, self.admin_key.encode()):
            raise APIError(401, "this endpoint needs the admin key", kind="authentication_error")

    def recording_status(self, session: Session) -> str | None:
        """The status of the session's trajectory (a pool read: call it off the event loop), or None when
        it records nowhere; a call is refused (:meth:`refuse_ended`) unless it is ``running``."""
        if self.pool is None or session.trajectory_id is None:
            return None
        return self.pool.trajectory_status(session.trajectory_id)

    def refuse_ended(self, session: Session, status: str | None) -> None:
        """Refuse (409) a call whose trajectory can no longer record (timed out, finished, failed), and
        forget its session; ``status``: :meth:`recording_status`'s."""
        if status is not None and status != "running":  # ended behind the gateway's back (timed out, finished by a driver)
            self.forget(session)
            raise APIError(409, f"this session's trajectory is {status}; it can no longer record", kind="invalid_request_error")

    def tool_format_for(self, session: Session) -> ToolFormat:
        """The session's tool format, bound to the model (checked when the session was opened)."""
        return self.formats.get(session.tool_format)

    # ---- prefix id reuse -------------------------------------------------------------------------

    def reuse_ids(self, session: Session, text: str, ids: list[int], *, has_history: bool = True) -> tuple[list[int], PromptHistory]:
        """The prompt's ids, and how they match what the session sampled before (token drift).

        If ``text`` begins with an earlier completion's full text (its prompt and its output), the
        prompt begins with that completion's exact ids: as rendered (``exact``), or, where
        re-tokenising the sampled answer gave other ids, with the sampled ids put back and the rest
        encoded (``reused``; never at the cost of exactness: the ids must decode to ``text``). Else,
        when the request holds earlier turns (``has_history``), the rendering diverged from what was
        sampled (``drifted``: a template that drops earlier thinking, a history the agent edited),
        ``at`` the first position whose id differs from the closest earlier completion's; the prompt
        then starts a new branch of the trajectory's prefix tree, trained exactly as any other.
        """
        family = self.formats.family
        if not session.history or not has_history:
            return ids, PromptHistory("first", family=family)
        best: tuple[str, list[int]] | None = None
        for prior_text, prior_ids in session.history:
            if len(prior_text) < len(text) and text.startswith(prior_text) and (best is None or len(prior_text) > len(best[0])):
                best = (prior_text, prior_ids)
        if best is not None:
            prior_ids = best[1]
            if ids[: len(prior_ids)] == prior_ids:
                # the same values; the sampled ids' own objects, which the pool then compares with what
                # it stored for that call at memory speed (a list skips __eq__ for an object with itself)
                return prior_ids + ids[len(prior_ids):], PromptHistory("exact", family=family)
            candidate = prior_ids + self.tokenizer.encode(text[len(best[0]):], add_special_tokens=False)
            if not renders_own_ids(self.tokenizer) and prompt_codec(self.tokenizer).decode(candidate) == text:
                session.reused += 1
                self.metrics.prefix_reuse.inc()
                return candidate, PromptHistory("reused", family=family)
        at = max(common_prefix(ids, prior_ids) for _, prior_ids in session.history)
        return ids, PromptHistory("drifted", at=at, family=family)

    def remember_thinking(self, session: Session, answers: list[Any], max_entries: int = 64) -> None:
        """Keep the thinking the model sampled before each answer (a parsed output), to put it back
        when the agent sends the answer without it (:meth:`restore_thinking`)."""
        for parsed in answers:
            if parsed.reasoning:
                session.thoughts[answer_key(parsed.content, parsed.calls)] = parsed.reasoning
        while len(session.thoughts) > max_entries:
            session.thoughts.pop(next(iter(session.thoughts)))

    def restore_thinking(self, session: Session, turns: list[Any]) -> list[Any]:
        """Most agents drop the ``reasoning_content`` they were sent; a template that renders thinking
        then writes their turn differently from how it was sampled. An assistant turn sent back
        without thinking whose content and calls are an answer this session sampled gets that
        answer's thinking back, so the template renders it as it was sampled (where the template
        keeps thinking at all: one that drops it for earlier turns still drifts, counted)."""
        if not session.thoughts:
            return turns
        out = []
        for turn in turns:
            if turn.role == "assistant" and not turn.reasoning:
                thought = session.thoughts.get(answer_key(turn.content, turn.tool_calls))
                if thought:
                    turn = dataclasses.replace(turn, reasoning=thought)
                    self.metrics.thinking_restored.inc()
            out.append(turn)
        return out

    def remember(self, session: Session, prompt_ids: list[int], outputs: list[GenerationOutput], max_entries: int = 64) -> None:
        for out in outputs:
            full = prompt_ids + out.output_ids
            session.history.append((prompt_codec(self.tokenizer).decode(full), full))  # = decode(full)
        del session.history[:-max_entries]

    # ---- recording ---------------------------------------------------------------------------

    async def record(
        self, session: Session, prompt_ids: list[int], outputs: list[GenerationOutput], *, sampling: Sampling,
        started_at: float, tool_format: str, parse_errors: list[list[dict[str, Any]]], request: dict[str, Any] | None,
        agent: str | None = None, tool_calls: list[list[dict[str, Any]]] | None = None, history: PromptHistory | None = None,
    ) -> None:
        """Remember the call in the session's history (:meth:`remember`, for the next prompt's ids) and
        append each output as one completion of the session's trajectory (``agent``: which of the
        trajectory's agents made the call, from the ``x-forge-agent`` header), in one worker-thread trip."""
        session.requests += 1
        session.tokens_out += sum(len(out.output_ids) for out in outputs)
        finished = time.time()
        recording = self.pool is not None and session.trajectory_id is not None
        calls_of = tool_calls or [None] * len(outputs)

        def work() -> None:  # one trip to a worker thread: the session's history (decoding), then the pool's rows
            self.remember(session, prompt_ids, outputs)
            if not recording:
                return
            self.pool.append_completions([NewCompletion(  # one unit of the pool's group commit: all n or none
                session.trajectory_id, prompt_ids=prompt_ids, output_ids=out.output_ids, output_logprobs=out.logprobs,
                policy_version=out.policy_version, sampling=sampling, finish_reason=out.finish_reason,
                started_at=started_at, finished_at=finished, tool_format=tool_format, parse_errors=errors,
                request=request if self.record_requests else None, agent=agent, tool_calls=calls, history=history,
            ) for out, errors, calls in zip(outputs, parse_errors, calls_of)])

        try:
            await run_in_threadpool(work)
        except ForgeError as exc:  # e.g. the group timed out while this call was generating
            raise APIError(409, f"the call could not be recorded: {exc}") from None


def answer_key(content: str, calls: list[Any]) -> tuple[Any, ...]:
    """An assistant answer as sent and as sampled compare: its text, and each call's name and
    arguments (a JSON string read as the object it holds)."""
    def args(value: Any) -> str:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return value
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    return ((content or "").strip(), *((c.name, args(c.arguments)) for c in calls))
