"""``POST /v1/completions``: raw text (or token ids) in, no chat template. The body and every
streamed chunk are the openai SDK's ``Completion``."""

from __future__ import annotations

import secrets
import time
from typing import Any, Iterator, Optional, Union

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from openai.types.completion import Completion
from openai.types.completion_choice import CompletionChoice, Logprobs
from pydantic import BaseModel, ConfigDict, Field

from forge_cli.engine.base import MAX_SEED
from forge_cli.gateway.errors import APIError, sse
from forge_cli.gateway.openapi import body_schema
from forge_cli.gateway.protocol.types import MAX_TOKENS, Bool, Float, Int
from forge_cli.gateway.routes.common import (
    commit,
    generate,
    openai_usage,
    read_json,
    sampling,
    sse_event,
    state_of,
    validate,
    wire_json,
)
from forge_cli.gateway.token_text import json_logprob

router = APIRouter()


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = "forge"
    prompt: Union[str, list[Int], list[str]]
    max_tokens: Int = Field(16, ge=1, le=MAX_TOKENS)
    temperature: Optional[Float] = Field(None, ge=0, le=2)
    top_p: Optional[Float] = Field(None, gt=0, le=1)
    stop: Union[str, list[str], None] = None
    n: Int = Field(1, ge=1, le=16)
    stream: Bool = False
    logprobs: Optional[Int] = Field(None, ge=0, le=5)
    echo: Bool = False
    seed: Optional[Int] = Field(None, ge=0, le=MAX_SEED)


@router.post("/v1/completions", openapi_extra=body_schema(CompletionRequest))
@router.post("/s/{session}/v1/completions", openapi_extra=body_schema(CompletionRequest))
async def completions(request: Request):
    raw = await read_json(request)
    req: CompletionRequest = validate(CompletionRequest, raw)
    tok = state_of(request).tokenizer
    if isinstance(req.prompt, list) and req.prompt and all(isinstance(x, str) for x in req.prompt):
        if len(req.prompt) != 1:
            raise APIError(400, "prompt: one prompt per request (a list of several strings is not supported)", param="prompt")
        req.prompt = req.prompt[0]
    if not isinstance(req.prompt, str):
        vocab = len(tok)
        if any(not 0 <= i < vocab for i in req.prompt):
            raise APIError(400, f"prompt: token ids must be in 0..{vocab - 1}", param="prompt")
    params = sampling(max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p, stop=req.stop, seed=req.seed, n=req.n,
                      top_logprobs=req.logprobs)
    gen = await generate(request, [], [], params, raw=raw, prompt=req.prompt)
    echo = gen.prepared.rendered.text if req.echo else ""
    choices = []
    for index, (out, parsed) in enumerate(zip(gen.outputs, gen.parsed)):
        logprobs: Logprobs | None = None
        if req.logprobs is not None:
            # legacy shape: per position a {token text: logprob} of the k most likely (None when k = 0);
            # ids that decode alike share a key, which keeps the likeliest's value
            tops = None
            if out.top_logprobs:
                tops = [{} for _ in out.top_logprobs]
                for entries, top in zip(tops, out.top_logprobs):
                    for token_id, value in top:
                        entries.setdefault(tok.decode([token_id]), json_logprob(value))
            logprobs = Logprobs(tokens=[tok.decode([t]) for t in out.output_ids], token_logprobs=[json_logprob(v) for v in out.logprobs],
                                top_logprobs=tops, text_offset=None)
        choices.append(CompletionChoice(index=index, text=echo + parsed.content, logprobs=logprobs,
                                        finish_reason="length" if out.finish_reason == "length" else "stop"))
    body = Completion(id=f"cmpl-{secrets.token_hex(12)}", object="text_completion", created=int(time.time()), model=req.model,
                      choices=choices, usage=openai_usage(gen))
    if req.stream:
        response: Any = StreamingResponse(iter(list(_stream(body))), media_type="text/event-stream")
    else:
        response = JSONResponse(wire_json(body))
    await commit(request, gen)
    return response


def _stream(body: Completion) -> Iterator[str]:
    """Each choice's text in pieces of 16 characters (no finish reason, no logprobs), then its last
    chunk (empty text, its finish reason and logprobs). OpenAI streams ``finish_reason: null``, which
    the SDK's type does not admit: the pieces are copies of the validated choice, not validated again."""
    for choice in body.choices:
        text = choice.text
        for i in range(0, len(text), 16):
            piece = choice.model_copy(update={"text": text[i : i + 16], "finish_reason": None, "logprobs": None})
            yield sse_event(body.model_copy(update={"choices": [piece], "usage": None}))
        yield sse_event(body.model_copy(update={"choices": [choice.model_copy(update={"text": ""})], "usage": None}))
    yield sse("[DONE]")
