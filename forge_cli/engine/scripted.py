"""The ``scripted`` engine: a programmable policy whose text is scored by a real model.

A policy maps the request (the gateway's ``context``: the rendered messages, tools, the session)
to assistant *text*; the engine tokenises it, appends EOS, and computes each id's logprob with a
real model, so the recorded ids and logprobs are as real as a sampled completion's. It drives
scaffolds and real agent programs through whole episodes before any model can solve a task.

A policy is a Python callable ``policy(context) -> str`` (or a list of token ids, for a tokenizer
whose text does not encode its special tokens, as mistral-common's does not), an import path ``"module:function"``
(``"module:function?key=value&…"`` passes keyword arguments, values read as JSON),
or a JSON file::

    {"rules": [{"when": "regex on the last message", "reply": "text"}, ...],
     "turns": ["first reply", "second reply", ...]}

``rules`` are tried first (first match wins); otherwise ``turns`` are replied in order, one per
sample (a call with ``n = 2`` takes two), per session (the last one repeats).

A reply containing a stop string ends at the earliest one (:func:`~forge_cli.engine.base.first_stop`),
its ids kept through it, as a sampling engine's would be.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import re
import threading
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qsl

from forge_cli.engine.base import Engine, GenerationOutput, SamplingParams, context_limit, first_stop
from forge_cli.engine.hf import load_hf, score
from forge_cli.engine.weights import load_into
from forge_cli.errors import ForgeError

Policy = Callable[[dict[str, Any]], str]


def load_policy(spec: str | Path | Policy) -> Policy:
    """A policy from a callable, ``module:function`` (``module:function?key=value&…`` passes keyword
    arguments, each value read as JSON, else as a string), or a JSON rules/turns file."""
    if callable(spec):
        return spec
    text = str(spec)
    if ":" in text and not Path(text).exists():
        module, _, rest = text.partition(":")
        name, _, query = rest.partition("?")
        try:
            function = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise ForgeError(f"cannot import the scripted policy {text!r}: {exc}") from None
        if not query:
            return function

        def value(raw: str) -> Any:
            try:
                return json.loads(raw)
            except ValueError:
                return raw

        kwargs = {key: value(raw) for key, raw in parse_qsl(query, keep_blank_values=True)}
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):  # a callable without a signature: let the call say
            signature = None

        def takes(key: str) -> bool:  # the request comes first, as the engine calls it; then the keyword
            try:
                signature.bind({}, **{key: kwargs[key]})
            except TypeError:
                return False
            return True

        unknown = sorted(key for key in kwargs if signature is not None and not takes(key))
        if unknown:
            raise ForgeError(f"the scripted policy {module}:{name} takes no {', '.join(unknown)} (in {text!r})")
        return functools.partial(function, **kwargs)
    path = Path(text)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ForgeError(f"cannot read the scripted policy file {path}: {exc}") from None
    return FilePolicy(data, str(path))


class FilePolicy:
    def __init__(self, data: dict[str, Any], where: str = "policy") -> None:
        if not isinstance(data, dict) or not (data.get("rules") or data.get("turns")):
            raise ForgeError(f"{where}: a scripted policy needs 'rules' or 'turns'")
        try:
            self.rules = [(re.compile(r.get("when", "")), str(r["reply"])) for r in data.get("rules", [])]
        except (KeyError, re.error, AttributeError) as exc:
            raise ForgeError(f"{where}: bad rule ({exc})") from None
        self.turns = [str(t) for t in data.get("turns", [])]
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, context: dict[str, Any]) -> str:
        messages = context.get("messages") or []
        last = messages[-1].get("content") if messages else ""
        last = last if isinstance(last, str) else json.dumps(last)
        for pattern, reply in self.rules:
            if pattern.search(last or ""):
                return reply
        if not self.turns:
            raise ForgeError(f"scripted policy: no rule matches {last[:80]!r} and there are no turns")
        session = str(context.get("session", ""))
        with self._lock:
            i = self._next.get(session, 0)
            self._next[session] = i + 1
        return self.turns[min(i, len(self.turns) - 1)]


class ScriptedEngine(Engine):
    name = "scripted"

    def __init__(self, model_path: str | Path, policy: str | Path | Policy, *, device: str = "cpu",
                 max_model_len: int | None = None, decode_s_per_token: float = 0.0) -> None:
        self.model, self.tokenizer = load_hf(model_path, device)
        super().__init__(context_limit(max_model_len, getattr(self.model.config, "max_position_embeddings", None)))
        self.eos_token_id = self.tokenizer.eos_token_id
        self.policy = load_policy(policy)
        self._lock = threading.Lock()
        self.decode_s_per_token = decode_s_per_token  # emulated decode time (no CPU), 0: none

    async def _generate(self, prompt_ids, params, context):
        context = context or {}
        loop = asyncio.get_running_loop()
        outputs = []
        for _ in range(params.n):
            text = await loop.run_in_executor(None, self.policy, context)
            outputs.append(await loop.run_in_executor(None, self._score, prompt_ids, text, params))
        if self.decode_s_per_token:  # the n samples of one call decode side by side, as in a batch
            await asyncio.sleep(self.decode_s_per_token * max(len(o.output_ids) for o in outputs))
        return outputs

    def _score(self, prompt_ids: list[int], text: str | list[int], params: SamplingParams) -> GenerationOutput:
        if not isinstance(text, str):  # token ids: for a tokenizer whose text does not encode its special tokens (mistral-common)
            return self._score_ids(prompt_ids, [int(i) for i in text], params)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        reason, why = "stop", self.eos_token_id
        hit = first_stop(text, params.stop)
        if hit:  # keep the ids through the earliest stop string, as a sampling engine would
            at, why = hit
            ids = self.tokenizer.encode(text[: at + len(why)], add_special_tokens=False)
        elif self.eos_token_id is not None:
            ids = ids + [self.eos_token_id]
        if len(ids) > params.max_tokens:
            ids, reason, why = ids[: params.max_tokens], "length", None
        with self._lock:
            lps, tops = score(self.model, prompt_ids, ids, params.temperature, params.top_logprobs)
        return GenerationOutput(ids, lps, reason, self.version, why, top_logprobs=tops)

    def _score_ids(self, prompt_ids: list[int], ids: list[int], params: SamplingParams) -> GenerationOutput:
        """Ids as the policy wrote them; EOS appended unless they end with one of the tokenizer's added
        (control) tokens already: the policy ended the turn itself (gpt-oss's ``<|call|>``)."""
        reason, why = "stop", self.eos_token_id
        added = getattr(self.tokenizer, "added_tokens_decoder", None)
        ended = bool(ids) and isinstance(added, dict) and ids[-1] in added
        if ended:
            why = ids[-1]
        elif self.eos_token_id is not None:
            ids = ids + [self.eos_token_id]
        if len(ids) > params.max_tokens:
            ids, reason, why = ids[: params.max_tokens], "length", None
        with self._lock:
            lps, tops = score(self.model, prompt_ids, ids, params.temperature, params.top_logprobs)
        return GenerationOutput(ids, lps, reason, self.version, why, top_logprobs=tops)

    async def _load_weights(self, weights: Any) -> None:
        with self._lock:
            load_into(self.model, weights)
