"""The engine interface: token ids in; token ids, one logprob per output id, and a finish reason out.

An engine never parses chat or tools (the gateway does). Its logprobs are the behaviour policy's:
``log_softmax(logits / T)`` at the sampled id, under the request's temperature ``T`` (greedy,
``T = 0``, reports ``log_softmax(logits)``), which is what the trainer recomputes — otherwise the
importance ratio is wrong from the first step. A temperature below :data:`MIN_TEMPERATURE` is
greedy: :class:`SamplingParams` turns it into ``0`` (so ``logits / T`` never overflows, and the
recorded sampling says what was used).

Stop strings end generation at the one that occurs *earliest* in the text (:func:`first_stop`),
whatever their order in the request; every engine reports that one as ``stop_reason``. Every
engine takes ``max_model_len`` (prompt + output, in tokens; :func:`context_limit`) and checks
requests against it in :meth:`Engine.check`.

Pausing is shared by every engine: :meth:`Engine.pause` stops admitting new requests (they wait,
none fails) and returns once the in-flight ones have finished; :meth:`Engine.resume` lets the
waiting ones in. Weight updates happen inside a pause and bump :attr:`Engine.version`.
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from forge_cli.errors import ForgeError

MAX_TOP_LOGPROBS = 20  # OpenAI's limit
# below this a temperature is greedy (vLLM raises such temperatures to 1e-2 "to avoid nan or inf";
# here they become 0, on every engine, so that what is recorded is what was sampled)
MIN_TEMPERATURE = 1e-2
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``stop`` strings end generation at the earliest one in the text (the ids
    through it are returned; cutting the text is the gateway's job); ``stop_token_ids`` are added
    to the model's EOS.

    Non-finite numbers are refused (ForgeError). A ``temperature`` in ``(0, MIN_TEMPERATURE)`` is
    stored as ``0`` (greedy): :attr:`temperature` is always the one the engines use. A tiny
    ``top_p`` keeps at least the most likely id.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    n: int = 1
    top_logprobs: int = 0  # also report this many most likely ids per output position (0..20)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ForgeError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ForgeError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if self.temperature < MIN_TEMPERATURE:
            object.__setattr__(self, "temperature", 0.0)  # greedy (see MIN_TEMPERATURE)
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise ForgeError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise ForgeError(f"seed must be in 0..{MAX_SEED}, got {self.seed}")
        if self.n < 1:
            raise ForgeError(f"n must be >= 1, got {self.n}")
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ForgeError(f"top_logprobs must be in 0..{MAX_TOP_LOGPROBS}, got {self.top_logprobs}")

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class GenerationOutput:
    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS or a stop string/id) or "length"
    policy_version: int
    stop_reason: str | int | None = None  # the stop string or id that ended it
    extra: dict[str, Any] = field(default_factory=dict)
    # with params.top_logprobs = k: per output position, the k most likely (id, logprob) pairs under
    # the same distribution as ``logprobs``, most likely first
    top_logprobs: list[list[tuple[int, float]]] | None = None


class Engine:
    """Base class: subclasses implement :meth:`_generate` and :meth:`_load_weights`."""

    name = "engine"

    def __init__(self, max_model_len: int) -> None:
        self.version = 0
        self.max_model_len = max_model_len
        self._open = asyncio.Event()
        self._open.set()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._busy_s = 0.0  # seconds with at least one request in flight, up to _busy_since
        self._busy_since: float | None = None
        self.eos_token_id: int | None = None

    # ---- what subclasses provide --------------------------------------------------------------

    async def _generate(self, prompt_ids: list[int], params: SamplingParams, context: dict[str, Any] | None) -> list[GenerationOutput]:
        raise NotImplementedError

    async def _load_weights(self, weights: Any) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        """Release the engine's resources."""

    # ---- shared behaviour --------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    @asynccontextmanager
    async def _admitted(self) -> AsyncIterator[None]:
        while not self._open.is_set():
            await self._open.wait()
        if self._in_flight == 0:
            self._busy_since = time.monotonic()
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._busy_s += time.monotonic() - (self._busy_since or time.monotonic())
                self._busy_since = None
                self._idle.set()

    def busy_seconds(self) -> float:
        """Seconds (of the monotonic clock) during which at least one request was in flight, since the
        engine started: the loop's engine-idle fraction is 1 - its growth over a step / the step's time."""
        running = time.monotonic() - self._busy_since if self._busy_since is not None else 0.0
        return self._busy_s + running

    def check(self, prompt_ids: list[int], params: SamplingParams) -> SamplingParams:
        """Raise ForgeError if the prompt leaves no room; clamp max_tokens to what is left."""
        if not prompt_ids:
            raise ForgeError("the prompt is empty")
        if len(prompt_ids) >= self.max_model_len:
            raise ForgeError(
                f"the prompt is {len(prompt_ids)} tokens; this model's context is {self.max_model_len} tokens"
            )
        room = self.max_model_len - len(prompt_ids)
        if params.max_tokens > room:
            params = SamplingParams(**{**params.__dict__, "max_tokens": room})
        return params

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, context: dict[str, Any] | None = None
    ) -> list[GenerationOutput]:
        """``params.n`` samples for one prompt. Raises ForgeError if the prompt leaves no room."""
        params = self.check(prompt_ids, params)
        async with self._admitted():
            return await self._generate(prompt_ids, params, context)

    async def generate_stream(
        self, prompt_ids: list[int], params: SamplingParams, *, context: dict[str, Any] | None = None
    ) -> AsyncIterator[list[int] | GenerationOutput]:
        """One sample, as it is made: lists of new ids, then the final :class:`GenerationOutput`.

        Call :meth:`check` first to get a clear error before a response has started.
        """
        params = self.check(prompt_ids, params)
        if params.n != 1:
            raise ForgeError("streaming generates one sample (n = 1)")
        async with self._admitted():
            async for item in self._generate_stream(prompt_ids, params, context):
                yield item

    async def _generate_stream(
        self, prompt_ids: list[int], params: SamplingParams, context: dict[str, Any] | None
    ) -> AsyncIterator[list[int] | GenerationOutput]:
        """Engines that cannot stream produce everything at once."""
        [out] = await self._generate(prompt_ids, params, context)
        yield list(out.output_ids)
        yield out

    async def pause(self) -> None:
        """Stop admitting requests and wait for the in-flight ones to finish."""
        self._open.clear()
        await self._idle.wait()

    async def resume(self) -> None:
        self._open.set()

    async def load_weights(self, weights: Any, *, version: int | None = None) -> int:
        """Swap in new weights (a state dict or a folder) inside a pause; returns the new version:
        one more than before, or ``version`` (a resumed run's checkpoint's)."""
        if version is not None and (not isinstance(version, int) or version < 0):
            raise ForgeError(f"a policy version is an integer >= 0, got {version!r}")
        was_paused = self.paused
        await self.pause()
        try:
            await self._load_weights(weights)
            self.version = self.version + 1 if version is None else version
        finally:
            if not was_paused:
                await self.resume()
        return self.version


def first_stop(text: str, stops: tuple[str, ...] | list[str]) -> tuple[int, str] | None:
    """``(position, stop)`` of the stop string that starts earliest in ``text``, if any occurs.

    The order of ``stops`` does not matter: ``["Observation:", "</code>"]`` on
    ``"…</code>\nObservation:"`` is ``"</code>"``. Of stops starting at the same position, the
    longest wins (the text before it, which the client sees, is the same either way). Empty
    strings never match.
    """
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop) if stop else -1
        if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(stop) > len(best[1]))):
            best = (at, stop)
    return best


def context_limit(max_model_len: int | None, model_limit: int | None) -> int:
    """The one context limit of every engine: ``max_model_len`` (prompt + output tokens), or, when
    it is None, the model's own (``max_position_embeddings``; 4096 when the config has none).
    ForgeError when it is below 2 or beyond what the model's positions can hold."""
    if max_model_len is None:
        return int(model_limit or 4096)
    if max_model_len < 2:
        raise ForgeError(f"max_model_len must be >= 2 (a prompt token and an output token), got {max_model_len}")
    if model_limit is not None and max_model_len > model_limit:
        raise ForgeError(f"max_model_len {max_model_len} is beyond this model's {model_limit} positions "
                         "(max_position_embeddings)")
    return max_model_len
